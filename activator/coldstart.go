package activator

import "net/http"

// coldStart marks a request that arrives while its service has no routable
// pod, and pokes the autoscaler at once: waiting for the next report would
// add up to a reporting period to the cold start.
type coldStart struct {
	next http.Handler
	// poke is Config.Poke; nil pokes nobody.
	poke func(key string)
}

func (h *coldStart) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := exchangeOf(r)
	if e.t.routableCount() == 0 {
		e.cold = true
		if h.poke != nil {
			h.poke(e.t.name)
		}
	}
	h.next.ServeHTTP(w, r)
}
