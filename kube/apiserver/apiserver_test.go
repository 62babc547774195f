package apiserver

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: one
  cluster: {server: "https://one.example:6443"}
- name: two
  cluster: {server: "https://two.example:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: one
  context: {cluster: one, user: u, namespace: team-a}
- name: two
  context: {cluster: two, user: u}
current-context: one
`

func TestClientConfigFindsAsKubectlDoes(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", path)
	for _, tc := range []struct {
		name                          string
		kubeconfig, context, override string
		host, namespace               string
	}{
		{"current context, from $KUBECONFIG", "", "", "", "https://one.example:6443", "team-a"},
		{"-n", "", "", "team-b", "https://one.example:6443", "team-b"},
		{"--context without a namespace", "", "two", "", "https://two.example:6443", "default"},
		{"--kubeconfig --context -n", path, "two", "team-c", "https://two.example:6443", "team-c"},
	} {
		cc := ClientConfig(tc.kubeconfig, tc.context, tc.override)
		rc, err := cc.ClientConfig()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ns, _, err := cc.Namespace()
		if err != nil || rc.Host != tc.host || ns != tc.namespace {
			t.Errorf("%s: %s in %q (%v), want %s in %q", tc.name, rc.Host, ns, err, tc.host, tc.namespace)
		}
	}
	if _, err := ClientConfig("", "three", "").ClientConfig(); err == nil || clientcmd.IsEmptyConfig(err) {
		t.Errorf("an unknown context: %v, want an error naming it", err)
	}

	// Nothing configured, not in a pod: an empty config, which the caller
	// can tell apart.
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	if _, err := ClientConfig("", "", "").ClientConfig(); !clientcmd.IsEmptyConfig(err) {
		t.Errorf("no kubeconfig: %v, want an empty config", err)
	}
	if _, err := ClientConfig(filepath.Join(t.TempDir(), "none"), "", "").ClientConfig(); err == nil || clientcmd.IsEmptyConfig(err) {
		t.Errorf("a --kubeconfig that is not there: %v, want an error naming it", err)
	}
}
