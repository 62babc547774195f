package certs

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/swell-run/swell/kube"
)

var (
	configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	mutatingGVR   = admissionv1.SchemeGroupVersion.WithResource("mutatingwebhookconfigurations")
	validatingGVR = admissionv1.SchemeGroupVersion.WithResource("validatingwebhookconfigurations")
)

// optimistic makes f's API server refuse, as a real one does, an update or
// a patch of resource made at a resourceVersion that is no longer the
// object's: with a Conflict. A patch that names no resourceVersion is
// applied whatever changed since it was computed. (The fake API server
// keeps the resourceVersion an object is written with; the other
// replica's writes here change it.)
func optimistic(f *fixture, resource string) {
	check := func(action k8stesting.Action) (bool, runtime.Object, error) {
		var name, at string
		switch a := action.(type) {
		case k8stesting.UpdateAction:
			m, err := meta.Accessor(a.GetObject())
			if err != nil {
				return true, nil, err
			}
			name, at = m.GetName(), m.GetResourceVersion()
		case k8stesting.PatchAction:
			var ops []patchOp
			if err := json.Unmarshal(a.GetPatch(), &ops); err != nil {
				return true, nil, err
			}
			i := slices.IndexFunc(ops, func(op patchOp) bool { return op.Path == "/metadata/resourceVersion" })
			if i < 0 {
				return false, nil, nil
			}
			name = a.GetName()
			at, _ = ops[i].Value.(string)
		default:
			return false, nil, nil
		}
		cur, err := f.client.Tracker().Get(action.GetResource(), action.GetNamespace(), name)
		if err != nil {
			return false, nil, nil // the default reaction says so
		}
		m, err := meta.Accessor(cur)
		if err != nil {
			return true, nil, err
		}
		if m.GetResourceVersion() != at {
			return true, nil, apierrors.NewConflict(action.GetResource().GroupResource(), name, errors.New("the object has been modified"))
		}
		return false, nil, nil
	}
	f.client.PrependReactor("update", resource, check)
	f.client.PrependReactor("patch", resource, check)
}

// interleave runs write, another replica's, once: just before this
// replica's first verb on resource reaches the API server.
func interleave(f *fixture, verb, resource string, write func()) *bool {
	done := new(bool)
	f.client.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		if !*done {
			*done = true
			write()
		}
		return false, nil, nil
	})
	return done
}

// rotated is the CA part another replica writes when it rotates the CA of
// f's Secret at at: a new CA, the old one behind it.
func rotated(t *testing.T, f *fixture, at time.Time) authority {
	t.Helper()
	auth, err := parseAuthority(f.secret(t).Data, at)
	if err != nil {
		t.Fatal(err)
	}
	next, err := newAuthority(at, DefaultCAValidity, auth.bundle...)
	if err != nil {
		t.Fatal(err)
	}
	return next
}

// setCAConfigMap makes bundle the CA ConfigMap's, as another replica
// writing it would (a new resourceVersion).
func setCAConfigMap(t *testing.T, f *fixture, bundle []byte) {
	t.Helper()
	obj, err := f.client.Tracker().Get(configMapsGVR, ns, kube.CAConfigMap)
	if err != nil {
		t.Fatal(err)
	}
	cm := obj.(*corev1.ConfigMap).DeepCopy()
	cm.Data[kube.CAConfigMapKey] = string(bundle)
	cm.ResourceVersion += "+"
	if err := f.client.Tracker().Update(configMapsGVR, cm, ns); err != nil {
		t.Fatal(err)
	}
}

