package certs

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/swell-run/swell/kube"
)

func ensureToken(t *testing.T, c *fake.Clientset) string {
	t.Helper()
	tok, err := EnsureToken(context.Background(), c, ns, kube.ActivatorTokenSecret, kube.ActivatorTokenKey)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func tokenSecret(data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: kube.ActivatorTokenSecret, Namespace: ns}, Data: data}
}

func TestEnsureTokenCreatesThenReuses(t *testing.T) {
	c := fake.NewClientset()
	tok := ensureToken(t, c)
	if raw, err := base64.StdEncoding.DecodeString(tok); err != nil || len(raw) != 32 {
		t.Errorf("token %q: %d bytes, err %v; want 32 bytes in standard base64", tok, len(raw), err)
	}
	s, err := c.CoreV1().Secrets(ns).Get(context.Background(), kube.ActivatorTokenSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Data[kube.ActivatorTokenKey]) != tok || s.Labels[kube.LabelManagedBy] != kube.ManagedBy {
		t.Errorf("Secret data %q labels %v", s.Data, s.Labels)
	}
	if again := ensureToken(t, c); again != tok {
		t.Errorf("second call returned %q, want the first token %q", again, tok)
	}
	if another := ensureToken(t, fake.NewClientset()); another == tok {
		t.Error("two Secrets got the same token")
	}
}

func TestEnsureTokenFillsMissingKey(t *testing.T) {
	for _, data := range []map[string][]byte{nil, {"other": []byte("x")}, {"other": []byte("x"), kube.ActivatorTokenKey: {}}} {
		c := fake.NewClientset(tokenSecret(data))
		tok := ensureToken(t, c)
		s, _ := c.CoreV1().Secrets(ns).Get(context.Background(), kube.ActivatorTokenSecret, metav1.GetOptions{})
		if len(tok) == 0 || string(s.Data[kube.ActivatorTokenKey]) != tok {
			t.Errorf("from %q: token %q, Secret %q", data, tok, s.Data)
		}
		if data["other"] != nil && string(s.Data["other"]) != "x" {
			t.Errorf("from %q: the other key was lost: %q", data, s.Data)
		}
	}
}

func TestEnsureTokenRaces(t *testing.T) {
	theirs := tokenSecret(map[string][]byte{kube.ActivatorTokenKey: []byte("theirs")})

	// Another replica creates the Secret between this one's read and create.
	c := fake.NewClientset()
	c.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if err := c.Tracker().Create(secretsGVR, theirs, ns); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewAlreadyExists(secretsGVR.GroupResource(), theirs.Name)
	})
	if got := ensureToken(t, c); got != "theirs" {
		t.Errorf("after losing the create: %q, want theirs", got)
	}

	// Another replica fills in the key between this one's read and update.
	c = fake.NewClientset(tokenSecret(nil))
	c.PrependReactor("update", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if err := c.Tracker().Update(secretsGVR, theirs, ns); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewConflict(secretsGVR.GroupResource(), theirs.Name, errors.New("the object has been modified"))
	})
	if got := ensureToken(t, c); got != "theirs" {
		t.Errorf("after losing the update: %q, want theirs", got)
	}
}

func TestEnsureTokenRejects(t *testing.T) {
	c := fake.NewClientset()
	for _, tc := range []struct{ ns, name, key, want string }{
		{"", "s", "k", `namespace ""`},
		{ns, "S!", "k", `Secret name "S!"`},
		{ns, "s", "a/b", `Secret key "a/b"`},
	} {
		_, err := EnsureToken(context.Background(), c, tc.ns, tc.name, tc.key)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("EnsureToken(%q, %q, %q) = %v, want an error with %q", tc.ns, tc.name, tc.key, err, tc.want)
		}
	}
	if _, err := EnsureToken(context.Background(), nil, ns, "s", "k"); err == nil {
		t.Error("no error without a client")
	}
	if n := len(c.Actions()); n != 0 {
		t.Errorf("%d API calls for bad arguments", n)
	}
}
