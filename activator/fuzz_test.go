package activator

import (
	"context"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/swell-run/swell/pkg/network"
)

// wellFormedHost is a Host a client may send: a DNS name (any case,
// perhaps with a trailing dot) or a bracketed IPv6 literal, perhaps with a
// port.
var wellFormedHost = regexp.MustCompile(`^([A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.?|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?$`)

// FuzzNormalizeHost: no Host makes normalizeHost panic; what it returns
// has no upper-case letter; and for a well-formed Host it is what
// net.SplitHostPort and strings.ToLower make of it, without the trailing
// dot.
func FuzzNormalizeHost(f *testing.F) {
	for _, s := range []string{"", "hello.default", "HELLO.Default.svc.cluster.local.:8080", "[::1]:80", "[::1]", "[::1",
		"::1", "a:b:c", "host:", ":80", ".", "..", "a..", "[]", "[a]b]:1", "x.y.:0", "İ.example", "\x00:\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		got := normalizeHost(host)
		if strings.ToLower(got) != got {
			t.Fatalf("normalizeHost(%q) = %q: not lower case", host, got)
		}
		if !wellFormedHost.MatchString(host) {
			return
		}
		want := host
		if h, _, err := net.SplitHostPort(host); err == nil {
			want = h
			if strings.HasPrefix(host, "[") {
				want = "[" + h + "]"
			}
		}
		want = strings.ToLower(strings.TrimSuffix(want, "."))
		if got != want {
			t.Fatalf("normalizeHost(%q) = %q, want %q", host, got, want)
		}
	})
}

// FuzzLookup: a route table built from services whose hosts include a
// fuzzed one, asked for a fuzzed Host with a fuzzed Swell-Service header,
// never panics and answers what a linear search of the services, in the
// source's order, answers: the first service with a name equal to the
// Host, both normalised. The header never changes the answer.
func FuzzLookup(f *testing.F) {
	for _, s := range [][2]string{
		{"hello.example.com", "hello.default"},
		{"HELLO.default.svc.cluster.local.:80", "other.team"},
		{"other.team:8080", "x"},
		{"", ""},
		{"hello.default", "[::1]:80"},
		{"shared.example.com", "Shared.Example.COM."},
		{"nowhere", "hello.example.com"},
	} {
		f.Add(s[0], s[1], "team/other")
	}
	a, err := New(Config{Source: NewMemorySource()})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, host, configured, header string) {
		services := []Service{
			{Key: mustKey("default/hello"), Hosts: []string{"hello.example.com", "Shared.Example.com."}},
			{Key: mustKey("team/other"), Hosts: []string{configured, "shared.example.com"}},
		}
		a.sync(services)
		tab := a.table.Load()

		var want *target
	search:
		for _, sv := range services {
			for _, name := range append(clusterLocalNames(sv.Key, DefaultClusterDomain), sv.Hosts...) {
				if normalizeHost(name) == normalizeHost(host) {
					want = tab.byKey[sv.Key]
					break search
				}
			}
		}
		r := &http.Request{Host: host, Header: http.Header{}}
		if got := tab.lookup(r.WithContext(context.Background())); got != want {
			t.Fatalf("lookup(%q) with %q configured = %v, want %v", host, configured, name(got), name(want))
		}
		r.Header[network.ServiceHeader] = []string{header}
		if got := tab.lookup(r.WithContext(context.Background())); got != want {
			t.Fatalf("lookup(%q) with %s %q = %v, want %v: the header routed", host, network.ServiceHeader, header, name(got), name(want))
		}
	})
}

func name(t *target) string {
	if t == nil {
		return "nothing"
	}
	return t.name
}