// setWebhookBundles makes bundle the caBundle of every webhook of both
// configurations, as another replica patching them would.
func setWebhookBundles(t *testing.T, f *fixture, bundle []byte) {
	t.Helper()
	tr := f.client.Tracker()
	obj, err := tr.Get(mutatingGVR, "", kube.WebhookConfiguration)
	if err != nil {
		t.Fatal(err)
	}
	mw := obj.(*admissionv1.MutatingWebhookConfiguration).DeepCopy()
	for i := range mw.Webhooks {
		mw.Webhooks[i].ClientConfig.CABundle = bundle
	}
	mw.ResourceVersion += "+"
	if obj, err = tr.Get(validatingGVR, "", kube.WebhookConfiguration); err != nil {
		t.Fatal(err)
	}
	vw := obj.(*admissionv1.ValidatingWebhookConfiguration).DeepCopy()
	for i := range vw.Webhooks {
		vw.Webhooks[i].ClientConfig.CABundle = bundle
	}
	vw.ResourceVersion += "+"
	if err := tr.Update(mutatingGVR, mw, ""); err != nil {
		t.Fatal(err)
	}
	if err := tr.Update(validatingGVR, vw, ""); err != nil {
		t.Fatal(err)
	}
}

// TestStaleReplicaKeepsNewerCA races a replica that read the Secret before
// another rotated its CA against that other replica's publishing of the
// new bundle: whether the other's write lands before this replica reads
// what is published, or between its read and its write (refused then with
// a Conflict, as the resourceVersion has changed), the bundle published in
// the end still holds the new CA, so that clients trust the certificates it
// signs.
func TestStaleReplicaKeepsNewerCA(t *testing.T) {
	for _, tc := range []struct {
		name string
		// The other replica's write comes just before this one's verb
		// (get, or its write) on resource; published are the bundles
		// there, set writes them.
		resource, verb string
		published      func(f *fixture, t *testing.T) [][]byte
		set            func(t *testing.T, f *fixture, bundle []byte)
	}{
		{"ConfigMap, written before the read", "configmaps", "get", (*fixture).caConfigMaps, setCAConfigMap},
		{"ConfigMap, written between the read and the update", "configmaps", "update", (*fixture).caConfigMaps, setCAConfigMap},
		{"webhooks, written before the read", "mutatingwebhookconfigurations", "get", (*fixture).bundles, setWebhookBundles},
		{"webhooks, written between the read and the patch", "mutatingwebhookconfigurations", "patch", (*fixture).bundles, setWebhookBundles},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			m := f.manager(t)
			reconcile(t, m)
			ca := parseCerts(t, m.CABundle())[0]
			// This replica checks a minute before the CA is due: nothing to
			// rotate. The other checks a minute after, and rotates.
			f.clock.SetTime(renewAt(ca).Add(-time.Minute))
			reconcile(t, m)
			theirs := rotated(t, f, renewAt(ca).Add(time.Minute))
			if tc.verb != "get" {
				// Something this replica must write: the bundle emptied.
				tc.set(t, f, nil)
			}
			optimistic(f, "configmaps")
			optimistic(f, "mutatingwebhookconfigurations")
			optimistic(f, "validatingwebhookconfigurations")
			raced := interleave(f, tc.verb, tc.resource, func() { tc.set(t, f, theirs.encodeBundle()) })

			reconcile(t, m)
			if !*raced {
				t.Fatalf("this replica never made a %s of %s", tc.verb, tc.resource)
			}
			newLeaf, err := theirs.issue(m.names, f.clock.Now(), DefaultCertValidity)
			if err != nil {
				t.Fatal(err)
			}
			for i, b := range tc.published(f, t) {
				if err := verify(newLeaf.cert, b, f.clock.Now()); err != nil {
					t.Errorf("bundle %d published does not trust the new CA's certificate: %v", i, err)
				}
				if err := verify(served(t, m), b, f.clock.Now()); err != nil {
					t.Errorf("bundle %d published does not trust the certificate this replica serves: %v", i, err)
				}
			}
		})
	}
}

// caConfigMaps is the CA ConfigMap's bundle, as the one bundle there.
func (f *fixture) caConfigMaps(t *testing.T) [][]byte { return [][]byte{f.caConfigMap(t)} }

