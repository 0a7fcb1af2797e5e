package tlsfiles_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/internal/harness/tlstest"
	"github.com/idkeeper/idkeeper/internal/tlsfiles"
)

// serial dials addr over TLS, trusting pool, and returns the server certificate's
// serial number.
func serial(t *testing.T, addr string, pool *x509.CertPool, maxVersion uint16) (int64, error) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MaxVersion: maxVersion})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// A real handshake on loopback with a test CA; a rotated pair is served from the
// next handshake on; a half-written rotation keeps the previous pair.
func TestHandshakeAndRotation(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca := tlstest.NewCA(t)
	ca.WriteLeaf(t, 100, certFile, keyFile)
	logs := &logBuf{}
	c, err := tlsfiles.Load(certFile, keyFile, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	c.CheckEvery = 0
	ln, err := tls.Listen("tcp", "127.0.0.1:0", c.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { conn.(*tls.Conn).Handshake(); conn.Close() }()
		}
	}()
	addr := ln.Addr().String()
	if s, err := serial(t, addr, ca.Pool, 0); err != nil || s != 100 {
		t.Fatalf("first handshake: serial %d, %v", s, err)
	}
	if _, err := serial(t, addr, ca.Pool, tls.VersionTLS11); err == nil {
		t.Fatal("a TLS 1.1 handshake succeeded")
	}
	if _, err := serial(t, addr, x509.NewCertPool(), 0); err == nil {
		t.Fatal("a client that does not trust the CA connected")
	}

	time.Sleep(10 * time.Millisecond) // a new modification time
	ca.WriteLeaf(t, 200, certFile, keyFile)
	if s, err := serial(t, addr, ca.Pool, 0); err != nil || s != 200 {
		t.Fatalf("after the rotation: serial %d, %v", s, err)
	}
	if !strings.Contains(logs.String(), "TLS certificate reloaded") {
		t.Fatalf("the reload was not logged:\n%s", logs)
	}

	// Half a rotation: the new certificate is there, its key not yet.
	time.Sleep(10 * time.Millisecond)
	other := filepath.Join(dir, "other.key")
	ca.WriteLeaf(t, 300, certFile, other)
	for range 3 {
		if s, err := serial(t, addr, ca.Pool, 0); err != nil || s != 200 {
			t.Fatalf("during a half-written rotation: serial %d, %v", s, err)
		}
	}
	if n := strings.Count(logs.String(), "do not load"); n != 1 {
		t.Fatalf("the failed pair was logged %d times:\n%s", n, logs)
	}
	b, _ := os.ReadFile(other)
	os.WriteFile(keyFile, b, 0o600) // the key arrives
	if s, err := serial(t, addr, ca.Pool, 0); err != nil || s != 300 {
		t.Fatalf("after the rotation completed: serial %d, %v", s, err)
	}
}

func TestLoadFails(t *testing.T) {
	dir := t.TempDir()
	if _, err := tlsfiles.Load(filepath.Join(dir, "none.crt"), filepath.Join(dir, "none.key"), nil); err == nil {
		t.Fatal("Load of missing files succeeded")
	}
	os.WriteFile(filepath.Join(dir, "x.crt"), []byte("junk"), 0o600)
	os.WriteFile(filepath.Join(dir, "x.key"), []byte("junk"), 0o600)
	if _, err := tlsfiles.Load(filepath.Join(dir, "x.crt"), filepath.Join(dir, "x.key"), nil); err == nil {
		t.Fatal("Load of files that are no pair succeeded")
	}
}
