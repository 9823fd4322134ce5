package ingress

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// CertReloader serves a certificate pair from two PEM files and re-reads
// them when their content changes, so that a rotated certificate (a
// Kubernetes secret update, a cert-manager renewal) is used by new
// handshakes without a restart. Open connections are not touched. A new pair
// that does not load is logged and the last good one kept.
//
// It checks on demand rather than watches: a Kubernetes secret volume
// replaces files by swapping a symlinked directory, which file watches
// follow badly. A handshake that comes certCheckPeriod or more after the
// last check re-reads the two small files before it picks the pair, so a
// rotation is served from the first handshake a second after it at the
// latest, and a process with no handshakes reads nothing.
type CertReloader struct {
	certFile, keyFile string
	log               *slog.Logger
	cert              atomic.Pointer[tls.Certificate]

	now     func() time.Time // the clock; tests inject theirs
	t0      time.Time        // the time base of checked
	checked atomic.Int64     // last check, nanoseconds since t0

	mu              sync.Mutex // serializes Reload
	certPEM, keyPEM []byte     // last content tried, good or bad
}

// certCheckPeriod is the least time between two checks of the files.
const certCheckPeriod = time.Second

// NewCertReloader loads the pair once; an error here is a configuration
// error. A nil logger discards.
func NewCertReloader(certFile, keyFile string, log *slog.Logger) (*CertReloader, error) {
	return newCertReloader(certFile, keyFile, log, time.Now)
}

// newCertReloader is NewCertReloader with the clock given.
func newCertReloader(certFile, keyFile string, log *slog.Logger, now func() time.Time) (*CertReloader, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &CertReloader{certFile: certFile, keyFile: keyFile, log: log, now: now, t0: now()}
	certPEM, keyPEM, err := c.read()
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load %s and %s: %w", certFile, keyFile, err)
	}
	c.cert.Store(&cert)
	c.certPEM, c.keyPEM = certPEM, keyPEM
	return c, nil
}

func (c *CertReloader) read() (certPEM, keyPEM []byte, err error) {
	if certPEM, err = os.ReadFile(c.certFile); err != nil {
		return nil, nil, err
	}
	if keyPEM, err = os.ReadFile(c.keyFile); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// Reload re-reads the files and, when their content changed and loads,
// switches to the new pair. It reports whether it switched. GetCertificate
// calls it at most once per certCheckPeriod; a pair that does not load is
// logged once, when the content changes to it.
func (c *CertReloader) Reload() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	certPEM, keyPEM, err := c.read()
	if err != nil {
		// Mid-rotation one file may be missing for a moment: keep the pair.
		return false
	}
	if bytes.Equal(certPEM, c.certPEM) && bytes.Equal(keyPEM, c.keyPEM) {
		return false
	}
	c.certPEM, c.keyPEM = certPEM, keyPEM
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		c.log.LogAttrs(context.Background(), slog.LevelWarn, "new certificate pair rejected; keeping the old one",
			slog.String("cert", c.certFile), slog.String("key", c.keyFile), slog.Any("err", err))
		return false
	}
	c.cert.Store(&cert)
	c.log.LogAttrs(context.Background(), slog.LevelInfo, "certificate reloaded", slog.String("cert", c.certFile))
	return true
}

// GetCertificate is for tls.Config.GetCertificate. When the last check of
// the files is certCheckPeriod old or more, the one handshake that wins a
// compare-and-swap of the check time re-reads them first; the handshakes
// racing it do not wait and get the current pair.
func (c *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	now := int64(c.now().Sub(c.t0))
	if last := c.checked.Load(); now-last >= int64(certCheckPeriod) && c.checked.CompareAndSwap(last, now) {
		c.Reload()
	}
	return c.cert.Load(), nil
}

// TLSOptions narrow the server's TLS configuration, as an operator's
// policy asks (Knative's QUEUE_PROXY_TLS_* variables). The zero value is
// TLSConfig's defaults.
type TLSOptions struct {
	// MinVersion raises the floor above TLS 1.2; below it, 1.2 stays.
	MinVersion uint16
	// MaxVersion caps the version; 0 means the newest crypto/tls knows.
	MaxVersion uint16
	// CipherSuites, when set, are the TLS 1.2 suites allowed (crypto/tls
	// does not let TLS 1.3's be chosen).
	CipherSuites []uint16
	// CurvePreferences, when set, are the key exchanges allowed, in order.
	CurvePreferences []tls.CurveID
}

// ServerTLSConfig is TLSConfig with o applied.
func (c *CertReloader) ServerTLSConfig(o TLSOptions) *tls.Config {
	cfg := c.TLSConfig(o.MinVersion)
	cfg.MaxVersion = o.MaxVersion
	cfg.CipherSuites = o.CipherSuites
	cfg.CurvePreferences = o.CurvePreferences
	return cfg
}

// TLSConfig returns a server configuration that serves the reloaded pair,
// offers HTTP/2 and HTTP/1.1 by ALPN, and accepts TLS 1.2 or newer
// (minVersion, when higher, raises the floor).
func (c *CertReloader) TLSConfig(minVersion uint16) *tls.Config {
	if minVersion < tls.VersionTLS12 {
		minVersion = tls.VersionTLS12
	}
	return &tls.Config{
		MinVersion:     minVersion,
		GetCertificate: c.GetCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
	}
}
