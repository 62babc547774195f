package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// demoPeer is the header on the hello app's answers to requests with knobs
// that names the address the request came from: the pod's loopback when
// the queue-proxy sent it on.
const demoPeer = "Demo-Peer"

// streamTally counts every request of a stream and what came of it.
type streamTally struct {
	mu sync.Mutex
	// phase names the part of the test under way, for the examples of
	// the requests sent in it.
	phase    string
	sent     int
	ok       int
	lost     int
	bypassed int
	// examples keeps the first few lost or bypassing answers, for the
	// failure message.
	examples []string
	// replicas counts answers by the replica that gave them, for the round
	// under way.
	replicas map[string]int
	wg       sync.WaitGroup
}

// note records what came of one request.
func (s *streamTally) note(at time.Time, phase string, code int, peer, body string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	example := func(what string) {
		if len(s.examples) < 10 {
			s.examples = append(s.examples, at.Format("15:04:05.000")+" "+phase+": "+what)
		}
	}
	switch {
	case err != nil:
		s.lost++
		example(err.Error())
	case code != http.StatusOK:
		s.lost++
		example(fmt.Sprintf("status %d: %q", code, lastBytes(body, 200)))
	case peer != "127.0.0.1" && peer != "::1":
		s.bypassed++
		example(fmt.Sprintf("answered from %s for a request from %q, not through the queue-proxy", replicaOf(body), peer))
	default:
		s.ok++
		s.replicas[replicaOf(body)]++
	}
}

// answeringReplicas says how many replicas have answered in this round.
func (s *streamTally) answeringReplicas() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.replicas)
}

// replicaOf takes the replica's name from the hello app's greeting.
func replicaOf(body string) string {
	_, after, ok := strings.Cut(body, "(replica ")
	if !ok {
		return "?"
	}
	name, _, _ := strings.Cut(after, ")")
	return name
}

