package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/activatorsource"
	"github.com/swell-run/swell/kube/apiserver"
)

// userAgent names the activator in the API server's logs.
const userAgent = "swell-activator"

// kubeMode is the activator on Kubernetes: the services come from the
// cluster's pods-Services (kube/activatorsource), the autoscaler's address
// from its Service's endpoints and the CAs it is trusted by from its
// ConfigMap; the activator proves itself with its pod's service-account
// token.
type kubeMode struct {
	cfg    config
	rest   *rest.Config
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
	return &kubeMode{cfg: cfg, rest: rc, client: client, src: src, log: log}, nil
}

// configure sets what the activator needs from the cluster besides its
// source: who each caller is, by its address, and what the services'
// NetworkPolicies say of it, so that a service takes requests only from
// the callers it admits.
func (k *kubeMode) configure(c *activator.Config) {
	c.Callers, c.CallersHint = k.src.Callers(), kube.CallersHint
}

// credentials returns the service-account token the activator reaches the
// API server with, or the file holding it: the kubelet renews that file,
// and the reporter reads it at each connection. The autoscaler checks it
// with the TokenReview API, which says which pod it is bound to.
func (k *kubeMode) credentials() (token, file string, err error) {
	switch {
	case k.rest.BearerTokenFile != "":
		return "", k.rest.BearerTokenFile, nil
	case k.rest.BearerToken != "":
		return k.rest.BearerToken, "", nil
	}
	return "", "", errors.New("the activator has no service-account token to present to the autoscaler: " +
		"run it with its service account's token mounted (automountServiceAccountToken), or set AUTOSCALER_TOKEN_FILE")
}

// dialerFor is the websocket dialer of the reporter to the autoscaler
// replica at addr, one that leads a bucket of services: the autoscaler's
// Service names are dialled at addr, bypassing any HTTP proxy, and over
// TLS trusted by the CAs the autoscaler publishes; everything else as
// websocket.DefaultDialer would.
func (k *kubeMode) dialerFor(addr string) *websocket.Dialer {
	hosts := kube.HostNames(kube.AutoscalerService, k.cfg.SystemNamespace, k.cfg.ClusterDomain)
	d := *websocket.DefaultDialer
	d.NetDialContext = autoscalerDialer(hosts, k.cfg.SystemNamespace+"/"+kube.AutoscalerService,
		func() (string, bool) { return addr, addr != "" }, (&net.Dialer{}).DialContext)
	proxy := d.Proxy
	d.Proxy = func(r *http.Request) (*url.URL, error) {
		if isHost(hosts, r.URL.Hostname()) || proxy == nil {
			return nil, nil
		}
		return proxy(r)
	}
	// The name is the Service's, whatever AUTOSCALER_URL names: dialled
	// by an IP address, a handshake would otherwise check no name, and any
	// certificate a trusted CA issued would pass for the autoscaler.
	d.TLSClientConfig = trustedBy(k.src.AutoscalerRoots, k.cfg.SystemNamespace+"/"+kube.CAConfigMap, hosts[1])
	return &d
}

// trustedBy is a TLS client configuration that verifies the server's
// certificate, for name, against the CAs roots returns at the handshake:
// they change as the autoscaler rotates its CA, which a tls.Config's fixed
// RootCAs could not follow. Without roots (what publishes them is absent)
// every handshake fails.
func trustedBy(roots func() *x509.CertPool, from, name string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Not skipped: VerifyConnection below verifies the chain and the
		// name, as the standard verification would, against the current
		// roots.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			pool := roots()
			if pool == nil {
				return fmt.Errorf("no CA to trust the autoscaler by yet: the ConfigMap %s is absent or holds no certificate", from)
			}
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the autoscaler presented no certificate")
			}
			opts := x509.VerifyOptions{Roots: pool, DNSName: name, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		},
	}
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
