// Package problem holds the HTTP wire conventions that IdKeeper's services (the
// registry API in package http, the ID gateway, the idempotency middleware) share,
// so that a client sees one family of answers from all of them:
//
//   - the one table of codes and their HTTP status and title (Lookup; the root
//     package's codes here, the codes of packages above this one added with
//     Register);
//   - errors as RFC 9457 application/problem+json bodies (From, Problem.Write):
//     type, title, status, detail and code, field for INVALID_REQUEST, and the
//     Error's Details as extension members;
//   - the headers and encoding of every JSON answer, error or not (WriteJSON,
//     SetHeaders);
//   - the media type a JSON request must have (CheckJSONContentType).
//
// It uses the standard library, the root idkeeper package and internal/wire only.
// What differs between the services (Retry-After, logging) stays with them.
package problem

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// TypeBase prefixes the "type" member of every problem body; the rest is the code
// in lower case with dashes: CLOCK_SKEW_TOO_LARGE →
// https://idkeeper.dev/problems/clock-skew-too-large. The URI names the problem
// type; clients must branch on the "code" member, which carries the same
// information in the form the rest of IdKeeper uses.
const TypeBase = "https://idkeeper.dev/problems/"

// ContentType is the media type of error bodies (RFC 9457).
const ContentType = "application/problem+json"

// Entry is how HTTP speaks one code: the status of the answer and the "title"
// member of its problem body, a fixed short summary of the code (the "detail"
// member tells what went wrong with this request).
type Entry struct {
	Status int
	Title  string
}

// table is the one mapping of codes to HTTP: the root package's codes here, those
// of the packages above this one added by Register. Written only by Register.
var (
	tableMu sync.RWMutex
	table   = map[idkeeper.Code]Entry{
		protocol.CodeInvalidRequest:         {http.StatusBadRequest, "Invalid request"},
		protocol.CodeAPIKeyMissing:          {http.StatusUnauthorized, "API key missing"},
		protocol.CodeAPIKeyInvalid:          {http.StatusUnauthorized, "API key invalid"},
		protocol.CodeAPIKeyExpired:          {http.StatusUnauthorized, "API key expired"},
		protocol.CodeIPNotAllowed:           {http.StatusForbidden, "IP address not allowed"},
		protocol.CodeLeaseNotOwned:          {http.StatusForbidden, "Lease owned by another API key"},
		protocol.CodeAdminKeyRequired:       {http.StatusForbidden, "Admin API key required"},
		protocol.CodeNotFound:               {http.StatusNotFound, "Not found"},
		protocol.CodeMethodNotAllowed:       {http.StatusMethodNotAllowed, "Method not allowed"},
		protocol.CodeConflict:               {http.StatusConflict, "Conflict"},
		protocol.CodeClockSkewTooLarge:      {http.StatusConflict, "Clock skew too large"},
		protocol.CodeRequesterCountMismatch: {http.StatusConflict, "Requester holds a different number of node IDs"},
		protocol.CodeNodeIDsExhausted:       {http.StatusConflict, "Node IDs exhausted"},
		protocol.CodeAPIKeyQuotaExceeded:    {http.StatusConflict, "API key quota exceeded"},
		protocol.CodeUnsupportedMediaType:   {http.StatusUnsupportedMediaType, "Unsupported media type"},
		protocol.CodeBodyTooLarge:           {http.StatusRequestEntityTooLarge, "Request body too large"},
		protocol.CodeCountTooLarge:          {http.StatusBadRequest, "Count too large"},
		protocol.CodeStoreUnavailable:       {http.StatusServiceUnavailable, "Store unavailable"},
		protocol.CodeNotReady:               {http.StatusServiceUnavailable, "Not ready"},
		protocol.CodeStoreNotInitialised:    {http.StatusServiceUnavailable, "Store not initialised"},
		protocol.CodeStoreRecovering:        {http.StatusServiceUnavailable, "Store recovering from a reset"},
		protocol.CodePoolMismatch:           {http.StatusServiceUnavailable, "Store pool differs from the registry's"},
		protocol.CodeStoreClockSkew:         {http.StatusServiceUnavailable, "Store clock disagrees"},
		protocol.CodeClockUnverified:        {http.StatusServiceUnavailable, "Clock not verified"},
		protocol.CodeLoginFailed:            {http.StatusUnauthorized, "Login failed"},
		protocol.CodeLoginThrottleFull:      {http.StatusTooManyRequests, "Login throttle full"},
		protocol.CodePasswordTooCommon:      {http.StatusBadRequest, "Password too common"},
		protocol.CodeSessionExpired:         {http.StatusUnauthorized, "Session expired"},
		protocol.CodeForbidden:              {http.StatusForbidden, "Forbidden"},
		protocol.CodeInternal:               {http.StatusInternalServerError, "Internal server error"},
	}
)

