// Package pki generates a test cluster's certificates, keys and
// kubeconfigs: a CA, the apiserver's and the kubelet's serving
// certificates, the service-account signing key, and a client identity for
// each of the cluster's users.
//
// Keys are ECDSA P-256. Everything is written to one directory, readable by
// its owner only; the kubeconfigs name the files by absolute path.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/swell-run/swell/hack/cluster/netns"
)

// The apiserver serving certificate's names: every address it is dialled
// at inside the cluster's namespace (pods dial the ClusterIP of the
// Service "kubernetes"), and the in-cluster Service names.
var (
	ServingIPs   = []string{"127.0.0.1", netns.AdvertiseAddress, netns.Gateway, netns.KubernetesServiceIP}
	ServingNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
)

// Options says what to generate.
type Options struct {
	// Dir receives the files; it is created if missing.
	Dir string
	// KubeconfigDir receives the kubeconfigs. Default: Dir.
	KubeconfigDir string
	// Server is the apiserver URL written into the kubeconfigs,
	// e.g. https://127.0.0.1:6443.
	Server string
	// NodeName names the node identity (CN=system:node:<NodeName>) and
	// the kubelet's serving certificate.
	NodeName string
	// NodeIP is the address the apiserver dials the kubelet at, in the
	// kubelet's serving certificate.
	NodeIP string
	// Now is the start of the certificates' validity.
	Now time.Time
	// Validity is how long certificates are valid; default one year.
	Validity time.Duration
}

// Client is a client identity's files.
type Client struct {
	Cert, Key, Kubeconfig string
}

// Files are the paths of what Generate wrote.
type Files struct {
	CACert, CAKey     string
	ServingCert       string
	ServingKey        string
	ServiceAccountKey string // private key, PKCS#8 PEM: signs tokens
	ServiceAccountPub string // public key, PKIX PEM: verifies them
	KubeletCert       string // the kubelet's serving certificate
	KubeletKey        string
	Admin             Client // O=system:masters; admin.kubeconfig
	ControllerManager Client // CN=system:kube-controller-manager
	Scheduler         Client // CN=system:kube-scheduler: binds pods
	Node              Client // CN=system:node:<name>, O=system:nodes: the kubelet
	Proxy             Client // CN=system:kube-proxy
	// KubeletClientCert and KubeletClientKey are the apiserver's identity
	// towards the kubelet (logs, exec): O=system:masters, which the
	// kubelet's webhook authorizer allows everything.
	KubeletClientCert string
	KubeletClientKey  string
}

// The identities' subjects.
func adminSubject() pkix.Name {
	return pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}}
}

func nodeSubject(node string) pkix.Name {
	return pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}}
}

