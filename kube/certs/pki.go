package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// The keys of the certificate Secret.
const (
	keyCert     = corev1.TLSCertKey       // the serving certificate
	keyKey      = corev1.TLSPrivateKeyKey // its private key
	keyCABundle = "ca.crt"                // the CA bundle: the current CA first
	keyCAKey    = "ca.key"                // the current CA's private key
)

// backdate is how far before its issuing a certificate becomes valid, so
// that replicas and API servers whose clocks run somewhat behind accept it.
const backdate = time.Hour

// authority is the CA part of the Secret.
type authority struct {
	cert *x509.Certificate // the current CA: it signs new serving certificates
	key  crypto.Signer
	// bundle is what callers trust: cert first, then earlier CAs that are
	// still valid.
	bundle []*x509.Certificate
}

// serving is the serving certificate and its key.
type serving struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// renewAt is when c is due for renewal: RenewFraction into its lifetime.
func renewAt(c *x509.Certificate) time.Time {
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotBefore.Add(time.Duration(float64(life) * RenewFraction))
}

// parseAuthority reads the CA part of data: the bundle, and the key of one
// of its certificates, which must be a CA valid at now. The bundle it
// returns starts with that CA.
func parseAuthority(data map[string][]byte, now time.Time) (authority, error) {
	var a authority
	if len(data[keyCABundle]) == 0 {
		return a, fmt.Errorf("no %s", keyCABundle)
	}
	bundle, err := cert.ParseCertsPEM(data[keyCABundle])
	if err != nil {
		return a, fmt.Errorf("%s: %w", keyCABundle, err)
	}
	key, err := parseKey(data, keyCAKey)
	if err != nil {
		return a, err
	}
	i := slices.IndexFunc(bundle, func(c *x509.Certificate) bool { return samePublicKey(c.PublicKey, key.Public()) })
	if i < 0 {
		return a, fmt.Errorf("%s matches no certificate of %s", keyCAKey, keyCABundle)
	}
	ca := bundle[i]
	switch {
	case !ca.BasicConstraintsValid || !ca.IsCA || ca.KeyUsage&x509.KeyUsageCertSign == 0:
		return a, fmt.Errorf("the certificate of %s (%s) is not a CA", keyCAKey, ca.Subject)
	case !now.Before(ca.NotAfter):
		return a, fmt.Errorf("the CA %s expired at %s", ca.Subject, ca.NotAfter.UTC().Format(time.RFC3339))
	}
	a.cert, a.key = ca, key
	a.bundle = append([]*x509.Certificate{ca}, slices.Delete(bundle, i, i+1)...)
	return a, nil
}

// parseServing reads the serving certificate of data and checks it: its key
// matches, it names every one of names, it serves TLS, it is not expired and
// a CA of bundle signed it. It also returns that CA.
func parseServing(data map[string][]byte, bundle []*x509.Certificate, names []string, now time.Time) (serving, *x509.Certificate, error) {
	var s serving
	if len(data[keyCert]) == 0 {
		return s, nil, fmt.Errorf("no %s", keyCert)
	}
	chain, err := cert.ParseCertsPEM(data[keyCert])
	if err != nil {
		return s, nil, fmt.Errorf("%s: %w", keyCert, err)
	}
	leaf := chain[0]
	key, err := parseKey(data, keyKey)
	if err != nil {
		return s, nil, err
	}
	if !samePublicKey(leaf.PublicKey, key.Public()) {
		return s, nil, fmt.Errorf("%s does not match the certificate of %s", keyKey, keyCert)
	}
	for _, n := range names {
		if !slices.Contains(leaf.DNSNames, n) {
			return s, nil, fmt.Errorf("the certificate of %s does not name %s (it names %v)", keyCert, n, leaf.DNSNames)
		}
	}
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		return s, nil, fmt.Errorf("the certificate of %s is not for serving TLS (no serverAuth usage)", keyCert)
	}
	if !now.Before(leaf.NotAfter) {
		return s, nil, fmt.Errorf("the certificate of %s expired at %s", keyCert, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	i := slices.IndexFunc(bundle, func(ca *x509.Certificate) bool { return leaf.CheckSignatureFrom(ca) == nil })
	if i < 0 {
		return s, nil, fmt.Errorf("the certificate of %s is not signed by a CA of %s", keyCert, keyCABundle)
	}
	return serving{cert: leaf, key: key}, bundle[i], nil
}

// parseKey reads the private key under data[name].
func parseKey(data map[string][]byte, name string) (crypto.Signer, error) {
	if len(data[name]) == 0 {
		return nil, fmt.Errorf("no %s", name)
	}
	k, err := keyutil.ParsePrivateKeyPEM(data[name])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: a %T cannot sign", name, k)
	}
	return s, nil
}

