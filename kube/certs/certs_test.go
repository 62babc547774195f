package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/cert"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/kube"
)

const (
	ns         = kube.DefaultSystemNamespace
	serverName = "swell-webhook.swell-system.svc"
)

var secretsGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// fixture is a fake API server holding Swell's two webhook configurations,
// and a fake clock.
type fixture struct {
	client *fake.Clientset
	clock  *clocktesting.FakeClock
	logger *zap.Logger
	logs   *observer.ObservedLogs
}

func newFixture(t *testing.T, objects ...runtime.Object) *fixture {
	t.Helper()
	if objects == nil {
		objects = []runtime.Object{mutating(), validating()}
	}
	core, logs := observer.New(zapcore.DebugLevel)
	// Whole seconds, as certificates have them.
	clk := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	return &fixture{client: fake.NewClientset(objects...), clock: clk, logger: zap.New(core), logs: logs}
}

// manager returns a Manager of f's API server and clock.
func (f *fixture) manager(t *testing.T, mod ...func(*Config)) *Manager {
	t.Helper()
	cfg := Config{Client: f.client, Namespace: ns, Clock: f.clock, Logger: f.logger}
	for _, m := range mod {
		m(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (f *fixture) secret(t *testing.T) *corev1.Secret {
	t.Helper()
	s, err := f.client.CoreV1().Secrets(ns).Get(context.Background(), kube.WebhookCertSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// bundles returns the caBundle of every webhook of both configurations.
func (f *fixture) bundles(t *testing.T) [][]byte {
	t.Helper()
	ctx := context.Background()
	mw, err := f.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, kube.WebhookConfiguration, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vw, err := f.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, kube.WebhookConfiguration, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, w := range mw.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	for _, w := range vw.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out
}

// countActions counts the calls verb made on resource.
func (f *fixture) countActions(verb, resource string) int {
	n := 0
	for _, a := range f.client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

func mutating() *admissionv1.MutatingWebhookConfiguration {
	fail, ignore := admissionv1.Fail, admissionv1.Ignore
	none := admissionv1.SideEffectClassNone
	path := "/mutate"
	return &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: kube.WebhookConfiguration, Labels: map[string]string{"keep": "me"}},
		Webhooks: []admissionv1.MutatingWebhook{
			{
				Name: "inject.swell.run",
				ClientConfig: admissionv1.WebhookClientConfig{
					Service: &admissionv1.ServiceReference{Namespace: ns, Name: kube.WebhookService, Path: &path},
				},
				FailurePolicy:           &ignore,
				SideEffects:             &none,
				AdmissionReviewVersions: []string{"v1"},
				ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{kube.LabelEnabled: "true"}},
			},
			{
				Name:                    "pods.inject.swell.run",
				ClientConfig:            admissionv1.WebhookClientConfig{CABundle: []byte("stale")},
				FailurePolicy:           &fail,
				SideEffects:             &none,
				AdmissionReviewVersions: []string{"v1"},
			},
		},
	}
}

func validating() *admissionv1.ValidatingWebhookConfiguration {
	fail := admissionv1.Fail
	none := admissionv1.SideEffectClassNone
	return &admissionv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: kube.WebhookConfiguration},
		Webhooks: []admissionv1.ValidatingWebhook{{
			Name:                    "validate.swell.run",
			ClientConfig:            admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{Namespace: ns, Name: kube.WebhookService}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

func reconcile(t *testing.T, m *Manager) {
	t.Helper()
	if err := m.reconcile(context.Background()); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
}

// served returns the leaf certificate m serves.
func served(t *testing.T, m *Manager) *x509.Certificate {
	t.Helper()
	c, err := m.GetCertificate(&tls.ClientHelloInfo{ServerName: serverName})
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf
}

// verify checks that c is trusted, for serverName at now, by bundle.
func verify(c *x509.Certificate, bundle []byte, now time.Time) error {
	pool, err := cert.NewPoolFromBytes(bundle)
	if err != nil {
		return err
	}
	_, err = c.Verify(x509.VerifyOptions{Roots: pool, DNSName: serverName, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

func parseCerts(t *testing.T, pem []byte) []*x509.Certificate {
	t.Helper()
	cs, err := cert.ParseCertsPEM(pem)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestFirstCreatesSecondReuses(t *testing.T) {
	f := newFixture(t)
	first := f.manager(t)
	if first.Ready() || first.CABundle() != nil {
		t.Fatal("a Manager is ready before it has read the Secret")
	}
	if _, err := first.GetCertificate(&tls.ClientHelloInfo{}); err == nil || !strings.Contains(err.Error(), "no webhook certificate loaded yet") {
		t.Fatalf("GetCertificate before a load: err = %v, want a clear error", err)
	}
	reconcile(t, first)
	if !first.Ready() {
		t.Fatal("not ready after creating the Secret")
	}
	s := f.secret(t)
	if s.Type != corev1.SecretTypeTLS || s.Labels[kube.LabelManagedBy] != kube.ManagedBy {
		t.Errorf("Secret type %q labels %v, want %s and %s=%s", s.Type, s.Labels, corev1.SecretTypeTLS, kube.LabelManagedBy, kube.ManagedBy)
	}
	for _, k := range []string{"tls.crt", "tls.key", "ca.crt", "ca.key"} {
		if len(s.Data[k]) == 0 {
			t.Errorf("Secret has no %s", k)
		}
	}
	leaf := served(t, first)
	if !bytes.Equal(first.CABundle(), s.Data["ca.crt"]) {
		t.Error("CABundle is not the Secret's ca.crt")
	}
	ca := parseCerts(t, s.Data["ca.crt"])[0]
	if !ca.IsCA || !bytes.Equal(leaf.AuthorityKeyId, ca.SubjectKeyId) || len(ca.SubjectKeyId) == 0 || len(leaf.SubjectKeyId) == 0 {
		t.Errorf("key identifiers: CA %x, leaf %x (authority %x)", ca.SubjectKeyId, leaf.SubjectKeyId, leaf.AuthorityKeyId)
	}
	want := []string{"swell-webhook.swell-system.svc", "swell-webhook", "swell-webhook.swell-system", "swell-webhook.swell-system.svc.cluster.local"}
	if strings.Join(leaf.DNSNames, " ") != strings.Join(want, " ") {
		t.Errorf("DNS names %v, want %v", leaf.DNSNames, want)
	}
	if leaf.KeyUsage != x509.KeyUsageDigitalSignature || len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || leaf.IsCA {
		t.Errorf("leaf usages %v %v, CA %v", leaf.KeyUsage, leaf.ExtKeyUsage, leaf.IsCA)
	}
	if life := leaf.NotAfter.Sub(f.clock.Now()); life != DefaultCertValidity {
		t.Errorf("serving certificate valid for %v, want %v", life, DefaultCertValidity)
	}
	if life := ca.NotAfter.Sub(f.clock.Now()); life != DefaultCAValidity {
		t.Errorf("CA valid for %v, want %v", life, DefaultCAValidity)
	}
	if err := verify(leaf, first.CABundle(), f.clock.Now()); err != nil {
		t.Error(err)
	}

	second := f.manager(t)
	reconcile(t, second)
	if got := f.secret(t); got.ResourceVersion != s.ResourceVersion || !equalData(got.Data, s.Data) {
		t.Error("the second Manager changed the Secret")
	}
	if n := f.countActions("update", "secrets") + f.countActions("create", "secrets"); n != 1 {
		t.Errorf("%d writes of the Secret, want 1", n)
	}
	if !served(t, second).Equal(leaf) {
		t.Error("the second Manager serves another certificate")
	}
}

func equalData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// otherReplica returns the Secret another replica would write, starting
// from existing (nil: none), on an API server of its own.
func otherReplica(t *testing.T, f *fixture, existing *corev1.Secret) *corev1.Secret {
	t.Helper()
	objects := []runtime.Object{mutating(), validating()}
	if existing != nil {
		objects = append(objects, existing)
	}
	other := &fixture{client: fake.NewClientset(objects...), clock: f.clock, logger: zap.NewNop()}
	reconcile(t, other.manager(t))
	return other.secret(t)
}

func TestRacingCreatesConverge(t *testing.T) {
	f := newFixture(t)
	theirs := otherReplica(t, f, nil)
	raced := false
	f.client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if raced {
			return false, nil, nil
		}
		raced = true
		// The other replica's create lands between this one's read and
		// its create.
		if err := f.client.Tracker().Create(secretsGVR, theirs, ns); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewAlreadyExists(secretsGVR.GroupResource(), kube.WebhookCertSecret)
	})
	m := f.manager(t)
	reconcile(t, m)
	if !raced {
		t.Fatal("the Manager never tried to create the Secret")
	}
	if got := f.secret(t); !equalData(got.Data, theirs.Data) {
		t.Error("the Secret is not the one the other replica created")
	}
	if !bytes.Equal(served(t, m).Raw, parseCerts(t, theirs.Data["tls.crt"])[0].Raw) || !bytes.Equal(m.CABundle(), theirs.Data["ca.crt"]) {
		t.Error("the Manager does not serve the other replica's certificate")
	}
	if n := f.countActions("update", "secrets"); n != 0 {
		t.Errorf("%d updates of the Secret after losing the race, want 0", n)
	}
}

func TestRacingRepairsConverge(t *testing.T) {
	f := newFixture(t)
	reconcile(t, f.manager(t))
	broken := f.secret(t)
	broken.Data["tls.crt"] = []byte("not a certificate")
	if _, err := f.client.CoreV1().Secrets(ns).Update(context.Background(), broken, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	theirs := otherReplica(t, f, broken)
	raced := false
	f.client.PrependReactor("update", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if raced {
			return false, nil, nil
		}
		raced = true
		if err := f.client.Tracker().Update(secretsGVR, theirs, ns); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewConflict(secretsGVR.GroupResource(), kube.WebhookCertSecret, errors.New("the object has been modified"))
	})
	m := f.manager(t)
	reconcile(t, m)
	if !raced {
		t.Fatal("the Manager never tried to repair the Secret")
	}
	if got := f.secret(t); !equalData(got.Data, theirs.Data) {
		t.Error("the Secret is not the other replica's repair")
	}
	if !bytes.Equal(served(t, m).Raw, parseCerts(t, theirs.Data["tls.crt"])[0].Raw) {
		t.Error("the Manager does not serve the other replica's certificate")
	}
}

func TestServingCertificateRenewedCAKept(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t)
	reconcile(t, m)
	before := f.secret(t)
	leaf := served(t, m)
	due := renewAt(leaf)
	if want := leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) * 2 / 3); due.Sub(want).Abs() > time.Microsecond {
		t.Fatalf("renewal due at %v, want 2/3 into the life, %v", due, want)
	}

	f.clock.SetTime(due.Add(-time.Minute))
	reconcile(t, m)
	if !served(t, m).Equal(leaf) || f.secret(t).ResourceVersion != before.ResourceVersion {
		t.Fatal("renewed before 2/3 of the life")
	}

	f.clock.SetTime(due.Add(time.Minute))
	reconcile(t, m)
	after := f.secret(t)
	renewed := served(t, m)
	if renewed.Equal(leaf) {
		t.Fatal("not renewed past 2/3 of the life")
	}
	if !bytes.Equal(after.Data["ca.crt"], before.Data["ca.crt"]) || !bytes.Equal(after.Data["ca.key"], before.Data["ca.key"]) {
		t.Error("renewing the serving certificate changed the CA")
	}
	if !bytes.Equal(after.Data["tls.crt"], mustEncode(t, renewed)) {
		t.Error("the renewed certificate served is not the Secret's")
	}
	if err := verify(renewed, m.CABundle(), f.clock.Now()); err != nil {
		t.Error(err)
	}
}

func mustEncode(t *testing.T, c *x509.Certificate) []byte {
	t.Helper()
	b, err := cert.EncodeCertificates(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCARotation lives six years in steps of a month: the certificate
// served is trusted by the bundle published in the configurations at every
// step, the CA rotates once, and the old CA stays in the bundle until it
// expires.
func TestCARotation(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t)
	reconcile(t, m)
	firstCA := parseCerts(t, m.CABundle())[0]

	var rotated time.Time
	for f.clock.Now().Before(firstCA.NotBefore.Add(6 * 365 * 24 * time.Hour)) {
		f.clock.Step(30 * 24 * time.Hour)
		reconcile(t, m)
		now := f.clock.Now()
		for i, b := range f.bundles(t) {
			if !bytes.Equal(b, m.CABundle()) {
				t.Fatalf("%v: webhook %d's caBundle is not the Manager's", now, i)
			}
		}
		if err := verify(served(t, m), m.CABundle(), now); err != nil {
			t.Fatalf("%v: the certificate served is not trusted by the bundle published: %v", now, err)
		}
		bundle := parseCerts(t, m.CABundle())
		switch {
		case bundle[0].Equal(firstCA):
			if len(bundle) != 1 {
				t.Fatalf("%v: %d CAs in the bundle before any rotation", now, len(bundle))
			}
		case rotated.IsZero():
			rotated = now
			if now.Before(renewAt(firstCA)) {
				t.Fatalf("CA rotated at %v, before 2/3 of its life (%v)", now, renewAt(firstCA))
			}
			fallthrough
		default:
			old := len(bundle) > 1 && bundle[1].Equal(firstCA)
			if stillValid := now.Before(firstCA.NotAfter); old != stillValid || len(bundle) > 2 {
				t.Fatalf("%v: bundle of %d CAs holds the old CA: %v; the old CA valid: %v", now, len(bundle), old, stillValid)
			}
			if !bytes.Equal(served(t, m).AuthorityKeyId, bundle[0].SubjectKeyId) {
				t.Fatalf("%v: the serving certificate is not signed by the new CA", now)
			}
		}
	}
	if rotated.IsZero() || rotated.After(renewAt(firstCA).Add(31*24*time.Hour)) {
		t.Errorf("CA rotated at %v; due at %v", rotated, renewAt(firstCA))
	}
}

// TestCABundleBeforeServingCertificate checks the order of a CA rotation:
// while the configurations cannot be patched, the Secret gets the new
// bundle but the serving certificate stays signed by the old CA.
func TestCABundleBeforeServingCertificate(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t)
	reconcile(t, m)
	oldCA := parseCerts(t, m.CABundle())[0]
	oldBundle := m.CABundle()
	leaf := served(t, m)

	// Live until the CA is due, renewing the serving certificate, so that
	// only the CA is due then.
	caDue := renewAt(oldCA).Add(time.Minute)
	for !renewAt(leaf).After(caDue) {
		f.clock.SetTime(renewAt(leaf).Add(time.Minute))
		reconcile(t, m)
		leaf = served(t, m)
	}

	blocked := true
	f.client.PrependReactor("patch", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		if blocked {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{}, kube.WebhookConfiguration, errors.New("not now"))
		}
		return false, nil, nil
	})
	f.clock.SetTime(caDue)
	if err := m.reconcile(context.Background()); err == nil {
		t.Fatal("no error while the configurations cannot be patched")
	}
	bundle := parseCerts(t, f.secret(t).Data["ca.crt"])
	if len(bundle) != 2 || bundle[0].Equal(oldCA) || !bundle[1].Equal(oldCA) {
		t.Fatalf("the Secret's bundle does not hold the new CA then the old one")
	}
	if !served(t, m).Equal(leaf) || !bytes.Equal(f.secret(t).Data["tls.crt"], mustEncode(t, leaf)) {
		t.Fatal("the serving certificate changed before the new bundle was published")
	}
	if err := verify(served(t, m), oldBundle, f.clock.Now()); err != nil {
		t.Fatalf("the certificate served is no longer trusted by the published bundle: %v", err)
	}

	blocked = false
	reconcile(t, m)
	now := served(t, m)
	if now.Equal(leaf) || !bytes.Equal(now.AuthorityKeyId, bundle[0].SubjectKeyId) {
		t.Fatal("the serving certificate is not signed by the new CA once the bundle is published")
	}
	for i, b := range f.bundles(t) {
		if !bytes.Equal(b, m.CABundle()) {
			t.Fatalf("webhook %d's caBundle is not the new bundle", i)
		}
		if err := verify(now, b, f.clock.Now()); err != nil {
			t.Fatalf("webhook %d's caBundle does not trust the certificate served: %v", i, err)
		}
	}
	// A caller still holding the old bundle trusts the old certificate,
	// which stays valid, as long as the old CA does.
	if err := verify(leaf, m.CABundle(), f.clock.Now()); err != nil {
		t.Errorf("the new bundle does not trust certificates of the old CA: %v", err)
	}
}

func TestCABundlePatched(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t)
	reconcile(t, m)
	bundles := f.bundles(t)
	if len(bundles) != 3 {
		t.Fatalf("%d webhooks, want 3", len(bundles))
	}
	for i, b := range bundles {
		if !bytes.Equal(b, m.CABundle()) {
			t.Errorf("webhook %d: caBundle %q, want the Manager's", i, b)
		}
	}

	// Nothing else changed.
	ctx := context.Background()
	mw, _ := f.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, kube.WebhookConfiguration, metav1.GetOptions{})
	want := mutating()
	for i := range mw.Webhooks {
		mw.Webhooks[i].ClientConfig.CABundle = nil
		want.Webhooks[i].ClientConfig.CABundle = nil
	}
	mw.ObjectMeta, want.ObjectMeta = metav1.ObjectMeta{Labels: mw.Labels}, metav1.ObjectMeta{Labels: want.Labels}
	mw.TypeMeta, want.TypeMeta = metav1.TypeMeta{}, metav1.TypeMeta{}
	if a, b := mustJSON(t, mw), mustJSON(t, want); a != b {
		t.Errorf("patching changed more than caBundle:\n got %s\nwant %s", a, b)
	}

	// Emptied by someone: patched again.
	vw, _ := f.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, kube.WebhookConfiguration, metav1.GetOptions{})
	vw.Webhooks[0].ClientConfig.CABundle = nil
	if _, err := f.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, vw, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	patches := f.countActions("patch", "validatingwebhookconfigurations")
	reconcile(t, m)
	if got := f.bundles(t)[2]; !bytes.Equal(got, m.CABundle()) {
		t.Errorf("emptied caBundle not patched again: %q", got)
	}
	reconcile(t, m)
	if n := f.countActions("patch", "validatingwebhookconfigurations"); n != patches+1 {
		t.Errorf("%d patches, want %d: a configuration that holds the bundle is patched anyway", n, patches+1)
	}
}

