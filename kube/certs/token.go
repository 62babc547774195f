package certs

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/swell-run/swell/kube"
)

// tokenBytes is how much randomness a new token holds.
const tokenBytes = 32

// EnsureToken returns the token under key in the Secret namespace/name,
// creating the Secret with a new token if it is absent and adding a new
// token if the Secret has none under key (its other keys stay). A token is
// 32 bytes from crypto/rand in standard base64. Replicas calling it at once
// all return the token of the one that wrote first.
func EnsureToken(ctx context.Context, client kubernetes.Interface, namespace, name, key string) (string, error) {
	if client == nil {
		return "", errors.New("certs: no Kubernetes client")
	}
	for _, c := range []struct {
		what, value string
		check       func(string) []string
	}{
		{"namespace", namespace, validation.IsDNS1123Label},
		{"Secret name", name, validation.IsDNS1123Subdomain},
		{"Secret key", key, validation.IsConfigMapKey},
	} {
		if errs := c.check(c.value); len(errs) > 0 {
			return "", fmt.Errorf("certs: token %s %q is not valid: %s", c.what, c.value, strings.Join(errs, "; "))
		}
	}
	secrets := client.CoreV1().Secrets(namespace)
	for range maxSteps {
		s, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			token := newToken()
			_, err = secrets.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{
					Name:      name,
					Namespace: namespace,
					Labels:    map[string]string{kube.LabelManagedBy: kube.ManagedBy},
				},
				Type: corev1.SecretTypeOpaque,
				Data: map[string][]byte{key: []byte(token)},
			}, metav1.CreateOptions{})
			switch {
			case apierrors.IsAlreadyExists(err):
				continue // another replica was first: take its token
			case err != nil:
				return "", fmt.Errorf("create token Secret %s/%s: %w", namespace, name, err)
			}
			return token, nil
		}
		if err != nil {
			return "", fmt.Errorf("read token Secret %s/%s: %w", namespace, name, err)
		}
		if t := s.Data[key]; len(t) > 0 {
			return string(t), nil
		}
		token := newToken()
		s = s.DeepCopy()
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		s.Data[key] = []byte(token)
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
		switch {
		case apierrors.IsConflict(err):
			continue // changed meanwhile: look again
		case err != nil:
			return "", fmt.Errorf("add key %s to token Secret %s/%s: %w", key, namespace, name, err)
		}
		return token, nil
	}
	return "", fmt.Errorf("token Secret %s/%s still changing after %d attempts", namespace, name, maxSteps)
}

func newToken() string {
	b := make([]byte, tokenBytes)
	_, _ = rand.Read(b) // never fails: crypto/rand crashes the program instead
	return base64.StdEncoding.EncodeToString(b)
}
