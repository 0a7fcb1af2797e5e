package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/idkeeper/idkeeper"
)

// Error codes of the gateway, sent as the `code` member of problem+json; the
// gateway also answers with the idkeeper codes INVALID_REQUEST, API_KEY_MISSING,
// API_KEY_INVALID, UNSUPPORTED_MEDIA_TYPE, BODY_TOO_LARGE, NOT_FOUND,
// METHOD_NOT_ALLOWED, NOT_READY and INTERNAL, and with those of the idempotency
// package.
const (
	// CodeCountTooLarge (400): count is above Options.MaxCount; the problem carries
	// a maxCount member.
	CodeCountTooLarge idkeeper.Code = "COUNT_TOO_LARGE"
	// CodeIssuingUnavailable (503, Retry-After): the gateway cannot mint now: it
	// holds no lease yet, has lost it, a node ID is still cooling, or the clock is
	// unusable. No ID of the request was handed out.
	CodeIssuingUnavailable idkeeper.Code = "ISSUING_UNAVAILABLE"
)

// RetryAfterSeconds is the Retry-After of every 503 the gateway sends itself.
const RetryAfterSeconds = 1

// problemTypeBase is the http package's: clients see one family of problem types.
const problemTypeBase = "https://idkeeper.dev/problems/"

const problemContentType = "application/problem+json"

var problemTitles = map[idkeeper.Code]string{
	idkeeper.CodeInvalidRequest:       "Invalid request",
	idkeeper.CodeAPIKeyMissing:        "API key missing",
	idkeeper.CodeAPIKeyInvalid:        "API key invalid",
	idkeeper.CodeNotFound:             "Not found",
	idkeeper.CodeMethodNotAllowed:     "Method not allowed",
	idkeeper.CodeUnsupportedMediaType: "Unsupported media type",
	idkeeper.CodeBodyTooLarge:         "Request body too large",
	idkeeper.CodeNotReady:             "Not ready",
	idkeeper.CodeInternal:             "Internal server error",
	CodeCountTooLarge:                 "Count too large",
	CodeIssuingUnavailable:            "Issuing unavailable",
}

// reservedMembers are the problem members that Error.Details may not override.
var reservedMembers = map[string]bool{"type": true, "title": true, "status": true, "detail": true, "code": true, "field": true, "instance": true}

// statusOf is the HTTP status of a code the gateway sends.
func statusOf(code idkeeper.Code) int {
	switch code {
	case CodeCountTooLarge:
		return http.StatusBadRequest
	case CodeIssuingUnavailable:
		return http.StatusServiceUnavailable
	}
	return code.Status()
}

// Shared header values: assigning them to a header map costs no allocation, and
// net/http only reads them.
var (
	hdrJSON    = []string{"application/json"}
	hdrNoStore = []string{"no-store"}
	hdrNosniff = []string{"nosniff"}
)

// writeProblem sends err as RFC 9457 problem+json in the shape of the registry's:
// type, title, status, detail, code, and field and the Error's Details when set. An
// error that is not an *idkeeper.Error is INTERNAL and shows nothing of itself.
func writeProblem(w http.ResponseWriter, err error) {
	code := idkeeper.ErrorCode(err)
	if code == "" {
		code = idkeeper.CodeInternal
	}
	status := statusOf(code)
	title := problemTitles[code]
	if title == "" {
		title = http.StatusText(status)
	}
	p := map[string]any{
		"type":   problemTypeBase + strings.ReplaceAll(strings.ToLower(string(code)), "_", "-"),
		"title":  title,
		"status": status,
		"detail": idkeeper.ErrorMessage(err),
		"code":   string(code),
	}
	var e *idkeeper.Error
	if errors.As(err, &e) {
		if e.Field != "" {
			p["field"] = e.Field
		}
		for k, v := range e.Details {
			if !reservedMembers[k] {
				p[k] = v
			}
		}
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
	}
	writeJSON(w, status, problemContentType, p)
}

// writeJSON sends v, encoded with encoding/json: for every answer but issuance.
func writeJSON(w http.ResponseWriter, status int, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only a programming error gets here: every body is built from plain values.
		status, contentType = http.StatusInternalServerError, problemContentType
		b = []byte(`{"type":"` + problemTypeBase + `internal","title":"Internal server error","status":500,"code":"INTERNAL"}`)
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h["Cache-Control"] = hdrNoStore
	h["X-Content-Type-Options"] = hdrNosniff
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// unavailable is the 503 of a refused issuance or health check; cause is the
// source's error, whose message tells the client why (it holds no secret).
func unavailable(cause error) error {
	return &idkeeper.Error{Code: CodeIssuingUnavailable,
		Message: "the gateway cannot issue IDs now: " + cause.Error() + "; retry later, or on another gateway", Err: cause}
}
