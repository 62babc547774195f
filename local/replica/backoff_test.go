package replica

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name    string
		uptimes []time.Duration
		want    []time.Duration
	}{
		{"doubles", []time.Duration{0, 0, 0, 0}, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms}},
		{"caps at 10s", make([]time.Duration, 10),
			[]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 6400 * ms, 10 * time.Second, 10 * time.Second, 10 * time.Second}},
		{"resets after 10s up", []time.Duration{0, 0, 0, 10 * time.Second, 0}, []time.Duration{100 * ms, 200 * ms, 400 * ms, 100 * ms, 200 * ms}},
		{"no reset just under 10s", []time.Duration{0, 0, 10*time.Second - 1}, []time.Duration{100 * ms, 200 * ms, 400 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b backoff
			for i, up := range tt.uptimes {
				if got := b.delay(up); got != tt.want[i] {
					t.Fatalf("delay #%d after uptime %s = %s, want %s", i+1, up, got, tt.want[i])
				}
			}
		})
	}
}
