package main

import (
	"strings"
	"testing"
)

func TestCountEvents(t *testing.T) {
	log := `swell local: serving s01, s02 at http://127.0.0.1:8080 (dashboard http://127.0.0.1:8081/)
21:15:17.173 s01: scale 0→1 (min-scale: 1 pod)
21:15:20.001 s02: scale 0→2 (poke)
s02-1 | {"level":"info","msg":"scale 0→1 (poke)"}
21:15:28.672 s02: panic — 19 in flight for 1 pod at target 1.4
21:15:28.672 s02: scale 2→4 (panic: wants 4 pods for 2 ready at target 1.4)
21:15:40.000 s02: replica s02-3 crashed; restarting it with backoff
21:15:40.500 s02: replica s02-3 restarted (restarts: 1)
21:16:10.673 s02: scale 4→0 (scale to zero after 10s idle)
21:16:11.000 s02: route pods→activator (excess burst capacity -5)
`
	got, err := countEvents(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := eventCounts{scales: 4, fromZero: 2, toZero: 1, crashes: 1}
	if got != want {
		t.Errorf("countEvents = %+v, want %+v", got, want)
	}
}
