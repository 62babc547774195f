package collector

import (
	"errors"
	"fmt"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap/zapcore"
)

// readBinary reads one whole binary frame from ws into buf, reused. A
// non-zero code is the close code for the failure, with its reason: the
// peer closed (1000), a text frame (1003), a frame over the read limit
// (1009), nothing read by the read deadline (4001, idle), or a broken
// connection (1006).
func readBinary(ws *websocket.Conn, buf []byte, limit int64) ([]byte, int, string) {
	mt, r, err := ws.NextReader()
	if err == nil && mt != websocket.BinaryMessage {
		return buf, websocket.CloseUnsupportedData, "text frame; the frames are binary"
	}
	if err == nil {
		buf, err = readAll(r, buf[:0])
	}
	if err == nil {
		return buf, 0, ""
	}
	var ce *websocket.CloseError
	var timeout interface{ Timeout() bool }
	switch {
	case errors.As(err, &ce):
		return buf, websocket.CloseNormalClosure, "peer closed: " + ce.Error()
	case errors.Is(err, websocket.ErrReadLimit):
		return buf, websocket.CloseMessageTooBig, fmt.Sprintf("frame larger than %d bytes", limit)
	case errors.As(err, &timeout) && timeout.Timeout():
		return buf, CloseIdle, "nothing received by the read deadline"
	}
	return buf, websocket.CloseAbnormalClosure, err.Error()
}

// sendClose sends a close frame with code and reason, if the code is one
// that may be sent, then closes ws. Codes 1005 and 1006 describe a
// connection that ended without a close frame; they are never sent.
func sendClose(ws *websocket.Conn, code int, reason string, timeout time.Duration) {
	if code != websocket.CloseAbnormalClosure && code != websocket.CloseNoStatusReceived {
		if len(reason) > 123 { // a close frame's payload is at most 125 bytes
			reason = reason[:120] + "..."
		}
		ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(timeout))
	}
	ws.Close()
}

// closeLevel is the level a close with code is logged at: a warning when
// the peer broke the protocol, else normal.
func closeLevel(code int, normal zapcore.Level) zapcore.Level {
	switch code {
	case websocket.CloseInvalidFramePayloadData, websocket.CloseMessageTooBig, websocket.ClosePolicyViolation, websocket.CloseUnsupportedData:
		return zapcore.WarnLevel
	}
	return normal
}
