package e2e

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestRBACDenies(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const sa = "reader"

	if _, err := e.cs.CoreV1().ServiceAccounts(e.ns).Create(t.Context(), &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: sa},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ServiceAccount: %v", err)
	}
	// The admin may impersonate; the apiserver adds the ServiceAccount's
	// groups to the impersonated user.
	cfg := rest.CopyConfig(e.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("system:serviceaccount:%s:%s", e.ns, sa)}
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	secrets := as.CoreV1().Secrets(e.ns)

	if _, err := secrets.List(t.Context(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("list Secrets as %s without a RoleBinding: %v, want Forbidden", cfg.Impersonate.UserName, err)
	}

	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "secret-reader"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""},
			Resources: []string{"secrets"},
			Verbs:     []string{"get", "list"},
		}},
	}
	if _, err := e.cs.RbacV1().Roles(e.ns).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Role: %v", err)
	}
	if _, err := e.cs.RbacV1().RoleBindings(e.ns).Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "secret-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: e.ns, Name: sa}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create RoleBinding: %v", err)
	}

	// The authorizer reads RBAC objects from an informer: the grant takes
	// effect shortly after it is stored.
	e.eventually("list Secrets allowed once bound", func(ctx context.Context) error {
		_, err := secrets.List(ctx, metav1.ListOptions{})
		return err
	})
	// What the Role does not grant stays denied.
	if _, err := secrets.Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "written"},
	}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("create a Secret with only get and list granted: %v, want Forbidden", err)
	}
	if _, err := as.CoreV1().Secrets(metav1.NamespaceSystem).List(t.Context(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list Secrets of %s with a RoleBinding in %s only: %v, want Forbidden", metav1.NamespaceSystem, e.ns, err)
	}
}
