// Package certs gives the autoscaler's TLS servers (the admission webhooks
// and the activators' endpoint) their certificate without cert-manager: a
// CA and a serving certificate kept in a Secret, renewed before they
// expire, with the CA bundle patched into the webhook configurations and
// published in a ConfigMap for the activators.
//
// Every autoscaler replica runs a Manager. There is no leader: the replicas
// converge on one Secret through optimistic concurrency, each re-reading and
// deciding again when another replica's write got in first. See
// docs/webhook.md, "TLS without cert-manager".
package certs

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation"
	admissioninformers "k8s.io/client-go/informers/admissionregistration/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/kube"
)

// Lifetimes and checks.
const (
	// DefaultCAValidity is how long a CA is valid.
	DefaultCAValidity = 5 * 365 * 24 * time.Hour
	// DefaultCertValidity is how long a serving certificate is valid.
	DefaultCertValidity = 365 * 24 * time.Hour
	// MinValidity is the shortest validity accepted: the last third of a
	// certificate's life must leave room for several checks.
	MinValidity = time.Hour
	// RenewFraction is the part of a certificate's lifetime after which it
	// is renewed (the CA and the serving certificate alike). The rest is
	// the margin for a Swell that is down or cannot write its Secret.
	RenewFraction = 2.0 / 3.0
	// CheckInterval is the longest time between two checks of the Secret
	// and the webhook configurations; a change to either is checked at
	// once.
	CheckInterval = 10 * time.Minute
	// maxBackoff caps the wait before retrying a check that failed.
	maxBackoff = time.Minute
)

// Config says which Secret and webhook configurations a Manager keeps.
type Config struct {
	// Client reaches the API server. Required.
	Client kubernetes.Interface
	// Namespace is Swell's system namespace, where the Secret and the
	// webhook Service are. Required.
	Namespace string
	// SecretName is the Secret holding the CA and the serving
	// certificate; "" means kube.WebhookCertSecret.
	SecretName string
	// ServiceName is the webhooks' Service; "" means kube.WebhookService.
	// The certificate names <svc>, <svc>.<ns>, <svc>.<ns>.svc and
	// <svc>.<ns>.svc.cluster.local.
	ServiceName string
	// OtherServices are more Services of the namespace the certificate
	// names the same way: the autoscaler's, which the activators dial.
	OtherServices []string
	// CAConfigMap is the ConfigMap of the namespace that gets the CA
	// bundle under kube.CAConfigMapKey, for clients other than the API
	// server; "" means kube.CAConfigMap.
	CAConfigMap string
	// WebhookConfiguration names the Mutating- and the
	// ValidatingWebhookConfiguration whose every webhook gets the CA
	// bundle; "" means kube.WebhookConfiguration.
	WebhookConfiguration string
	// CAValidity and CertValidity are the lifetimes of a new CA and of a
	// new serving certificate; 0 means DefaultCAValidity and
	// DefaultCertValidity. A serving certificate never outlives its CA.
	CAValidity, CertValidity time.Duration
	// Clock tells the time; nil means the real clock. If it is also a
	// clock.Clock, Run takes its timers from it.
	Clock clock.PassiveClock
	// Logger gets a line per change and a warning per Secret repaired;
	// nil logs nothing.
	Logger *zap.Logger
}

// A Manager keeps the certificate Secret valid and current, serves its
// certificate, and keeps its CA bundle in the webhook configurations and
// the CA ConfigMap.
type Manager struct {
	client      kubernetes.Interface
	namespace   string
	secretName  string
	webhookName string
	caConfigMap string
	names       []string
	caValidity  time.Duration
	validity    time.Duration
	clock       clock.PassiveClock
	log         *zap.Logger

	cur atomic.Pointer[loaded]
}

// loaded is what the Manager serves.
type loaded struct {
	cert   *tls.Certificate
	bundle []byte
}

