package activatorauth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/autoscaler/collector"
)

const activators = "system:serviceaccount:swell-system:activator"

// apiServer answers token reviews from a table of token → status, and
// counts them.
type apiServer struct {
	client  *fake.Clientset
	reviews int
	// down makes every review fail as an unreachable API server would.
	down bool
}

func newAPIServer(tokens map[string]authenticationv1.TokenReviewStatus) *apiServer {
	s := &apiServer{client: fake.NewClientset()}
	s.client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s.reviews++
		if s.down {
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		tr.Status = tokens[subject(tr.Spec.Token)] // unknown: not authenticated
		if tr.Status.Authenticated && len(tr.Status.Audiences) == 0 {
			tr.Status.Audiences = []string{"https://kubernetes.default.svc"}
		}
		return true, tr, nil
	})
	return s
}

// jwt is a token shaped as a service-account token is, standing for sub:
// the fake API server reviews it as its table says sub is.
func jwt(sub string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256","kid":"k"}`)) + "." + enc([]byte(sub)) + ".c2lnbmF0dXJl"
}

// subject is what jwt made token of.
func subject(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return ""
	}
	b, _ := base64.RawURLEncoding.DecodeString(parts[1])
	return string(b)
}

func bound(user, pod string) authenticationv1.TokenReviewStatus {
	st := authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: user}}
	if pod != "" {
		st.User.Extra = map[string]authenticationv1.ExtraValue{PodNameExtra: {pod}}
	}
	return st
}

