package main

import (
	"crypto/tls"
	"flag"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idkeeper/idkeeper/internal/problem"
	"github.com/idkeeper/idkeeper/internal/tlsfiles"
	"github.com/idkeeper/idkeeper/protocol"
)

// listenFlags are the listener settings the server and the gateway share: TLS and
// where /metrics is served.
type listenFlags struct {
	certFile, keyFile string
	metrics           string // --metrics-listen; "": /metrics on the API listener
}

func (l *listenFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.certFile, "tls-cert", "", "PEM certificate (chain) to serve HTTPS with, TLS 1.2 at least; read again when the file changes (with --tls-key)")
	fs.StringVar(&l.keyFile, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&l.metrics, "metrics-listen", "", "serve /metrics on this host:port instead of the API listener (plain HTTP)")
}

// listen is what a command needs to start its listeners: the API listener's TLS
// configuration (nil: plain HTTP) and the metrics listener's address.
type listen struct {
	tls     *tls.Config
	metrics string
}

// load reads the certificate pair; both files or neither.
func (l *listenFlags) load(log *slog.Logger) (listen, error) {
	out := listen{metrics: l.metrics}
	if (l.certFile == "") != (l.keyFile == "") {
		return out, usageError{tlsfiles.ErrHalfPair}
	}
	if l.certFile == "" {
		return out, nil
	}
	c, err := tlsfiles.Load(l.certFile, l.keyFile, log)
	if err != nil {
		return out, usageError{err}
	}
	out.tls = c.ServerConfig()
	return out, nil
}

// apiListeners are a command's API listener and, with --metrics-listen, its
// metrics listener, bound (bindAPI) before the command touches its store and
// served (serve) once its handler is ready.
type apiListeners struct {
	api, metrics *httpService
	tls          bool
}

// bindAPI binds the API listener on addr, with l's TLS, and the metrics listener
// when l.metrics is set. A busy port is an error naming it; nothing stays bound
// then.
func (l listen) bindAPI(addr string, log *slog.Logger) (apiListeners, error) {
	b := apiListeners{tls: l.tls != nil}
	var err error
	if l.metrics != "" {
		if b.metrics, err = bindHTTP(l.metrics, nil, log); err != nil {
			return b, err
		}
	}
	if b.api, err = bindHTTP(addr, l.tls, log); err != nil {
		b.metrics.release()
		return apiListeners{}, err
	}
	return b, nil
}

// serve serves h on the API listener of what (for the log) and /metrics of g on
// the metrics listener when there is one: then the API listener answers /metrics
// with 404. A plain API listener on a non-loopback address is warned about.
func (b apiListeners) serve(what string, h http.Handler, g prometheus.Gatherer, log *slog.Logger) (api, metrics *httpService) {
	if b.metrics != nil {
		h = withoutMetrics(h)
		ph := promhttp.HandlerFor(g, promhttp.HandlerOpts{
			ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
			ErrorHandling: promhttp.ContinueOnError,
		})
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", ph)
		b.metrics.serve(mux)
		log.Info("serving /metrics on its own listener", "addr", b.metrics.Addr().String())
	}
	b.api.serve(h)
	if !b.tls {
		warnPlain(b.api.ln, what, log)
	}
	return b.api, b.metrics
}

// release closes listeners that were never served.
func (b apiListeners) release() {
	b.api.release()
	b.metrics.release()
}

// closeMetrics is the shutdown step of a metrics listener, nil-safe.
func closeMetrics(m *httpService) closeStep {
	return closeStep{"close the metrics listener", func() error {
		if m == nil {
			return nil
		}
		return m.srv.Close()
	}}
}

// withoutMetrics answers /metrics with 404: it is served on its own listener.
func withoutMetrics(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			_ = problem.From(protocol.Errorf(protocol.CodeNotFound, "/metrics is served on the --metrics-listen address")).Write(w, 0)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// warnPlain warns when a listener on a non-loopback address serves plain HTTP:
// API keys would cross the network in clear.
func warnPlain(ln net.Listener, what string, log *slog.Logger) {
	tcp, ok := ln.Addr().(*net.TCPAddr)
	if !ok || tcp.IP.IsLoopback() {
		return
	}
	log.Warn(what+" listens on a non-loopback address without TLS: API keys cross the network in clear; "+
		"set --tls-cert and --tls-key, or keep it behind a TLS-terminating proxy", "addr", ln.Addr().String())
}
