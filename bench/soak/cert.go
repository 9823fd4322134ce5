package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// issuer makes the self-signed pairs queue serves on its TLS port, writes
// them to the files queue was given, and keeps a pool of every certificate
// it issued, which the soak's TLS clients trust: a client that connected
// before a rotation and one that connects after both verify. It is safe for
// concurrent use.
type issuer struct {
	certFile, keyFile string

	mu     sync.Mutex // serializes issue
	serial int64
	pool   atomic.Pointer[x509.CertPool] // replaced, never changed, so handshakes read it without a lock
	latest atomic.Pointer[big.Int]       // the serial of the pair last written
}

func newIssuer(dir string) *issuer {
	return &issuer{certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key")}
}

// issue makes a new pair (ECDSA P-256, SAN localhost, 127.0.0.1 and ::1,
// valid from an hour ago for a day), trusts it, and then replaces the two
// files, each by a rename so that queue never reads half a file.
func (is *issuer) issue() (*big.Int, error) {
	is.mu.Lock()
	defer is.mu.Unlock()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	is.serial++
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(is.serial),
		Subject:      pkix.Name{CommonName: fmt.Sprintf("soak %d", is.serial)},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal key: %w", err)
	}
	pool := x509.NewCertPool()
	if old := is.pool.Load(); old != nil {
		pool = old.Clone()
	}
	pool.AddCert(cert)
	is.pool.Store(pool)
	// The key first: between the two renames queue may read the new key
	// with the old certificate, which it refuses and keeps the old pair
	// until its next check a second later (docs/contract.md section 1.1).
	if err := writeAtomic(is.keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})); err != nil {
		return nil, err
	}
	if err := writeAtomic(is.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})); err != nil {
		return nil, err
	}
	is.latest.Store(cert.SerialNumber)
	return cert.SerialNumber, nil
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return nil
}

// clientConfig is a TLS client configuration offering protos by ALPN that
// accepts a server certificate issued by is, at any time, for the name or
// address dialed.
func (is *issuer) clientConfig(protos ...string) *tls.Config {
	return &tls.Config{
		NextProtos: protos,
		// Verification is VerifyConnection's, against the pool of the
		// moment: a tls.Config's RootCAs cannot grow under a Transport.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no server certificate")
			}
			name := cs.ServerName
			if name == "" {
				name = "127.0.0.1"
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: is.pool.Load(), DNSName: name})
			return err
		},
	}
}