// Register adds the entries of the codes a package defines for itself (package
// idempotency, package gateway). Such a package imports this one, so this one
// cannot list its codes; it calls Register from its init instead, as image
// formats and database/sql drivers register themselves: every code a package can
// return is then in the table before any of its code runs.
//
// It panics, at start-up, on a programming error: a code already in the table,
// an empty code or title, or a status outside 400..599.
func Register(entries map[idkeeper.Code]Entry) {
	tableMu.Lock()
	defer tableMu.Unlock()
	for code, e := range entries {
		switch _, dup := table[code]; {
		case dup:
			panic(fmt.Sprintf("problem: code %s registered twice", code))
		case code == "" || e.Title == "" || e.Status < 400 || e.Status > 599:
			panic(fmt.Sprintf("problem: bad entry for code %q: %+v", code, e))
		}
	}
	maps.Copy(table, entries)
}

// Lookup returns the entry of code. A code that no package registered has
// status 500 and the text of that status as its title, and ok false.
func Lookup(code idkeeper.Code) (e Entry, ok bool) {
	tableMu.RLock()
	e, ok = table[code]
	tableMu.RUnlock()
	if !ok {
		e = Entry{http.StatusInternalServerError, http.StatusText(http.StatusInternalServerError)}
	}
	return e, ok
}

// Codes returns every code in the table, sorted.
func Codes() []idkeeper.Code {
	tableMu.RLock()
	defer tableMu.RUnlock()
	return slices.Sorted(maps.Keys(table))
}

// reserved are the problem members that Error.Details may not override.
var reserved = func() map[string]bool {
	m := map[string]bool{}
	for _, name := range wire.ProblemMembers {
		m[name] = true
	}
	return m
}()

// Type is the "type" URI of code: TypeBase and the code in lower case with dashes.
func Type(code idkeeper.Code) string {
	return TypeBase + strings.ReplaceAll(strings.ToLower(string(code)), "_", "-")
}

// Problem is one problem+json answer.
type Problem struct {
	Code   idkeeper.Code  // never empty
	Status int            // the code's, from Lookup
	Body   map[string]any // the members; encoding/json writes them sorted by name
}

// From builds the problem of err: the code of the first *idkeeper.Error in its
// chain, its status and title from Lookup, and the members type, title,
// status, detail and code; field when the Error names one; and the Error's Details
// as extension members, except any that would replace a standard member (type,
// title, status, detail, code, field, instance). An error that is not an
// *idkeeper.Error, and nil, is INTERNAL with the detail "internal error": it shows
// nothing of itself.
func From(err error) Problem {
	code := protocol.ErrorCode(err)
	if code == "" {
		code = protocol.CodeInternal
	}
	entry, _ := Lookup(code)
	status := entry.Status
	body := map[string]any{
		"type":   Type(code),
		"title":  entry.Title,
		"status": status,
		"detail": protocol.ErrorMessage(err),
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
var internalBody = []byte(`{"type":"` + Type(protocol.CodeInternal) + `","title":"` + table[protocol.CodeInternal].Title +
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
		return protocol.Errorf(protocol.CodeUnsupportedMediaType, "the Content-Type header is missing; send application/json")
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return protocol.Errorf(protocol.CodeUnsupportedMediaType, "Content-Type %q is not supported; send application/json", ct)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return protocol.Errorf(protocol.CodeUnsupportedMediaType, "charset %q is not supported; send UTF-8", cs)
	}
	return nil
}
