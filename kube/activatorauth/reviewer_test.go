package activatorauth

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
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
		tr.Status = tokens[tr.Spec.Token] // unknown: not authenticated
		if tr.Status.Authenticated && len(tr.Status.Audiences) == 0 {
			tr.Status.Audiences = []string{"https://kubernetes.default.svc"}
		}
		return true, tr, nil
	})
	return s
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
	pod, err := r.Authenticate(ctx, "activator-1")
	if err != nil || pod != "activator-7d9f-abcde" {
		t.Fatalf("the activator's token: %q, %v", pod, err)
	}
	for token, want := range map[string]string{
		"other-account":            `"system:serviceaccount:tenant:default"'s, not the activators'`,
		"other-ns":                 "not the activators'",
		"legacy-secret":            "not bound to one pod",
		"two-pods":                 "not bound to one pod",
		"a-user":                   "not the activators'",
		"not-authentic":            "token has expired",
		"unknown":                  "did not authenticate",
		"":                         "cannot be a service-account token",
		strings.Repeat("x", 1<<20): "cannot be a service-account token",
	} {
		pod, err := r.Authenticate(ctx, token)
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
		if _, err := r.Authenticate(ctx, "t"); err != nil {
			t.Fatal(err)
		}
	}
	if s.reviews != 1 {
		t.Fatalf("%d reviews for one token within its TTL, want 1", s.reviews)
	}
	delete(tokens, "t") // the pod was deleted: its token is no longer valid
	clk.Step(time.Minute)
	if _, err := r.Authenticate(ctx, "t"); err == nil {
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
		_, err := r.Authenticate(ctx, "forged-"+string(rune('a'+i%26)))
		if errors.Is(err, collector.ErrRetryLater) {
			retry++
		}
	}
	if s.reviews != 3 || retry != 97 {
		t.Errorf("%d reviews, %d told to retry; want 3 and 97", s.reviews, retry)
	}
	clk.Step(time.Second)
	s.down = true
	if _, err := r.Authenticate(ctx, "any"); !errors.Is(err, collector.ErrRetryLater) {
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
		if _, err := r.Authenticate(ctx, tok); err != nil {
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
	_, err := r.Authenticate(context.Background(), "t")
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
