package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/protocol"
)

// metrics is the gateway's Prometheus instrumentation:
//
//	idkeeper_gateway_requests_total{route,status}       requests answered, by route and HTTP status
//	idkeeper_gateway_request_duration_seconds{route}    latency (histogram)
//	idkeeper_gateway_ids_issued_total                   IDs sent in fresh 200 answers (not replays)
//	idkeeper_gateway_idempotent_replays_total           answers replayed for an Idempotency-Key
//	idkeeper_build_info{version,commit,goversion}       1 (internal/buildinfo), as the registry exports it
//
// With Options.Idempotency, New also registers the idempotency Service's
// collector: idkeeper_idempotency_records and idkeeper_idempotency_record_bytes
// (the store's live records and their bytes), idkeeper_idempotency_records_stored_total
// and idkeeper_idempotency_records_exhausted_total (see idempotency.Service.Collector).
//
// The session's own metrics come from clientmetrics.NewCollector (package
// client/clientmetrics), which the program registers next to these, as the idkeeper
// binary does: per node ID, IDs minted, the generator's clock rollbacks (width and
// duration histograms), refused calls and sequence waits (a histogram); for the
// session, lease time left and health.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	issued   prometheus.Counter
	replays  prometheus.Counter
}

// Route names, the route label.
const (
	routeIssue   = "issue"
	routeDecode  = "decode"
	routeVersion = "version"
	routeHealth  = "health"
	routeLivez   = "livez"
	routeReadyz  = "readyz"
	routeProm    = "metrics"
	routeOpenAPI = "openapi"
	routeOther   = "other"
)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idkeeper_gateway_requests_total",
			Help: "Requests answered by the gateway, by route and HTTP status.",
		}, []string{"route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idkeeper_gateway_request_duration_seconds",
			Help:    "Time from routing a request to the end of its answer, by route.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route"}),
		issued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idkeeper_gateway_ids_issued_total",
			Help: "IDs sent in fresh 200 answers of POST /v1/ids (replays not counted).",
		}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idkeeper_gateway_idempotent_replays_total",
			Help: "Answers of POST /v1/ids replayed from the idempotency store.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.issued, m.replays)
	}
	return m
}

// routeMetrics are one route's series, resolved once so that the common answer
// costs no label lookup.
type routeMetrics struct {
	m        *metrics
	name     string
	ok       prometheus.Counter
	duration prometheus.Observer
}

func (m *metrics) route(name string) *routeMetrics {
	return &routeMetrics{m: m, name: name, ok: m.requests.WithLabelValues(name, "200"), duration: m.duration.WithLabelValues(name)}
}

func (rm *routeMetrics) observe(status int, replayed bool, start time.Time) {
	if status == 200 {
		rm.ok.Inc()
	} else {
		rm.m.requests.WithLabelValues(rm.name, strconv.Itoa(status)).Inc()
	}
	if replayed {
		rm.m.replays.Inc()
	}
	rm.duration.Observe(time.Since(start).Seconds())
}

// recorder passes a response through, notes its status, and replaces the
// ServeMux's own plain-text 404 and 405 (the only text/plain answers the gateway
// makes) by problem+json; the 405 keeps the Allow header the mux sets. Recorders
// are pooled.
type recorder struct {
	w        http.ResponseWriter
	r        *http.Request
	status   int
	replaced bool
}

var recorders = sync.Pool{New: func() any { return new(recorder) }}

func (rec *recorder) Header() http.Header { return rec.w.Header() }

func (rec *recorder) WriteHeader(code int) {
	if rec.status == 0 && code >= 200 {
		rec.status = code
		if (code == http.StatusNotFound || code == http.StatusMethodNotAllowed) &&
			strings.HasPrefix(rec.w.Header().Get("Content-Type"), "text/plain") {
			rec.replaced = true
			writeProblem(rec.w, muxError(rec.r, code, rec.w.Header().Get("Allow")))
			return
		}
	}
	rec.w.WriteHeader(code)
}

func muxError(r *http.Request, code int, allow string) error {
	if code == http.StatusNotFound {
		return protocol.Errorf(protocol.CodeNotFound, "no route for %s %s", r.Method, r.URL.Path)
	}
	return protocol.Errorf(protocol.CodeMethodNotAllowed, "%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, allow)
}

func (rec *recorder) Write(b []byte) (int, error) {
	if rec.replaced {
		return len(b), nil
	}
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return rec.w.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (rec *recorder) Unwrap() http.ResponseWriter { return rec.w }

func (rec *recorder) replayed() bool {
	v := rec.w.Header()[idempotency.HeaderReplayed]
	return len(v) == 1 && v[0] == "true"
}
