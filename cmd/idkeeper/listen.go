package main

import (
	"crypto/tls"
	"flag"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/problem"
	"github.com/idkeeper/idkeeper/internal/tlsfiles"
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

// serveAPI starts the API listener of what (for the log), and the metrics listener
// when l.metrics is set: then the API listener answers /metrics with 404.
func (l listen) serveAPI(what, addr string, h http.Handler, g prometheus.Gatherer, log *slog.Logger) (api, metrics *httpService, err error) {
	if l.metrics != "" {
		h = withoutMetrics(h)
		ph := promhttp.HandlerFor(g, promhttp.HandlerOpts{
			ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
			ErrorHandling: promhttp.ContinueOnError,
		})
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", ph)
		if metrics, err = startHTTP(l.metrics, mux, nil, log); err != nil {
			return nil, nil, err
		}
		log.Info("serving /metrics on its own listener", "addr", metrics.Addr().String())
	}
	if api, err = startHTTP(addr, h, l.tls, log); err != nil {
		if metrics != nil {
			_ = metrics.srv.Close()
		}
		return nil, nil, err
	}
	if l.tls == nil {
		warnPlain(api.ln, what, log)
	}
	return api, metrics, nil
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
			_ = problem.From(idkeeper.Errorf(idkeeper.CodeNotFound, "/metrics is served on the --metrics-listen address")).Write(w, 0)
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
