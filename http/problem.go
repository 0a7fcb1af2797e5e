package http

import (
	"net/http"

	"github.com/idkeeper/idkeeper/internal/problem"
)

// RetryAfterSeconds is the Retry-After sent with every 503.
const RetryAfterSeconds = 5

// writeProblem sends err as problem+json (see internal/problem: an error that is
// not an *idkeeper.Error is INTERNAL and shows nothing of itself), with
// Retry-After on a 503; it logs server-side failures with their cause and records
// the code for the access log.
func (s *Server) writeProblem(w http.ResponseWriter, r *http.Request, err error) {
	p := problem.From(err)
	if info := infoFrom(r.Context()); info != nil {
		info.code = string(p.Code)
	}
	retryAfter := 0
	switch {
	case p.Status == http.StatusServiceUnavailable:
		retryAfter = RetryAfterSeconds
		s.log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "code", string(p.Code), "err", err)
	case p.Status >= 500:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "code", string(p.Code), "err", err)
	}
	if err := p.Write(w, retryAfter); err != nil {
		s.log.Error("encode response", "err", err)
	}
}

// writeJSON sends v as a 200 application/json response.
func (s *Server) writeJSON(w http.ResponseWriter, v any) {
	if err := problem.WriteJSON(w, http.StatusOK, "application/json", v); err != nil {
		s.log.Error("encode response", "err", err)
	}
}
