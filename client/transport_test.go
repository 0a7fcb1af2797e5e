package client_test

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/internal/harness/registrytest"
)

// A registry answer that redirects elsewhere is never followed: the API key would
// go with it (net/http strips Authorization on a cross-host redirect, not
// X-API-Key). The other server receives nothing, with the default client and with
// one the program brings; Open fails saying why.
func TestRedirectsAreNotFollowedWithTheKey(t *testing.T) {
	var hits atomic.Int32
	var leaked atomic.Value
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		leaked.Store(r.Header.Get("X-API-Key"))
		w.WriteHeader(http.StatusTeapot)
	}))
	defer elsewhere.Close()
	e := newEnv(t, idkeeper.Config{})
	e.proxy.set(allocPath, func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusTemporaryRedirect)
	})
	for _, hc := range []*http.Client{nil, http.DefaultClient} {
		cfg := e.config()
		cfg.HTTPClient = hc
		s, err := client.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		err = s.Open(ctx)
		cancel()
		var se *client.ServerError
		if !errors.As(err, &se) || se.Status != http.StatusTemporaryRedirect || !strings.Contains(se.Error(), "not followed") {
			t.Fatalf("Open through a redirect: %v", err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the redirect target got %d requests (key %q)", n, leaked.Load())
	}
}

// An https:// registry whose certificate a private CA signed: the session trusts it
// through CABundle, and refuses it without.
func TestHTTPSWithACABundle(t *testing.T) {
	srv := registrytest.Start(t, registrytest.Options{APIKey: testKey, TLS: true})
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.HTTP.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := client.CABundle(bundle)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s, err := client.Start(ctx, client.Config{ServerURL: srv.URL, APIKey: testKey, TLSConfig: tlsCfg, Requester: requester(),
		OnFatal: func(error) {}})
	if err != nil {
		t.Fatalf("Start over https with the CA bundle: %v", err)
	}
	if _, err := s.NextID(); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// One attempt only (the back-off outlasts the context): its error is the
	// handshake's.
	bad, err := client.New(client.Config{ServerURL: srv.URL, APIKey: testKey, Requester: requester(), BackoffMax: time.Minute,
		BackoffInitial: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	if err := bad.Open(short); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Open without the CA: %v, want a certificate error", err)
	}
	if _, err := client.CABundle(filepath.Join(t.TempDir(), "missing.pem")); err == nil {
		t.Fatal("CABundle of a missing file succeeded")
	}
	empty := filepath.Join(t.TempDir(), "empty.pem")
	os.WriteFile(empty, []byte("not a certificate\n"), 0o600)
	if _, err := client.CABundle(empty); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("CABundle of a file without certificates: %v", err)
	}
}

// roundTripFunc is an http.RoundTripper of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Config.WrapTransport wraps the default client's transport (instrumentation such
// as tracing.Transport plugs in there): every request of the session goes through
// the wrapper, to the registry over the transport it was given. A wrapper that
// returns nil is refused by New; with an HTTPClient of the program's the wrapper
// is never called.
func TestConfig_WrapTransport(t *testing.T) {
	srv := registrytest.Start(t, registrytest.Options{APIKey: testKey})
	var wraps, sent atomic.Int32
	var paths sync.Map
	wrap := func(rt http.RoundTripper) http.RoundTripper {
		wraps.Add(1)
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			sent.Add(1)
			paths.Store(r.URL.Path, true)
			return rt.RoundTrip(r)
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s, err := client.Start(ctx, client.Config{ServerURL: srv.URL, APIKey: testKey, Requester: requester(),
		WrapTransport: wrap, OnFatal: func(error) {}})
	if err != nil {
		t.Fatalf("Start through the wrapped transport: %v", err)
	}
	if _, err := s.NextID(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, ok := paths.Load(allocPath); wraps.Load() != 1 || sent.Load() < 2 || !ok {
		t.Fatalf("wrapped %d times, %d requests through the wrapper (Alloc among them: %v), want 1 and Alloc and Remove",
			wraps.Load(), sent.Load(), ok)
	}

	if _, err := client.New(client.Config{ServerURL: srv.URL, APIKey: testKey,
		WrapTransport: func(http.RoundTripper) http.RoundTripper { return nil }}); err == nil ||
		!strings.Contains(err.Error(), "WrapTransport returned a nil transport") {
		t.Fatalf("New with a wrapper returning nil: %v", err)
	}
	if _, err := client.New(client.Config{ServerURL: srv.URL, APIKey: testKey, HTTPClient: &http.Client{},
		WrapTransport: wrap}); err != nil || wraps.Load() != 1 {
		t.Fatalf("New with an HTTPClient: %v; the wrapper was called %d times, want only the first session's", err, wraps.Load())
	}
}
