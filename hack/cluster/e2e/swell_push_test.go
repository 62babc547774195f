package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSwellPodsPushTheirStats: the queue-proxies push their stats to the
// leader, which reads every pod from its push rather than scraping it. A
// pod whose push connection is cut (its queue-proxy's connections to the
// push port reset, so it cannot dial again either) is scraped within a
// round or two, and its service keeps scaling on it. With the leader
// killed, the pods that can push reconnect to the new leader, which
// decides every service at every tick from its first.
func TestSwellPodsPushTheirStats(t *testing.T) {
	e := swellSetup(t)
	const name = "pusher"
	e.createHello(swellHello(name, nil, map[string]string{
		"autoscaling.swell.run/class":                 "kpa",
		"swell.run/container-concurrency":             "1",
		"autoscaling.swell.run/initial-scale":         "2",
		"autoscaling.swell.run/min-scale":             "2",
		"autoscaling.swell.run/max-scale":             "6",
		"autoscaling.swell.run/target-burst-capacity": "0",
	}))
	e.waitServingSwell(name, 2)

	leader := e.leader(t.Context())
	sample := func(ctx context.Context, replica string) (shardStatus, shardService, error) {
		st, err := e.replicaStatus(ctx, replica)
		if err != nil {
			return st, shardService{}, err
		}
		for _, s := range st.Services {
			if s.Namespace == e.ns && s.Name == name {
				if s.LastSample == nil {
					return st, s, fmt.Errorf("%s has no sample yet", name)
				}
				return st, s, nil
			}
		}
		return st, shardService{}, fmt.Errorf("%s is not among %s's services", name, replica)
	}
	e.eventually("both pods of "+name+" read from their pushes", func(ctx context.Context) error {
		st, s, err := sample(ctx, leader)
		if err != nil {
			return err
		}
		if s.LastSample.Read != 2 || s.LastSample.Pushed != 2 || st.PodsPushing < 2 {
			return fmt.Errorf("read %d pods, %d from a push; %d pods pushing", s.LastSample.Read, s.LastSample.Pushed, st.PodsPushing)
		}
		return nil
	})

	// One pod's push cut: it is scraped instead.
	pods, err := e.pods(t.Context(), name)
	if err != nil || len(pods) != 2 {
		t.Fatalf("pods of %s: %d %v", name, len(pods), err)
	}
	e.cutPush(&pods[0])
	e.eventually("the cut pod scraped, the other pushing", func(ctx context.Context) error {
		_, s, err := sample(ctx, leader)
		if err != nil {
			return err
		}
		if s.LastSample.Read != 2 || s.LastSample.Pushed != 1 {
			return fmt.Errorf("read %d pods, %d from a push", s.LastSample.Read, s.LastSample.Pushed)
		}
		return nil
	})

	// The leader killed: the pods follow the new one.
	e.killLeader(true)
	next := e.leader(t.Context())
	e.eventuallyWithin("the pods pushing to the new leader "+next, scaleTimeout, func(ctx context.Context) error {
		st, s, err := sample(ctx, next)
		if err != nil {
			return err
		}
		if s.LastSample.Read != 2 || s.LastSample.Pushed != 1 || st.PodsPushing < 1 {
			return fmt.Errorf("read %d pods, %d from a push; %d pods pushing", s.LastSample.Read, s.LastSample.Pushed, st.PodsPushing)
		}
		return nil
	})
	// From then on every tick decides: the latest decision is never more
	// than a tick (and the time a status read takes) old.
	e.consistently(name+" decided at every tick by "+next, 10*time.Second, func(ctx context.Context) error {
		st, s, err := sample(ctx, next)
		if err != nil {
			return err
		}
		tick, err := time.ParseDuration(st.TickInterval)
		if err != nil {
			return fmt.Errorf("tick interval %q: %v", st.TickInterval, err)
		}
		if age := st.Time.Sub(s.Time); !s.Decided || age > tick+time.Second {
			return fmt.Errorf("latest decision %v old (decided %t), tick %v", age, s.Decided, tick)
		}
		return nil
	})

	// Load beyond the two pods: the service scales on the pushed pod and
	// the scraped one alike.
	ctx, cancel := context.WithTimeout(t.Context(), scaleTimeout)
	defer cancel()
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var mu sync.Mutex
	failed := map[string]int{}
	for range 5 {
		wg.Go(func() {
			for ctx.Err() == nil {
				code, _, err := e.viaService(ctx, name, "/?sleep=2s")
				if ctx.Err() == nil && (err != nil || code != http.StatusOK) {
					mu.Lock()
					failed[fmt.Sprint(code, err)]++
					mu.Unlock()
				}
			}
		})
	}
	e.eventuallyWithin(name+" scaled past its two pods by load", scaleTimeout, func(ctx context.Context) error {
		n, err := e.replicas(ctx, name)
		if err != nil {
			return err
		}
		if n < 4 {
			return fmt.Errorf("scale %d", n)
		}
		return nil
	})
	e.eventuallyWithin("the new pods pushing to "+next, scaleTimeout, func(ctx context.Context) error {
		_, s, err := sample(ctx, next)
		if err != nil {
			return err
		}
		// Every pod that pushes is read every round; the cut one only when
		// the sample has room for it (a round samples, and the pushing
		// pods fill it first).
		if s.LastSample.Pushed < 3 || s.LastSample.Pushed < s.LastSample.Read-1 {
			return fmt.Errorf("read %d pods, %d from a push; want the new ones pushing, all but the cut one", s.LastSample.Read, s.LastSample.Pushed)
		}
		return nil
	})
	cancel()
	wg.Wait()
	if len(failed) > 0 {
		t.Errorf("requests that failed under load: %v", failed)
	}
}

// leader is the autoscaler replica holding the lead.
func (e *env) leader(ctx context.Context) string {
	e.t.Helper()
	l, err := e.cs.CoordinationV1().Leases(swellNamespace).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	h := ptrOr(l.Spec.HolderIdentity, "")
	if h == "" {
		e.t.Fatalf("lease %s has no holder", leaseName)
	}
	return h
}

// cutPush resets every connection of pod p to the autoscaler's push port
// (network.DefaultAutoscalerPushPort, the Service's and the pods'), now
// and from then on: a rule in the pod's network namespace answers its
// packets there with a reset, as a broken network would.
func (e *env) cutPush(p *corev1.Pod) {
	e.t.Helper()
	pid, err := podProcess(p)
	if err != nil {
		e.t.Fatalf("a process of pod %s: %v", p.Name, err)
	}
	out, err := exec.CommandContext(e.t.Context(), "nsenter", fmt.Sprintf("--net=/proc/%d/ns/net", pid), "--",
		"iptables", "-w", "-I", "OUTPUT", "-p", "tcp", "--dport", "8081", "-j", "REJECT", "--reject-with", "tcp-reset").CombinedOutput()
	if err != nil {
		e.t.Fatalf("cut the push of pod %s: %v: %s", p.Name, err, strings.TrimSpace(string(out)))
	}
}
