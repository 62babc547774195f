package pki

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

var now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func generate(t *testing.T) Files {
	t.Helper()
	f, err := Generate(Options{Dir: t.TempDir(), Server: "https://127.0.0.1:6443", NodeName: "swell-node", NodeIP: "198.18.0.1", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := pem.Decode(b)
	if p == nil || p.Type != "CERTIFICATE" {
		t.Fatalf("%s: not a PEM certificate", path)
	}
	c, err := x509.ParseCertificate(p.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func verify(t *testing.T, f Files, path string, usage x509.ExtKeyUsage, dnsName string) *x509.Certificate {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, f.CACert))
	c := readCert(t, path)
	_, err := c.Verify(x509.VerifyOptions{
		Roots: roots, DNSName: dnsName, CurrentTime: now.Add(time.Minute),
		KeyUsages: []x509.ExtKeyUsage{usage},
	})
	if err != nil {
		t.Errorf("%s does not verify against the CA: %v", filepath.Base(path), err)
	}
	return c
}

func TestServingCert(t *testing.T) {
	f := generate(t)
	for _, name := range ServingNames {
		verify(t, f, f.ServingCert, x509.ExtKeyUsageServerAuth, name)
	}
	c := readCert(t, f.ServingCert)
	for _, want := range ServingIPs {
		if !slices.ContainsFunc(c.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.ParseIP(want)) }) {
			t.Errorf("serving certificate lacks IP SAN %s: %v", want, c.IPAddresses)
		}
	}
	if len(c.IPAddresses) != len(ServingIPs) {
		t.Errorf("serving certificate IP SANs = %v, want %v", c.IPAddresses, ServingIPs)
	}
	// A name not in the certificate must not verify.
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, f.CACert))
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: "example.com", CurrentTime: now}); err == nil {
		t.Error("serving certificate verifies for example.com")
	}
}

// TestKubeletCerts: the kubelet serves at the node's address, and the
// apiserver calls it as a member of system:masters.
func TestKubeletCerts(t *testing.T) {
	f := generate(t)
	c := verify(t, f, f.KubeletCert, x509.ExtKeyUsageServerAuth, "swell-node")
	if len(c.IPAddresses) != 1 || !c.IPAddresses[0].Equal(net.ParseIP("198.18.0.1")) {
		t.Errorf("kubelet serving certificate IP SANs = %v, want the node's 198.18.0.1", c.IPAddresses)
	}
	c = verify(t, f, f.KubeletClientCert, x509.ExtKeyUsageClientAuth, "")
	if !slices.Equal(c.Subject.Organization, []string{"system:masters"}) || slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		t.Errorf("the apiserver's kubelet client certificate: O=%v usages %v; want O=system:masters, client only", c.Subject.Organization, c.ExtKeyUsage)
	}
}

func TestClientIdentities(t *testing.T) {
	f := generate(t)
	for _, tc := range []struct {
		client Client
		cn     string
		orgs   []string
	}{
		{f.Admin, "admin", []string{"system:masters"}},
		{f.ControllerManager, "system:kube-controller-manager", nil},
		{f.Scheduler, "system:kube-scheduler", nil},
		{f.Node, "system:node:swell-node", []string{"system:nodes"}},
		{f.Proxy, "system:kube-proxy", nil},
	} {
		c := verify(t, f, tc.client.Cert, x509.ExtKeyUsageClientAuth, "")
		if c.Subject.CommonName != tc.cn || !slices.Equal(c.Subject.Organization, tc.orgs) {
			t.Errorf("%s: subject CN=%q O=%v, want CN=%q O=%v", filepath.Base(tc.client.Cert), c.Subject.CommonName, c.Subject.Organization, tc.cn, tc.orgs)
		}
		// A client certificate must not serve.
		if slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
			t.Errorf("%s is usable as a serving certificate", filepath.Base(tc.client.Cert))
		}

		cfg, err := clientcmd.BuildConfigFromFlags("", tc.client.Kubeconfig)
		if err != nil {
			t.Fatalf("%s: %v", tc.client.Kubeconfig, err)
		}
		if cfg.Host != "https://127.0.0.1:6443" || cfg.CAFile != f.CACert || cfg.CertFile != tc.client.Cert || cfg.KeyFile != tc.client.Key {
			t.Errorf("%s: host %s ca %s cert %s key %s; want the generated files", filepath.Base(tc.client.Kubeconfig), cfg.Host, cfg.CAFile, cfg.CertFile, cfg.KeyFile)
		}
	}
	if filepath.Base(f.Admin.Kubeconfig) != "admin.kubeconfig" {
		t.Errorf("admin kubeconfig = %s, want admin.kubeconfig", f.Admin.Kubeconfig)
	}
}

func TestServiceAccountKeyPair(t *testing.T) {
	f := generate(t)
	readBlock := func(path, typ string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := pem.Decode(b)
		if p == nil || p.Type != typ {
			t.Fatalf("%s: want a PEM %s", path, typ)
		}
		return p.Bytes
	}
	key, err := x509.ParsePKCS8PrivateKey(readBlock(f.ServiceAccountKey, "PRIVATE KEY"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.ParsePKIXPublicKey(readBlock(f.ServiceAccountPub, "PUBLIC KEY"))
	if err != nil {
		t.Fatal(err)
	}
	if !key.(*ecdsa.PrivateKey).PublicKey.Equal(pub) {
		t.Error("sa.pub is not the public half of sa.key")
	}
}

func TestPrivateFiles(t *testing.T) {
	f := generate(t)
	for _, p := range []string{f.CAKey, f.ServingKey, f.ServiceAccountKey, f.KubeletKey, f.KubeletClientKey, f.Admin.Key, f.Admin.Kubeconfig} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v, want no group or other access", filepath.Base(p), st.Mode().Perm())
		}
	}
}

func TestGenerateRequiresOptions(t *testing.T) {
	if _, err := Generate(Options{Dir: t.TempDir()}); err == nil {
		t.Error("Generate without Server and NodeName succeeded")
	}
	if _, err := Generate(Options{Dir: t.TempDir(), Server: "https://127.0.0.1:6443", NodeName: "n", NodeIP: "node"}); err == nil {
		t.Error("Generate with a NodeIP that is no IP address succeeded")
	}
}

func TestKubeconfigDir(t *testing.T) {
	kc := t.TempDir()
	f, err := Generate(Options{Dir: t.TempDir(), KubeconfigDir: kc, Server: "https://127.0.0.1:6443", NodeName: "n", NodeIP: "198.18.0.1", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Client{f.Admin, f.ControllerManager, f.Scheduler, f.Node, f.Proxy} {
		if filepath.Dir(c.Kubeconfig) != kc {
			t.Errorf("kubeconfig %s not in %s", c.Kubeconfig, kc)
		}
		if _, err := os.Stat(c.Kubeconfig); err != nil {
			t.Error(err)
		}
	}
}