func TestCABundleConfigurationsAbsent(t *testing.T) {
	f := newFixture(t, []runtime.Object{}...)
	m := f.manager(t)
	reconcile(t, m) // no error: the configurations may come later
	if !m.Ready() {
		t.Fatal("not ready without webhook configurations")
	}
	ctx := context.Background()
	if _, err := f.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mutating(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validating(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reconcile(t, m)
	for i, b := range f.bundles(t) {
		if !bytes.Equal(b, m.CABundle()) {
			t.Errorf("webhook %d not patched once its configuration exists", i)
		}
	}
}

func TestBrokenSecretRegenerated(t *testing.T) {
	other := newFixture(t)
	reconcile(t, other.manager(t))
	foreign := other.secret(t).Data

	for _, tc := range []struct {
		name    string
		breakIt func(d map[string][]byte)
		keepCA  bool
		why     string
	}{
		{"CA does not parse", func(d map[string][]byte) { d["ca.crt"] = []byte("garbage") }, false, "ca.crt"},
		{"no CA key", func(d map[string][]byte) { delete(d, "ca.key") }, false, "no ca.key"},
		{"CA key of another CA", func(d map[string][]byte) { d["ca.key"] = foreign["ca.key"] }, false, "matches no certificate"},
		{"certificate does not parse", func(d map[string][]byte) {
			d["tls.crt"] = []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
		}, true, "tls.crt"},
		{"key does not match", func(d map[string][]byte) { d["tls.key"] = foreign["tls.key"] }, true, "does not match"},
		{"signed by another CA", func(d map[string][]byte) { d["tls.crt"], d["tls.key"] = foreign["tls.crt"], foreign["tls.key"] }, true, "not signed by a CA"},
		{"serving certificate is a CA", func(d map[string][]byte) { d["tls.crt"], d["tls.key"] = d["ca.crt"], d["ca.key"] }, true, "does not name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			reconcile(t, f.manager(t))
			s := f.secret(t)
			good := s.DeepCopy().Data
			tc.breakIt(s.Data)
			if _, err := f.client.CoreV1().Secrets(ns).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			m := f.manager(t)
			reconcile(t, m)
			fixed := f.secret(t).Data
			if _, err := parseAuthority(fixed, f.clock.Now()); err != nil {
				t.Fatalf("CA still broken: %v", err)
			}
			if bytes.Equal(fixed["ca.key"], good["ca.key"]) != tc.keepCA {
				t.Errorf("CA kept: %v, want %v", !tc.keepCA, tc.keepCA)
			}
			if err := verify(served(t, m), m.CABundle(), f.clock.Now()); err != nil {
				t.Error(err)
			}
			if !bytes.Equal(mustEncode(t, served(t, m)), fixed["tls.crt"]) {
				t.Error("the certificate served is not the Secret's")
			}
			warned := f.logs.FilterLevelExact(zapcore.WarnLevel).All()
			if len(warned) != 1 || !strings.Contains(warned[0].ContextMap()["why"].(string), tc.why) {
				t.Errorf("warnings %v, want one saying %q", warned, tc.why)
			}
		})
	}

	for _, tc := range []struct {
		name   string
		after  time.Duration
		keepCA bool
	}{
		{"serving certificate expired", DefaultCertValidity + time.Hour, true},
		{"CA expired", DefaultCAValidity + time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			m := f.manager(t)
			reconcile(t, m)
			before := f.secret(t).Data
			f.clock.Step(tc.after)
			reconcile(t, m)
			after := f.secret(t).Data
			if bytes.Equal(after["ca.key"], before["ca.key"]) != tc.keepCA {
				t.Errorf("CA kept: %v, want %v", !tc.keepCA, tc.keepCA)
			}
			if err := verify(served(t, m), m.CABundle(), f.clock.Now()); err != nil {
				t.Error(err)
			}
			warned := f.logs.FilterLevelExact(zapcore.WarnLevel).All()
			if len(warned) != 1 || !strings.Contains(warned[0].ContextMap()["why"].(string), "expired") {
				t.Errorf("warnings %v, want one saying expired", warned)
			}
		})
	}

	t.Run("other names", func(t *testing.T) {
		f := newFixture(t)
		reconcile(t, f.manager(t))
		m := f.manager(t, func(c *Config) { c.ServiceName = "renamed" })
		reconcile(t, m)
		if got := served(t, m).DNSNames; got[0] != "renamed.swell-system.svc" {
			t.Errorf("names %v, want renamed.swell-system.svc first", got)
		}
	})
}

