package certs

import (
	"bytes"
	"cmp"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/retry"

	"github.com/swell-run/swell/kube"
)

// fieldManager names Swell as the writer of the CA bundles.
const fieldManager = "swell"

// webhookConfig is one kind of webhook configuration, read and patched.
type webhookConfig struct {
	kind  string
	get   func(ctx context.Context, name string) (webhooks, error)
	patch func(ctx context.Context, name string, patch []byte) error
}

// webhooks is what publishing reads of a webhook configuration: its
// resourceVersion, and the name and caBundle of each webhook, in order.
type webhooks struct {
	resourceVersion string
	names           []string
	bundles         [][]byte
}

// webhooksOf reads the resourceVersion and each webhook's name and CA
// bundle, in order.
func webhooksOf[W any](resourceVersion string, list []W, of func(W) (string, []byte)) webhooks {
	w := webhooks{resourceVersion: resourceVersion, names: make([]string, len(list)), bundles: make([][]byte, len(list))}
	for i, x := range list {
		w.names[i], w.bundles[i] = of(x)
	}
	return w
}

func (m *Manager) webhookConfigs() []webhookConfig {
	adm := m.client.AdmissionregistrationV1()
	return []webhookConfig{
		{
			kind: "MutatingWebhookConfiguration",
			get: func(ctx context.Context, name string) (webhooks, error) {
				c, err := adm.MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return webhooks{}, err
				}
				return webhooksOf(c.ResourceVersion, c.Webhooks, func(w admissionregistrationv1.MutatingWebhook) (string, []byte) {
					return w.Name, w.ClientConfig.CABundle
				}), nil
			},
			patch: func(ctx context.Context, name string, patch []byte) error {
				_, err := adm.MutatingWebhookConfigurations().Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
				return err
			},
		},
		{
			kind: "ValidatingWebhookConfiguration",
			get: func(ctx context.Context, name string) (webhooks, error) {
				c, err := adm.ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return webhooks{}, err
				}
				return webhooksOf(c.ResourceVersion, c.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) (string, []byte) {
					return w.Name, w.ClientConfig.CABundle
				}), nil
			},
			patch: func(ctx context.Context, name string, patch []byte) error {
				_, err := adm.ValidatingWebhookConfigurations().Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
				return err
			},
		},
	}
}

// publish makes the caBundle of every webhook of both webhook
// configurations, and the content of the CA ConfigMap, hold the CAs of
// ours (the Secret's bundle) merged with what each holds already (see
// mergeBundle), merging again from what it reads at every attempt. It
// reports whether every configuration that exists now, and the ConfigMap,
// hold ours; a configuration that does not exist yet is no error (its
// creation is a change Run sees).
//
// It patches with a JSON patch that sets only the caBundle of the webhooks
// that differ, each guarded by a test of the webhook's name, so it never
// touches another field, not even one this client does not know. The patch
// also carries the resourceVersion read, which makes the API server refuse
// it with a Conflict if the configuration changed since: a patch computed
// from a bundle another replica has since rewritten would undo that write.
// A refused patch is read, merged and made again.
func (m *Manager) publish(ctx context.Context, ours []*x509.Certificate, now time.Time) (bool, error) {
	merge := func(published []byte) []byte { return mergeBundle(published, ours, now) }
	var errs []error
	for _, wc := range m.webhookConfigs() {
		err := retry.OnError(retry.DefaultRetry, retriable, func() error {
			w, err := wc.get(ctx, m.webhookName)
			if err != nil {
				return err
			}
			patch, n := caBundlePatch(w, merge)
			if n == 0 {
				return nil
			}
			if err := wc.patch(ctx, m.webhookName, patch); err != nil {
				return err
			}
			m.log.Info("patched the CA bundle into the webhook configuration", zap.String("kind", wc.kind), zap.String("name", m.webhookName), zap.Int("webhooks", n))
			return nil
		})
		switch {
		case apierrors.IsNotFound(err):
			m.log.Debug("no webhook configuration to patch yet", zap.String("kind", wc.kind), zap.String("name", m.webhookName))
		case err != nil:
			errs = append(errs, fmt.Errorf("patch the CA bundle into %s %s: %w", wc.kind, m.webhookName, err))
		}
	}
	if err := m.publishConfigMap(ctx, merge); err != nil {
		errs = append(errs, err)
	}
	return len(errs) == 0, errors.Join(errs...)
}