// Generate creates a fresh CA and every certificate, key and kubeconfig
// under opts.Dir, replacing what is there.
func Generate(opts Options) (Files, error) {
	if opts.Dir == "" || opts.Server == "" || opts.NodeName == "" || net.ParseIP(opts.NodeIP) == nil {
		return Files{}, errors.New("pki: Dir, Server, NodeName and NodeIP (an IP address) are required")
	}
	if opts.Validity == 0 {
		opts.Validity = 365 * 24 * time.Hour
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return Files{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Files{}, fmt.Errorf("pki: %w", err)
	}
	kcDir := dir
	if opts.KubeconfigDir != "" {
		if kcDir, err = filepath.Abs(opts.KubeconfigDir); err != nil {
			return Files{}, err
		}
		if err := os.MkdirAll(kcDir, 0o700); err != nil {
			return Files{}, fmt.Errorf("pki: %w", err)
		}
	}
	g := generator{dir: dir, opts: opts}
	f := Files{}

	caKey, err := g.key("ca.key")
	if err != nil {
		return Files{}, err
	}
	caTmpl := g.template(pkix.Name{CommonName: "swell-cluster-ca"})
	caTmpl.IsCA = true
	caTmpl.BasicConstraintsValid = true
	caTmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Files{}, fmt.Errorf("pki: CA: %w", err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	if f.CACert, err = g.writeCert("ca.crt", caDER); err != nil {
		return Files{}, err
	}
	f.CAKey = filepath.Join(dir, "ca.key")
	g.ca, g.caKey = ca, caKey

	serving := g.template(pkix.Name{CommonName: "kube-apiserver"})
	serving.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	serving.DNSNames = ServingNames
	for _, s := range ServingIPs {
		serving.IPAddresses = append(serving.IPAddresses, net.ParseIP(s))
	}
	if f.ServingCert, f.ServingKey, err = g.leaf("apiserver", serving); err != nil {
		return Files{}, err
	}

	kc := g.template(pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}})
	kc.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if f.KubeletClientCert, f.KubeletClientKey, err = g.leaf("apiserver-kubelet-client", kc); err != nil {
		return Files{}, err
	}
	kubelet := g.template(nodeSubject(opts.NodeName))
	kubelet.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	kubelet.DNSNames = []string{opts.NodeName}
	kubelet.IPAddresses = []net.IP{net.ParseIP(opts.NodeIP)}
	if f.KubeletCert, f.KubeletKey, err = g.leaf("kubelet", kubelet); err != nil {
		return Files{}, err
	}

	saKey, err := g.key("sa.key")
	if err != nil {
		return Files{}, err
	}
	f.ServiceAccountKey = filepath.Join(dir, "sa.key")
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return Files{}, fmt.Errorf("pki: service-account key: %w", err)
	}
	f.ServiceAccountPub = filepath.Join(dir, "sa.pub")
	if err := writePEM(f.ServiceAccountPub, "PUBLIC KEY", pub); err != nil {
		return Files{}, err
	}

	clients := []struct {
		name    string
		user    string
		subject pkix.Name
		into    *Client
	}{
		{"admin", "admin", adminSubject(), &f.Admin},
		{"controller-manager", "system:kube-controller-manager", pkix.Name{CommonName: "system:kube-controller-manager"}, &f.ControllerManager},
		{"scheduler", "system:kube-scheduler", pkix.Name{CommonName: "system:kube-scheduler"}, &f.Scheduler},
		{"node", "system:node:" + opts.NodeName, nodeSubject(opts.NodeName), &f.Node},
		{"kube-proxy", "system:kube-proxy", pkix.Name{CommonName: "system:kube-proxy"}, &f.Proxy},
	}
	for _, c := range clients {
		tmpl := g.template(c.subject)
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		cert, key, err := g.leaf(c.name, tmpl)
		if err != nil {
			return Files{}, err
		}
		kc := filepath.Join(kcDir, c.name+".kubeconfig")
		if err := writeKubeconfig(kc, opts.Server, f.CACert, c.user, cert, key); err != nil {
			return Files{}, err
		}
		*c.into = Client{Cert: cert, Key: key, Kubeconfig: kc}
	}
	return f, nil
}

type generator struct {
	dir    string
	opts   Options
	serial int64
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

func (g *generator) template(subject pkix.Name) *x509.Certificate {
	g.serial++
	return &x509.Certificate{
		SerialNumber: big.NewInt(g.serial),
		Subject:      subject,
		// A little slack for clocks; everything here shares one.
		NotBefore: g.opts.Now.Add(-time.Hour),
		NotAfter:  g.opts.Now.Add(g.opts.Validity),
		KeyUsage:  x509.KeyUsageDigitalSignature,
	}
}

// key generates an ECDSA P-256 key and writes it as PKCS#8 PEM to name.
func (g *generator) key(name string) (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", name, err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", name, err)
	}
	return k, writePEM(filepath.Join(g.dir, name), "PRIVATE KEY", der)
}

// leaf signs tmpl with the CA and writes <name>.crt and <name>.key.
func (g *generator) leaf(name string, tmpl *x509.Certificate) (cert, key string, err error) {
	k, err := g.key(name + ".key")
	if err != nil {
		return "", "", err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, g.ca, &k.PublicKey, g.caKey)
	if err != nil {
		return "", "", fmt.Errorf("pki: %s certificate: %w", name, err)
	}
	cert, err = g.writeCert(name+".crt", der)
	return cert, filepath.Join(g.dir, name+".key"), err
}

func (g *generator) writeCert(name string, der []byte) (string, error) {
	p := filepath.Join(g.dir, name)
	return p, writePEM(p, "CERTIFICATE", der)
}

func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}

func writeKubeconfig(path, server, ca, user, cert, key string) error {
	const name = "swell"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: cert, ClientKey: key}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: user}
	cfg.CurrentContext = name
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("pki: kubeconfig %s: %w", path, err)
	}
	return os.Chmod(path, 0o600)
}