func TestHandshake(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: m.GetCertificate, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if err := c.(*tls.Conn).Handshake(); err == nil {
					_, _ = io.WriteString(c, "ok")
				}
			}()
		}
	}()
	dial := func(bundle []byte) (*x509.Certificate, error) {
		pool, err := cert.NewPoolFromBytes(bundle)
		if err != nil {
			pool = x509.NewCertPool()
		}
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(),
			&tls.Config{RootCAs: pool, ServerName: serverName, Time: f.clock.Now, MinVersion: tls.VersionTLS12})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		if b, err := io.ReadAll(c); err != nil || string(b) != "ok" {
			return nil, errors.New("no answer after the handshake")
		}
		return c.ConnectionState().PeerCertificates[0], nil
	}

	if _, err := dial(nil); err == nil {
		t.Fatal("handshake succeeded before a certificate was loaded")
	}
	reconcile(t, m)
	got, err := dial(m.CABundle())
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(served(t, m)) {
		t.Error("the peer's certificate is not the one loaded")
	}

	// After a renewal, new connections get the new certificate.
	f.clock.SetTime(renewAt(got).Add(time.Minute))
	reconcile(t, m)
	renewed, err := dial(m.CABundle())
	if err != nil {
		t.Fatal(err)
	}
	if renewed.Equal(got) {
		t.Error("still the old certificate after a renewal")
	}
}

