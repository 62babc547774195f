// Command httpserver is the node agent tests' container: it serves the
// value of $MESSAGE on $LISTEN and, if $FETCH is set, first fetches that
// URL until it answers and writes the body to $FETCH_OUT.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	if url := os.Getenv("FETCH"); url != "" {
		for {
			resp, err := http.Get(url)
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err := os.WriteFile(os.Getenv("FETCH_OUT"), body, 0o644); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	msg := os.Getenv("MESSAGE")
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, msg) })
	fmt.Fprintln(os.Stderr, "listening on", os.Getenv("LISTEN"))
	fmt.Fprintln(os.Stderr, http.ListenAndServe(os.Getenv("LISTEN"), nil))
	os.Exit(1)
}
