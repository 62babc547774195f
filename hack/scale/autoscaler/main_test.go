package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/swell-run/swell/hack/scale/pods"
	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/shard"
)

func TestParseLead(t *testing.T) {
	for _, tt := range []struct {
		buckets int
		lead    string
		want    []int
		errs    []string // each in the error
	}{
		{buckets: 1, want: []int{0}},
		{buckets: 10, want: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{buckets: 10, lead: "0,3,6,9", want: []int{0, 3, 6, 9}},
		{buckets: 10, lead: " 8, 2 ", want: []int{2, 8}},
		{buckets: 1, lead: "0", want: []int{0}},
		// Every bad element is named, with what is accepted.
		{buckets: 10, lead: "1,10,x,-1,1", errs: []string{`bucket "10": accepted is a number from 0 to 9 (-buckets 10)`,
			`bucket "x"`, `bucket "-1"`, "bucket 1 is named twice"}},
		{buckets: 3, lead: "", errs: nil, want: []int{0, 1, 2}},
		{buckets: 0, errs: []string{"-buckets: 0 buckets; accepted: 1 to 64"}},
		{buckets: 65, lead: "0", errs: []string{"-buckets: 65 buckets"}},
	} {
		name := fmt.Sprintf("-buckets %d -lead %q", tt.buckets, tt.lead)
		owned, err := parseLead(tt.buckets, tt.lead)
		if len(tt.errs) > 0 {
			if err == nil {
				t.Errorf("%s: no error", name)
				continue
			}
			for _, e := range tt.errs {
				if !strings.Contains(err.Error(), e) {
					t.Errorf("%s: error %q lacks %q", name, err, e)
				}
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := owned.List(); !slices.Equal(got, tt.want) || owned.Buckets() != max(tt.buckets, 1) {
			t.Errorf("%s: leads %v of %d, want %v", name, got, owned.Buckets(), tt.want)
		}
	}
}

func TestParseFlagsLead(t *testing.T) {
	o, err := parseFlags([]string{"-pods", "p.jsonl", "-token", "t", "-buckets", "10", "-lead", "1,4,7"})
	if err != nil {
		t.Fatal(err)
	}
	if o.lead.Buckets() != 10 || !slices.Equal(o.lead.List(), []int{1, 4, 7}) {
		t.Errorf("leads %v of %d", o.lead.List(), o.lead.Buckets())
	}
	// Its problems are reported with the others'.
	_, err = parseFlags([]string{"-buckets", "10", "-lead", "12"})
	for _, want := range []string{"-pods is required", "-token", `bucket "12"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

// Replicas leading the buckets b with b%3 == i divide the fleet: each
// service is led once, by the replica of shard.Of's bucket.
func TestLedServicesDivideTheFleet(t *testing.T) {
	var svcs []pods.Service
	for i := range 300 {
		svcs = append(svcs, pods.Service{Service: fmt.Sprintf("scale/svc-%05d", i), Kind: pods.KindBusy})
	}
	if got := ledServices(svcs, mustLead(t, 1, "")); len(got) != len(svcs) {
		t.Errorf("one bucket: %d services led of %d", len(got), len(svcs))
	}
	ledBy := map[string]int{}
	for i, lead := range []string{"0,3,6,9", "1,4,7", "2,5,8"} {
		got := ledServices(svcs, mustLead(t, 10, lead))
		// Each has about its share: 4, 3 and 3 tenths.
		if share := float64(len(got)) / float64(len(svcs)); share < 0.2 || share > 0.55 {
			t.Errorf("replica %d (%s) leads %d of %d services", i, lead, len(got), len(svcs))
		}
		for _, s := range got {
			if b := shard.Of(s.Service, 10); b%3 != i {
				t.Errorf("replica %d leads %s, of bucket %d", i, s.Service, b)
			}
			ledBy[s.Service]++
		}
	}
	for _, s := range svcs {
		if ledBy[s.Service] != 1 {
			t.Errorf("%s is led %d times", s.Service, ledBy[s.Service])
		}
	}
}

func mustLead(t *testing.T, n int, lead string) *shard.Owned {
	t.Helper()
	o, err := parseLead(n, lead)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestParseFlagsPush(t *testing.T) {
	o, err := parseFlags([]string{"-pods", "p.jsonl", "-token", "t", "-push", "-buckets", "3", "-lead", "1",
		"-leaders", "127.0.0.1:8080, 127.0.0.1:8081,127.0.0.1:8082"})
	if err != nil {
		t.Fatal(err)
	}
	if !o.push || !slices.Equal(o.leaders, []string{"127.0.0.1:8080", "127.0.0.1:8081", "127.0.0.1:8082"}) {
		t.Errorf("push %v, leaders %q", o.push, o.leaders)
	}
	// Every problem at once, each naming the flag and what is accepted.
	_, err = parseFlags([]string{"-pods", "p.jsonl", "-token", "t", "-buckets", "3", "-leaders", "127.0.0.1:8080,nohost"})
	for _, want := range []string{
		`-leaders: bucket 1's leader "nohost": accepted is host:port`,
		"-leaders: 2 addresses for 3 buckets (-buckets): accepted is one for each bucket",
		"-leaders is where -push sends pods: it needs -push",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

// A replica takes the pushes of the services of the buckets it leads,
// and sends the others' pods to their bucket's leader; with no leader
// named, they retry.
func TestPushRoute(t *testing.T) {
	leaders := []string{"127.0.0.1:8080", "127.0.0.1:8081", "127.0.0.1:8082"}
	route := pushRoute(mustLead(t, 3, "1"), leaders)
	for i := range 30 {
		key := service.Key{Namespace: "scale", Name: fmt.Sprintf("svc-%05d", i)}
		b := shard.OfKey(key, 3)
		here, elsewhere := route(key)
		switch {
		case b == 1 && (!here || elsewhere != ""):
			t.Errorf("%s, of the bucket led here: %v, %q", key, here, elsewhere)
		case b != 1 && (here || elsewhere != leaders[b]):
			t.Errorf("%s, of bucket %d: %v, %q; want %s", key, b, here, elsewhere, leaders[b])
		}
	}
	noLeaders := pushRoute(mustLead(t, 3, "1"), nil)
	for i := range 30 {
		key := service.Key{Namespace: "scale", Name: fmt.Sprintf("svc-%05d", i)}
		if here, elsewhere := noLeaders(key); here != (shard.OfKey(key, 3) == 1) || elsewhere != "" {
			t.Errorf("no leaders named, %s: %v, %q", key, here, elsewhere)
		}
	}
	if here, _ := pushRoute(mustLead(t, 1, ""), nil)(service.Key{Namespace: "x", Name: "y"}); !here {
		t.Error("one leader does not take every service")
	}
}