// New checks cfg and returns a Manager; Run starts it.
func New(cfg Config) (*Manager, error) {
	if cfg.Client == nil {
		return nil, errors.New("certs: no Kubernetes client (Config.Client)")
	}
	cfg.SecretName = cmp.Or(cfg.SecretName, kube.WebhookCertSecret)
	cfg.ServiceName = cmp.Or(cfg.ServiceName, kube.WebhookService)
	cfg.WebhookConfiguration = cmp.Or(cfg.WebhookConfiguration, kube.WebhookConfiguration)
	cfg.CAConfigMap = cmp.Or(cfg.CAConfigMap, kube.CAConfigMap)
	if cfg.CAValidity == 0 {
		cfg.CAValidity = DefaultCAValidity
	}
	if cfg.CertValidity == 0 {
		cfg.CertValidity = DefaultCertValidity
	}
	for _, c := range []struct {
		what, value string
		check       func(string) []string
		accepted    string
	}{
		{"Namespace", cfg.Namespace, validation.IsDNS1123Label, "a namespace name"},
		{"SecretName", cfg.SecretName, validation.IsDNS1123Subdomain, "a Secret name"},
		{"ServiceName", cfg.ServiceName, validation.IsDNS1035Label, "a Service name"},
		{"WebhookConfiguration", cfg.WebhookConfiguration, validation.IsDNS1123Subdomain, "a webhook configuration name"},
		{"CAConfigMap", cfg.CAConfigMap, validation.IsDNS1123Subdomain, "a ConfigMap name"},
	} {
		if errs := c.check(c.value); len(errs) > 0 {
			return nil, fmt.Errorf("certs: %s %q is not %s: %s", c.what, c.value, c.accepted, strings.Join(errs, "; "))
		}
	}
	if cfg.CAValidity < MinValidity || cfg.CertValidity < MinValidity {
		return nil, fmt.Errorf("certs: CAValidity %v, CertValidity %v; accepted: at least %v each, or 0 for the defaults", cfg.CAValidity, cfg.CertValidity, MinValidity)
	}
	if cfg.CertValidity > cfg.CAValidity {
		return nil, fmt.Errorf("certs: CertValidity %v is longer than CAValidity %v; accepted: at most the CA's validity", cfg.CertValidity, cfg.CAValidity)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	ns := cfg.Namespace
	// The first name is the certificate's common name.
	var names []string
	for _, svc := range append([]string{cfg.ServiceName}, cfg.OtherServices...) {
		if errs := validation.IsDNS1035Label(svc); len(errs) > 0 {
			return nil, fmt.Errorf("certs: OtherServices: %q is not a Service name: %s", svc, strings.Join(errs, "; "))
		}
		if slices.Contains(names, svc+"."+ns+".svc") {
			continue
		}
		names = append(names, svc+"."+ns+".svc", svc, svc+"."+ns, svc+"."+ns+".svc.cluster.local")
	}
	return &Manager{
		client:      cfg.Client,
		namespace:   ns,
		secretName:  cfg.SecretName,
		webhookName: cfg.WebhookConfiguration,
		caConfigMap: cfg.CAConfigMap,
		names:       names,
		caValidity:  cfg.CAValidity,
		validity:    cfg.CertValidity,
		clock:       cfg.Clock,
		log:         cfg.Logger.With(zap.String("secret", ns+"/"+cfg.SecretName)),
	}, nil
}

// GetCertificate returns the newest serving certificate loaded, for
// tls.Config.GetCertificate; an error until the first is loaded.
func (m *Manager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	l := m.cur.Load()
	if l == nil {
		return nil, fmt.Errorf("certs: no webhook certificate loaded yet from Secret %s/%s", m.namespace, m.secretName)
	}
	return l.cert, nil
}

// Ready reports whether a serving certificate is loaded.
func (m *Manager) Ready() bool { return m.cur.Load() != nil }

// CABundle returns the PEM of the CAs that callers should trust, the one
// that signs new certificates first; nil until a certificate is loaded.
func (m *Manager) CABundle() []byte {
	l := m.cur.Load()
	if l == nil {
		return nil
	}
	return append([]byte(nil), l.bundle...)
}

// Run keeps the Secret, the webhook configurations and the CA ConfigMap
// until ctx ends, then returns nil. It checks them at once, at every change
// of any (seen
// through informers restricted to their names), and at least every
// CheckInterval; a check that fails is retried sooner, with a backoff up to
// a minute. Call it once.
func (m *Manager) Run(ctx context.Context) error {
	timers, ok := m.clock.(clock.Clock)
	if !ok {
		timers = clock.RealClock{}
	}
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default: // a check is already pending; it will see this change too
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}
	secretOnly := byName(m.secretName)
	webhookOnly := byName(m.webhookName)
	informers := []cache.SharedIndexInformer{
		coreinformers.NewFilteredSecretInformer(m.client, m.namespace, 0, cache.Indexers{}, secretOnly),
		coreinformers.NewFilteredConfigMapInformer(m.client, m.namespace, 0, cache.Indexers{}, byName(m.caConfigMap)),
		admissioninformers.NewFilteredMutatingWebhookConfigurationInformer(m.client, 0, cache.Indexers{}, webhookOnly),
		admissioninformers.NewFilteredValidatingWebhookConfigurationInformer(m.client, 0, cache.Indexers{}, webhookOnly),
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, inf := range informers {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("certs: watch: %w", err)
		}
		wg.Go(func() { inf.RunWithContext(ctx) })
	}

	failures := 0
	for {
		err := m.reconcile(ctx)
		wait := CheckInterval
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			failures++
			wait = min(time.Second<<min(failures-1, 6), maxBackoff)
			m.log.Warn("webhook certificate check failed; retrying", zap.Error(err), zap.Duration("in", wait))
		default:
			failures = 0
		}
		t := timers.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		case <-kick:
			t.Stop()
		}
	}
}

// byName restricts an informer's list and watch to the object named name.
func byName(name string) func(*metav1.ListOptions) {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	return func(o *metav1.ListOptions) { o.FieldSelector = sel }
}
