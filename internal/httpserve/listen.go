package httpserve

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idkeeper/idkeeper/internal/problem"
	"github.com/idkeeper/idkeeper/protocol"
)

// Net is what a process needs to start its listeners: the API listener's TLS
// configuration (nil: plain HTTP) and the metrics listener's address ("":
// /metrics on the API listener).
type Net struct {
	TLS     *tls.Config
	Metrics string
}

// Listeners are a process's API listener and, with Net.Metrics, its metrics
// listener, bound (Net.BindAPI) before the process touches its store and served
// (Serve) once its handler is ready.
type Listeners struct {
	API, Metrics *Service
	tls          bool
}

// BindAPI binds the API listener on addr, with n's TLS, and the metrics listener
// when n.Metrics is set. A busy port is an error naming it; nothing stays bound
// then.
func (n Net) BindAPI(addr string, log *slog.Logger) (Listeners, error) {
	b := Listeners{tls: n.TLS != nil}
	var err error
	if n.Metrics != "" {
		if b.Metrics, err = Bind(n.Metrics, nil, log); err != nil {
			return b, err
		}
	}
	if b.API, err = Bind(addr, n.TLS, log); err != nil {
		b.Metrics.Release()
		return Listeners{}, err
	}
	return b, nil
}

// Serve serves h on the API listener of what (for the log) and /metrics of g on
// the metrics listener when there is one: then the API listener answers /metrics
// with 404. A plain API listener on a non-loopback address is warned about.
func (b Listeners) Serve(what string, h http.Handler, g prometheus.Gatherer, log *slog.Logger) (api, metrics *Service) {
	if b.Metrics != nil {
		h = withoutMetrics(h)
		ph := promhttp.HandlerFor(g, promhttp.HandlerOpts{
			ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
			ErrorHandling: promhttp.ContinueOnError,
		})
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", ph)
		b.Metrics.Serve(mux)
		log.Info("serving /metrics on its own listener", "addr", b.Metrics.Addr().String())
	}
	b.API.Serve(h)
	if !b.tls {
		WarnPlain(b.API.ln, what, log)
	}
	return b.API, b.Metrics
}

// Release closes listeners that were never served.
func (b Listeners) Release() {
	b.API.Release()
	b.Metrics.Release()
}

// CloseMetrics is the shutdown step of a metrics listener, nil-safe.
func CloseMetrics(m *Service) Step {
	return Step{"close the metrics listener", func() error {
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

// WarnPlain warns when a listener on a non-loopback address serves plain HTTP:
// API keys would cross the network in clear.
func WarnPlain(ln net.Listener, what string, log *slog.Logger) {
	tcp, ok := ln.Addr().(*net.TCPAddr)
	if !ok || tcp.IP.IsLoopback() {
		return
	}
	log.Warn(what+" listens on a non-loopback address without TLS: API keys cross the network in clear; "+
		"set --tls-cert and --tls-key, or keep it behind a TLS-terminating proxy", "addr", ln.Addr().String())
}
