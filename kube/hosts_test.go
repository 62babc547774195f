package kube

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/swell-run/swell/pkg/autoscaling"
)

func TestParseHosts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"", ""},
		{"  ", ""},
		{"shop.example.com", "shop.example.com"},
		{" Shop.Example.COM. , api.example.com,shop.example.com ", "api.example.com,shop.example.com"},
		{"a.b.c.d.example.org", "a.b.c.d.example.org"},
	} {
		got, err := ParseHosts(tc.in)
		if err != nil || strings.Join(got, ",") != tc.want {
			t.Errorf("ParseHosts(%q) = %v, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"shop.example.com,,api.example.com", "entry 2 is empty"},
		{"10.96.0.10", "is an address"},
		{"[fd00::1]", "is an address"},
		{"web.payments", "is a cluster-local name"},
		{"web.payments.svc", "is a cluster-local name"},
		{"web.payments.svc.cluster.local", "is a cluster-local name"},
		{"under_score.example.com", "is not a DNS name"},
		{"*.example.com", "is not a DNS name"},
		{strings.Repeat("h.example.com,", 33) + "x.example.com", "more than 32"},
	} {
		_, err := ParseHosts(tc.in)
		var ae *autoscaling.Error
		if !errors.As(err, &ae) || ae.Key != AnnotationHosts || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseHosts(%.40q) = %v; want an *autoscaling.Error for %s containing %q", tc.in, err, AnnotationHosts, tc.want)
		}
	}
}

func TestParseClusterIPs(t *testing.T) {
	got, err := ParseClusterIPs("10.96.0.10, fd00:10:96::a,::ffff:10.96.0.11")
	if err != nil || strings.Join(got, " ") != "10.96.0.10 [fd00:10:96::a] 10.96.0.11" {
		t.Errorf("ParseClusterIPs = %v, %v", got, err)
	}
	if got, err := ParseClusterIPs(""); err != nil || got != nil {
		t.Errorf("empty: %v, %v", got, err)
	}
	for _, bad := range []string{"None", "10.96.0.10,", "fe80::1%eth0"} {
		if _, err := ParseClusterIPs(bad); err == nil {
			t.Errorf("ParseClusterIPs(%q) accepted", bad)
		}
	}
	if h := HostOfAddr(netip.MustParseAddr("fd00::1")); h != "[fd00::1]" {
		t.Errorf("HostOfAddr = %q", h)
	}
}

func FuzzParseHosts(f *testing.F) {
	for _, s := range []string{"shop.example.com", "a.b", "10.0.0.1,x.example.com", "*.x.y", " , "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		hosts, err := ParseHosts(v)
		if err != nil {
			return
		}
		if len(hosts) > MaxHosts {
			t.Fatalf("%d hosts accepted", len(hosts))
		}
		for _, h := range hosts {
			if clusterLocal(h) || isAddr(h) || h != strings.ToLower(h) {
				t.Fatalf("accepted %q", h)
			}
			// What was accepted reads back the same.
			again, err := ParseHosts(strings.Join(hosts, ","))
			if err != nil || strings.Join(again, ",") != strings.Join(hosts, ",") {
				t.Fatalf("round trip of %v: %v, %v", hosts, again, err)
			}
		}
	})
}
