// Package httpserve is how every idkeeper process serves HTTP: listeners bound
// before the process touches its store (Bind, Net.BindAPI), served once the
// handler is ready, /metrics on the API listener or its own, and a shutdown that
// drains the requests in flight and then closes the process's resources in
// order (Service.Shutdown, Step). The registry server (package server) and the
// gateway command share it; it also starts a process's OpenTelemetry tracing
// (StartTracing).
package httpserve

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

// NewPromRegistry returns a Prometheus registry with the collectors every
// idkeeper process exports (Go runtime, process, build info), then extra.
func NewPromRegistry(extra ...prometheus.Collector) *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(append([]prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
	}, extra...)...)
	return r
}

// Service is an http.Server serving its own listener in the background.
type Service struct {
	srv    *http.Server
	ln     net.Listener
	served chan error // receives the result of Serve, once
}

// Bind listens on addr (host:port; ":0" picks a free port) for a server that
// Serve starts later, over TLS when tlsCfg is not nil, with the timeouts and
// header limit of every idkeeper listener; the server's own errors go to log at
// warn level. A process binds its listeners before it touches its store, so that
// a busy port fails it before anything is written; Release closes a listener
// never served. The error names addr.
func Bind(addr string, tlsCfg *tls.Config, log *slog.Logger) (*Service, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return &Service{ln: ln, served: make(chan error, 1), srv: &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		TLSConfig:         tlsCfg,
	}}, nil
}

// Serve serves h on the bound listener in the background, once. Serve's result
// arrives on Served; it is http.ErrServerClosed after shutdown.
func (s *Service) Serve(h http.Handler) {
	s.srv.Handler = h
	if s.srv.TLSConfig == nil {
		go func() { s.served <- s.srv.Serve(s.ln) }()
	} else {
		// The certificate comes from TLSConfig.GetCertificate: no file names here.
		go func() { s.served <- s.srv.ServeTLS(s.ln, "", "") }()
	}
}

// Served receives the result of Serve, once; nil (never ready) for a nil
// Service.
func (s *Service) Served() <-chan error {
	if s == nil {
		return nil
	}
	return s.served
}

// Release closes the listener of a service that was never served; nil-safe.
func (s *Service) Release() {
	if s != nil {
		_ = s.ln.Close()
	}
}

// Addr is the address the service listens on.
func (s *Service) Addr() net.Addr { return s.ln.Addr() }

// Listener is the service's listener.
func (s *Service) Listener() net.Listener { return s.ln }

// Drain stops accepting connections and waits for the requests in flight, at
// most timeout; then it closes the connections left and returns the error.
func (s *Service) Drain(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
		return err
	}
	return nil
}

// Close closes the listener and every connection at once.
func (s *Service) Close() error { return s.srv.Close() }

// Step is a resource that Shutdown closes once the HTTP requests have drained.
type Step struct {
	What  string // what closing does, for the error: "close the store"
	Close func() error
}

// Shutdown stops accepting connections and waits for the requests in flight, at
// most timeout (then it closes the connections left); then it runs every step in
// order, the later ones even when an earlier one fails. It returns the errors of
// all, joined, each prefixed with what failed; nil when everything went well.
func (s *Service) Shutdown(timeout time.Duration, steps ...Step) error {
	var drained error
	if err := s.Drain(timeout); err != nil {
		drained = fmt.Errorf("drain HTTP requests: %w", err)
	}
	return errors.Join(drained, RunSteps(steps...))
}

// RunSteps runs every step in order, the later ones even when an earlier one
// fails, as Shutdown does after its drain: for a process that serves no
// listener of its own.
func RunSteps(steps ...Step) error {
	var errs []error
	for _, st := range steps {
		if err := st.Close(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", st.What, err))
		}
	}
	return errors.Join(errs...)
}
