package local

import (
	"testing"
	"time"

	"github.com/swell-run/swell/local/replica"
)

type fakeReplica struct {
	addr  string
	ready bool
}

func (r fakeReplica) Ready() bool         { return r.ready }
func (r fakeReplica) MetricsAddr() string { return r.addr }

// TestVictimOrder: a scale-down stops a replica not ready yet first, then
// the least busy the autoscaler named, then the newest, as a ReplicaSet
// removes unready pods, then those of lowest deletion cost.
func TestVictimOrder(t *testing.T) {
	oldest, middle, newest := fakeReplica{"a", true}, fakeReplica{"b", true}, fakeReplica{"c", true}
	for _, tc := range []struct {
		name     string
		replicas []fakeReplica
		first    []string
		want     int
	}{
		{"newest without a choice", []fakeReplica{oldest, middle, newest}, nil, 2},
		{"the least busy named", []fakeReplica{oldest, middle, newest}, []string{"a", "c"}, 0},
		{"a named replica gone", []fakeReplica{oldest, middle, newest}, []string{"gone", "b"}, 1},
		{"none of those named", []fakeReplica{oldest, middle, newest}, []string{"gone"}, 2},
		{"not ready before any named", []fakeReplica{oldest, {"b", false}, newest}, []string{"a"}, 1},
	} {
		if got := victim(tc.replicas, tc.first); got != tc.want {
			t.Errorf("%s: victim %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestReplicaSeconds(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := &localService{born: map[*replica.Replica]time.Time{}}
	a, b := new(replica.Replica), new(replica.Replica)
	s.born[a] = t0
	s.born[b] = t0.Add(2 * time.Second)
	if got := s.replicaSeconds(t0.Add(3 * time.Second)); got != 4 {
		t.Errorf("two live replicas, 3s and 1s old: %v replica-seconds, want 4", got)
	}
	// a exits at 5s: its 5 seconds stay counted, and stop growing.
	s.exited(a, t0.Add(5*time.Second))
	s.exited(a, t0.Add(7*time.Second)) // a second report changes nothing
	if got := s.replicaSeconds(t0.Add(10 * time.Second)); got != 5+8 {
		t.Errorf("a ended after 5s, b alive for 8s: %v replica-seconds, want 13", got)
	}
	s.exited(b, t0.Add(10*time.Second))
	if got := s.replicaSeconds(t0.Add(60 * time.Second)); got != 13 {
		t.Errorf("both ended: %v replica-seconds, want 13 however late it is read", got)
	}
}