func TestNewRejects(t *testing.T) {
	c := fake.NewClientset()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Namespace: ns}, "no Kubernetes client"},
		{Config{Client: c}, `Namespace "" is not a namespace name`},
		{Config{Client: c, Namespace: "Swell"}, `Namespace "Swell"`},
		{Config{Client: c, Namespace: ns, ServiceName: "a.b"}, `ServiceName "a.b" is not a Service name`},
		{Config{Client: c, Namespace: ns, SecretName: "_"}, `SecretName "_"`},
		{Config{Client: c, Namespace: ns, WebhookConfiguration: "A"}, `WebhookConfiguration "A"`},
		{Config{Client: c, Namespace: ns, CertValidity: time.Minute}, "at least 1h0m0s"},
		{Config{Client: c, Namespace: ns, CAValidity: -time.Hour}, "at least 1h0m0s"},
		{Config{Client: c, Namespace: ns, CAValidity: 24 * time.Hour, CertValidity: 48 * time.Hour}, "longer than CAValidity"},
	} {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
}

// runClock is the fake clock, telling TestRun of each timer Run arms (after
// each check, for the next) and each it stops (when a change comes before
// the timer, or ctx ends).
type runClock struct {
	*clocktesting.FakeClock
	events chan timerEvent
}

// timerEvent is a timer armed for wait, or one stopped.
type timerEvent struct {
	wait    time.Duration
	stopped bool
}