// newCA is a CA made at created, valid for validity (from an hour before).
func newCA(t *testing.T, created time.Time, validity time.Duration) *x509.Certificate {
	t.Helper()
	a, err := newAuthority(created, validity)
	if err != nil {
		t.Fatal(err)
	}
	return a.cert
}

// pemOf is the PEM of blocks, each a certificate or, if a string, the
// bytes of a block of that type.
func pemOf(t *testing.T, blocks ...any) []byte {
	t.Helper()
	var out []byte
	for _, b := range blocks {
		switch b := b.(type) {
		case *x509.Certificate:
			out = append(out, mustEncode(t, b)...)
		case string:
			out = append(out, pem.EncodeToMemory(&pem.Block{Type: b, Bytes: []byte("not DER")})...)
		}
	}
	return out
}

// TestMergeBundle is the rule of what a replica publishes, given what is
// published and the CAs of the Secret it read (its own: the current CA
// first).
func TestMergeBundle(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	year := 365 * 24 * time.Hour
	first := newCA(t, t0, 5*year)
	second := newCA(t, t0.Add(40*(30*24*time.Hour)), 5*year) // rotated about 2/3 into first's life
	now := t0.Add(4 * year)
	startedOver := newCA(t, now.Add(-time.Hour), 5*year) // the Secret deleted, made anew
	gone := newCA(t, t0.Add(-2*year), year)              // expired a year before t0
	shortLived := newCA(t, now.Add(-time.Minute), MinValidity)
	issuer, err := newAuthority(now, year)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := issuer.issue([]string{serverName}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name      string
		published []byte
		ours      []*x509.Certificate
		at        time.Time
		want      []*x509.Certificate
	}{
		{"nothing published: ours", nil, []*x509.Certificate{first}, now, []*x509.Certificate{first}},
		{"a CA rotated out stays while valid", pemOf(t, first), []*x509.Certificate{second, first}, now, []*x509.Certificate{second, first}},
		{"a newer CA another replica published stays", pemOf(t, second, first), []*x509.Certificate{first}, now, []*x509.Certificate{second, first}},
		{"newest first, whatever the order published", pemOf(t, first, second), []*x509.Certificate{first}, now, []*x509.Certificate{second, first}},
		{"an expired CA goes, an older valid one of ours stays", pemOf(t, second, first, gone), []*x509.Certificate{second, first}, now, []*x509.Certificate{second, first}},
		{"a newer CA stays until it expires", pemOf(t, shortLived, second, first), []*x509.Certificate{second, first}, now, []*x509.Certificate{shortLived, second, first}},
		{"a newer CA goes once expired", pemOf(t, shortLived, second, first), []*x509.Certificate{second, first}, shortLived.NotAfter, []*x509.Certificate{second, first}},
		{"a CA rotated out goes once expired", pemOf(t, second, first), []*x509.Certificate{second, first}, first.NotAfter, []*x509.Certificate{second}},
		{"CAs the Secret dropped when it started over go", pemOf(t, second, first), []*x509.Certificate{startedOver}, now, []*x509.Certificate{startedOver}},
		{"a replica holding the Secret from before it started over keeps the new CA", pemOf(t, startedOver), []*x509.Certificate{second, first}, now, []*x509.Certificate{startedOver, second, first}},
		{"what is not a CA certificate goes", append(append(pemOf(t, leaf.cert, "CERTIFICATE", "PRIVATE KEY"), "garbage"...), pemOf(t, first)...), []*x509.Certificate{second}, now, []*x509.Certificate{second}},
		{"a CA published twice is published once", pemOf(t, shortLived, shortLived), []*x509.Certificate{second}, now, []*x509.Certificate{shortLived, second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mergeBundle(tc.published, tc.ours, tc.at)
			if want := pemOf(t, anys(tc.want)...); !bytes.Equal(got, want) {
				t.Errorf("got %s, want %s", subjects(t, got), subjects(t, want))
			}
			if again := mergeBundle(got, tc.ours, tc.at); !bytes.Equal(again, got) {
				t.Errorf("not a fixed point: %s, then %s", subjects(t, got), subjects(t, again))
			}
		})
	}
}

