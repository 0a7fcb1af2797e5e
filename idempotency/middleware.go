package idempotency

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/problem"
	"github.com/idkeeper/idkeeper/protocol"
)

// HeaderReplayed is the response header set to "true" on a replayed response.
const HeaderReplayed = "Idempotent-Replayed"

// MaxOperationLen is the longest operation name Wrap accepts.
const MaxOperationLen = 128

// Wrap returns a handler that gives next's operation the Idempotency-Key semantics
// of the package doc. operation names the operation in the key's scope (e.g.
// "gateway.ids.issue"); caller returns the authenticated caller (e.g. the API key
// ID); nil, or "", puts every caller in one scope.
//
// GET, HEAD, OPTIONS and TRACE requests go to next untouched. For others, Wrap
// reads the key (exactly one Idempotency-Key field line; see ParseKey) and the
// body (up to Config.MaxBody, or the MaxBody option's lower limit), fingerprints
// method, Target and body, and calls Do, with the records of the caller counted
// under Config.MaxRecords (see Owner). next runs with the body restored and writes
// into a buffer; its response is sent once Do has settled it, with every header
// it set (a replay carries only the replayable ones, and Idempotent-Replayed:
// true). Every answer Wrap sends, fresh or replayed, carries Cache-Control:
// no-store and X-Content-Type-Options: nosniff unless next set those headers (a
// replay has the stored ones when ReplayHeaders names them). next must not hijack
// the connection or depend on streaming. Wrap's own errors are problem+json with a
// code: IDEMPOTENCY_KEY_REQUIRED, IDEMPOTENCY_KEY_INVALID, BODY_TOO_LARGE,
// INVALID_REQUEST (unreadable body), and those of Do.
//
// Wrap checks the size of a body, not what it says: a handler should refuse what
// it can without reading the body (media type, size) before Wrap (the gateway
// does), so that it costs no store call; see BindKeyOn for refusals of a body.
//
// Wrap panics when operation is empty, longer than MaxOperationLen or not
// printable ASCII: it is a constant of the program. The options MaxBody,
// WithCodec and BindKeyOn apply.
func (s *Service) Wrap(operation string, caller func(*http.Request) string, next http.Handler, opts ...Option) http.Handler {
	if operation == "" || len(operation) > MaxOperationLen || strings.IndexFunc(operation, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
		panic(fmt.Sprintf("idempotency: invalid operation name %q", operation))
	}
	o := collect(opts)
	limit := s.maxBody
	if o.maxBody > 0 && o.maxBody < limit {
		limit = o.maxBody
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
			next.ServeHTTP(w, r)
			return
		}
		values := r.Header.Values(HeaderKey)
		switch {
		case len(values) == 0 && s.required:
			writeProblem(w, &idkeeper.Error{Code: CodeKeyRequired, Field: HeaderKey,
				Message: "this operation requires an Idempotency-Key header; send a new random key (a UUID) with every new request"})
			return
		case len(values) == 0:
			next.ServeHTTP(w, r)
			return
		case len(values) > 1:
			writeProblem(w, invalidKey("send exactly one Idempotency-Key header, not %d", len(values)))
			return
		}
		key, err := ParseKey(values[0])
		if err != nil {
			writeProblem(w, err)
			return
		}
		body, err := readBody(r, limit)
		if err != nil {
			if protocol.ErrorCode(err) == protocol.CodeBodyTooLarge {
				// Do not read the rest for the next request on this connection.
				w.Header().Set("Connection", "close")
			}
			writeProblem(w, err)
			return
		}
		who := ""
		if caller != nil {
			who = caller(r)
		}
		idem := s.request(Owner(who, operation), true, o, Scope(who, operation, key), Fingerprint(r.Method, Target(r.URL), body))
		res, err := s.do(r.Context(), idem, func(ctx context.Context) Response {
			rec := &recorder{header: http.Header{}}
			req := r.WithContext(ctx)
			req.Body = io.NopCloser(bytes.NewReader(body))
			req.ContentLength = int64(len(body))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
			next.ServeHTTP(rec, req)
			return rec.response()
		})
		if err != nil {
			writeProblem(w, err)
			return
		}
		writeResult(w, res)
	})
}

