package http

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/buildinfo"
	"github.com/idkeeper/idkeeper/internal/problem"
	"github.com/idkeeper/idkeeper/protocol"
)

// Route names, the route label of idkeeper_http_rejected_total: one per route
// pattern of the Server, never the raw path, so that the label has a fixed set of
// values.
const (
	routeAlloc     = "alloc"
	routeRenew     = "renew"
	routeRemove    = "remove"
	routeRemaining = "remaining"
	routeVersion   = "version"
	routeOpenAPI   = "openapi"
	routeAdmin     = "admin"
	routeHealth    = "health"
	routeLivez     = "livez"
	routeReadyz    = "readyz"
	routeProm      = "metrics"
	routeOther     = "other" // no route matched: a 404 or 405 of the mux
)

// authCodes are the codes a client stuck with a wrong key gets; their series exist
// from the start on the /v1 lease routes, so that an alert's increase() sees the
// first rejection too.
var authCodes = []idkeeper.Code{protocol.CodeAPIKeyMissing, protocol.CodeAPIKeyInvalid, protocol.CodeAPIKeyExpired}

// newRejected is idkeeper_http_rejected_total{route,code}.
func newRejected() *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idkeeper_http_rejected_total",
		Help: "Answers of the registry's HTTP API with a status of 400 or above, by route (the route pattern's name, " +
			"other when none matched) and code (the problem+json code; the HTTP status for an answer of another type).",
	}, []string{"route", "code"})
	for _, route := range []string{routeAlloc, routeRenew, routeRemove, routeRemaining} {
		for _, c := range authCodes {
			v.WithLabelValues(route, string(c))
		}
	}
	return v
}

// rejected counts one answer of status ≥ 400 on route; code is the problem's code,
// or "" when the answer was not problem+json.
func (m *Metrics) rejected(route string, code idkeeper.Code, status int) {
	c := string(code)
	if c == "" {
		c = strconv.Itoa(status)
	}
	m.reject.WithLabelValues(route, c).Inc()
}

// registerBuild registers idkeeper_build_info with the Registerer given to
// NewMetrics, once however many Servers share m.
func (m *Metrics) registerBuild(version, commit string) {
	m.buildOnce.Do(func() {
		if m.reg != nil {
			m.reg.MustRegister(buildinfo.Collector(version, commit))
		}
	})
}

// maxProblemSniff bounds what a rejectWriter keeps of a problem body to read its
// code: problem bodies the services write are a few hundred bytes.
const maxProblemSniff = 4 << 10

// rejectWriter passes an answer through and, when its status is 400 or above and
// it is problem+json, keeps the start of its body to read the code from: every
// writer of problems (this package, package admin, an idempotent replay) is then
// counted alike. Only failures pay for it.
type rejectWriter struct {
	http.ResponseWriter
	status  int
	problem bool
	body    []byte
}

var rejectWriters = sync.Pool{New: func() any { return new(rejectWriter) }}

func (w *rejectWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
		w.problem = code >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), problem.ContentType)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *rejectWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.problem && len(w.body) < maxProblemSniff {
		w.body = append(w.body, b[:min(len(b), maxProblemSniff-len(w.body))]...)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *rejectWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// code is the problem code of the answer: "" when it was not problem+json, and
// also when its code is not one of the table's (internal/problem), which keeps
// the label's values to the known codes whatever a body holds.
func (w *rejectWriter) code() idkeeper.Code {
	if !w.problem {
		return ""
	}
	var p struct {
		Code idkeeper.Code `json:"code"`
	}
	if json.Unmarshal(w.body, &p) != nil {
		return ""
	}
	if _, ok := problem.Lookup(p.Code); !ok {
		return ""
	}
	return p.Code
}