func samePublicKey(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}

// tidy drops from the bundle, after the current CA, what is not a CA, what
// has expired at now, and repeats.
func (a *authority) tidy(now time.Time) {
	kept := a.bundle[:1]
	for _, c := range a.bundle[1:] {
		if c.IsCA && now.Before(c.NotAfter) && !slices.ContainsFunc(kept, func(k *x509.Certificate) bool { return bytes.Equal(k.Raw, c.Raw) }) {
			kept = append(kept, c)
		}
	}
	a.bundle = kept
}

// newAuthority makes a new CA valid from now for validity; previous, which
// callers may still trust, follows it in the bundle.
func newAuthority(now time.Time, validity time.Duration, previous ...*x509.Certificate) (authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return authority{}, fmt.Errorf("generate a CA key: %w", err)
	}
	serial, skid, err := serialAndKeyID(key.Public())
	if err != nil {
		return authority{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("swell-webhook-ca@%d", now.Unix())},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          skid,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return authority{}, fmt.Errorf("create the CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return authority{}, fmt.Errorf("parse the new CA certificate: %w", err)
	}
	return authority{cert: ca, key: key, bundle: append([]*x509.Certificate{ca}, previous...)}, nil
}

// issue makes a serving certificate for names (the first is its common
// name) signed by a's CA, valid from now for validity but not past the CA's
// own end.
func (a authority) issue(names []string, now time.Time, validity time.Duration) (serving, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return serving{}, fmt.Errorf("generate a serving key: %w", err)
	}
	serial, skid, err := serialAndKeyID(key.Public())
	if err != nil {
		return serving{}, err
	}
	notAfter := now.Add(validity)
	if notAfter.After(a.cert.NotAfter) {
		notAfter = a.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: names[0]},
		DNSNames:              names,
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		SubjectKeyId:          skid,
		AuthorityKeyId:        a.cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return serving{}, fmt.Errorf("create the serving certificate: %w", err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return serving{}, fmt.Errorf("parse the new serving certificate: %w", err)
	}
	return serving{cert: c, key: key}, nil
}

// serialAndKeyID returns a random 128-bit serial number and the key
// identifier of pub: the leftmost 160 bits of the SHA-256 of its
// subjectPublicKey bits (RFC 7093, section 2, method 1).
func serialAndKeyID(pub crypto.PublicKey) (*big.Int, []byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, nil, fmt.Errorf("generate a serial number: %w", err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal a public key: %w", err)
	}
	var spki struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(der, &spki); err != nil {
		return nil, nil, fmt.Errorf("read a public key: %w", err)
	}
	sum := sha256.Sum256(spki.PublicKey.Bytes)
	return serial, sum[:20], nil
}

// encodeBundle is the PEM of the bundle, the current CA first.
func (a authority) encodeBundle() []byte {
	b, _ := cert.EncodeCertificates(a.bundle...) // writing PEM to memory does not fail
	return b
}

// encode writes a and s into data, leaving its other keys alone.
func encode(data map[string][]byte, a authority, s serving) error {
	if s.cert == nil {
		return errors.New("no serving certificate to encode")
	}
	caKey, err := keyutil.MarshalPrivateKeyToPEM(a.key)
	if err != nil {
		return fmt.Errorf("encode the CA key: %w", err)
	}
	key, err := keyutil.MarshalPrivateKeyToPEM(s.key)
	if err != nil {
		return fmt.Errorf("encode the serving key: %w", err)
	}
	crt, _ := cert.EncodeCertificates(s.cert)
	data[keyCABundle] = a.encodeBundle()
	data[keyCAKey] = caKey
	data[keyCert] = crt
	data[keyKey] = key
	return nil
}
