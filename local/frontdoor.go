package local

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
)

// frontDoor is where traffic enters `swell local`: the part a Kubernetes
// cluster's Service and its endpoints play. It finds the request's service
// and sends the request through the activator, or, when the autoscaler has
// taken the activator out of the service's path, straight to one of its
// ready replicas.
type frontDoor struct {
	act     http.Handler
	direct  *httputil.ReverseProxy
	byHost  map[string]*localService
	byName  map[string]*localService
	only    *localService // the one service, when there is one
	names   string        // for the 404 body
	log     *zap.Logger
	counter atomic.Uint64 // round robin over ready replicas
}

type directKey struct{}

// direct is where a request sent straight to a replica goes.
type direct struct {
	addr string
	svc  *localService
}

func newFrontDoor(b *backend, act http.Handler, log *zap.Logger) *frontDoor {
	f := &frontDoor{
		act:    act,
		byHost: make(map[string]*localService),
		byName: make(map[string]*localService),
		log:    log,
	}
	var names []string
	for _, s := range b.order {
		f.byName[s.name] = s
		f.byName[s.key.String()] = s
		for _, h := range append([]string{s.name, s.name + ".localhost", s.name + "." + Namespace}, s.cfg.Hosts...) {
			f.byHost[strings.ToLower(h)] = s
		}
		names = append(names, s.name)
	}
	sort.Strings(names)
	f.names = strings.Join(names, ", ")
	if len(b.order) == 1 {
		f.only = b.order[0]
	}
	f.direct = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = pr.In.Context().Value(directKey{}).(direct).addr
			proxy.SetForwarded(pr)
			proxy.StripSwellHeaders(pr.Out.Header)
		},
		Transport: proxy.NewTransport(proxy.TransportConfig{
			DialTimeout:         2 * time.Second,
			KeepAlive:           30 * time.Second,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     30 * time.Second,
		}),
		BufferPool: &proxy.BufferPool{},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			d := r.Context().Value(directKey{}).(direct)
			var op *net.OpError
			if errors.As(err, &op) && op.Op == "dial" {
				// The replica left between the choice and the dial:
				// nothing was sent, so the activator takes the request
				// and finds it another.
				f.toActivator(w, r, d.svc)
				return
			}
			f.log.Warn("request to a replica failed", zap.String("replica", d.addr), zap.Error(err))
			proxy.Reject(w, http.StatusBadGateway, network.ReasonAppUnreachable)
		},
	}
	return f
}

// service finds the request's service: by the Swell-Service header ("hello"
// or "local/hello"), then by Host (a service's hosts, its name, and
// <name>.localhost), and when only one service runs, that one.
func (f *frontDoor) service(r *http.Request) *localService {
	if h := r.Header.Get(network.ServiceHeader); h != "" {
		return f.byName[h]
	}
	host := strings.ToLower(r.Host)
	if s := f.byHost[host]; s != nil {
		return s
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		if s := f.byHost[h]; s != nil {
			return s
		}
	}
	return f.only
}

func (f *frontDoor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := f.service(r)
	if s == nil {
		h := w.Header()
		h.Set(network.ReasonHeader, network.ReasonUnknownService)
		h["Content-Type"] = proxy.PlainText
		h["X-Content-Type-Options"] = proxy.NoSniff
		w.WriteHeader(http.StatusNotFound)
		msg := "swell local: no service for host " + r.Host
		if h := r.Header.Get(network.ServiceHeader); h != "" {
			msg = "swell local: no service named " + h
		}
		w.Write([]byte(msg + "; services: " + f.names + " (route with Host: <name>.localhost or the " + network.ServiceHeader + " header)\n"))
		return
	}
	if v := s.view.Load(); v.route == plan.RoutePods && len(v.ready) > 0 {
		addr := v.ready[f.counter.Add(1)%uint64(len(v.ready))]
		f.direct.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), directKey{}, direct{addr, s})))
		return
	}
	f.toActivator(w, r, s)
}

// toActivator hands r to the activator for s. The service goes in r's
// context (activator.WithService), which no client can set: the activator
// routes by no header, and strips the client's Swell-* headers itself.
func (f *frontDoor) toActivator(w http.ResponseWriter, r *http.Request, s *localService) {
	f.act.ServeHTTP(w, r.WithContext(activator.WithService(r.Context(), s.key)))
}
