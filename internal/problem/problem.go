// Package problem holds the HTTP wire conventions that IdKeeper's services (the
// registry API in package http, the ID gateway, the idempotency middleware) share,
// so that a client sees one family of answers from all of them:
//
//   - errors as RFC 9457 application/problem+json bodies (From, Problem.Write):
//     type, title, status, detail and code, field for INVALID_REQUEST, and the
//     Error's Details as extension members;
//   - the headers and encoding of every JSON answer, error or not (WriteJSON,
//     SetHeaders);
//   - the media type a JSON request must have (CheckJSONContentType).
//
// It uses the standard library and the root idkeeper package only. What differs
// between the services (Retry-After, logging) stays with them.
package problem

import (
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/idkeeper/idkeeper"
)

// TypeBase prefixes the "type" member of every problem body; the rest is the code
// in lower case with dashes: CLOCK_SKEW_TOO_LARGE →
// https://idkeeper.dev/problems/clock-skew-too-large. The URI names the problem
// type; clients must branch on the "code" member, which carries the same
// information in the form the rest of IdKeeper uses.
const TypeBase = "https://idkeeper.dev/problems/"

// ContentType is the media type of error bodies (RFC 9457).
const ContentType = "application/problem+json"

// Titles are the fixed, short summaries of each code (the "title" member); the
// "detail" member tells what went wrong with this request. A code without an entry
// gets the text of its HTTP status. Read-only.
var Titles = map[idkeeper.Code]string{
	idkeeper.CodeInvalidRequest:         "Invalid request",
	idkeeper.CodeAPIKeyMissing:          "API key missing",
	idkeeper.CodeAPIKeyInvalid:          "API key invalid",
	idkeeper.CodeAPIKeyExpired:          "API key expired",
	idkeeper.CodeIPNotAllowed:           "IP address not allowed",
	idkeeper.CodeLeaseNotOwned:          "Lease owned by another API key",
	idkeeper.CodeNotFound:               "Not found",
	idkeeper.CodeMethodNotAllowed:       "Method not allowed",
	idkeeper.CodeConflict:               "Conflict",
	idkeeper.CodeClockSkewTooLarge:      "Clock skew too large",
	idkeeper.CodeRequesterCountMismatch: "Requester holds a different number of node IDs",
	idkeeper.CodeNodeIDsExhausted:       "Node IDs exhausted",
	idkeeper.CodeAPIKeyQuotaExceeded:    "API key quota exceeded",
	idkeeper.CodeUnsupportedMediaType:   "Unsupported media type",
	idkeeper.CodeBodyTooLarge:           "Request body too large",
	idkeeper.CodeStoreUnavailable:       "Store unavailable",
	idkeeper.CodeNotReady:               "Not ready",
	idkeeper.CodeStoreNotInitialised:    "Store not initialised",
	idkeeper.CodeStoreRecovering:        "Store recovering from a reset",
	idkeeper.CodeStoreClockSkew:         "Store clock disagrees",
	idkeeper.CodeInternal:               "Internal server error",

	idkeeper.CodeIdempotencyKeyRequired: "Idempotency key required",
	idkeeper.CodeIdempotencyKeyInvalid:  "Idempotency key invalid",
	idkeeper.CodeIdempotencyInProgress:  "Request with this idempotency key in progress",
	idkeeper.CodeIdempotencyKeyReused:   "Idempotency key reused with a different request",

	idkeeper.CodeIdempotencyRecordsExhausted: "Too many idempotency records",

	idkeeper.CodeCountTooLarge:      "Count too large",
	idkeeper.CodeIssuingUnavailable: "Issuing unavailable",
}

// reserved are the problem members that Error.Details may not override.
var reserved = map[string]bool{"type": true, "title": true, "status": true, "detail": true, "code": true, "field": true, "instance": true}

// Type is the "type" URI of code: TypeBase and the code in lower case with dashes.
func Type(code idkeeper.Code) string {
	return TypeBase + strings.ReplaceAll(strings.ToLower(string(code)), "_", "-")
}