// TestSwellStreamThroughZeroAndBack sends a steady stream of requests to a
// Service's ClusterIP, as its clients do, while Swell takes it from zero to
// several pods, back to one and to zero, twice; the ClusterIP leads to the
// activators, then to the pods' queue-proxies, then to the activators
// again. Every request is counted: none may be lost, and none may be
// answered by the app's port directly, past the queue-proxy.
func TestSwellStreamThroughZeroAndBack(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	const name = "stream"
	e.createHello(swellHello(name, int32p(0), map[string]string{
		"autoscaling.swell.run/min-scale": "0",
		// Room for the load to read high: on a busy machine a 200-ms
		// request takes longer end to end, and with too few pods allowed
		// the spare slot below is never there.
		"autoscaling.swell.run/max-scale": "6",
		// A pod is asked to keep half a request in flight for each it
		// may take (target 1 at 50 %), and takes 2 at most.
		"autoscaling.swell.run/target":                        "1",
		"autoscaling.swell.run/target-utilization-percentage": "50",
		"swell.run/container-concurrency":                     "2",
		// Knative's policy, whose burst capacity is the one set here (the
		// default class learns its own): the switches are crossed at
		// known loads.
		"autoscaling.swell.run/class": "kpa",
		// One spare slot is kept (KPA's target burst capacity): the
		// Service is routed to its pods once they have it to spare, and
		// both switches are crossed. With 0 the activator would leave the
		// path at the first ready pod whatever the backlog, as in Knative,
		// and a pod's queue-proxy would turn away what it cannot queue.
		"autoscaling.swell.run/target-burst-capacity": "1",
	}))

	atZero := func(ctx context.Context) error {
		if n, err := e.replicas(ctx, name); err != nil || n != 0 {
			return fmt.Errorf("scale %d %v, want 0", n, err)
		}
		s, err := e.routeSlice(ctx, name)
		if err != nil {
			return err
		}
		if s.Labels[labelRoute] != "activator" || len(s.Endpoints) == 0 {
			return fmt.Errorf("route %q endpoints %v, want the activators", s.Labels[labelRoute], sliceIPs(s))
		}
		return nil
	}
	e.eventually(name+" at zero behind the activators", atZero)
	e.waitProxied(name, "activator")

	url, err := e.serviceURL(t.Context(), name, "/?sleep=200ms")
	if err != nil {
		t.Fatal(err)
	}
	host := name + "." + e.ns + ".svc.cluster.local"
	tally := &streamTally{replicas: map[string]int{}}
	send := func() {
		tally.mu.Lock()
		tally.sent++
		phase := tally.phase
		tally.mu.Unlock()
		tally.wg.Go(func() {
			at := time.Now()
			code, peer, body, err := peerGet(t.Context(), url, host)
			tally.note(at, phase, code, peer, body, err)
		})
	}
	// stream sends rate requests a second, each on its own (an open loop:
	// a slow answer does not slow the stream), until until holds.
	stream := func(rate int, what string, until func(ctx context.Context) error) {
		t.Helper()
		tally.mu.Lock()
		tally.phase = what
		tally.mu.Unlock()
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			if rate == 0 {
				return
			}
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.Context().Done():
					return
				case <-tick.C:
					send()
				}
			}
		}()
		defer func() {
			close(stop)
			<-done
		}()
		e.eventuallyWithin(fmt.Sprintf("%s, at %d requests a second", what, rate), scaleTimeout, until)
	}

	for round := 1; round <= 2; round++ {
		tally.mu.Lock()
		clear(tally.replicas)
		tally.mu.Unlock()
		// 10 requests a second of 200 ms each keep 2 in flight: 4 pods,
		// which have a slot to spare beyond the burst capacity (4 − 1 −
		// 2), so the activator leaves the path. Slower answers keep more
		// in flight and ask for more pods, up to 6: a slot is spare up to
		// 5 in flight, 500 ms a request.
		stream(10, fmt.Sprintf("round %d: %s routed to its pods, answered by at least 2 of them", round, name), func(ctx context.Context) error {
			s, err := e.routeSlice(ctx, name)
			if err != nil {
				return err
			}
			if s.Labels[labelRoute] != "pods" {
				return fmt.Errorf("route %q", s.Labels[labelRoute])
			}
			if n := tally.answeringReplicas(); n < 2 {
				return fmt.Errorf("answered by %d replicas", n)
			}
			return nil
		})
		// 1 a second keeps 0.2 in flight: one pod (up to 500 ms a
		// request), which has no slot to spare, so the activator comes
		// back into the path.
		stream(1, fmt.Sprintf("round %d: %s down to one pod, routed to the activators", round, name), func(ctx context.Context) error {
			if n, err := e.replicas(ctx, name); err != nil || n != 1 {
				return fmt.Errorf("scale %d %v, want 1", n, err)
			}
			return e.routeIs(ctx, name, "activator")
		})
		stream(0, fmt.Sprintf("round %d: %s back at zero behind the activators", round, name), atZero)
	}

	tally.wg.Wait()
	tally.mu.Lock()
	defer tally.mu.Unlock()
	t.Logf("%d requests sent: %d answered through the queue-proxy, %d lost, %d answered past it", tally.sent, tally.ok, tally.lost, tally.bypassed)
	if tally.lost > 0 || tally.bypassed > 0 || tally.ok != tally.sent {
		t.Errorf("of %d requests %d were lost and %d answered past the queue-proxy, want none; the first:\n%s",
			tally.sent, tally.lost, tally.bypassed, strings.Join(tally.examples, "\n"))
	}
}

// peerGet sends GET url with the Host header host, waiting for a cold
// start, and returns the status, the Demo-Peer header and the body.
func peerGet(ctx context.Context, url, host string) (code int, peer, body string, err error) {
	return clientGet(ctx, slowClient, url, host)
}

// lastBytes is the last n bytes of s.
func lastBytes(s string, n int) string {
	return s[max(0, len(s)-n):]
}
