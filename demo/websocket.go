package demo

import (
	"io"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
)

// websocketCloseGrace bounds how long a draining app waits for a websocket
// peer to answer its close message.
const websocketCloseGrace = time.Second

// serveWebsocket echoes every text and binary message back as it came,
// streaming it so large messages are not held whole in memory.
func (s *server) serveWebsocket(w http.ResponseWriter, r *http.Request) {
	c, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade already answered with an error status.
	}
	defer c.Close()

	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-s.stopping:
			// Hijacked connections are invisible to the HTTP server's
			// shutdown: say goodbye here, and stop waiting for a peer that
			// does not answer.
			deadline := time.Now().Add(websocketCloseGrace)
			msg := websocket.FormatCloseMessage(websocket.CloseGoingAway, "server shutting down")
			_ = c.WriteControl(websocket.CloseMessage, msg, deadline)
			_ = c.NetConn().SetReadDeadline(deadline)
		case <-done:
		}
	}()

	for {
		typ, rd, err := c.NextReader()
		if err != nil {
			return
		}
		wr, err := c.NextWriter(typ)
		if err != nil {
			return
		}
		if _, err := io.Copy(wr, rd); err != nil {
			return
		}
		if err := wr.Close(); err != nil {
			return
		}
	}
}