// Title is the "title" member of code: its entry in Titles, else the text of its
// HTTP status.
func Title(code idkeeper.Code) string {
	if t := Titles[code]; t != "" {
		return t
	}
	return http.StatusText(code.Status())
}

// Problem is one problem+json answer.
type Problem struct {
	Code   idkeeper.Code  // never empty
	Status int            // Code.Status()
	Body   map[string]any // the members; encoding/json writes them sorted by name
}

// From builds the problem of err: the code of the first *idkeeper.Error in its
// chain, its status from idkeeper.Code.Status, and the members type, title,
// status, detail and code; field when the Error names one; and the Error's Details
// as extension members, except any that would replace a standard member (type,
// title, status, detail, code, field, instance). An error that is not an
// *idkeeper.Error, and nil, is INTERNAL with the detail "internal error": it shows
// nothing of itself.
func From(err error) Problem {
	code := idkeeper.ErrorCode(err)
	if code == "" {
		code = idkeeper.CodeInternal
	}
	status := code.Status()
	body := map[string]any{
		"type":   Type(code),
		"title":  Title(code),
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
			if !reserved[k] {
				body[k] = v
			}
		}
	}
	return Problem{Code: code, Status: status, Body: body}
}

// Write sends p with WriteJSON as ContentType. A retryAfter above zero is sent as
// the Retry-After header, in seconds; which problems carry one, and how long, is
// the caller's policy. The error is WriteJSON's.
func (p Problem) Write(w http.ResponseWriter, retryAfter int) error {
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	return WriteJSON(w, p.Status, ContentType, p.Body)
}

// internalBody is sent when an answer cannot be encoded.
var internalBody = []byte(`{"type":"` + Type(idkeeper.CodeInternal) + `","title":"` + Titles[idkeeper.CodeInternal] +
	`","status":500,"code":"INTERNAL"}` + "\n")

// WriteJSON sends v encoded with encoding/json and a newline, with status, the
// Content-Type contentType, Content-Length and the headers of SetHeaders. When v
// cannot be encoded (a programming error: every body is built from plain values)
// it sends a 500 INTERNAL problem instead and returns the encoding error, for the
// caller to log.
func WriteJSON(w http.ResponseWriter, status int, contentType string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		status, contentType, b = http.StatusInternalServerError, ContentType, internalBody
	} else {
		b = append(b, '\n')
	}
	h := w.Header()
	SetHeaders(h, contentType)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
	return err
}

// Shared header values: assigning them to a header map costs no allocation, and
// net/http only reads them.
var (
	hdrJSON    = []string{"application/json"}
	hdrProblem = []string{ContentType}
	hdrNoStore = []string{"no-store"}
	hdrNosniff = []string{"nosniff"}
)

// SetHeaders sets the Content-Type of a JSON answer to contentType, and the headers
// every such answer carries: Cache-Control: no-store and X-Content-Type-Options:
// nosniff. It allocates nothing for application/json and ContentType.
func SetHeaders(h http.Header, contentType string) {
	switch contentType {
	case "application/json":
		h["Content-Type"] = hdrJSON
	case ContentType:
		h["Content-Type"] = hdrProblem
	default:
		h.Set("Content-Type", contentType)
	}
	h["Cache-Control"] = hdrNoStore
	h["X-Content-Type-Options"] = hdrNosniff
}

// CheckJSONContentType accepts the Content-Type header value of a JSON request
// body: application/json, with no charset or charset=utf-8 (in any case). Anything
// else, an empty value included, is an UNSUPPORTED_MEDIA_TYPE *idkeeper.Error whose
// message says what to send.
func CheckJSONContentType(ct string) error {
	if ct == "application/json" {
		return nil
	}
	if ct == "" {
		return idkeeper.Errorf(idkeeper.CodeUnsupportedMediaType, "the Content-Type header is missing; send application/json")
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return idkeeper.Errorf(idkeeper.CodeUnsupportedMediaType, "Content-Type %q is not supported; send application/json", ct)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return idkeeper.Errorf(idkeeper.CodeUnsupportedMediaType, "charset %q is not supported; send UTF-8", cs)
	}
	return nil
}
