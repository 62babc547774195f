package kube

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// AnnotationHosts lists, on a Deployment and on its pods-Service (the
// autoscaler copies it, validated), more host names the activator routes
// to the Deployment: those an Ingress or a gateway sends in Host when it
// proxies to the pods' addresses rather than to the Service's name. A
// comma-separated list of DNS names; cluster-local names and addresses are
// not accepted (the activator knows those itself).
const AnnotationHosts = Prefix + "hosts"

// AnnotationClusterIPs lists, on a pods-Service, the cluster IPs of the
// Services Swell routes to the Deployment, comma-separated: the activator
// routes a request whose Host is one of them (a client that dialled the
// ClusterIP) to the Deployment. The autoscaler writes it from the
// Services' spec.clusterIPs.
const AnnotationClusterIPs = Prefix + "cluster-ips"

// MaxHosts bounds AnnotationHosts: the hosts are held in every
// activator's table.
const MaxHosts = 32

const hostsAccepted = "a comma-separated list of at most 32 DNS names such as shop.example.com, none of them cluster-local (<name>.<namespace>[.svc[.<domain>]]) or an address"

// ParseHosts reads the value of AnnotationHosts: DNS names (RFC 1123
// subdomains, compared in lower case) separated by commas, spaces around
// each allowed, at most MaxHosts. A name that ends in .svc or .svc.<any>,
// or that has two labels (it would read as <service>.<namespace>), is
// refused: a Deployment may not claim another namespace's cluster-local
// names. An IP address is refused too. The names come back sorted, each
// once. A value that is none of these is an *autoscaling.Error naming the
// annotation, the value, every problem and what is accepted. The webhook
// validates the annotation with it, the autoscaler copies it to the
// pods-Service with it, and the activator reads it with it.
func ParseHosts(v string) ([]string, error) {
	trimmed := strings.TrimSpace(v)
	if trimmed == "" {
		return nil, nil
	}
	var hosts, problems []string
	items := strings.Split(trimmed, ",")
	if len(items) > MaxHosts {
		problems = append(problems, fmt.Sprintf("%d names, more than %d", len(items), MaxHosts))
		items = items[:MaxHosts]
	}
	for i, item := range items {
		h := strings.ToLower(strings.TrimSuffix(strings.TrimSpace(item), "."))
		switch {
		case h == "":
			problems = append(problems, fmt.Sprintf("entry %d is empty", i+1))
		case isAddr(h):
			problems = append(problems, strconv.Quote(h)+" is an address; the activator routes a Service's cluster IPs itself")
		case len(validation.IsDNS1123Subdomain(h)) > 0:
			problems = append(problems, strconv.Quote(h)+" is not a DNS name")
		case clusterLocal(h):
			problems = append(problems, strconv.Quote(h)+" is a cluster-local name (<name>.<namespace>[.svc…]); the activator routes those itself, and only for the namespace's own Services")
		default:
			hosts = append(hosts, h)
		}
	}
	if len(problems) > 0 {
		return nil, &autoscaling.Error{Key: AnnotationHosts, Name: AnnotationHosts, Value: v,
			Problem: "is not a list of host names: " + strings.Join(problems, "; "), Accepted: hostsAccepted}
	}
	slices.Sort(hosts)
	return slices.Compact(hosts), nil
}

// clusterLocal reports whether h could be a cluster-local name of a
// Service: <name>.<namespace>, or anything with a .svc label after the
// first two.
func clusterLocal(h string) bool {
	labels := strings.Split(h, ".")
	return len(labels) == 2 || len(labels) >= 3 && labels[2] == "svc"
}

func isAddr(h string) bool {
	_, err := netip.ParseAddr(strings.Trim(h, "[]"))
	return err == nil
}

// ParseClusterIPs reads the value of AnnotationClusterIPs: addresses
// separated by commas. Each comes back as the activator compares it with
// a request's Host: IPv4 dotted, IPv6 in brackets. It is written by the
// autoscaler, so a value that does not parse is an error, not a guess.
func ParseClusterIPs(v string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var out []string
	for item := range strings.SplitSeq(v, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(item))
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("annotation %s: %q is not an address", AnnotationClusterIPs, strings.TrimSpace(item))
		}
		out = append(out, HostOfAddr(a))
	}
	return out, nil
}

// HostOfAddr is a as a request's Host names it, without port: IPv6 in
// brackets.
func HostOfAddr(a netip.Addr) string {
	if a.Is6() && !a.Is4In6() {
		return "[" + a.String() + "]"
	}
	return a.Unmap().String()
}
