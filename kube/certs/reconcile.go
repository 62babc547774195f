package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/swell-run/swell/kube"
)

// maxSteps bounds the writes of one check. A check writes at most three
// times (repair, CA rotation, serving certificate); each write another
// replica beats costs a step more.
const maxSteps = 8

// reconcile moves the Secret and the webhook configurations one check
// forward, in steps: each step reads the Secret (or takes what the last
// write returned), makes at most one change to it and starts over, until
// nothing is left to change. In order:
//
//  1. an absent Secret is created; a CA part that does not parse, has no
//     key or has expired is replaced with a new CA and serving certificate;
//     a serving certificate that does not parse, does not match its key or
//     its names, has expired or is not signed by a CA of the bundle is
//     reissued;
//  2. the certificate is loaded, so a valid one is served at once;
//  3. a CA due for renewal is replaced, the old one kept in the bundle;
//     expired CAs leave the bundle;
//  4. the bundle is patched into the webhook configurations and written to
//     the CA ConfigMap, with any newer CA they hold kept (see mergeBundle);
//  5. a serving certificate due for renewal, or signed by an older CA, is
//     reissued by the current CA, but a change of CA only once the
//     configurations and the ConfigMap hold the bundle, so that no caller
//     is ever presented a certificate it does not trust.
//
// A write that fails with AlreadyExists or Conflict means another replica
// wrote first: the next step reads its Secret and decides again.
func (m *Manager) reconcile(ctx context.Context) error {
	secrets := m.client.CoreV1().Secrets(m.namespace)
	var s *corev1.Secret // as last read or written; nil: read it
	for range maxSteps {
		if s == nil {
			got, err := secrets.Get(ctx, m.secretName, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				s, err = m.create(ctx)
				if apierrors.IsAlreadyExists(err) {
					m.log.Debug("another replica created the Secret first")
					continue
				}
				if err != nil {
					return err
				}
				continue
			case err != nil:
				return fmt.Errorf("read Secret %s/%s: %w", m.namespace, m.secretName, err)
			}
			s = got
		}
		now := m.clock.Now()

		auth, err := parseAuthority(s.Data, now)
		if err != nil {
			m.log.Warn("webhook CA unusable; replacing the Secret's CA and serving certificate", zap.String("why", err.Error()))
			if auth, err = newAuthority(now, m.caValidity); err != nil {
				return err
			}
			s, err = m.write(ctx, s, auth, serving{}, "created a new CA and serving certificate")
			if err != nil {
				return err
			}
			continue
		}
		srv, signer, err := parseServing(s.Data, auth.bundle, m.names, now)
		if err != nil {
			m.log.Warn("webhook serving certificate unusable; reissuing it", zap.String("why", err.Error()))
			s, err = m.write(ctx, s, auth, serving{}, "reissued the serving certificate")
			if err != nil {
				return err
			}
			continue
		}
		m.load(srv, auth)

		if !now.Before(renewAt(auth.cert)) {
			next, err := newAuthority(now, m.caValidity, auth.bundle...)
			if err != nil {
				return err
			}
			next.tidy(now)
			// The serving certificate stays: the new CA signs one only once
			// callers trust it.
			s, err = m.write(ctx, s, next, srv, fmt.Sprintf("rotated the CA (the previous one expires at %s)", auth.cert.NotAfter.UTC().Format(time.RFC3339)))
			if err != nil {
				return err
			}
			continue
		}
		tidied := auth
		tidied.tidy(now)
		if bundle := tidied.encodeBundle(); !bytes.Equal(bundle, s.Data[keyCABundle]) {
			s, err = m.write(ctx, s, tidied, srv, "removed expired or foreign certificates from the CA bundle")
			if err != nil {
				return err
			}
			continue
		}

		published, perr := m.publish(ctx, auth.bundle, now)
		newCA := signer != auth.cert
		if (newCA || !now.Before(renewAt(srv.cert))) && (!newCA || published) {
			s, err = m.write(ctx, s, auth, serving{}, "renewed the serving certificate")
			if err != nil {
				return err
			}
			continue
		}
		return perr
	}
	return fmt.Errorf("Secret %s/%s still changing after %d steps; other writers are racing", m.namespace, m.secretName, maxSteps)
}

// create creates the Secret with a new CA and serving certificate.
func (m *Manager) create(ctx context.Context) (*corev1.Secret, error) {
	now := m.clock.Now()
	auth, err := newAuthority(now, m.caValidity)
	if err != nil {
		return nil, err
	}
	srv, err := auth.issue(m.names, now, m.validity)
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      m.secretName,
			Namespace: m.namespace,
			Labels:    map[string]string{kube.LabelManagedBy: kube.ManagedBy},
		},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{},
	}
	if err := encode(s.Data, auth, srv); err != nil {
		return nil, err
	}
	got, err := m.client.CoreV1().Secrets(m.namespace).Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		return nil, fmt.Errorf("create Secret %s/%s: %w", m.namespace, m.secretName, err)
	}
	m.log.Info("created the webhook certificate Secret", certFields(srv.cert)...)
	return got, nil
}

// write updates s, read at its resourceVersion, with auth and srv; a zero
// srv is issued by auth now. It returns the Secret written, or nil (and no
// error) when another writer got in first.
func (m *Manager) write(ctx context.Context, s *corev1.Secret, auth authority, srv serving, what string) (*corev1.Secret, error) {
	if srv.cert == nil {
		var err error
		if srv, err = auth.issue(m.names, m.clock.Now(), m.validity); err != nil {
			return nil, err
		}
	}
	next := s.DeepCopy()
	if next.Data == nil {
		next.Data = map[string][]byte{}
	}
	if next.Labels == nil {
		next.Labels = map[string]string{}
	}
	next.Labels[kube.LabelManagedBy] = kube.ManagedBy
	if err := encode(next.Data, auth, srv); err != nil {
		return nil, err
	}
	got, err := m.client.CoreV1().Secrets(m.namespace).Update(ctx, next, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err):
		m.log.Debug("another replica changed the Secret first; reading it again", zap.String("dropped", what))
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("update Secret %s/%s (%s): %w", m.namespace, m.secretName, what, err)
	}
	m.log.Info("webhook certificate Secret: "+what, certFields(srv.cert)...)
	return got, nil
}

// load makes srv the certificate served and auth's bundle the one given out.
func (m *Manager) load(srv serving, auth authority) {
	bundle := auth.encodeBundle()
	if cur := m.cur.Load(); cur != nil && bytes.Equal(cur.cert.Leaf.Raw, srv.cert.Raw) && bytes.Equal(cur.bundle, bundle) {
		return
	}
	m.cur.Store(&loaded{
		cert:   &tls.Certificate{Certificate: [][]byte{srv.cert.Raw}, PrivateKey: srv.key, Leaf: srv.cert},
		bundle: bundle,
	})
	m.log.Info("loaded the webhook serving certificate", certFields(srv.cert)...)
}

func certFields(c *x509.Certificate) []zap.Field {
	return []zap.Field{
		zap.String("serial", c.SerialNumber.Text(16)),
		zap.String("issuer", c.Issuer.CommonName),
		zap.Time("notAfter", c.NotAfter),
	}
}
