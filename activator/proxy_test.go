package activator

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/swell-run/swell/pkg/network"
)

// newServing returns an env with one routable pod for default/hello.
func newServing(t *testing.T, pod *fakePod) *testEnv {
	t.Helper()
	src := NewMemorySource(Service{Key: helloKey, Pods: []Pod{pod.pod()}})
	e := newEnv(t, src, nil, nil)
	e.waitRoutable(t, helloKey, 1)
	return e
}

func TestProxyMarksRequests(t *testing.T) {
	pod := newFakePod(t, "p1", true)
	e := newServing(t, pod)
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/path?q=1", nil)
	req.Host = "hello.default"
	req.Header.Set("X-Forwarded-Proto", "https")
	do(t, req)
	r := recv(t, pod.arrived, "request")
	for k, want := range map[string]string{
		network.ProxyHeader: network.ProxyActivator,
		"X-Forwarded-For":   "127.0.0.1",
		"X-Forwarded-Proto": "https", // from the proxy in front, kept
	} {
		if got := r.Header.Get(k); got != want {
			t.Errorf("%s = %q at the pod, want %q", k, got, want)
		}
	}
	if r.Host != "hello.default" || r.URL.RequestURI() != "/path?q=1" {
		t.Errorf("pod got Host %q URI %q, want hello.default /path?q=1", r.Host, r.URL.RequestURI())
	}
}

// TestProxyStreams: a streamed response reaches the client chunk by chunk.
func TestProxyStreams(t *testing.T) {
	pod := newFakePod(t, "p1", true)
	next := make(chan struct{})
	pod.handler = func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-next
		io.WriteString(w, "second\n")
	}
	e := newServing(t, pod)
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL, nil)
	req.Host = "hello.default"
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first chunk %q, %v", line, err)
	}
	close(next) // the first chunk arrived before the second was written
	if line, err := br.ReadString('\n'); err != nil || line != "second\n" {
		t.Fatalf("second chunk %q, %v", line, err)
	}
}

func TestProxyWebsocket(t *testing.T) {
	pod := newFakePod(t, "p1", true)
	var up websocket.Upgrader
	pod.handler = func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			mt, m, err := c.ReadMessage()
			if err != nil {
				return
			}
			c.WriteMessage(mt, append([]byte("echo:"), m...))
		}
	}
	src := NewMemorySource(Service{Key: helloKey, Pods: []Pod{pod.pod()}})
	e := newEnv(t, src, nil, nil)
	e.waitRoutable(t, helloKey, 1)

	hdr := http.Header{"Host": {"hello.default"}}
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(e.srv.URL, "http")+"/ws", hdr)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"one", "two"} {
		if err := c.WriteMessage(websocket.TextMessage, []byte(m)); err != nil {
			t.Fatal(err)
		}
		if _, got, err := c.ReadMessage(); err != nil || string(got) != "echo:"+m {
			t.Fatalf("got %q, %v", got, err)
		}
	}
	c.Close()
	recv(t, e.finished, "websocket end")
	if n := metric(t, e.reg, "swell_activator_requests_total", map[string]string{"status_class": "1xx"}); n != 1 {
		t.Errorf("websocket: 1xx count %v, want 1 (its 101)", n)
	}
}

// TestProxyH2C: an HTTP/2 cleartext request goes to the pod over HTTP/2,
// trailers included.
func TestProxyH2C(t *testing.T) {
	pod := newFakePod(t, "p1", true)
	pod.srv.Close()
	pod.srv = httptest.NewUnstartedServer(http.HandlerFunc(pod.serve))
	pod.srv.Config.Protocols = new(http.Protocols)
	pod.srv.Config.Protocols.SetHTTP1(true)
	pod.srv.Config.Protocols.SetUnencryptedHTTP2(true)
	pod.srv.Start()
	t.Cleanup(pod.srv.Close)
	pod.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "Grpc-Status")
		io.WriteString(w, r.Proto)
		w.Header().Set("Grpc-Status", "0")
	}
	src := NewMemorySource(Service{Key: helloKey, Pods: []Pod{pod.pod()}})
	e := newEnv(t, src, nil, nil)
	// The activator itself must accept h2c.
	e.srv.Close()
	e.srv = httptest.NewUnstartedServer(e.a)
	e.srv.Config.Protocols = new(http.Protocols)
	e.srv.Config.Protocols.SetHTTP1(true)
	e.srv.Config.Protocols.SetUnencryptedHTTP2(true)
	e.srv.Start() // closed by newEnv's cleanup
	e.waitRoutable(t, helloKey, 1)

	// A client that speaks only cleartext HTTP/2 (prior knowledge).
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: tr}
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL, strings.NewReader("x"))
	req.Host = "hello.default"
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(body) != "HTTP/2.0" || res.Trailer.Get("Grpc-Status") != "0" {
		t.Fatalf("body %q trailer %q, want HTTP/2.0 and Grpc-Status 0", body, res.Trailer.Get("Grpc-Status"))
	}
}
