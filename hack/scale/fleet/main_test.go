//go:build linux

package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swell-run/swell/activator/reporter"
)

func TestParseFlagsSharded(t *testing.T) {
	o, err := parseFlags([]string{"-autoscaler", "ws://127.0.0.1:8081/activator", "-token", "t",
		"-leaders", "127.0.0.1:8081, 127.0.0.1:8082,127.0.0.1:8081", "-epoch", "2030-01-02T03:04:05Z", "-share", "/tmp/table"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (reporter.Leaders{"127.0.0.1:8081", "127.0.0.1:8082", "127.0.0.1:8081"}); !slices.Equal(o.leaders, want) {
		t.Errorf("leaders %q, want %q", o.leaders, want)
	}
	if !o.epoch.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) || o.share != "/tmp/table" || o.activators != 3 {
		t.Errorf("epoch %v, share %q, %d activators", o.epoch, o.share, o.activators)
	}

	// A process of a shared fleet without the activators still knows
	// their names: its pods split the proxied load among them.
	if o, err := parseFlags([]string{"-share", "/tmp/table"}); err != nil || o.activators != 3 {
		t.Errorf("serving only: %d activators, %v", o.activators, err)
	}
	if o, err := parseFlags(nil); err != nil || o.activators != 0 || o.leaders != nil || o.epoch.IsZero() {
		t.Errorf("alone: %d activators, leaders %q, epoch %v, %v", o.activators, o.leaders, o.epoch, err)
	}

	// Every problem at once, each naming the flag and what is accepted.
	_, err = parseFlags([]string{"-leaders", "127.0.0.1:1,nohost,:9", "-epoch", "yesterday"})
	for _, want := range []string{
		`-leaders: bucket 1's leader "nohost": accepted is host:port`,
		`-leaders: bucket 2's leader ":9"`,
		"-leaders needs -autoscaler",
		`-epoch "yesterday": accepted is an RFC 3339 time`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	_, err = parseFlags([]string{"-autoscaler", "ws://a/activator", "-token", "t", "-leaders", strings.Repeat("a:1,", 64) + "a:1"})
	if err == nil || !strings.Contains(err.Error(), "-leaders: 65 buckets; accepted: 1 to 64") {
		t.Errorf("65 leaders: %v", err)
	}
}

func TestParseFlagsPush(t *testing.T) {
	o, err := parseFlags([]string{"-push", "ws://127.0.0.1:8080, ws://127.0.0.1:8081/pods", "-push-slice", "2/6", "-push-dials", "1000"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(o.push) != "[127.0.0.1:8080 127.0.0.1:8081]" || o.pushPath != "/pods" || o.pushSlice != 2 || o.pushSlices != 6 || o.pushDials != 1000 {
		t.Errorf("push %v %s, slice %d/%d, %g dials a second", o.push, o.pushPath, o.pushSlice, o.pushSlices, o.pushDials)
	}
	if o, err := parseFlags(nil); err != nil || o.push != nil {
		t.Errorf("without -push: %v, %v", o.push, err)
	}
	// Every problem at once, each naming the flag and what is accepted.
	_, err = parseFlags([]string{"-push", "http://example.com/pods,ws://127.0.0.1:1/x,ws://127.0.0.1:2/y", "-push-slice", "3/3", "-push-dials", "0"})
	for _, want := range []string{
		`-push "http://example.com/pods": accepted is ws://IPv4:port`,
		`-push "ws://127.0.0.1:2/y": path /y, where the first URL's is /x: accepted is one path for all`,
		`-push-slice "3/3": accepted is i/n, 0 ≤ i < n`,
		"-push-dials 0: accepted is a number from 1 up",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	if _, err := parseFlags([]string{"-push", "ws://localhost:8080"}); err == nil || !strings.Contains(err.Error(), "the host must be an IPv4 address and a port") {
		t.Errorf("a host name: %v", err)
	}
	// The slices cover the pods, each once.
	next := 0
	for i := range 6 {
		lo, hi := slice(50000, i, 6)
		if lo != next || hi < lo {
			t.Fatalf("slice %d of 6: [%d, %d), after %d", i, lo, hi, next)
		}
		next = hi
	}
	if next != 50000 {
		t.Errorf("the slices end at %d of 50000", next)
	}
}
