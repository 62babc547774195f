package replica

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"

	"github.com/swell-run/swell/internal/proctest"
)

// Run as heldApp's app, the test binary serves the app instead of the
// tests.
const (
	envHeldApp = "REPLICA_TEST_HELD_APP"
	envRelease = "REPLICA_TEST_RELEASE"
)

// TestMain removes the binaries the end-to-end tests built; as a replica's
// app (heldApp), it serves the app.
func TestMain(m *testing.M) {
	if os.Getenv(envHeldApp) != "" {
		os.Exit(serveHeldApp())
	}
	proctest.Main(m)
}

// heldApp is the Command of a replica whose app holds every request to
// /hold until release (a named pipe) is written to and closed, and says
// on /stats how many it holds, as the demo app does: a request in flight
// held as long as a test needs, not for a guessed time.
func heldApp(t *testing.T, release string) ([]string, []string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{exe}, []string{envHeldApp + "=1", envRelease + "=" + release}
}

func serveHeldApp() int {
	var inflight atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		inflight.Add(1)
		defer inflight.Add(-1)
		// Opening a named pipe to read waits for a writer; reading it
		// to the end waits for the writer to close it.
		f, err := os.Open(os.Getenv(envRelease))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		io.Copy(io.Discard, f)
		f.Close()
		io.WriteString(w, "released\n")
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]int64{"inflight": inflight.Load()})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	ln, err := net.Listen("tcp", net.JoinHostPort(os.Getenv("HOST"), os.Getenv("PORT")))
	if err != nil {
		fmt.Fprintln(os.Stderr, "held app:", err)
		return 1
	}
	// Until the replica stops it (SIGTERM ends the process).
	http.Serve(ln, mux)
	return 1
}
