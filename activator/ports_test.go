package activator

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// portListeners opens loopback listeners for service ports: each on a
// port of its own choosing, reporting the service's port as its
// connections' local address, as a listener bound to that port would.
type portListeners struct {
	mu    sync.Mutex
	addrs map[int]string // service port → where it really listens
	fail  map[int]bool
}

func (p *portListeners) listen(port int) (net.Listener, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail[port] {
		return nil, &net.OpError{Op: "listen", Net: "tcp", Err: errAddrInUse}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.addrs[port] = ln.Addr().String()
	return asPort{ln, port}, nil
}

func (p *portListeners) addr(port int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addrs[port]
}

type errString string

func (e errString) Error() string { return string(e) }

const errAddrInUse = errString("address already in use")

type asPort struct {
	net.Listener
	port int
}

func (l asPort) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return portConn{c, l.port}, nil
}

type portConn struct {
	net.Conn
	port int
}

func (c portConn) LocalAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: c.port}
}

// newH2CPod is a ready fakePod that also speaks HTTP/2 without TLS, as
// the queue-proxy does: the activator forwards an HTTP/2 request so.
func newH2CPod(t *testing.T, name string) *fakePod {
	p := &fakePod{name: name, arrived: make(chan *http.Request, 1000)}
	p.ready.Store(true)
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(p.serve))
	p.srv.Config.Protocols = new(http.Protocols)
	p.srv.Config.Protocols.SetHTTP1(true)
	p.srv.Config.Protocols.SetUnencryptedHTTP2(true)
	p.srv.Start()
	t.Cleanup(p.srv.Close)
	return p
}

// getVia sends GET path with host to addr, over HTTP/1.1 or, with h2c,
// HTTP/2 with prior knowledge.
func getVia(t *testing.T, addr, host, path string, h2c bool) (int, string) {
	t.Helper()
	rt := &http.Transport{}
	if h2c {
		rt.Protocols = new(http.Protocols)
		rt.Protocols.SetUnencryptedHTTP2(true)
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	res, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatalf("GET %s%s at %s: %v", host, path, addr, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestServicePortRoutesWhateverTheHost: a request that arrives on a
// service's own port goes to that service with any Host and any path —
// the public host an ingress sends, another service's name, none the
// activator knows — over HTTP/1.1 and HTTP/2; on the shared port, Host
// still routes. A port taken away is closed; a port that cannot be opened
// routes nothing and is tried again at the next change.
func TestServicePortRoutesWhateverTheHost(t *testing.T) {
	web, api := newH2CPod(t, "web-1"), newH2CPod(t, "api-1")
	webKey, apiKey := mustKey("shop/web"), mustKey("shop/api")
	src := NewMemorySource(
		Service{Key: webKey, Port: 20001, Pods: []Pod{web.pod()}},
		Service{Key: apiKey, Port: 20002, Pods: []Pod{api.pod()}},
	)
	pl := &portListeners{addrs: map[int]string{}, fail: map[int]bool{20003: true}}
	srv := &http.Server{}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	e := newEnv(t, src, func(c *Config) { c.ServePort = srv.Serve; c.ListenPort = pl.listen }, func(a *Activator) { srv.Handler = a })
	t.Cleanup(func() { srv.Close() })
	e.waitRoutable(t, webKey, 1)
	e.waitRoutable(t, apiKey, 1)

	for _, c := range []struct {
		port       int
		host, path string
		want       string
	}{
		{20001, "shop.example.com", "/", "web-1"},
		{20002, "shop.example.com", "/api/v1/items", "api-1"},
		{20002, "web.shop.svc.cluster.local", "/", "api-1"},
		{20001, "[fd00::1]:8080", "/x", "web-1"},
		{20001, "", "/", "web-1"},
	} {
		for _, h2c := range []bool{false, true} {
			code, body := getVia(t, pl.addr(c.port), c.host, c.path, h2c)
			if code != http.StatusOK || body != c.want {
				t.Errorf("port %d, Host %q, %s (h2c %v): %d %q, want 200 %q", c.port, c.host, c.path, h2c, code, body, c.want)
			}
		}
	}
	if res, body := e.get(t, "api.shop", nil); res.StatusCode != http.StatusOK || body != "api-1" {
		t.Errorf("the shared port by Host: %d %q, want api-1", res.StatusCode, body)
	}
	if res, _ := e.get(t, "shop.example.com", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("the shared port with a public host: %d, want 404", res.StatusCode)
	}

	// web loses its port; a third service's port cannot be opened.
	webAddr := pl.addr(20001)
	src.Set(Service{Key: webKey, Pods: []Pod{web.pod()}})
	src.Set(Service{Key: mustKey("shop/third"), Port: 20003})
	e.waitRoutable(t, mustKey("shop/third"), 0)
	for e.a.table.Load().byPort[20001] != nil {
		<-*e.a.tableChanged.Load()
	}
	if c, err := net.Dial("tcp", webAddr); err == nil {
		c.Close()
		t.Errorf("web's port still takes connections after web lost it")
	}
	if got := e.a.table.Load().byPort[20003]; got != nil {
		t.Errorf("a port that could not be opened routes to %s", got.name)
	}
	pl.mu.Lock()
	pl.fail[20003] = false
	pl.mu.Unlock()
	src.Set(Service{Key: mustKey("shop/third"), Port: 20003, ContainerConcurrency: 1})
	for e.a.table.Load().byPort[20003] == nil {
		<-*e.a.tableChanged.Load()
	}
}
