package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// activatorKey is the key an activator's name has in a pod's stats
// (stats.ActivatorKey in the main module): its 64-bit FNV-1a hash.
func activatorKey(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return max(h.Sum64(), 1)
}

// TestSwellPodsCountEachActivator: with three activators in the path, each
// names itself on the requests it forwards, and the pod's queue-proxy
// reports what each sent it apart, under the names the activators report
// to the autoscaler under (their pods' names), which is how the autoscaler
// counts what an activator cut off from it sends.
func TestSwellPodsCountEachActivator(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	const name = "shares"
	e.createHello(swellHello(name, int32p(1), map[string]string{
		"autoscaling.swell.run/min-scale": "1",
		"autoscaling.swell.run/max-scale": "1",
	}))
	var pod corev1.Pod
	e.eventuallyWithin("a ready pod of "+name, scaleTimeout, func(ctx context.Context) error {
		pods, err := e.pods(ctx, name)
		if err != nil {
			return err
		}
		for _, p := range pods {
			if isReady(&p) && p.DeletionTimestamp == nil {
				pod = p
				return nil
			}
		}
		return fmt.Errorf("no ready pod among %d", len(pods))
	})
	acts, err := e.cs.CoreV1().Pods(swellNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=swell-activator"})
	if err != nil {
		t.Fatal(err)
	}
	names := map[uint64]string{}
	for _, a := range acts.Items {
		if a.DeletionTimestamp == nil {
			names[activatorKey(a.Name)] = a.Name
		}
	}
	if len(names) != activators {
		t.Fatalf("%d activator pods, want %d", len(names), activators)
	}

	// Requests through the activators' ClusterIP on new connections, so
	// that kube-proxy spreads them over the three.
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}, Timeout: scaleTimeout}
	s, err := e.cs.CoreV1().Services(swellNamespace).Get(t.Context(), "activator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + net.JoinHostPort(s.Spec.ClusterIP, "80") + "/?sleep=300ms"
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	var lost []string
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				req.Host = name + "." + e.ns + ".svc.cluster.local"
				res, err := client.Do(req)
				mu.Lock()
				switch {
				case err == nil:
					res.Body.Close()
					codes[res.StatusCode]++
				case ctx.Err() == nil:
					lost = append(lost, err.Error())
				}
				mu.Unlock()
			}
		})
	}

	stats := "http://" + net.JoinHostPort(pod.Status.PodIP, "9090") + "/stats"
	seen := map[uint64]float64{}
	e.eventually("the pod's stats naming at least two of the activators, and no one else", func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, stats, nil)
		req.Header.Set("Accept", "application/json")
		res, err := httpClient.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		var r struct {
			ProxiedConcurrency float64 `json:"proxiedConcurrency"`
			Attributed         bool    `json:"attributed"`
			ByActivator        []struct {
				Activator   uint64  `json:"activator"`
				Concurrency float64 `json:"concurrency"`
			} `json:"byActivator"`
		}
		if err := json.NewDecoder(res.Body).Decode(&r); err != nil {
			return err
		}
		if !r.Attributed {
			return fmt.Errorf("the report does not split its proxied figures: %+v", r)
		}
		var sum float64
		for _, sh := range r.ByActivator {
			if _, ok := names[sh.Activator]; !ok {
				t.Fatalf("the pod reports a share of activator key %x, which no activator has (%v)", sh.Activator, names)
			}
			seen[sh.Activator] += sh.Concurrency
			sum += sh.Concurrency
		}
		if sum > r.ProxiedConcurrency*(1+1e-9)+1e-9 {
			t.Fatalf("shares add up to %v, above the proxied %v", sum, r.ProxiedConcurrency)
		}
		if len(seen) < 2 {
			return fmt.Errorf("shares of %d activators so far", len(seen))
		}
		return nil
	})
	stop()
	wg.Wait()
	var who []string
	for k, c := range seen {
		who = append(who, fmt.Sprintf("%s %.2f", names[k], c))
	}
	slices.Sort(who)
	t.Logf("shares seen (summed over the reports read): %v; answers by status %v", who, codes)
	for code, n := range codes {
		if code != http.StatusOK {
			t.Errorf("%d answers with status %d, want all 200", n, code)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d requests failed, the first: %s", len(lost), lost[0])
	}
}
