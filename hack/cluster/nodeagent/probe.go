package nodeagent

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probeTracker is the kubelet's bookkeeping for one probe of one running
// container: when the next probe is due and what the result is after the
// success and failure thresholds. It is pure; the caller runs the probes
// and passes the times.
type probeTracker struct {
	period              time.Duration
	timeout             time.Duration
	successThreshold    int
	failureThreshold    int
	next                time.Time
	successes, failures int
	ok                  bool
}

// newProbeTracker starts the bookkeeping for a container started at
// started. initial is the result before any probe ran: false for
// readiness and startup, true for liveness.
func newProbeTracker(p *corev1.Probe, started time.Time, initial bool) *probeTracker {
	t := &probeTracker{
		period:           seconds(p.PeriodSeconds, 10),
		timeout:          seconds(p.TimeoutSeconds, 1),
		successThreshold: int(orDefault(p.SuccessThreshold, 1)),
		failureThreshold: int(orDefault(p.FailureThreshold, 3)),
		next:             started.Add(time.Duration(p.InitialDelaySeconds) * time.Second),
		ok:               initial,
	}
	return t
}

func seconds(v, def int32) time.Duration { return time.Duration(orDefault(v, def)) * time.Second }

func orDefault(v, def int32) int32 {
	if v <= 0 {
		return def
	}
	return v
}

// due reports when the next probe is to run.
func (t *probeTracker) due() time.Time { return t.next }

// observe records the outcome of a probe that ran at now, schedules the
// next one and returns the result after thresholds, and whether it changed.
func (t *probeTracker) observe(now time.Time, success bool) (ok, changed bool) {
	t.next = now.Add(t.period)
	if success {
		t.successes++
		t.failures = 0
		if !t.ok && t.successes >= t.successThreshold {
			t.ok = true
			return true, true
		}
	} else {
		t.failures++
		t.successes = 0
		if t.ok && t.failures >= t.failureThreshold {
			t.ok = false
			return false, true
		}
	}
	return t.ok, false
}

// failedOut reports whether the last failureThreshold probes failed: a
// startup probe in that state has failed for good.
func (t *probeTracker) failedOut() bool { return t.failures >= t.failureThreshold }

// prober runs probe handlers against a pod for real: HTTP and TCP from the
// node to the pod IP, exec inside the pod's network namespace.
type prober struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	ip   string // the ip binary
}

// handler is the part of a probe or lifecycle hook the prober runs.
type handler struct {
	exec      *corev1.ExecAction
	httpGet   *corev1.HTTPGetAction
	tcpSocket *corev1.TCPSocketAction
	grpc      *corev1.GRPCAction
}

// run runs h once against the pod and returns nil on success.
func (p *prober) run(ctx context.Context, h handler, netns, podIP string, c *corev1.Container, env []envVar, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case h.exec != nil:
		if len(h.exec.Command) == 0 {
			return fmt.Errorf("exec: empty command")
		}
		cmd := exec.CommandContext(ctx, p.ip, append([]string{"netns", "exec", netns}, h.exec.Command...)...)
		cmd.Env = environ(env)
		cmd.WaitDelay = time.Second
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("exec %q: %w: %.200s", h.exec.Command, err, out)
		}
		return nil
	case h.httpGet != nil:
		return p.httpGet(ctx, h.httpGet, podIP, c)
	case h.tcpSocket != nil:
		port, err := resolvePort(h.tcpSocket.Port, c)
		if err != nil {
			return err
		}
		host := h.tcpSocket.Host
		if host == "" {
			host = podIP
		}
		conn, err := p.dial(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return fmt.Errorf("tcp: %w", err)
		}
		return conn.Close()
	case h.grpc != nil:
		return fmt.Errorf("grpc probes are not supported by the node agent; use httpGet, tcpSocket or exec")
	}
	return fmt.Errorf("probe has no handler")
}

func (p *prober) httpGet(ctx context.Context, g *corev1.HTTPGetAction, podIP string, c *corev1.Container) error {
	port, err := resolvePort(g.Port, c)
	if err != nil {
		return err
	}
	host := g.Host
	if host == "" {
		host = podIP
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	path := g.Path
	if path == "" || path[0] != '/' {
		path = "/" + path
	}
	url := scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("http: %w", err)
	}
	req.Header.Set("User-Agent", "kube-probe/1.37")
	req.Header.Set("Accept", "*/*")
	for _, h := range g.HTTPHeaders {
		if h.Name == "Host" {
			req.Host = h.Value
			continue
		}
		req.Header.Set(h.Name, h.Value)
	}
	client := &http.Client{
		Transport: &http.Transport{
			DialContext:       p.dial,
			DisableKeepAlives: true,
			// The kubelet does not verify a probed pod's certificate either.
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("http: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("http GET %s: status %d", url, resp.StatusCode)
	}
	return nil
}

// resolvePort turns a probe's port, a number or the name of one of the
// container's ports, into a number.
func resolvePort(p intstr.IntOrString, c *corev1.Container) (int, error) {
	if p.Type == intstr.Int {
		if p.IntVal <= 0 || p.IntVal > 65535 {
			return 0, fmt.Errorf("port %d: want 1-65535", p.IntVal)
		}
		return int(p.IntVal), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil && n > 0 && n <= 65535 {
		return n, nil
	}
	return 0, fmt.Errorf("port %q: not a number and not the name of a port of container %q", p.StrVal, c.Name)
}

func probeHandler(p *corev1.Probe) handler {
	return handler{exec: p.Exec, httpGet: p.HTTPGet, tcpSocket: p.TCPSocket, grpc: p.GRPC}
}

func hookHandler(h *corev1.LifecycleHandler) handler {
	return handler{exec: h.Exec, httpGet: h.HTTPGet, tcpSocket: h.TCPSocket}
}
