package queueproxy

import (
	"net/http"

	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/proxy"
)

// probeHandler answers probes (network.IsProbe) on the serving port itself,
// after checking the user container, and passes everything else to next.
// Probes are how the activator and the kubelet ask whether this pod can
// take traffic: they must never reach the app as traffic nor count as load.
type probeHandler struct {
	next     http.Handler
	prober   *prober
	draining func() bool
}

var probeQueue = []string{network.ProbeQueue}

func (p *probeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !network.IsProbe(r) {
		p.next.ServeHTTP(w, r)
		return
	}
	// Answer as the queue-proxy whatever the outcome, so the prober knows
	// who answered.
	w.Header()[network.ProbeHeader] = probeQueue
	switch {
	case p.draining():
		proxy.Reject(w, http.StatusServiceUnavailable, network.ReasonDraining)
	case p.prober.Ready() || p.prober.ProbeNow(r.Context()):
		w.Header()["Content-Type"] = proxy.PlainText
		w.Write([]byte(network.ProbeQueue))
	default:
		proxy.Reject(w, http.StatusServiceUnavailable, network.ReasonNotReady)
	}
}
