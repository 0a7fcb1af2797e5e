package http

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/idkeeper/idkeeper"
)

// ProblemTypeBase prefixes the "type" member of every problem body; the rest is
// the code in lower case with dashes: CLOCK_SKEW_TOO_LARGE →
// https://idkeeper.dev/problems/clock-skew-too-large. The URI names the problem
// type; clients must branch on the "code" member, which carries the same
// information in the form the rest of IdKeeper uses.
const ProblemTypeBase = "https://idkeeper.dev/problems/"

// RetryAfterSeconds is the Retry-After sent with every 503.
const RetryAfterSeconds = 5

// ProblemContentType is the media type of error bodies (RFC 9457).
const ProblemContentType = "application/problem+json"

// problemTitles are the fixed, short summaries of each code ("title" member); the
// "detail" member tells what went wrong with this request.
var problemTitles = map[idkeeper.Code]string{
	idkeeper.CodeInvalidRequest:         "Invalid request",
	idkeeper.CodeAPIKeyMissing:          "API key missing",
	idkeeper.CodeAPIKeyInvalid:          "API key invalid",
	idkeeper.CodeAPIKeyExpired:          "API key expired",
	idkeeper.CodeIPNotAllowed:           "IP address not allowed",
	idkeeper.CodeNotFound:               "Not found",
	idkeeper.CodeMethodNotAllowed:       "Method not allowed",
	idkeeper.CodeConflict:               "Conflict",
	idkeeper.CodeClockSkewTooLarge:      "Clock skew too large",
	idkeeper.CodeRequesterCountMismatch: "Requester holds a different number of node IDs",
	idkeeper.CodeNodeIDsExhausted:       "Node IDs exhausted",
	idkeeper.CodeUnsupportedMediaType:   "Unsupported media type",
	idkeeper.CodeBodyTooLarge:           "Request body too large",
	idkeeper.CodeStoreUnavailable:       "Store unavailable",
	idkeeper.CodeNotReady:               "Not ready",
	idkeeper.CodeInternal:               "Internal server error",
}

// reservedMembers are the problem members that Error.Details may not override.
var reservedMembers = map[string]bool{"type": true, "title": true, "status": true, "detail": true, "code": true, "field": true, "instance": true}

// problemType is the "type" URI of code.
func problemType(code idkeeper.Code) string {
	return ProblemTypeBase + strings.ReplaceAll(strings.ToLower(string(code)), "_", "-")
}

// problemBody builds the RFC 9457 body for err: type, title, status, detail and code;
// field for INVALID_REQUEST; and the Error's Details as extension members. An error
// that is not an *idkeeper.Error is INTERNAL and shows nothing of itself.
func problemBody(err error) (status int, body map[string]any) {
	code := idkeeper.ErrorCode(err)
	if code == "" {
		code = idkeeper.CodeInternal
	}
	status = code.Status()
	title := problemTitles[code]
	if title == "" {
		title = http.StatusText(status)
	}
	body = map[string]any{
		"type":   problemType(code),
		"title":  title,
		"status": status,
		"detail": idkeeper.ErrorMessage(err),
		"code":   string(code),
	}
	var e *idkeeper.Error
	if errors.As(err, &e) {
		if e.Field != "" {
			body["field"] = e.Field
		}
		for k, v := range e.Details {
			if !reservedMembers[k] {
				body[k] = v
			}
		}
	}
	return status, body
}

// writeProblem sends err as problem+json, logs server-side failures with their cause
// and records the code for the access log.
func (s *Server) writeProblem(w http.ResponseWriter, r *http.Request, err error) {
	status, body := problemBody(err)
	code := body["code"].(string)
	if info := infoFrom(r.Context()); info != nil {
		info.code = code
	}
	switch {
	case status == http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
		s.log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "code", code, "err", err)
	case status >= 500:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "code", code, "err", err)
	}
	writeBody(w, s.log, status, ProblemContentType, body)
}

// writeJSON sends v as a 200 application/json response.
func (s *Server) writeJSON(w http.ResponseWriter, v any) {
	writeBody(w, s.log, http.StatusOK, "application/json", v)
}

func writeBody(w http.ResponseWriter, log *slog.Logger, status int, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only a programming error gets here: every body is built from plain values.
		log.Error("encode response", "err", err)
		status, contentType = http.StatusInternalServerError, ProblemContentType
		b = []byte(`{"type":"` + problemType(idkeeper.CodeInternal) + `","title":"Internal server error","status":500,"code":"INTERNAL"}`)
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