func (c *runClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.events <- timerEvent{wait: d}
	return stopReporter{Timer: t, events: c.events}
}

type stopReporter struct {
	clock.Timer
	events chan<- timerEvent
}

func (t stopReporter) Stop() bool {
	t.events <- timerEvent{stopped: true}
	return t.Timer.Stop()
}

// TestRun drives Run through the informers and the fake clock: it loads the
// certificate, patches an emptied bundle again, checks every CheckInterval,
// and returns when its context ends.
func TestRun(t *testing.T) {
	f := newFixture(t)
	clk := &runClock{FakeClock: f.clock, events: make(chan timerEvent, 100)}
	m := f.manager(t, func(c *Config) { c.Clock = clk })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // ends Run if the test fails early
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()

	// next waits for Run's next check, which ends by arming the timer for
	// the one after, and returns what caused it: the start, a change (Run
	// stopped the timer before it fired) or the timer. A check that failed
	// (the timer is a backoff) fails the test, and one that never comes
	// fails it instead of hanging it.
	started, stopped := false, false
	next := func() string {
		t.Helper()
		for {
			select {
			case ev := <-clk.events:
				if ev.stopped {
					stopped = true
					continue
				}
				cause := "timer"
				switch {
				case !started:
					cause = "start"
				case stopped:
					cause = "change"
				}
				started, stopped = true, false
				if ev.wait != CheckInterval {
					t.Fatalf("check (%s) failed, retried in %v: %v", cause, ev.wait,
						f.logs.FilterMessage("webhook certificate check failed; retrying").All())
				}
				return cause
			case <-time.After(10 * time.Second):
				t.Fatal("no check from Run")
				return ""
			}
		}
	}
	if c := next(); c != "start" || !m.Ready() {
		t.Fatalf("first check %q, ready %v", c, m.Ready())
	}

	ctxBG := context.Background()
	vw, err := f.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctxBG, kube.WebhookConfiguration, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vw.Webhooks[0].ClientConfig.CABundle = nil
	if _, err := f.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctxBG, vw, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for !bytes.Equal(f.bundles(t)[2], m.CABundle()) {
		next()
	}

	// Every check sets a timer at the fake clock's time; stepping the
	// clock fires it unless a change came first, and then the next one.
	for i := 0; ; i++ {
		if i == 20 {
			t.Fatal("no check on the timer after stepping the clock 20 times")
		}
		f.clock.Step(CheckInterval)
		if next() == "timer" {
			break
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v after its context ended, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// caConfigMap returns the CA bundle the ConfigMap holds, or nil if absent.
func (f *fixture) caConfigMap(t *testing.T) []byte {
	t.Helper()
	cm, err := f.client.CoreV1().ConfigMaps(ns).Get(context.Background(), kube.CAConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return []byte(cm.Data[kube.CAConfigMapKey])
}

// The activators trust the autoscaler through the ConfigMap: it holds the
// bundle, is restored when changed or deleted, keeps its other keys, and
// is not written when it holds the bundle already.
func TestCABundlePublishedInConfigMap(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t)
	reconcile(t, m)
	if got := f.caConfigMap(t); !bytes.Equal(got, m.CABundle()) {
		t.Fatalf("ConfigMap %s holds %q, want the Manager's bundle", kube.CAConfigMap, got)
	}

	ctx := context.Background()
	cms := f.client.CoreV1().ConfigMaps(ns)
	cm, _ := cms.Get(ctx, kube.CAConfigMap, metav1.GetOptions{})
	cm.Data[kube.CAConfigMapKey] = "tampered"
	cm.Data["note"] = "kept"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	reconcile(t, m)
	cm, _ = cms.Get(ctx, kube.CAConfigMap, metav1.GetOptions{})
	if cm.Data[kube.CAConfigMapKey] != string(m.CABundle()) || cm.Data["note"] != "kept" {
		t.Errorf("after tampering: data %v, want the bundle back and the other key kept", cm.Data)
	}

	if err := cms.Delete(ctx, kube.CAConfigMap, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	reconcile(t, m)
	if got := f.caConfigMap(t); !bytes.Equal(got, m.CABundle()) {
		t.Errorf("deleted ConfigMap not created again: %q", got)
	}
	updates := f.countActions("update", "configmaps")
	reconcile(t, m)
	if n := f.countActions("update", "configmaps"); n != updates {
		t.Errorf("%d ConfigMap updates, want %d: one holding the bundle is written anyway", n, updates)
	}
}

// The certificate names the other Services too, and a certificate that
// does not is reissued: the activators dial the autoscaler by its name.
func TestOtherServicesNamed(t *testing.T) {
	f := newFixture(t)
	reconcile(t, f.manager(t))
	before := f.secret(t).Data[corev1.TLSCertKey]

	m := f.manager(t, func(c *Config) { c.OtherServices = []string{kube.AutoscalerService} })
	reconcile(t, m)
	if bytes.Equal(f.secret(t).Data[corev1.TLSCertKey], before) {
		t.Fatal("a certificate that does not name the autoscaler's Service was kept")
	}
	leaf := served(t, m)
	pool, err := cert.NewPoolFromBytes(m.CABundle())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{serverName, "autoscaler.swell-system.svc", "autoscaler", "autoscaler.swell-system.svc.cluster.local"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: f.clock.Now()}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	if _, err := New(Config{Client: f.client, Namespace: ns, OtherServices: []string{"Not_A_Service"}}); err == nil {
		t.Error("an invalid Service name in OtherServices was accepted")
	}
}
