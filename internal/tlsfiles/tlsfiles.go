// Package tlsfiles serves a TLS certificate kept in PEM files that may be replaced
// while the server runs (cert-manager, certbot, a mounted Kubernetes secret): the
// next handshake after a change uses the new pair, with no restart.
package tlsfiles

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// DefaultCheckEvery is how often, at most, a handshake looks at the files.
const DefaultCheckEvery = time.Second

// Certificate is a certificate and key pair read from two files, read again when
// either file changes (its size or modification time, following symbolic links,
// which is how Kubernetes swaps a mounted secret). A pair that fails to load (a
// rotation caught half-written, a key that does not match) is logged and the
// previous pair kept: a rotation never takes the listener down. Safe for
// concurrent use.
type Certificate struct {
	certFile, keyFile string
	log               *slog.Logger
	// CheckEvery bounds how often the files are looked at; set before use.
	CheckEvery time.Duration

	mu      sync.Mutex
	cur     *tls.Certificate
	stamp   [2]fileStamp
	checked time.Time
	failed  [2]fileStamp // the stamp of a pair that failed, not to log it again
}

type fileStamp struct {
	size int64
	mod  time.Time
}

// Load reads the pair and returns the Certificate; it fails when the files cannot
// be read or do not form a pair, so that a server does not start without it.
func Load(certFile, keyFile string, log *slog.Logger) (*Certificate, error) {
	if log == nil {
		log = slog.Default()
	}
	c := &Certificate{certFile: certFile, keyFile: keyFile, log: log, CheckEvery: DefaultCheckEvery}
	stamp, err := c.stamps()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: load %s and %s: %w", certFile, keyFile, err)
	}
	c.cur, c.stamp, c.checked = &cert, stamp, time.Now()
	return c, nil
}

func (c *Certificate) stamps() ([2]fileStamp, error) {
	var out [2]fileStamp
	for i, f := range []string{c.certFile, c.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return out, fmt.Errorf("tls: %w", err)
		}
		out[i] = fileStamp{fi.Size(), fi.ModTime()}
	}
	return out, nil
}

// GetCertificate is tls.Config.GetCertificate: the current pair, read again first
// when the files changed since they were last looked at (at most every CheckEvery).
func (c *Certificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.checked) < c.CheckEvery {
		return c.cur, nil
	}
	c.checked = time.Now()
	stamp, err := c.stamps()
	if err != nil || stamp == c.stamp || stamp == c.failed {
		if err != nil && stamp != c.failed {
			c.failed = stamp
			c.log.Error("TLS certificate files unreadable; serving the previous certificate", "err", err)
		}
		return c.cur, nil
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		c.failed = stamp
		c.log.Error("TLS certificate files changed but do not load; serving the previous certificate until they do",
			"cert", c.certFile, "key", c.keyFile, "err", err)
		return c.cur, nil
	}
	c.cur, c.stamp = &cert, stamp
	c.log.Info("TLS certificate reloaded", "cert", c.certFile, "notAfter", leafNotAfter(&cert))
	return c.cur, nil
}

func leafNotAfter(c *tls.Certificate) time.Time {
	if c.Leaf != nil {
		return c.Leaf.NotAfter
	}
	return time.Time{}
}

// ServerConfig is the TLS configuration of a listener serving c: TLS 1.2 at least.
func (c *Certificate) ServerConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.GetCertificate}
}

// ErrHalfPair: only one of a certificate and a key file was given.
var ErrHalfPair = errors.New("tls: give both a certificate and a key file, or neither")
