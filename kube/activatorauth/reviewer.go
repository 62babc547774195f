// Package activatorauth tells the autoscaler which activator is calling: it
// checks the service-account token an activator presents with the
// TokenReview API and returns the pod the token is bound to. The endpoint
// then accepts only a hello naming that pod, so a compromised activator
// cannot speak for another, and a token ends with its pod or its expiry
// (the kubelet replaces it well before; the activator reads it again at
// each connection). Nothing is shared between activators, and nothing is
// to rotate by hand.
package activatorauth

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"golang.org/x/time/rate"

	"github.com/swell-run/swell/autoscaler/collector"
)

// PodNameExtra is the key of the user-info extra in which the API server
// names the pod a bound service-account token belongs to.
const PodNameExtra = "authentication.kubernetes.io/pod-name"

// Defaults of Config.
const (
	// DefaultCacheTTL is how long an accepted token is taken without
	// asking again. A token revoked (its pod deleted) is refused at the
	// next connection after that.
	DefaultCacheTTL = time.Minute
	// DefaultMaxCached bounds the accepted tokens remembered; a few per
	// activator replica is the need.
	DefaultMaxCached = 1024
	// DefaultRate and DefaultBurst bound the reviews per second asked of
	// the API server for tokens not remembered, whatever callers send.
	DefaultRate  = 5
	DefaultBurst = 20
	// MaxTokenLength refuses, unasked, what cannot be a service-account
	// token (a JWT of a few hundred bytes to a few KiB).
	MaxTokenLength = 16 << 10
)

// Config configures a Reviewer.
type Config struct {
	// Client reaches the API server; its account needs create on
	// tokenreviews. Required.
	Client kubernetes.Interface
	// Namespace and ServiceAccount name the activators' account: a token
	// of any other is refused. Required.
	Namespace, ServiceAccount string
	// Audiences, if set, are the audiences the token must be meant for
	// (a projected token's); nil accepts the API server's own, as the
	// token the kubelet mounts in every pod has.
	Audiences []string
	// CacheTTL, MaxCached, Rate and Burst: see the defaults.
	CacheTTL  time.Duration
	MaxCached int
	Rate      rate.Limit
	Burst     int
	// Clock tells the time (default the real clock).
	Clock clock.PassiveClock
}

// A Reviewer is a collector.Authenticator backed by the TokenReview API.
// It is safe for concurrent use.
type Reviewer struct {
	client    kubernetes.Interface
	username  string
	audiences []string
	ttl       time.Duration
	max       int
	clock     clock.PassiveClock
	limit     *rate.Limiter

	mu    sync.Mutex
	cache map[[sha256.Size]byte]accepted
}

type accepted struct {
	pod   string
	until time.Time
}

var _ collector.Authenticator = (*Reviewer)(nil)

// New checks cfg and returns a Reviewer.
func New(cfg Config) (*Reviewer, error) {
	if cfg.Client == nil {
		return nil, errors.New("activatorauth: Config.Client is required")
	}
	if errs := validation.IsDNS1123Label(cfg.Namespace); len(errs) > 0 {
		return nil, fmt.Errorf("activatorauth: Namespace %q: %s", cfg.Namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(cfg.ServiceAccount); len(errs) > 0 {
		return nil, fmt.Errorf("activatorauth: ServiceAccount %q: %s", cfg.ServiceAccount, strings.Join(errs, "; "))
	}
	r := &Reviewer{
		client:    cfg.Client,
		username:  "system:serviceaccount:" + cfg.Namespace + ":" + cfg.ServiceAccount,
		audiences: cfg.Audiences,
		ttl:       cfg.CacheTTL,
		max:       cfg.MaxCached,
		clock:     cfg.Clock,
		cache:     make(map[[sha256.Size]byte]accepted),
	}
	if r.ttl <= 0 {
		r.ttl = DefaultCacheTTL
	}
	if r.max <= 0 {
		r.max = DefaultMaxCached
	}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	lim, burst := cfg.Rate, cfg.Burst
	if lim <= 0 {
		lim = DefaultRate
	}
	if burst <= 0 {
		burst = DefaultBurst
	}
	r.limit = rate.NewLimiter(lim, burst)
	return r, nil
}

// Authenticate returns the name of the activator pod token is bound to. It
// asks the API server unless it accepted the same token within the cache
// TTL. A token the API server cannot be asked about now (the review rate
// is spent, or the API server did not answer) is an error wrapping
// collector.ErrRetryLater; a token it refuses, of another account, or not
// bound to a pod, is refused.
func (r *Reviewer) Authenticate(ctx context.Context, token string) (string, error) {
	if token == "" || len(token) > MaxTokenLength {
		return "", fmt.Errorf("a token of %d bytes cannot be a service-account token", len(token))
	}
	sum := sha256.Sum256([]byte(token))
	now := r.clock.Now()
	r.mu.Lock()
	a, ok := r.cache[sum]
	r.mu.Unlock()
	if ok && now.Before(a.until) {
		return a.pod, nil
	}
	if !r.limit.AllowN(now, 1) {
		return "", fmt.Errorf("token reviews: more than %v per second asked: %w", r.limit.Limit(), collector.ErrRetryLater)
	}
	tr, err := r.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: r.audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		if apierrors.IsForbidden(err) {
			return "", fmt.Errorf("token review: %w (the autoscaler's account needs create on tokenreviews.authentication.k8s.io): %w", err, collector.ErrRetryLater)
		}
		return "", fmt.Errorf("token review: %w: %w", err, collector.ErrRetryLater)
	}
	pod, err := r.judge(tr.Status)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cache) >= r.max {
		r.sweepLocked(now)
	}
	if len(r.cache) < r.max {
		r.cache[sum] = accepted{pod: pod, until: now.Add(r.ttl)}
	}
	return pod, nil
}

// judge reads a review's verdict: authenticated, for the activators'
// account, bound to one pod.
func (r *Reviewer) judge(st authenticationv1.TokenReviewStatus) (string, error) {
	switch {
	case !st.Authenticated:
		return "", fmt.Errorf("the API server did not authenticate the token: %s", cmp.Or(st.Error, "no reason given"))
	case st.User.Username != r.username:
		return "", fmt.Errorf("the token is %q's, not the activators' (%s)", st.User.Username, r.username)
	case len(r.audiences) > 0 && !slices.ContainsFunc(st.Audiences, func(a string) bool { return slices.Contains(r.audiences, a) }):
		return "", fmt.Errorf("the token is for audiences %v, not %v", st.Audiences, r.audiences)
	}
	pods := st.User.Extra[PodNameExtra]
	if len(pods) != 1 || pods[0] == "" {
		return "", fmt.Errorf("the token is not bound to one pod (extra %s: %v); activators present the token the kubelet mounts, which is", PodNameExtra, pods)
	}
	return pods[0], nil
}

// sweepLocked drops expired entries; if none expired, all of them: the
// next connections ask again, within the review rate.
func (r *Reviewer) sweepLocked(now time.Time) {
	n := len(r.cache)
	for k, a := range r.cache {
		if !now.Before(a.until) {
			delete(r.cache, k)
		}
	}
	if len(r.cache) == n {
		clear(r.cache)
	}
}
