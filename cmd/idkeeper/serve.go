package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// newPromRegistry returns a Prometheus registry with the collectors every idkeeper
// process exports (Go runtime, process, build info), then extra.
func newPromRegistry(extra ...prometheus.Collector) *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(append([]prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
	}, extra...)...)
	return r
}

// httpService is an http.Server serving its own listener in the background.
type httpService struct {
	srv    *http.Server
	ln     net.Listener
	served chan error // receives the result of Serve, once
}

// bindHTTP listens on addr (host:port; ":0" picks a free port) for a server
// that serve starts later, over TLS when tlsCfg is not nil, with the timeouts and
// header limit of every idkeeper listener; the server's own errors go to log at
// warn level. A command binds its listeners before it touches its store, so that a
// busy port fails it before anything is written; release closes a listener
// never served. The error names addr.
func bindHTTP(addr string, tlsCfg *tls.Config, log *slog.Logger) (*httpService, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return &httpService{ln: ln, served: make(chan error, 1), srv: &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		TLSConfig:         tlsCfg,
	}}, nil
}

// serve serves h on the bound listener in the background, once. Serve's result
// arrives on served; it is http.ErrServerClosed after shutdown.
func (s *httpService) serve(h http.Handler) {
	s.srv.Handler = h
	if s.srv.TLSConfig == nil {
		go func() { s.served <- s.srv.Serve(s.ln) }()
	} else {
		// The certificate comes from TLSConfig.GetCertificate: no file names here.
		go func() { s.served <- s.srv.ServeTLS(s.ln, "", "") }()
	}
}

// release closes the listener of a service that was never served; nil-safe.
func (s *httpService) release() {
	if s != nil {
		_ = s.ln.Close()
	}
}

// Addr is the address the service listens on.
func (s *httpService) Addr() net.Addr { return s.ln.Addr() }

// closeStep is a resource that shutdown closes once the HTTP requests have drained.
type closeStep struct {
	what  string // what closing does, for the error: "close the store"
	close func() error
}

// shutdown stops accepting connections and waits for the requests in flight, at
// most timeout (then it closes the connections left); then it runs every step in
// order, the later ones even when an earlier one fails. It returns the errors of
// all, joined, each prefixed with what failed; nil when everything went well.
func (s *httpService) shutdown(timeout time.Duration, steps ...closeStep) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var errs []error
	if err := s.srv.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("drain HTTP requests: %w", err))
		_ = s.srv.Close()
	}
	for _, st := range steps {
		if err := st.close(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", st.what, err))
		}
	}
	return errors.Join(errs...)
}
