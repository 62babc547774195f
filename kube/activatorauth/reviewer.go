// Package activatorauth tells the autoscaler which activator is calling: it
// checks the service-account token an activator presents with the
// TokenReview API and returns the pod the token is bound to. The endpoint
// then accepts only a hello naming that pod, so a compromised activator
// cannot speak for another, and a token ends with its pod or its expiry
// (the kubelet replaces it well before; the activator reads it again at
// each connection). Nothing is shared between activators, and nothing is
// to rotate by hand.
//
// A token is worth reviewing only from an activator pod's address, and
// counts only from the address of the pod it is bound to: anything else
// is refused without asking the API server, so that no pod can spend the
// reviews the activators need, nor use a token taken from one.
package activatorauth

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
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
	// DefaultSourceRate and DefaultSourceBurst bound them for each
	// activator pod: one (a compromised one) cannot spend the others'.
	// An activator asks once per connection, and connects to a few
	// autoscaler replicas at most.
	DefaultSourceRate  = 1
	DefaultSourceBurst = 5
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
	// Activators tells which activator pod holds an address. A token is
	// reviewed only from an activator pod's address and accepted only
	// from its own pod's. Nil checks no address (tests, and callers that
	// reach the autoscaler through a proxy).
	Activators Activators
	// CacheTTL, MaxCached, Rate, Burst, SourceRate and SourceBurst: see
	// the defaults.
	CacheTTL           time.Duration
	MaxCached          int
	Rate, SourceRate   rate.Limit
	Burst, SourceBurst int
	// Clock tells the time (default the real clock).
	Clock clock.PassiveClock
}

// Activators tells which activator pod holds an address.
type Activators interface {
	// ActivatorAt returns the name of the activator pod at ip; false if
	// none is known there.
	ActivatorAt(ip netip.Addr) (pod string, ok bool)
}

// ErrNotAnActivator refuses a caller whose address is no activator pod's
// (as far as the autoscaler knows yet: a pod that has just started may
// not be known for a moment, so it wraps collector.ErrRetryLater).
var ErrNotAnActivator = collector.ErrUnknownCaller

// A Reviewer is a collector.Authenticator backed by the TokenReview API.
// It is safe for concurrent use.
type Reviewer struct {
	client     kubernetes.Interface
	username   string
	audiences  []string
	ttl        time.Duration
	max        int
	clock      clock.PassiveClock
	limit      *rate.Limiter
	activators Activators
	srcRate    rate.Limit
	srcBurst   int

	mu    sync.Mutex
	cache map[[sha256.Size]byte]accepted
	// perPod limits each activator pod's reviews; entries idle for a
	// minute are dropped.
	perPod map[string]*sourceLimit
}

type sourceLimit struct {
	lim  *rate.Limiter
	last time.Time
}

// accepted is a token accepted for pod: taken without a review until
// until, and remembered as pod's until known, so that once no activator
// is at the address it comes from, it is refused rather than told to
// retry (its pod has gone, its process not).
type accepted struct {
	pod          string
	until, known time.Time
}

// rememberedFor is how long past its review an accepted token is known
// as its pod's: past the longest a connection goes between two checks.
const rememberedFor = 10 * time.Minute

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
		perPod:    map[string]*sourceLimit{},

		activators: cfg.Activators,
		srcRate:    cmp.Or(cfg.SourceRate, DefaultSourceRate),
		srcBurst:   cmp.Or(cfg.SourceBurst, DefaultSourceBurst),
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

// Authenticate returns the name of the activator pod token is bound to,
// presented from address from. It asks the API server unless it accepted
// the same token within the cache TTL. A token the API server cannot be
// asked about now (the review rate is spent, or the API server did not
// answer), or one from an address where no activator pod is known (yet),
// is an error wrapping collector.ErrRetryLater; a token it refuses, of
// another account, not bound to a pod, not bound to the pod at from, or
// that is not a JWT, is refused.
func (r *Reviewer) Authenticate(ctx context.Context, from netip.Addr, token string) (string, error) {
	if err := jwtShaped(token); err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(token))
	now := r.clock.Now()
	r.mu.Lock()
	a, ok := r.cache[sum]
	r.mu.Unlock()
	at := ""
	if r.activators != nil {
		var here bool
		if at, here = r.activators.ActivatorAt(from.Unmap()); !here {
			if ok && now.Before(a.known) {
				return "", fmt.Errorf("activator %q's token comes from %s, where no activator is (any more)", a.pod, from)
			}
			return "", fmt.Errorf("%s: %w", from, ErrNotAnActivator)
		}
	}
	if ok && now.Before(a.until) {
		return a.pod, r.from(a.pod, at, from)
	}
	if !r.allow(at, now) {
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
	if len(r.cache) >= r.max {
		r.sweepLocked(now)
	}
	if len(r.cache) < r.max {
		r.cache[sum] = accepted{pod: pod, until: now.Add(r.ttl), known: now.Add(max(r.ttl, rememberedFor))}
	}
	r.mu.Unlock()
	return pod, r.from(pod, at, from)
}

// from refuses a token bound to pod presented from the address of
// another activator pod, at: a token counts only from its own pod.
func (r *Reviewer) from(pod, at string, addr netip.Addr) error {
	if r.activators == nil || pod == at {
		return nil
	}
	return fmt.Errorf("the token is bound to activator %q but comes from %s, activator %q's address", pod, addr, at)
}

// allow takes a review from the budget of the activator pod at (when
// addresses are checked) and from the global one.
func (r *Reviewer) allow(at string, now time.Time) bool {
	if r.activators != nil {
		r.mu.Lock()
		sl := r.perPod[at]
		if sl == nil {
			for name, l := range r.perPod {
				if now.Sub(l.last) > time.Minute {
					delete(r.perPod, name)
				}
			}
			sl = &sourceLimit{lim: rate.NewLimiter(r.srcRate, r.srcBurst)}
			r.perPod[at] = sl
		}
		sl.last = now
		ok := sl.lim.AllowN(now, 1)
		r.mu.Unlock()
		if !ok {
			return false
		}
	}
	return r.limit.AllowN(now, 1)
}

// jwtShaped refuses, unasked, what cannot be a service-account token: a
// JWT in compact form, three base64url parts, the first a JSON object.
func jwtShaped(token string) error {
	if token == "" || len(token) > MaxTokenLength {
		return fmt.Errorf("a token of %d bytes cannot be a service-account token", len(token))
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return fmt.Errorf("a token of %d parts cannot be a service-account token (a JWT has 3)", len(parts))
	}
	for _, p := range parts {
		if p == "" || strings.IndexFunc(p, func(c rune) bool {
			return !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_')
		}) >= 0 {
			return errors.New("a token with a part that is not base64url cannot be a service-account token")
		}
	}
	header, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil || !json.Valid(header) || header[0] != '{' {
		return errors.New("a token whose header is not a JSON object cannot be a service-account token")
	}
	return nil
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

// sweepLocked drops the entries no longer known; if none, those no longer
// accepted; if none, all of them: the next connections ask again, within
// the review rate.
func (r *Reviewer) sweepLocked(now time.Time) {
	n := len(r.cache)
	for _, by := range []func(accepted) time.Time{
		func(a accepted) time.Time { return a.known },
		func(a accepted) time.Time { return a.until },
	} {
		for k, a := range r.cache {
			if !now.Before(by(a)) {
				delete(r.cache, k)
			}
		}
		if len(r.cache) < n {
			return
		}
	}
	clear(r.cache)
}
