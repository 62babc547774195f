package demo

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

func dialWebsocket(t *testing.T, base string) *websocket.Conn {
	t.Helper()
	url := "ws" + strings.TrimPrefix(base, "http") + websocketPath
	c, resp, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	resp.Body.Close()
	t.Cleanup(func() { c.Close() })
	return c
}

func echo(t *testing.T, c *websocket.Conn, typ int, msg []byte) {
	t.Helper()
	if err := c.WriteMessage(typ, msg); err != nil {
		t.Fatal(err)
	}
	gotType, got, err := c.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	if gotType != typ || !bytes.Equal(got, msg) {
		t.Fatalf("echo of type %d, %d bytes: got type %d, %d bytes", typ, len(msg), gotType, len(got))
	}
}

func TestWebsocketEcho(t *testing.T) {
	_, base := startApp(t, options{})
	hc := newClient(t, false)
	c := dialWebsocket(t, base)

	echo(t, c, websocket.TextMessage, []byte("hello, echo"))
	echo(t, c, websocket.BinaryMessage, []byte{0, 1, 2, 0xfe, 0xff})
	echo(t, c, websocket.BinaryMessage, bytes.Repeat([]byte("0123456789abcdef"), 1<<16)) // 1MiB
	echo(t, c, websocket.TextMessage, []byte{})

	// The echo just answered, so its handler is running: the connection
	// counts as one request in flight.
	if s := getStats(t, hc, base); s.InFlight != 1 || s.Requests != 1 {
		t.Errorf("stats %+v with a websocket open, want 1 in flight", s)
	}
	if err := c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")); err != nil {
		t.Fatal(err)
	}
	waitInFlight(t, hc, base, 0)
}

func TestWebsocketDrainSaysGoingAway(t *testing.T) {
	app, base := startApp(t, options{})
	c := dialWebsocket(t, base)
	echo(t, c, websocket.TextMessage, []byte("before"))

	app.drain()
	_, _, err := c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
		t.Fatalf("after drain read %v, want close %d", err, websocket.CloseGoingAway)
	}
	waitInFlight(t, newClient(t, false), base, 0)
}

func TestWebsocketNeedsUpgrade(t *testing.T) {
	_, base := startApp(t, options{})
	resp, _ := do(t, newClient(t, false), "GET", base+websocketPath, nil)
	if resp.StatusCode != 400 {
		t.Errorf("plain GET %s: status %d, want 400", websocketPath, resp.StatusCode)
	}
}