// TestMergeBundleConverges has a replica that read the Secret before the
// CA rotated and one that read it after publish in turns, from whatever
// was published: after one turn each, neither writes again.
func TestMergeBundleConverges(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	first := newCA(t, t0, DefaultCAValidity)
	second := newCA(t, t0.Add(DefaultCAValidity*2/3), DefaultCAValidity)
	now := t0.Add(DefaultCAValidity * 3 / 4)
	stale, fresh := []*x509.Certificate{first}, []*x509.Certificate{second, first}
	for _, published := range [][]byte{nil, []byte("garbage"), pemOf(t, first), pemOf(t, second), pemOf(t, first, second)} {
		for _, order := range [][2][]*x509.Certificate{{stale, fresh}, {fresh, stale}} {
			p := mergeBundle(mergeBundle(published, order[0], now), order[1], now)
			for turn, ours := range [][]*x509.Certificate{order[0], order[1], order[0]} {
				if next := mergeBundle(p, ours, now); !bytes.Equal(next, p) {
					t.Errorf("from %q: turn %d writes again: %s, then %s", published, turn, subjects(t, p), subjects(t, next))
				}
			}
			if want := pemOf(t, second, first); !bytes.Equal(p, want) {
				t.Errorf("from %q: converged on %s, want %s", published, subjects(t, p), subjects(t, want))
			}
		}
	}
}

func anys(cs []*x509.Certificate) []any {
	out := make([]any, len(cs))
	for i, c := range cs {
		out[i] = c
	}
	return out
}

// subjects names the certificates of a bundle, for messages.
func subjects(t *testing.T, bundle []byte) string {
	t.Helper()
	if len(bundle) == 0 {
		return "[]"
	}
	var names []string
	for _, c := range parseCerts(t, bundle) {
		names = append(names, c.Subject.CommonName+" (until "+c.NotAfter.UTC().Format(time.DateOnly)+")")
	}
	return "[" + strings.Join(names, ", ") + "]"
}

// TestPublishedBundleDropsOnlyExpired runs a Manager on the fake clock
// through a CA rotation while another replica's newer, short-lived CA is
// published too: the newer one is kept while valid and dropped once it
// has expired, while the CA rotated out, older but valid, stays.
func TestPublishedBundleDropsOnlyExpired(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t)
	reconcile(t, m)
	first := parseCerts(t, m.CABundle())[0]
	f.clock.SetTime(renewAt(first).Add(time.Minute))
	reconcile(t, m)
	second := parseCerts(t, m.CABundle())[0]
	if second.Equal(first) {
		t.Fatal("the CA did not rotate")
	}
	theirs := newCA(t, f.clock.Now().Add(time.Minute), MinValidity)
	gone := newCA(t, first.NotBefore.Add(-2*365*24*time.Hour), 365*24*time.Hour)
	setCAConfigMap(t, f, pemOf(t, theirs, second, first, gone))
	setWebhookBundles(t, f, pemOf(t, theirs, second, first, gone))

	reconcile(t, m)
	for i, b := range append(f.caConfigMaps(t), f.bundles(t)...) {
		if want := pemOf(t, theirs, second, first); !bytes.Equal(b, want) {
			t.Errorf("bundle %d: %s, want %s", i, subjects(t, b), subjects(t, want))
		}
	}

	f.clock.SetTime(theirs.NotAfter)
	reconcile(t, m)
	for i, b := range append(f.caConfigMaps(t), f.bundles(t)...) {
		if want := pemOf(t, second, first); !bytes.Equal(b, want) {
			t.Errorf("once the newer CA expired, bundle %d: %s, want %s", i, subjects(t, b), subjects(t, want))
		}
	}
}
