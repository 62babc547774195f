// Command box is the program of the end-to-end suite's pods that need no
// app: it prints -say if given, then waits for SIGTERM or SIGINT and exits
// 0, or, with -exit, exits with that code once -after has passed.
//
//	box                                   wait until stopped
//	box -say started -after 1s -exit 3    a container that crashes
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	say := flag.String("say", "", "a line to print first")
	code := flag.Int("exit", -1, "exit with this code after -after, instead of waiting to be stopped (0-255)")
	after := flag.Duration("after", 0, "how long to run before -exit")
	flag.Parse()
	if flag.NArg() > 0 || *code > 255 || *code < -1 || *after < 0 {
		fmt.Fprintf(os.Stderr, "box: bad arguments %q: want [-say LINE] [-exit 0-255 [-after DURATION]]\n", os.Args[1:])
		os.Exit(2)
	}
	if *say != "" {
		fmt.Println(*say)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	var exit <-chan time.Time
	if *code >= 0 {
		exit = time.After(*after)
	}
	select {
	case <-stop:
		os.Exit(0)
	case <-exit:
		os.Exit(*code)
	}
}
