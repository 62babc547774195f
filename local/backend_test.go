package local

import "testing"

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
