package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"
)

// fakeAPI plays the apiserver for the pods of a test: ServiceAccounts,
// Secrets and ConfigMaps from maps keyed namespace/name, and tokens
// "token-1", "token-2", ... that live for life.
type fakeAPI struct {
	clock clock.Clock
	life  time.Duration

	mu         sync.Mutex
	accounts   map[string]*corev1.ServiceAccount
	secrets    map[string]*corev1.Secret
	configMaps map[string]*corev1.ConfigMap
	failNext   int              // token requests that fail before one succeeds
	issued     map[string]int   // tokens issued, by pod name
	requested  chan *corev1.Pod // receives each pod a token request is made for, if not nil
}

func newFakeAPI(clk clock.Clock) *fakeAPI {
	return &fakeAPI{clock: clk, life: time.Hour, accounts: map[string]*corev1.ServiceAccount{},
		secrets: map[string]*corev1.Secret{}, configMaps: map[string]*corev1.ConfigMap{}, issued: map[string]int{}}
}

func notFound(resource, name string) error {
	return apierrors.NewNotFound(schema.GroupResource{Resource: resource}, name)
}

func (f *fakeAPI) secret(_ context.Context, namespace, name string) (*corev1.Secret, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.secrets[namespace+"/"+name]; ok {
		return s.DeepCopy(), nil
	}
	return nil, notFound("secrets", name)
}

func (f *fakeAPI) configMap(_ context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.configMaps[namespace+"/"+name]; ok {
		return c.DeepCopy(), nil
	}
	return nil, notFound("configmaps", name)
}

// serviceAccount returns the ServiceAccount if the test put one in, and
// else one with automounting unset, as the default ServiceAccount is.
func (f *fakeAPI) serviceAccount(_ context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sa, ok := f.accounts[namespace+"/"+name]; ok {
		return sa.DeepCopy(), nil
	}
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}, nil
}

func (f *fakeAPI) token(_ context.Context, pod *corev1.Pod, expiration time.Duration) (string, time.Time, error) {
	if f.requested != nil {
		f.requested <- pod
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if expiration != tokenExpiration {
		return "", time.Time{}, fmt.Errorf("asked for a token living %s, want %s", expiration, tokenExpiration)
	}
	if f.failNext > 0 {
		f.failNext--
		return "", time.Time{}, apierrors.NewForbidden(schema.GroupResource{Resource: "serviceaccounts"}, serviceAccountName(pod), errors.New("no relationship found"))
	}
	f.issued[pod.Name]++
	return fmt.Sprintf("token-%d", f.issued[pod.Name]), f.clock.Now().Add(f.life), nil
}

func (f *fakeAPI) tokensIssued(pod string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.issued[pod]
}

func TestRefreshAt(t *testing.T) {
	issued := time.Unix(1000, 0)
	for _, tc := range []struct {
		life, want time.Duration
	}{
		{time.Hour, 48 * time.Minute},
		{10 * time.Minute, 8 * time.Minute},
		{time.Second, minRefresh},  // never sooner than minRefresh
		{-time.Minute, minRefresh}, // expired on arrival: a clock apart
	} {
		if got := refreshAt(issued, issued.Add(tc.life)).Sub(issued); got != tc.want {
			t.Errorf("a token living %s is replaced after %s, want %s", tc.life, got, tc.want)
		}
	}
}

func TestAutomount(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		pod, sa *bool
		want    bool
	}{
		{nil, nil, true},
		{nil, &no, false},
		{nil, &yes, true},
		{&yes, &no, true}, // the pod's word wins
		{&no, &yes, false},
		{&no, nil, false},
	} {
		api := newFakeAPI(clock.RealClock{})
		api.accounts["ns/runner"] = &corev1.ServiceAccount{AutomountServiceAccountToken: tc.sa}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
			Spec: corev1.PodSpec{ServiceAccountName: "runner", AutomountServiceAccountToken: tc.pod}}
		got, err := automount(context.Background(), api, pod)
		if err != nil || got != tc.want {
			t.Errorf("pod %v, ServiceAccount %v: automount %v (%v), want %v", ptrString(tc.pod), ptrString(tc.sa), got, err, tc.want)
		}
	}
}

func ptrString(b *bool) string {
	if b == nil {
		return "unset"
	}
	return fmt.Sprint(*b)
}

