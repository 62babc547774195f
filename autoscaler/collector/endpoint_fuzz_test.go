package collector

import (
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	testclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/stats"
)

// checkingSink applies frames to an Activators store and checks what the
// endpoint hands it: only decoded, validated frames, never a hello, from a
// named activator.
type checkingSink struct {
	acts *Activators
	mu   sync.Mutex
	errs []string
}

func (s *checkingSink) Apply(activator string, f *stats.ActivatorFrame) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := stats.ValidateActivatorName(activator); err != nil {
		s.errs = append(s.errs, "frame from an unnamed activator: "+err.Error())
	}
	if f.Type != stats.ActivatorReport && f.Type != stats.ActivatorPoke {
		s.errs = append(s.errs, "a "+f.Type.String()+" frame reached the sink")
	}
	for _, e := range f.Entries {
		if err := service.Check(e.Service); err != nil {
			s.errs = append(s.errs, "an entry with a bad key reached the sink: "+err.Error())
		}
	}
	s.acts.Apply(activator, f)
}

// splitFrames cuts in into frames, each a 2-byte big-endian length then
// that many bytes; a short tail is the last frame.
func splitFrames(in []byte) [][]byte {
	var out [][]byte
	for len(in) >= 2 && len(out) < 64 {
		n := int(binary.BigEndian.Uint16(in))
		in = in[2:]
		n = min(n, len(in))
		out = append(out, in[:n])
		in = in[n:]
	}
	if len(in) > 0 {
		out = append(out, in)
	}
	return out
}

func frames(fs ...[]byte) []byte {
	var b []byte
	for _, f := range fs {
		b = binary.BigEndian.AppendUint16(b, uint16(len(f)))
		b = append(b, f...)
	}
	return b
}

// FuzzEndpointFrames sends any sequence of binary frames to the
// autoscaler's activator endpoint over a real websocket: the endpoint never
// panics, hands the sink only validated report and poke frames after a
// valid hello, and its store's figures stay sane.
func FuzzEndpointFrames(f *testing.F) {
	hello := stats.AppendActivatorHello(nil, "activator-0")
	report := stats.AppendActivatorReportHeader(nil, t0, time.Second)
	report = stats.AppendActivatorEntry(report, "ns/svc", stats.ActivatorFigures{Concurrency: 2, Requests: 20, InFlight: 1})
	poke := stats.AppendActivatorPoke(nil, "ns/svc", "ns/other")
	f.Add(frames(hello, report, poke))
	f.Add(frames(report, hello))
	f.Add(frames(hello, hello))
	f.Add(frames(hello, []byte{0xff, 1, 2, 3}, poke))
	f.Add(frames(stats.AppendActivatorHello(nil, "Bad Name"), poke))
	f.Add(frames(hello, stats.AppendActivatorPoke(nil, "not-a-key")))

	sink := &checkingSink{acts: NewActivators(testclock.NewFakeClock(t0), time.Hour)}
	ep, err := NewActivatorEndpoint(EndpointConfig{Tokens: []string{testToken}, Sink: sink, IdleTimeout: 5 * time.Second})
	if err != nil {
		f.Fatal(err)
	}
	srv := httptest.NewServer(ep)
	f.Cleanup(func() { ep.Close(); srv.Close() })
	url := "ws" + strings.TrimPrefix(srv.URL, "http")
	hdr := http.Header{"Authorization": {"Bearer " + testToken}}

	f.Fuzz(func(t *testing.T, in []byte) {
		ws, _, err := websocket.DefaultDialer.Dial(url, hdr)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer ws.Close()
		for _, fr := range splitFrames(in) {
			if err := ws.WriteMessage(websocket.BinaryMessage, fr); err != nil {
				break // the endpoint closed the connection
			}
		}
		// Close our side and read until the endpoint's side is closed too:
		// then it has handled every frame it will.
		ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				if time.Since(start) > 5*time.Second {
					t.Fatalf("the endpoint did not close for %v: %v", time.Since(start), err)
				}
				break
			}
		}
		sink.mu.Lock()
		errs := sink.errs
		sink.errs = nil
		sink.mu.Unlock()
		if len(errs) > 0 {
			t.Fatalf("%d problems: %s", len(errs), strings.Join(errs, "; "))
		}
		for _, name := range []string{"ns/svc", "ns/other"} {
			l := sink.acts.Load(name)
			if l.Pending < 0 || l.Concurrency < 0 || l.RPS < 0 || l.Activators < 0 {
				t.Fatalf("load of %s: %+v", name, l)
			}
		}
	})
}
