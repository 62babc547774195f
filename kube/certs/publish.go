package certs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/swell-run/swell/kube"
)

// fieldManager names Swell as the writer of the CA bundles.
const fieldManager = "swell"

// webhookConfig is one kind of webhook configuration, read and patched.
type webhookConfig struct {
	kind string
	// get returns the name and caBundle of each webhook of the
	// configuration, in order.
	get   func(ctx context.Context, name string) (names []string, bundles [][]byte, err error)
	patch func(ctx context.Context, name string, patch []byte) error
}

// namesAndBundles lists the name and CA bundle of each webhook, in order.
func namesAndBundles[W any](webhooks []W, of func(W) (string, []byte)) ([]string, [][]byte) {
	names, bundles := make([]string, len(webhooks)), make([][]byte, len(webhooks))
	for i, w := range webhooks {
		names[i], bundles[i] = of(w)
	}
	return names, bundles
}

func (m *Manager) webhookConfigs() []webhookConfig {
	adm := m.client.AdmissionregistrationV1()
	return []webhookConfig{
		{
			kind: "MutatingWebhookConfiguration",
			get: func(ctx context.Context, name string) ([]string, [][]byte, error) {
				c, err := adm.MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return nil, nil, err
				}
				names, bundles := namesAndBundles(c.Webhooks, func(w admissionregistrationv1.MutatingWebhook) (string, []byte) {
					return w.Name, w.ClientConfig.CABundle
				})
				return names, bundles, nil
			},
			patch: func(ctx context.Context, name string, patch []byte) error {
				_, err := adm.MutatingWebhookConfigurations().Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
				return err
			},
		},
		{
			kind: "ValidatingWebhookConfiguration",
			get: func(ctx context.Context, name string) ([]string, [][]byte, error) {
				c, err := adm.ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return nil, nil, err
				}
				names, bundles := namesAndBundles(c.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) (string, []byte) {
					return w.Name, w.ClientConfig.CABundle
				})
				return names, bundles, nil
			},
			patch: func(ctx context.Context, name string, patch []byte) error {
				_, err := adm.ValidatingWebhookConfigurations().Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
				return err
			},
		},
	}
}

// publish makes bundle the caBundle of every webhook of both webhook
// configurations and the content of the CA ConfigMap. It reports whether
// every configuration that exists now, and the ConfigMap, hold it; a
// configuration that does not exist yet is no error (its creation is a
// change Run sees).
//
// It patches with a JSON patch that sets only the caBundle of the webhooks
// that differ, each guarded by a test of the webhook's name, so it never
// touches another field, not even one this client does not know; a patch
// that raced with another change to the list is read and made again.
func (m *Manager) publish(ctx context.Context, bundle []byte) (bool, error) {
	var errs []error
	for _, wc := range m.webhookConfigs() {
		err := retry.OnError(retry.DefaultRetry, retriable, func() error {
			names, bundles, err := wc.get(ctx, m.webhookName)
			if err != nil {
				return err
			}
			patch, n := caBundlePatch(names, bundles, bundle)
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
	if err := m.publishConfigMap(ctx, bundle); err != nil {
		errs = append(errs, err)
	}
	return len(errs) == 0, errors.Join(errs...)
}

// publishConfigMap makes bundle the CA ConfigMap's kube.CAConfigMapKey,
// creating the ConfigMap if it is absent. Its other keys stay.
func (m *Manager) publishConfigMap(ctx context.Context, bundle []byte) error {
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
				Data: map[string]string{kube.CAConfigMapKey: string(bundle)},
			}, metav1.CreateOptions{FieldManager: fieldManager})
			if err == nil {
				m.log.Info("created the CA ConfigMap", zap.String("configMap", m.namespace+"/"+m.caConfigMap))
			}
			return err
		}
		if err != nil {
			return err
		}
		if cm.Data[kube.CAConfigMapKey] == string(bundle) {
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

// caBundlePatch is the JSON patch setting bundle as the caBundle of each
// webhook (named names, holding bundles) that does not have it yet, and how
// many webhooks it changes.
func caBundlePatch(names []string, bundles [][]byte, bundle []byte) ([]byte, int) {
	var ops []patchOp
	for i, name := range names {
		if bytes.Equal(bundles[i], bundle) {
			continue
		}
		at := "/webhooks/" + strconv.Itoa(i)
		ops = append(ops,
			patchOp{Op: "test", Path: at + "/name", Value: name},
			patchOp{Op: "add", Path: at + "/clientConfig/caBundle", Value: bundle}, // base64 in JSON, as the API has it
		)
	}
	if len(ops) == 0 {
		return nil, 0
	}
	b, _ := json.Marshal(ops) // strings and bytes always marshal
	return b, len(ops) / 2
}
