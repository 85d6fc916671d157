package k8s

// The cluster's PKI, made in Go at every start (no openssl): a CA, the API server's serving
// certificate, client certificates for every component and each kubelet, the service
// account signing key, and kubeconfigs with everything inline.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI is a certificate authority and the files made from it, all in Dir.
type PKI struct {
	// Dir holds ca.crt, ca.key, sa.key, sa.pub and NAME.crt / NAME.key per certificate.
	Dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  []byte
	serial int64
}

// NewPKI makes a CA (ECDSA P-256, valid for a day) and the service account key pair in dir.
func NewPKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ofsdn-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	p := &PKI{Dir: dir, caCert: cert, caKey: key, serial: 1,
		caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	if err := os.WriteFile(p.Path("ca.crt"), p.caPEM, 0o644); err != nil {
		return nil, err
	}
	if err := writeKey(p.Path("ca.key"), key); err != nil {
		return nil, err
	}
	sa, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := writeKey(p.Path("sa.key"), sa); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return nil, err
	}
	return p, os.WriteFile(p.Path("sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// Path returns the path of file name in the PKI directory.
func (p *PKI) Path(name string) string { return filepath.Join(p.Dir, name) }

// CAPEM returns the CA certificate, PEM-encoded.
func (p *PKI) CAPEM() []byte { return p.caPEM }

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// Cert makes NAME.crt and NAME.key signed by the CA, for subject CN and organizations
// (Kubernetes reads them as user name and groups). With ips or dnsNames the certificate
// serves TLS too; every certificate is a client certificate.
func (p *PKI) Cert(name, cn string, orgs []string, ips []net.IP, dnsNames []string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	p.serial++
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		IPAddresses: ips, DNSNames: dnsNames,
	}
	if len(ips) > 0 || len(dnsNames) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.Path(name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return writeKey(p.Path(name+".key"), key)
}

// Kubeconfig writes NAME.kubeconfig for the certificate NAME against server, with the CA,
// certificate and key inline, and returns its path.
func (p *PKI) Kubeconfig(name, server string) (string, error) {
	crt, err := os.ReadFile(p.Path(name + ".crt"))
	if err != nil {
		return "", err
	}
	key, err := os.ReadFile(p.Path(name + ".key"))
	if err != nil {
		return "", err
	}
	b64 := base64.StdEncoding.EncodeToString
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: ofsdn-test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: ofsdn-test
  context: {cluster: ofsdn-test, user: %s}
current-context: ofsdn-test
`, server, b64(p.caPEM), name, b64(crt), b64(key), name)
	path := p.Path(name + ".kubeconfig")
	return path, os.WriteFile(path, []byte(kc), 0o600)
}