// readBody reads r's body, at most limit bytes: a body that declares a larger
// Content-Length is refused unread, and one that turns out larger once limit+1
// bytes are read.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	tooLarge := protocol.Errorf(protocol.CodeBodyTooLarge, "the request body exceeds %d bytes", limit)
	if r.ContentLength > limit {
		return nil, tooLarge
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	size := int64(512)
	if r.ContentLength > 0 {
		size = r.ContentLength + 1 // +1: the read that sees EOF
	}
	over := limit
	if over < math.MaxInt64 {
		over++ // the byte that tells a body too large
	}
	buf := bytes.NewBuffer(make([]byte, 0, min(size, over)))
	n, err := buf.ReadFrom(io.LimitReader(r.Body, over))
	switch {
	case err != nil:
		return nil, protocol.Errorf(protocol.CodeInvalidRequest, "the request body could not be read")
	case n > limit:
		return nil, tooLarge
	}
	return buf.Bytes(), nil
}

func writeResult(w http.ResponseWriter, res Result) {
	h := w.Header()
	for name, v := range res.Header {
		h[name] = append([]string(nil), v...)
	}
	if res.Replayed {
		h.Set(HeaderReplayed, "true")
	}
	// The headers of every JSON answer (problem.SetHeaders), on replays as on
	// fresh answers, unless the answer has its own.
	if h.Get("Cache-Control") == "" {
		h.Set("Cache-Control", "no-store")
	}
	if h.Get("X-Content-Type-Options") == "" {
		h.Set("X-Content-Type-Options", "nosniff")
	}
	if bodyAllowed(res.Status) {
		h.Set("Content-Length", strconv.Itoa(len(res.Body)))
	}
	w.WriteHeader(res.Status)
	if bodyAllowed(res.Status) {
		_, _ = w.Write(res.Body)
	}
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// recorder buffers a handler's response.
type recorder struct {
	header http.Header
	sent   http.Header // header as it was at WriteHeader
	status int
	body   bytes.Buffer
}

func (rec *recorder) Header() http.Header { return rec.header }

// WriteHeader records the status of the final response; informational (1xx)
// responses are dropped, a second final one ignored, as net/http does.
func (rec *recorder) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if rec.status != 0 || code < 200 {
		return
	}
	rec.status, rec.sent = code, rec.header.Clone()
}

func (rec *recorder) Write(p []byte) (int, error) {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	return rec.body.Write(p)
}

func (rec *recorder) response() Response {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	return Response{Status: rec.status, Header: rec.sent, Body: rec.body.Bytes()}
}

// RetryAfterUnavailable is the Retry-After of a 503 STORE_UNAVAILABLE, in seconds.
const RetryAfterUnavailable = 5

// writeProblem sends err as RFC 9457 problem+json in the registry's shape (see
// internal/problem), with Retry-After on a 409 IDEMPOTENCY_REQUEST_IN_PROGRESS
// (RetryAfterInProgress), on a 429 IDEMPOTENCY_RECORDS_EXHAUSTED (until the
// caller's earliest record lapses) and on a 503 (RetryAfterUnavailable).
func writeProblem(w http.ResponseWriter, err error) {
	p := problem.From(err)
	retryAfter := 0
	switch {
	case p.Code == CodeInProgress:
		retryAfter = int(RetryAfterInProgress.Seconds())
	case p.Code == CodeRecordsExhausted:
		retryAfter, _ = p.Body["retryAfter"].(int)
		retryAfter = max(retryAfter, 1)
	case p.Status == http.StatusServiceUnavailable:
		retryAfter = RetryAfterUnavailable
	}
	_ = p.Write(w, retryAfter)
}
