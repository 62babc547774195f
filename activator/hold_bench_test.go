package activator

import (
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"
)

// BenchmarkHeldRequestMemory measures what one request held for a
// service at zero costs the activator: its HTTP/1.1 connection's buffers,
// its goroutine's stack, the request, its exchange and its place in the
// queue (DefaultMaxHeld is derived from it). The clients are bare
// connections that send one request each and read nothing, so they add
// next to nothing to the figure.
//
//	go test -run '^$' -bench HeldRequestMemory ./activator
func BenchmarkHeldRequestMemory(b *testing.B) {
	const n = 2000
	// Measured once per run, whatever b.N: the figure is per held request,
	// not per iteration.
	var heap, stack int64
	{
		src := NewMemorySource(Service{Key: helloKey, ContainerConcurrency: 1})
		e := newEnv(b, src, nil, nil)
		e.waitRoutable(b, helloKey, 0)
		addr := e.srv.Listener.Addr().String()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		conns := make([]net.Conn, 0, n)
		for range n {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(c, "GET /some/path?q=1 HTTP/1.1\r\nHost: hello.default\r\nUser-Agent: curl/8.0\r\nAccept: */*\r\nX-Request-Id: 0123456789abcdef0123456789abcdef\r\n\r\n")
			conns = append(conns, c)
		}
		deadline := time.Now().Add(testTimeout)
		for q, _ := e.a.Queued(helloKey); q != n; q, _ = e.a.Queued(helloKey) {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d requests held", q, n)
			}
			runtime.Gosched()
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = int64(after.HeapInuse) - int64(before.HeapInuse)
		stack = int64(after.StackInuse) - int64(before.StackInuse)
		for _, c := range conns {
			c.Close()
		}
	}
	for b.Loop() {
	}
	// After the loop, which resets what was reported before it.
	b.ReportMetric(float64(heap)/n, "heap-B/held")
	b.ReportMetric(float64(stack)/n, "stack-B/held")
	b.ReportMetric(float64(heap+stack)/n, "B/held")
}
