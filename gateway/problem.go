package gateway

import (
	"net/http"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/problem"
)

// Error codes of the gateway, sent as the `code` member of problem+json; their
// HTTP status and title are registered with internal/problem below. The gateway
// also answers with the idkeeper codes INVALID_REQUEST, COUNT_TOO_LARGE (count
// above Options.MaxCount, with a maxCount member), API_KEY_MISSING,
// API_KEY_INVALID, UNSUPPORTED_MEDIA_TYPE, BODY_TOO_LARGE, NOT_FOUND,
// METHOD_NOT_ALLOWED, NOT_READY and INTERNAL, and with those of the idempotency
// package.
const (
	// CodeIssuingUnavailable (503, Retry-After): the gateway cannot mint now: it
	// holds no lease yet, has lost it, a node ID is still cooling, or the clock is
	// unusable. No ID of the request was handed out.
	CodeIssuingUnavailable idkeeper.Code = "ISSUING_UNAVAILABLE"
)

func init() {
	problem.Register(map[idkeeper.Code]problem.Entry{
		CodeIssuingUnavailable: {Status: http.StatusServiceUnavailable, Title: "Issuing unavailable"},
	})
}

// RetryAfterSeconds is the Retry-After of every 503 the gateway sends itself.
const RetryAfterSeconds = 1

// writeProblem sends err as RFC 9457 problem+json in the registry's shape (see
// internal/problem: an error that is not an *idkeeper.Error is INTERNAL and shows
// nothing of itself), with Retry-After on a 503.
func writeProblem(w http.ResponseWriter, err error) {
	p := problem.From(err)
	retryAfter := 0
	if p.Status == http.StatusServiceUnavailable {
		retryAfter = RetryAfterSeconds
	}
	_ = p.Write(w, retryAfter)
}

// writeJSON sends v, encoded with encoding/json: for every answer but issuance.
func writeJSON(w http.ResponseWriter, v any) {
	_ = problem.WriteJSON(w, http.StatusOK, "application/json", v)
}

// unavailable is the 503 of a refused issuance or health check; cause is the
// source's error, whose message tells the client why (it holds no secret).
func unavailable(cause error) error {
	return &idkeeper.Error{Code: CodeIssuingUnavailable,
		Message: "the gateway cannot issue IDs now: " + cause.Error() + "; retry later, or on another gateway", Err: cause}
}
