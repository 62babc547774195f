package activator

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestExchangeCode: the status recorded is the first one written, else
// the pod's for a hijacked response, else 499 for a client that left, else
// the 200 net/http writes for a handler that wrote nothing.
func TestExchangeCode(t *testing.T) {
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		write    func(w http.ResponseWriter)
		upstream int32
		want     int
	}{
		{"nothing written", context.Background(), nil, 0, http.StatusOK},
		{"client left", gone, nil, 0, StatusClientClosed},
		{"header", gone, func(w http.ResponseWriter) { w.WriteHeader(http.StatusGatewayTimeout) }, 0, http.StatusGatewayTimeout},
		{"body only", context.Background(), func(w http.ResponseWriter) { w.Write([]byte("x")) }, 0, http.StatusOK},
		{"1xx then final", context.Background(), func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusCreated)
		}, 0, http.StatusCreated},
		{"hijacked upgrade", context.Background(), nil, http.StatusSwitchingProtocols, http.StatusSwitchingProtocols},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequestWithContext(tc.ctx, http.MethodGet, "/", nil)
			e, _ := newExchange(httptest.NewRecorder(), req, nil)
			if tc.write != nil {
				tc.write(e)
			}
			e.upstream = tc.upstream
			if got := e.code(); got != tc.want {
				t.Errorf("code %d, want %d", got, tc.want)
			}
		})
	}
}