func TestCredentialsFiles(t *testing.T) {
	dir := t.TempDir()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p"}}
	creds := newCredentials(dir)
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	const server = "https://198.18.0.1:6443"
	if err := creds.writeStatic(pod, server, ca); err != nil {
		t.Fatal(err)
	}
	if err := creds.writeToken("token-1"); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"token": "token-1", "ca.crt": string(ca), "namespace": "team"}
	for name, content := range want {
		p := filepath.Join(dir, "kubernetes.io", "serviceaccount", name)
		b, err := os.ReadFile(p)
		if err != nil || string(b) != content {
			t.Errorf("%s: %q (%v), want %q", name, b, err, content)
		}
	}
	entries, _ := os.ReadDir(creds.dir)
	if len(entries) != 4 {
		t.Errorf("files %v, want token, ca.crt, namespace, kubeconfig and nothing left over", entries)
	}
	for _, e := range entries {
		if info, err := e.Info(); err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", e.Name(), info.Mode(), err)
		}
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", creds.kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != server || cfg.BearerTokenFile != creds.token() || cfg.TLSClientConfig.CAFile != creds.ca() {
		t.Errorf("kubeconfig gives host %q, tokenFile %q, CA %q; want %s, %s, %s",
			cfg.Host, cfg.BearerTokenFile, cfg.TLSClientConfig.CAFile, server, creds.token(), creds.ca())
	}
	raw, err := clientcmd.LoadFromFile(creds.kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	if ns := raw.Contexts[raw.CurrentContext].Namespace; ns != "team" {
		t.Errorf("kubeconfig's namespace %q, want the pod's, team", ns)
	}

	env, err := creds.env(server)
	if err != nil {
		t.Fatal(err)
	}
	lookup := lookupIn(env)
	for name, want := range map[string]string{"KUBECONFIG": creds.kubeconfig(), "KUBERNETES_SERVICE_HOST": "198.18.0.1", "KUBERNETES_SERVICE_PORT": "6443"} {
		if got, _ := lookup(name); got != want {
			t.Errorf("%s=%q, want %q", name, got, want)
		}
	}
	if _, err := creds.env("198.18.0.1"); err == nil || !strings.Contains(err.Error(), "https://HOST:PORT") {
		t.Errorf("env of a server without scheme and port: %v, want an error showing the accepted form", err)
	}

	creds.remove()
	if _, err := os.Stat(filepath.Join(dir, "kubernetes.io")); !os.IsNotExist(err) {
		t.Errorf("after remove: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("remove took the pod's directory: %v", err)
	}
}

// waitForWaiter waits until the keeper's goroutine waits on the fake clock,
// that is, has done all it does before its next timer.
func waitForWaiter(t *testing.T, clk *testclock.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the token keeper never waited for its next refresh")
		}
		goruntime.Gosched()
	}
}

func TestTokenKeeperRefreshesAt80Percent(t *testing.T) {
	clk := testclock.NewFakeClock(time.Unix(1000, 0))
	api := newFakeAPI(clk)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u-1"}}
	creds := newCredentials(t.TempDir())
	if err := os.MkdirAll(creds.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	k := &tokenKeeper{api: api, pod: pod, creds: creds, clock: clk, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	token := func() string {
		b, _ := os.ReadFile(creds.token())
		return string(b)
	}
	next, err := k.fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := clk.Now().Add(48 * time.Minute); !next.Equal(want) || token() != "token-1" {
		t.Fatalf("first fetch: refresh at %v, token %q; want %v, token-1", next, token(), want)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.keepFresh(ctx, next)
	}()
	waitForWaiter(t, clk)
	clk.Step(48*time.Minute - time.Second)
	waitForWaiter(t, clk)
	if token() != "token-1" || api.tokensIssued("p") != 1 {
		t.Fatalf("before 80%% of the token's life: %q, %d issued; want token-1 still", token(), api.tokensIssued("p"))
	}
	clk.Step(time.Second)
	waitForWaiter(t, clk)
	if token() != "token-2" {
		t.Fatalf("at 80%% of its life the token is %q, want token-2", token())
	}

	// A failed refresh keeps the current token and is retried after 1s.
	api.mu.Lock()
	api.failNext = 1
	api.mu.Unlock()
	clk.Step(48 * time.Minute)
	waitForWaiter(t, clk)
	if token() != "token-2" {
		t.Fatalf("after a failed refresh: %q, want token-2 kept", token())
	}
	clk.Step(time.Second)
	waitForWaiter(t, clk)
	if token() != "token-3" {
		t.Fatalf("1s after a failed refresh: %q, want token-3", token())
	}

	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the token keeper did not stop with its context")
	}
}
