package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// traefikNotFound is the body of Traefik's answer to a request no router
// matches.
const traefikNotFound = "404 page not found\n"

// TestTraefikRoutesAnIngress: an Ingress of the class Traefik serves,
// with a public host and a path, to the Service of a plain Deployment of
// two pods. Once Traefik's own API routes that host and path to exactly
// the two pods, a request at Traefik's ClusterIP with that host and a
// path under it is answered by the app, coming from Traefik's pod, and
// every pod answers in turn; the same host on another path (or on one
// that only begins with the same letters: a prefix is matched by whole
// elements of the path, as the Ingress API defines it), and another host,
// get Traefik's 404 (the app greets on every path).
func TestTraefikRoutesAnIngress(t *testing.T) {
	t.Parallel()
	e := traefikSetup(t)
	const name, host, path = "shop", "shop.example.com", "/cart"
	e.createHello(helloDeployment(name, 2))
	pods := e.waitServing(name, 2)
	e.createIngress(name, host, path)

	var servers []string
	for _, p := range pods {
		servers = append(servers, "http://"+net.JoinHostPort(p.Status.PodIP, strconv.Itoa(helloPort)))
	}
	slices.Sort(servers)
	// The Ingress's backend names the Service's port by its name.
	service := e.ns + "-" + name + "-http"
	e.eventually("Traefik routing "+host+path+" to the pods "+strings.Join(servers, ", "), func(ctx context.Context) error {
		return traefikRoutes(ctx, e.cs, service, host, path, servers)
	})

	proxyPods, err := traefikPods(t.Context(), e.cs)
	if err != nil {
		t.Fatal(err)
	}
	var proxies []string
	for _, p := range proxyPods {
		proxies = append(proxies, p.Status.PodIP)
	}
	url, err := traefikURL(t.Context(), e)
	if err != nil {
		t.Fatal(err)
	}
	// Traefik balances round robin over the servers: four requests reach
	// both pods.
	answered := map[string]int{}
	for i := range 4 {
		// A query makes the app name the address the request came from.
		code, body, h, err := getHost(t.Context(), url+path+"/items?status=200", host)
		if err != nil {
			t.Fatalf("request %d for %s%s/items at Traefik's ClusterIP: %v", i, host, path, err)
		}
		if code != http.StatusOK || !strings.HasPrefix(body, helloGreeting) {
			t.Fatalf("request %d for %s%s/items: %d %q, want 200 and the app's greeting", i, host, path, code, body)
		}
		if peer := h.Get("Demo-Peer"); !slices.Contains(proxies, peer) {
			t.Fatalf("request %d reached the app from %q, not from Traefik's pods %v", i, peer, proxies)
		}
		for _, p := range pods {
			if strings.Contains(body, "(replica "+p.Name+")") {
				answered[p.Name]++
			}
		}
	}
	if len(answered) != len(pods) {
		t.Errorf("the answers came from the pods %v, want each of the %d", answered, len(pods))
	}

	// A prefix matches whole elements of the path, as the Ingress API
	// defines it.
	if code, body, _, err := getHost(t.Context(), url+path, host); err != nil || code != http.StatusOK || !strings.HasPrefix(body, helloGreeting) {
		t.Errorf("%s%s: %d %q %v, want 200 and the app's greeting", host, path, code, body, err)
	}
	for _, c := range []struct{ host, path string }{
		{host, "/"},
		{host, "/checkout"},
		{host, path + "oon"},
		{"unknown.example.com", path},
	} {
		code, body, _, err := getHost(t.Context(), url+c.path, c.host)
		if err != nil {
			t.Fatalf("%s%s at Traefik's ClusterIP: %v", c.host, c.path, err)
		}
		if code != http.StatusNotFound || body != traefikNotFound {
			t.Errorf("%s%s: %d %q, want Traefik's 404 %q", c.host, c.path, code, body, traefikNotFound)
		}
	}

	for _, p := range proxyPods {
		if rss, err := processRSS(&p, "traefik"); err != nil {
			t.Logf("Traefik's memory: %v", err)
		} else {
			t.Logf("Traefik's pod %s: resident memory %d MiB", p.Name, rss>>20)
		}
	}
}

// createIngress creates an Ingress of Traefik's class, name, that sends
// the requests for host on path and under it to the first port of the
// Service name.
func (e *env) createIngress(name, host, path string) {
	e.t.Helper()
	class, prefix := traefikClass, networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: networkingv1.IngressSpec{
			IngressClassName: &class,
			Rules: []networkingv1.IngressRule{{
				Host: host,
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: []networkingv1.HTTPIngressPath{{
						Path:     path,
						PathType: &prefix,
						Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
							Name: name,
							Port: networkingv1.ServiceBackendPort{Name: "http"},
						}},
					}},
				}},
			}},
		},
	}
	if _, err := e.cs.NetworkingV1().Ingresses(e.ns).Create(e.t.Context(), ing, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create ingress %s: %v", name, err)
	}
}

// traefikURL is the URL of Traefik's web entry point at its Service's
// ClusterIP, as clients in the cluster reach it.
func traefikURL(ctx context.Context, e *env) (string, error) {
	s, err := e.cs.CoreV1().Services(traefikNamespace).Get(ctx, traefikName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	for _, p := range s.Spec.Ports {
		if p.Name == "web" {
			return "http://" + net.JoinHostPort(s.Spec.ClusterIP, strconv.Itoa(int(p.Port))), nil
		}
	}
	return "", fmt.Errorf("service %s/%s has no port web: %v", traefikNamespace, traefikName, s.Spec.Ports)
}

// getHost sends GET url with the Host header host, on a new connection,
// and returns the status, the body and the headers.
func getHost(ctx context.Context, url, host string) (int, string, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", nil, err
	}
	req.Host = host
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header, err
}

// processRSS returns the resident memory, in bytes, of the process named
// comm in the pod p's cgroup.
func processRSS(p *corev1.Pod, comm string) (int64, error) {
	want := []byte("/pod" + string(p.UID) + "/")
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, d := range entries {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		dir := filepath.Join("/proc", d.Name())
		cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
		if err != nil || !bytes.Contains(cg, want) {
			continue
		}
		if c, err := os.ReadFile(filepath.Join(dir, "comm")); err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		status, err := os.ReadFile(filepath.Join(dir, "status"))
		if err != nil {
			return 0, err
		}
		for line := range strings.Lines(string(status)) {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				return kb << 10, err
			}
		}
		return 0, fmt.Errorf("no VmRSS in %s/status", dir)
	}
	return 0, fmt.Errorf("no process %s in the cgroup of pod %s (UID %s)", comm, p.Name, p.UID)
}
