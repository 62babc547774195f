package replica

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
)

// lineChecker fails the test on any Write that is not whole lines, each
// with one of the prefixes.
type lineChecker struct {
	t        *testing.T
	prefixes []string
	mu       sync.Mutex
	buf      bytes.Buffer
}

func (c *lineChecker) Write(p []byte) (int, error) {
	if !bytes.HasSuffix(p, []byte("\n")) || bytes.Count(p, []byte("\n")) != 1 {
		c.t.Errorf("write of %q is not one whole line", p)
	}
	ok := false
	for _, pre := range c.prefixes {
		ok = ok || bytes.HasPrefix(p, []byte(pre))
	}
	if !ok {
		c.t.Errorf("line %q has none of the prefixes %q", p, c.prefixes)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func TestCopyLines(t *testing.T) {
	long := strings.Repeat("x", maxLine+10)
	tests := []struct {
		name, in, want string
	}{
		{"lines", "a\nb\n", "p | a\np | b\n"},
		{"crlf", "a\r\nb\r\n", "p | a\np | b\n"},
		{"last line without newline", "a\nb", "p | a\np | b\n"},
		{"empty line", "\n", "p | \n"},
		{"nothing", "", ""},
		{"long line split", long + "\n", "p | " + long[:maxLine] + "\np | " + long[maxLine:] + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &lineChecker{t: t, prefixes: []string{"p | "}}
			copyLines(w, "p | ", strings.NewReader(tt.in))
			if got := w.buf.String(); got != tt.want {
				t.Fatalf("got %.200q, want %.200q", got, tt.want)
			}
		})
	}
}

// Two processes writing at once, in chunks that cut lines anywhere, still
// give whole lines.
func TestCopyLinesConcurrent(t *testing.T) {
	w := &lineChecker{t: t, prefixes: []string{"a | ", "b | "}}
	var wg sync.WaitGroup
	for _, name := range []string{"a", "b"} {
		pr, pw := io.Pipe()
		wg.Go(func() { copyLines(w, name+" | ", pr) })
		wg.Go(func() {
			var all bytes.Buffer
			for i := range 1000 {
				fmt.Fprintf(&all, "%s line %d\n", name, i)
			}
			for b := all.Bytes(); len(b) > 0; {
				n := min(len(b), 7)
				pw.Write(b[:n])
				b = b[n:]
			}
			pw.Close()
		})
	}
	wg.Wait()
	if n := strings.Count(w.buf.String(), "\n"); n != 2000 {
		t.Fatalf("got %d lines, want 2000", n)
	}
	for _, name := range []string{"a", "b"} {
		if !strings.Contains(w.buf.String(), name+" | "+name+" line 999\n") {
			t.Fatalf("last line of %s missing", name)
		}
	}
}
