package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/activatorsource"
	"github.com/swell-run/swell/kube/apiserver"
)

// userAgent names the activator in the API server's logs.
const userAgent = "swell-activator"

// kubeMode is the activator on Kubernetes: the services come from the
// cluster's pods-Services (kube/activatorsource), the token from its
// Secret, and the autoscaler's address from its Service's endpoints.
type kubeMode struct {
	cfg    config
	client kubernetes.Interface
	src    *activatorsource.Source
	log    *zap.Logger
}

// newKubeMode finds the API server and builds the source; Run starts it.
func newKubeMode(cfg config, log *zap.Logger) (*kubeMode, error) {
	rc, err := apiserver.RESTConfig(cfg.Kubeconfig, userAgent)
	if err != nil {
		return nil, fmt.Errorf("SERVICES_FILE is not set, so the services come from Kubernetes: %w", err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("Kubernetes client for %s: %w", rc.Host, err)
	}
	src, err := activatorsource.New(activatorsource.Config{
		Client:          client,
		SystemNamespace: cfg.SystemNamespace,
		ClusterDomain:   cfg.ClusterDomain,
		Logger:          log.Named("kubesource"),
	})
	if err != nil {
		return nil, err
	}
	return &kubeMode{cfg: cfg, client: client, src: src, log: log}, nil
}

// configure sets what the activator needs from the cluster besides its
// source: the namespace of each caller, by its address, so that a service
// takes requests only from the callers it admits.
func (k *kubeMode) configure(c *activator.Config) {
	c.Callers, c.CallersHint = k.src.Callers(), kube.CallersHint
}

// token waits for the autoscaler token's Secret and reads it.
func (k *kubeMode) token(ctx context.Context) (string, error) {
	k.log.Info("reading the autoscaler token",
		zap.String("secret", k.cfg.SystemNamespace+"/"+kube.ActivatorTokenSecret), zap.String("key", kube.ActivatorTokenKey))
	return activatorsource.ReadToken(ctx, k.client, k.cfg.SystemNamespace)
}

// dialer is the reporter's websocket dialer: the autoscaler's Service
// names are dialled at the endpoint the source knows, bypassing any HTTP
// proxy; everything else as websocket.DefaultDialer would.
func (k *kubeMode) dialer() *websocket.Dialer {
	hosts := kube.HostNames(kube.AutoscalerService, k.cfg.SystemNamespace, k.cfg.ClusterDomain)
	d := *websocket.DefaultDialer
	d.NetDialContext = autoscalerDialer(hosts, k.cfg.SystemNamespace+"/"+kube.AutoscalerService,
		k.src.AutoscalerAddr, (&net.Dialer{}).DialContext)
	proxy := d.Proxy
	d.Proxy = func(r *http.Request) (*url.URL, error) {
		if isHost(hosts, r.URL.Hostname()) || proxy == nil {
			return nil, nil
		}
		return proxy(r)
	}
	return &d
}

type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// autoscalerDialer dials an address whose host is one of hosts (the names
// of the autoscaler's Service) at endpoint(), the ready endpoint of that
// Service: the autoscaler that holds the lead writes it. So the activator
// needs neither cluster DNS nor kube-proxy to reach it, and follows a new
// leader on its next connection. Any other address goes to dial unchanged.
func autoscalerDialer(hosts []string, service string, endpoint func() (string, bool), dial dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, _, err := net.SplitHostPort(addr); err == nil && isHost(hosts, host) {
			ep, ok := endpoint()
			if !ok {
				return nil, fmt.Errorf("dial %s: Service %s has no ready endpoint on its port %q (no autoscaler holds the lead yet)", addr, service, kube.PortNameHTTP)
			}
			addr = ep
		}
		return dial(ctx, network, addr)
	}
}

// isHost reports whether host is one of hosts, ignoring case and a
// trailing dot.
func isHost(hosts []string, host string) bool {
	host = strings.TrimSuffix(host, ".")
	for _, h := range hosts {
		if strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}
