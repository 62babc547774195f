package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/swell-run/swell/internal/proctest"
)

// chromiumPath is where Debian's chromium package installs the browser.
const chromiumPath = "/usr/bin/chromium"

// startChromium runs a headless Chromium for the test, killed with its whole
// process group when the test ends, and returns a DevTools connection to its
// blank page.
func startChromium(t *testing.T) *cdp {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("SWELL_REQUIRE_CHROMIUM") == "1" {
			t.Fatalf("chromium required (SWELL_REQUIRE_CHROMIUM=1): %v", err)
		}
		t.Skipf("no chromium: %v", err)
	}
	dir := t.TempDir()
	// Cleanups run last-registered first: proctest.Start's kill of the process
	// group, then this wait for Chromium's helper processes (same group) to be
	// gone, then the removal of dir.
	var pgid int
	t.Cleanup(func() {
		for deadline := time.Now().Add(5 * time.Second); pgid != 0 && syscall.Kill(-pgid, 0) == nil; {
			if time.Now().After(deadline) {
				t.Errorf("chromium process group %d still alive after SIGKILL", pgid)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	p := proctest.Start(t, "chromium", chromiumPath, nil, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--remote-debugging-port=0", "--user-data-dir="+dir, "about:blank")
	pgid = p.Cmd.Process.Pid

	// With port 0, Chromium writes the port it picked to DevToolsActivePort.
	var port int
	proctest.Eventually(t, 20*time.Second, func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "DevToolsActivePort"))
		if err != nil {
			return false
		}
		line, _, _ := strings.Cut(string(b), "\n")
		port, err = strconv.Atoi(strings.TrimSpace(line))
		return err == nil && port > 0
	}, "chromium wrote no DevToolsActivePort in %s", dir)
	var ws string
	proctest.Eventually(t, 10*time.Second, func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/json/list", port))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var targets []struct{ Type, WebSocketDebuggerURL string }
		if json.NewDecoder(resp.Body).Decode(&targets) != nil {
			return false
		}
		for _, tg := range targets {
			if tg.Type == "page" && tg.WebSocketDebuggerURL != "" {
				ws = tg.WebSocketDebuggerURL
				return true
			}
		}
		return false
	}, "no page target in chromium's /json/list")
	c, err := dialCDP(ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return c
}

// cdp is a minimal Chrome DevTools Protocol client: calls are matched to
// their responses by id; of the events, only uncaught exceptions are kept.
type cdp struct {
	conn    *websocket.Conn
	writeMu sync.Mutex

	mu         sync.Mutex
	nextID     int64
	pending    map[int64]chan cdpMessage
	exceptions []string
	readErr    error
}

type cdpMessage struct {
	ID     int64           `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

func dialCDP(url string) (*cdp, error) {
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	conn, _, err := d.Dial(url, nil)
	if err != nil {
		return nil, fmt.Errorf("dial devtools %s: %w", url, err)
	}
	c := &cdp{conn: conn, pending: map[int64]chan cdpMessage{}}
	go c.readLoop()
	return c, nil
}

func (c *cdp) readLoop() {
	for {
		var m cdpMessage
		if err := c.conn.ReadJSON(&m); err != nil {
			c.mu.Lock()
			c.readErr = err
			for id, ch := range c.pending {
				close(ch)
				delete(c.pending, id)
			}
			c.mu.Unlock()
			return
		}
		c.mu.Lock()
		if m.Method == "Runtime.exceptionThrown" {
			c.exceptions = append(c.exceptions, string(m.Params))
		} else if ch, ok := c.pending[m.ID]; ok && m.Method == "" {
			ch <- m
			delete(c.pending, m.ID)
		}
		c.mu.Unlock()
	}
}

// call sends method with params and decodes the result into result (if not nil).
func (c *cdp) call(method string, params, result any) error {
	ch := make(chan cdpMessage, 1)
	c.mu.Lock()
	if c.readErr != nil {
		c.mu.Unlock()
		return fmt.Errorf("%s: connection closed: %w", method, c.readErr)
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = ch
	c.mu.Unlock()

	c.writeMu.Lock()
	err := c.conn.WriteJSON(map[string]any{"id": id, "method": method, "params": params})
	c.writeMu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return fmt.Errorf("%s: connection closed", method)
		}
		if m.Error != nil {
			return fmt.Errorf("%s: %d %s", method, m.Error.Code, m.Error.Message)
		}
		if result != nil {
			return json.Unmarshal(m.Result, result)
		}
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s: no answer within 10s", method)
	}
}

// evalJSON evaluates expr, which must return a JSON string, in the page and
// decodes that string into out.
func (c *cdp) evalJSON(expr string, out any) error {
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := c.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &res); err != nil {
		return err
	}
	if res.ExceptionDetails != nil {
		return fmt.Errorf("evaluate: %s", res.ExceptionDetails.Text)
	}
	var s string
	if err := json.Unmarshal(res.Result.Value, &s); err != nil {
		return fmt.Errorf("evaluate: want a JSON string, got %s", res.Result.Value)
	}
	return json.Unmarshal([]byte(s), out)
}

func (c *cdp) thrown() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.exceptions...)
}

func (c *cdp) close() { _ = c.conn.Close() }
