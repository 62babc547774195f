package activator

import (
	"net/http"

	"github.com/swell-run/swell/pkg/proxy"
)

// buildHandler returns the request path. Each stage is an http.Handler in
// its own file; the router gives the request an exchange (exchange.go)
// through which the stages below it share the request's service and state.
func (a *Activator) buildHandler() http.Handler {
	bound := queueBound{clk: a.clk, timeout: a.cfg.QueueTimeout}
	// Outermost first: each stage sees only what the ones above let through.
	return proxy.Chain(a.proxy,
		// Host names the service (or, in the same process, WithService); a
		// Service's name alone is looked up in the caller's namespace, as
		// cluster DNS would; a request for none is answered 404 and goes
		// no further.
		func(next http.Handler) http.Handler {
			return &router{next: next, table: &a.table, callers: a.callerLookup()}
		},
		// On Kubernetes, only callers the service admits go on (those its
		// NetworkPolicies would let reach its pods directly, and those
		// its Callers list): before
		// accounting, so that a refused caller neither counts as load
		// nor wakes the service.
		a.authorizeStage(),
		// The autoscaler's load and Prometheus' counts see every request,
		// the 503s and 504s below included; time queued counts.
		func(next http.Handler) http.Handler { return &accounting{next: next, clk: a.clk} },
		// The autoscaler hears of a request for a service with no routable
		// pod at once, not at the next report.
		func(next http.Handler) http.Handler { return &coldStart{next: next, poke: a.cfg.Poke} },
		// A pod that refused the connection is dropped and the request
		// tried on another, through the throttler again.
		func(next http.Handler) http.Handler { return &retry{next: next, clk: a.clk, bound: bound} },
		// At most the routable pods' slots at once; the rest wait, FIFO,
		// bounded in number and in time.
		func(next http.Handler) http.Handler { return &throttle{next: next, bound: bound, limits: a.limits} },
		// An admitted request takes a free slot on one pod, by the
		// service's policy.
		func(next http.Handler) http.Handler { return &balance{next: next, clk: a.clk, metrics: a.metrics} },
	)
}

// callerLookup finds callers' namespaces; the zero value (no
// Config.Callers) finds none.
func (a *Activator) callerLookup() callerLookup {
	if a.cfg.Callers == nil {
		return callerLookup{}
	}
	return callerLookup{dir: a.cfg.Callers, clk: a.clk, wait: a.cfg.CallerWait}
}

// authorizeStage is the caller's authorization, or nil (no stage) when
// the activator cannot tell who calls.
func (a *Activator) authorizeStage() func(http.Handler) http.Handler {
	if a.cfg.Callers == nil {
		return nil
	}
	return func(next http.Handler) http.Handler {
		return &authorize{next: next, callerLookup: a.callerLookup(), log: a.log, hint: a.cfg.CallersHint}
	}
}
