// Command pki writes what the test node's components need to trust and
// name each other: a CA, the API server's serving certificate, a client
// certificate and kubeconfig for each component, and the service-account
// signing key. Every key is ECDSA P-256; everything lives for a day.
//
//	pki -dir DIR -server https://10.88.0.1:6443 -ip 10.88.0.1,10.96.0.1 -node NAME
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"flag"
	"fmt"
	"log"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	dir := flag.String("dir", "", "where to write (required)")
	server := flag.String("server", "", "the API server's URL, for the kubeconfigs (required)")
	ips := flag.String("ip", "", "comma-separated IP addresses the API server is reached at")
	node := flag.String("node", "", "the node's name (required)")
	flag.Parse()
	if *dir == "" || *server == "" || *node == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		log.Fatal(err)
	}
	w := writer{dir: *dir}

	caKey := newKey()
	caTmpl := template("queue-e2e-ca", nil)
	caTmpl.IsCA = true
	caTmpl.BasicConstraintsValid = true
	caTmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		log.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	w.pair("ca", caDER, caKey)

	// The API server: every name a client in a pod or on the node uses.
	srv := template("kube-apiserver", nil)
	srv.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	srv.DNSNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	srv.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	for _, s := range strings.Split(*ips, ",") {
		if ip := net.ParseIP(strings.TrimSpace(s)); ip != nil {
			srv.IPAddresses = append(srv.IPAddresses, ip)
		} else if s != "" {
			log.Fatalf("pki: -ip: %q is not an IP address", s)
		}
	}
	w.signed("apiserver", srv, ca, caKey)

	// The clients, each as the identity Kubernetes' own setups give it.
	clients := []struct{ file, cn, org string }{
		{"admin", "kubernetes-admin", "system:masters"},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters"},
		{"controller-manager", "system:kube-controller-manager", ""},
		{"scheduler", "system:kube-scheduler", ""},
		{"kube-proxy", "system:kube-proxy", ""},
		{"kubelet", "system:node:" + *node, "system:nodes"},
	}
	for _, c := range clients {
		var org []string
		if c.org != "" {
			org = []string{c.org}
		}
		t := template(c.cn, org)
		t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		w.signed(c.file, t, ca, caKey)
		if c.file != "apiserver-kubelet-client" {
			w.kubeconfig(c.file, *server, caDER)
		}
	}

	// The service accounts' token signing key.
	sa := newKey()
	der, err := x509.MarshalPKCS8PrivateKey(sa)
	if err != nil {
		log.Fatal(err)
	}
	w.pem("sa.key", "PRIVATE KEY", der)
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		log.Fatal(err)
	}
	w.pem("sa.pub", "PUBLIC KEY", pub)
}

func newKey() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	return k
}

func template(cn string, org []string) *x509.Certificate {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		log.Fatal(err)
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: org},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
}

type writer struct{ dir string }

func (w writer) signed(name string, t, ca *x509.Certificate, caKey *ecdsa.PrivateKey) {
	k := newKey()
	der, err := x509.CreateCertificate(rand.Reader, t, ca, &k.PublicKey, caKey)
	if err != nil {
		log.Fatal(err)
	}
	w.pair(name, der, k)
}

func (w writer) pair(name string, der []byte, k *ecdsa.PrivateKey) {
	w.pem(name+".crt", "CERTIFICATE", der)
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		log.Fatal(err)
	}
	w.pem(name+".key", "EC PRIVATE KEY", kd)
}

func (w writer) pem(name, typ string, der []byte) {
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(filepath.Join(w.dir, name), b, 0o600); err != nil {
		log.Fatal(err)
	}
}

func (w writer) kubeconfig(name, server string, caDER []byte) {
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(w.dir, f))
		if err != nil {
			log.Fatal(err)
		}
		return base64.StdEncoding.EncodeToString(b)
	}
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: %s}
current-context: e2e
`, server, ca, name, read(name+".crt"), read(name+".key"), name)
	if err := os.WriteFile(filepath.Join(w.dir, name+".kubeconfig"), []byte(cfg), 0o600); err != nil {
		log.Fatal(err)
	}
}