func newReviewer(t *testing.T, s *apiServer, clk *clocktesting.FakeClock, mod ...func(*Config)) *Reviewer {
	t.Helper()
	cfg := Config{Client: s.client, Namespace: "swell-system", ServiceAccount: "activator", Clock: clk}
	for _, m := range mod {
		m(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Only a token of the activators' account, bound to a pod, is accepted,
// and it names that pod: a token of another account, one not bound to a
// pod, an unknown one and one that cannot be a token are refused.
func TestOnlyTheActivatorsBoundTokens(t *testing.T) {
	s := newAPIServer(map[string]authenticationv1.TokenReviewStatus{
		"activator-1":   bound(activators, "activator-7d9f-abcde"),
		"other-account": bound("system:serviceaccount:tenant:default", "tenant-pod"),
		"other-ns":      bound("system:serviceaccount:tenant:activator", "tenant-activator"),
		"legacy-secret": bound(activators, ""),
		"two-pods":      {Authenticated: true, User: authenticationv1.UserInfo{Username: activators, Extra: map[string]authenticationv1.ExtraValue{PodNameExtra: {"a", "b"}}}},
		"a-user":        bound("alice", "x"),
		"not-authentic": {Error: "token has expired"},
	})
	r := newReviewer(t, s, clocktesting.NewFakeClock(time.Now()))
	ctx := context.Background()
	pod, err := r.Authenticate(ctx, netip.Addr{}, jwt("activator-1"))
	if err != nil || pod != "activator-7d9f-abcde" {
		t.Fatalf("the activator's token: %q, %v", pod, err)
	}
	for token, want := range map[string]string{
		jwt("other-account"):            `"system:serviceaccount:tenant:default"'s, not the activators'`,
		jwt("other-ns"):                 "not the activators'",
		jwt("legacy-secret"):            "not bound to one pod",
		jwt("two-pods"):                 "not bound to one pod",
		jwt("a-user"):                   "not the activators'",
		jwt("not-authentic"):            "token has expired",
		jwt("unknown"):                  "did not authenticate",
		"":                              "cannot be a service-account token",
		jwt(strings.Repeat("x", 1<<20)): "cannot be a service-account token",
		"activator-1":                   "cannot be a service-account token",
		"a.b":                           "cannot be a service-account token",
		"a.b.c.d":                       "cannot be a service-account token",
		"e30.b.":                        "not base64url",
		"e30.b+/.c":                     "not base64url",
		"YWJj.b.c":                      "header is not a JSON object",
		"WzFd.b.c":                      "header is not a JSON object",
	} {
		pod, err := r.Authenticate(ctx, netip.Addr{}, token)
		if err == nil || !strings.Contains(err.Error(), want) || errors.Is(err, collector.ErrRetryLater) {
			t.Errorf("token %.20q: %q, %v; want refused with %q", token, pod, err, want)
		}
	}
	if s.reviews != 8 {
		t.Errorf("%d reviews, want 8 (none for what cannot be a token)", s.reviews)
	}
}

// An accepted token is remembered for the TTL, then asked about again,
// so a token whose pod is gone stops working within the TTL.
func TestAcceptedTokensRemembered(t *testing.T) {
	tokens := map[string]authenticationv1.TokenReviewStatus{"t": bound(activators, "activator-a")}
	s := newAPIServer(tokens)
	clk := clocktesting.NewFakeClock(time.Now())
	r := newReviewer(t, s, clk, func(c *Config) { c.CacheTTL = time.Minute })
	ctx := context.Background()
	for range 5 {
		if _, err := r.Authenticate(ctx, netip.Addr{}, jwt("t")); err != nil {
			t.Fatal(err)
		}
	}
	if s.reviews != 1 {
		t.Fatalf("%d reviews for one token within its TTL, want 1", s.reviews)
	}
	delete(tokens, "t") // the pod was deleted: its token is no longer valid
	clk.Step(time.Minute)
	if _, err := r.Authenticate(ctx, netip.Addr{}, jwt("t")); err == nil {
		t.Fatal("a token revoked a TTL ago still accepted")
	}
}

// A flood of tokens to review is bounded: beyond the rate the caller is
// told to retry, and the API server is not asked; an unreachable API
// server means retry, not refusal.
func TestReviewsBounded(t *testing.T) {
	s := newAPIServer(nil)
	clk := clocktesting.NewFakeClock(time.Now())
	r := newReviewer(t, s, clk, func(c *Config) { c.Rate, c.Burst = 1, 3 })
	ctx := context.Background()
	retry := 0
	for i := range 100 {
		_, err := r.Authenticate(ctx, netip.Addr{}, jwt("forged-"+string(rune('a'+i%26))))
		if errors.Is(err, collector.ErrRetryLater) {
			retry++
		}
	}
	if s.reviews != 3 || retry != 97 {
		t.Errorf("%d reviews, %d told to retry; want 3 and 97", s.reviews, retry)
	}
	clk.Step(time.Second)
	s.down = true
	if _, err := r.Authenticate(ctx, netip.Addr{}, jwt("any")); !errors.Is(err, collector.ErrRetryLater) {
		t.Errorf("API server down: %v, want ErrRetryLater", err)
	}
}

// The cache stays bounded: full, it drops what expired, else everything.
func TestCacheBounded(t *testing.T) {
	tokens := map[string]authenticationv1.TokenReviewStatus{}
	for _, tok := range []string{"a", "b", "c", "d"} {
		tokens[tok] = bound(activators, "pod-"+tok)
	}
	s := newAPIServer(tokens)
	clk := clocktesting.NewFakeClock(time.Now())
	r := newReviewer(t, s, clk, func(c *Config) { c.MaxCached = 2; c.Rate, c.Burst = 1000, 1000 })
	ctx := context.Background()
	for _, tok := range []string{"a", "b", "c", "d"} {
		if _, err := r.Authenticate(ctx, netip.Addr{}, jwt(tok)); err != nil {
			t.Fatal(err)
		}
		if n := len(r.cache); n > 2 {
			t.Fatalf("cache holds %d, more than its 2", n)
		}
	}
}

// A projected token for Swell's audience: the review asks for it, and a
// token the API server says is for another audience is refused.
func TestAudiences(t *testing.T) {
	var asked []string
	s := newAPIServer(nil)
	s.client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		asked = tr.Spec.Audiences
		tr.Status = bound(activators, "p")
		tr.Status.Audiences = []string{"elsewhere"}
		return true, tr, nil
	})
	r := newReviewer(t, s, clocktesting.NewFakeClock(time.Now()), func(c *Config) { c.Audiences = []string{"swell-autoscaler"} })
	_, err := r.Authenticate(context.Background(), netip.Addr{}, jwt("t"))
	if len(asked) != 1 || asked[0] != "swell-autoscaler" {
		t.Errorf("review asked for audiences %v", asked)
	}
	if err == nil || !strings.Contains(err.Error(), "audiences") {
		t.Errorf("a token for another audience: %v", err)
	}
}

func TestNewRejects(t *testing.T) {
	c := fake.NewClientset()
	for _, cfg := range []Config{
		{Namespace: "swell-system", ServiceAccount: "activator"},
		{Client: c, Namespace: "Bad_NS", ServiceAccount: "activator"},
		{Client: c, Namespace: "swell-system"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// activatorsAt is Activators from a table of address → pod.
type activatorsAt map[netip.Addr]string

func (a activatorsAt) ActivatorAt(ip netip.Addr) (string, bool) {
	pod, ok := a[ip]
	return pod, ok
}

// A flood of junk tokens costs the API server nothing, and leaves the
// activators the reviews they need: from an address where no activator
// pod is, nothing is reviewed; from one compromised activator, only its
// own share (second security review, finding 2). A token counts only
// from its own pod's address, even once remembered.
func TestReviewsOnlyForActivatorPods(t *testing.T) {
	s := newAPIServer(map[string]authenticationv1.TokenReviewStatus{
		"a": bound(activators, "activator-a"), "b": bound(activators, "activator-b"),
	})
	addrA, addrB, stranger := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.6"), netip.MustParseAddr("10.0.9.9")
	r := newReviewer(t, s, clocktesting.NewFakeClock(time.Now()), func(c *Config) {
		c.Activators = activatorsAt{addrA: "activator-a", addrB: "activator-b"}
	})
	ctx := context.Background()

	for i := range 1000 {
		_, err := r.Authenticate(ctx, stranger, jwt(fmt.Sprint("junk-", i)))
		if !errors.Is(err, ErrNotAnActivator) || !errors.Is(err, collector.ErrRetryLater) {
			t.Fatalf("junk from a stranger: %v; want ErrNotAnActivator", err)
		}
	}
	// A compromised activator spends its own budget.
	spent := 0
	for i := range 100 {
		if _, err := r.Authenticate(ctx, addrB, jwt(fmt.Sprint("junk-", i))); errors.Is(err, collector.ErrRetryLater) {
			spent++
		}
	}
	if s.reviews != DefaultSourceBurst || spent != 100-DefaultSourceBurst {
		t.Errorf("%d reviews, %d told to retry; want %d reviews, none for the stranger", s.reviews, spent, DefaultSourceBurst)
	}
	if pod, err := r.Authenticate(ctx, addrA, jwt("a")); err != nil || pod != "activator-a" {
		t.Fatalf("activator a after the floods: %q %v; want accepted", pod, err)
	}
	if _, err := r.Authenticate(ctx, stranger, jwt("a")); err == nil || errors.Is(err, collector.ErrRetryLater) {
		t.Errorf("a's token from a stranger: %v; want refused", err)
	}
	reviews := s.reviews
	_, err := r.Authenticate(ctx, addrB, jwt("a"))
	if err == nil || errors.Is(err, collector.ErrRetryLater) || !strings.Contains(err.Error(), `bound to activator "activator-a"`) {
		t.Errorf("a's remembered token from b's address: %v; want refused", err)
	}
	if s.reviews != reviews {
		t.Errorf("a remembered token reviewed again")
	}
}

// Pods knows the activators by address: the pods of their account that
// have not ended; an address two of them hold is neither's.
func TestPodsByAddress(t *testing.T) {
	pod := func(name, sa string, phase corev1.PodPhase, ips ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "swell-system", Name: name},
			Spec: corev1.PodSpec{ServiceAccountName: sa}, Status: corev1.PodStatus{Phase: phase}}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		return p
	}
	client := fake.NewClientset(
		pod("activator-a", "activator", corev1.PodRunning, "10.0.0.5", "fd00::5"),
		pod("autoscaler-a", "autoscaler", corev1.PodRunning, "10.0.0.7"),
		pod("activator-old", "activator", corev1.PodSucceeded, "10.0.0.8"),
		pod("activator-b", "activator", corev1.PodRunning, "10.0.0.9"),
		pod("activator-c", "activator", corev1.PodPending, "10.0.0.9"),
	)
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("swell-system"))
	p, err := NewPods(f.Core().V1().Pods(), "activator")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	f.Start(ctx.Done())
	defer f.Shutdown()
	defer cancel()
	f.WaitForCacheSync(ctx.Done())
	for ip, want := range map[string]string{
		"10.0.0.5": "activator-a", "fd00::5": "activator-a", "::ffff:10.0.0.5": "activator-a",
		"10.0.0.7": "", "10.0.0.8": "", "10.0.0.9": "", "10.0.0.1": "",
	} {
		got, ok := p.ActivatorAt(netip.MustParseAddr(ip))
		if got != want || ok != (want != "") {
			t.Errorf("ActivatorAt(%s) = %q %v; want %q", ip, got, ok, want)
		}
	}
}

// A token accepted from its pod's address is refused, not deferred, once
// no activator is at that address any more: its pod has gone, though a
// process may still hold a connection with it. A token never seen from an
// unknown address is deferred: its pod may be too new to be known yet.
func TestTokenOfAPodThatHasGone(t *testing.T) {
	s := newAPIServer(map[string]authenticationv1.TokenReviewStatus{"a": bound(activators, "activator-a")})
	addrA := netip.MustParseAddr("10.0.0.5")
	at := activatorsAt{addrA: "activator-a"}
	clk := clocktesting.NewFakeClock(time.Now())
	r := newReviewer(t, s, clk, func(c *Config) { c.Activators = at })
	ctx := context.Background()
	if _, err := r.Authenticate(ctx, addrA, jwt("a")); err != nil {
		t.Fatal(err)
	}
	delete(at, addrA)
	clk.Step(2 * time.Minute) // past the cache's TTL: a connection's next check
	_, err := r.Authenticate(ctx, addrA, jwt("a"))
	if err == nil || errors.Is(err, collector.ErrRetryLater) || !strings.Contains(err.Error(), "comes from 10.0.0.5, where no activator is") {
		t.Errorf("the token of a pod that has gone: %v; want refused", err)
	}
	if _, err := r.Authenticate(ctx, addrA, jwt("new")); !errors.Is(err, ErrNotAnActivator) {
		t.Errorf("a token never seen, from an address no activator holds: %v; want ErrNotAnActivator", err)
	}
}