// publishConfigMap sets the CA ConfigMap's kube.CAConfigMapKey to merge of
// what it holds, creating the ConfigMap if it is absent. Its other keys
// stay. An update that another write beat is refused (the resourceVersion
// read is no longer current), and read, merged and made again.
func (m *Manager) publishConfigMap(ctx context.Context, merge func(published []byte) []byte) error {
	cms := m.client.CoreV1().ConfigMaps(m.namespace)
	err := retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)
	}, func() error {
		cm, err := cms.Get(ctx, m.caConfigMap, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cms.Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{
					Name: m.caConfigMap, Namespace: m.namespace,
					Labels: map[string]string{kube.LabelManagedBy: kube.ManagedBy},
				},
				Data: map[string]string{kube.CAConfigMapKey: string(merge(nil))},
			}, metav1.CreateOptions{FieldManager: fieldManager})
			if err == nil {
				m.log.Info("created the CA ConfigMap", zap.String("configMap", m.namespace+"/"+m.caConfigMap))
			}
			return err
		}
		if err != nil {
			return err
		}
		published := cm.Data[kube.CAConfigMapKey]
		bundle := merge([]byte(published))
		if published == string(bundle) {
			return nil
		}
		cm = cm.DeepCopy()
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[kube.CAConfigMapKey] = string(bundle)
		if _, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: fieldManager}); err == nil {
			m.log.Info("updated the CA ConfigMap", zap.String("configMap", m.namespace+"/"+m.caConfigMap))
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("publish the CA bundle in ConfigMap %s/%s: %w", m.namespace, m.caConfigMap, err)
	}
	return nil
}

// mergeBundle is the CA bundle to publish in place of published, at now:
// the CAs of ours (the Secret's bundle as this replica read it), and those
// of published that are newer than all of ours, all but what has expired.
// A replica that read the Secret before another rotated the CA thus never
// takes the new CA away from the clients that must trust what it signs.
// The rest of published goes: CAs no newer than ours that ours do not
// hold, which the Secret let expire or dropped when it started over with a
// new CA (so deleting the Secret to be rid of a CA still works), and
// whatever is not a CA certificate.
//
// The order is newest first, by NotBefore then serial number: the same for
// every replica that holds the same CAs, so that they write the same
// bytes, and none writes again what another wrote.
func mergeBundle(published []byte, ours []*x509.Certificate, now time.Time) []byte {
	var newest time.Time
	for _, c := range ours {
		if c.NotBefore.After(newest) {
			newest = c.NotBefore
		}
	}
	cas := slices.Clone(ours)
	for rest := published; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type != cert.CertificateBlockType {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil || !c.BasicConstraintsValid || !c.IsCA || !c.NotBefore.After(newest) {
			continue
		}
		cas = append(cas, c)
	}
	cas = slices.DeleteFunc(cas, func(c *x509.Certificate) bool { return !now.Before(c.NotAfter) })
	slices.SortFunc(cas, func(a, b *x509.Certificate) int {
		return cmp.Or(b.NotBefore.Compare(a.NotBefore), b.SerialNumber.Cmp(a.SerialNumber), bytes.Compare(a.Raw, b.Raw))
	})
	cas = slices.CompactFunc(cas, func(a, b *x509.Certificate) bool { return bytes.Equal(a.Raw, b.Raw) })
	b, _ := cert.EncodeCertificates(cas...) // writing PEM to memory does not fail
	return b
}

// retriable says whether a failed read or patch of a webhook configuration
// may succeed if made again at once: not if the configuration is gone or
// Swell may not touch it.
func retriable(err error) bool {
	return !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// patchOp is one JSON patch (RFC 6902) operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// caBundlePatch is the JSON patch that sets the caBundle of each webhook of
// w to merge of it, where that differs, made at w's resourceVersion; and how
// many webhooks it changes.
func caBundlePatch(w webhooks, merge func(published []byte) []byte) ([]byte, int) {
	// "add" sets a member whether or not it is there.
	ops := []patchOp{{Op: "add", Path: "/metadata/resourceVersion", Value: w.resourceVersion}}
	for i, name := range w.names {
		bundle := merge(w.bundles[i])
		if bytes.Equal(w.bundles[i], bundle) {
			continue
		}
		at := "/webhooks/" + strconv.Itoa(i)
		ops = append(ops,
			patchOp{Op: "test", Path: at + "/name", Value: name},
			patchOp{Op: "add", Path: at + "/clientConfig/caBundle", Value: bundle}, // base64 in JSON, as the API has it
		)
	}
	if len(ops) == 1 {
		return nil, 0
	}
	b, _ := json.Marshal(ops) // strings and bytes always marshal
	return b, (len(ops) - 1) / 2
}
