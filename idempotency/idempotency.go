// Package idempotency is the Idempotency-Key component (DESIGN §6): it makes a
// non-idempotent operation safe to retry, so that a retried request gets the first
// request's answer instead of running again.
//
// A key is scoped by (caller, operation, key) (see Scope) and bound to the
// fingerprint of the first request that used it (see Fingerprint). For a key:
//
//   - the first request runs; its response is stored, then sent;
//   - a request with the same fingerprint after that gets the stored status,
//     replayable headers and body again, with the header Idempotent-Replayed: true;
//   - a request with the same fingerprint while the first still runs gets 409
//     IDEMPOTENCY_REQUEST_IN_PROGRESS, with Retry-After;
//   - a request with another fingerprint gets 422
//     IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST, whatever the first's state;
//   - a request without a key, where one is required, gets 400
//     IDEMPOTENCY_KEY_REQUIRED; a malformed key 400 IDEMPOTENCY_KEY_INVALID.
//
// Which responses are stored: every status below 500 except 408, 425 and 429
// (see Replayable). A 5xx, 408, 425 or 429 means "not done, try again": it is sent
// but not stored, and the key is free again at once. Handlers must therefore
// answer 5xx only when the operation had no effect that a retry would repeat
// (the gateway drops the IDs of a failed request, DESIGN §5).
//
// Records live in an idkeeper.IdempotencyStore (bolt for one process, redis for
// several), never only in memory, for Config.TTL after completion (24 h by
// default). The decisions are the Service's (Do); Wrap is the HTTP layer over it.
//
// # Crashes and late answers
//
// A request first claims the key with an in-flight marker that lapses after
// Config.LockFor, then runs, then stores its response, and only then sends it. The
// store writes the marker and replaces it by the response atomically, and replaces
// it only while the marker is still the request's own. Hence:
//
//   - a process that crashes after running the operation but before storing its
//     response has sent nothing; after LockFor the key is free and the retry runs
//     once more: the client has only ever seen one answer;
//   - a request that runs past LockFor may find that another request has taken
//     the key over; it then sends what the store holds (the other's stored
//     response, or 409 while the other runs) instead of its own, or stores and
//     sends its own if the key is free again. Two different stored answers for
//     one key never both reach clients.
package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idkeeper/idkeeper"
)

// Error codes of the component, sent as the `code` member of problem+json. They
// are the idkeeper.CodeIdempotency… codes under their older names here;
// idkeeper.Code.Status gives their HTTP status.
const (
	CodeKeyRequired = idkeeper.CodeIdempotencyKeyRequired // 400 IDEMPOTENCY_KEY_REQUIRED
	CodeKeyInvalid  = idkeeper.CodeIdempotencyKeyInvalid  // 400 IDEMPOTENCY_KEY_INVALID
	CodeInProgress  = idkeeper.CodeIdempotencyInProgress  // 409 IDEMPOTENCY_REQUEST_IN_PROGRESS
	CodeKeyReused   = idkeeper.CodeIdempotencyKeyReused   // 422 IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST
)

// Defaults for zero Config fields.
const (
	DefaultTTL     = 24 * time.Hour
	DefaultLockFor = time.Minute
	DefaultMaxBody = 1 << 20
)

// DefaultReplayHeaders are the response headers stored and replayed when
// Config.ReplayHeaders is nil.
var DefaultReplayHeaders = []string{"Content-Type", "Content-Language", "Content-Location", "Location"}

// RetryAfterInProgress is the Retry-After of a 409 IDEMPOTENCY_REQUEST_IN_PROGRESS:
// the first request usually ends within it.
const RetryAfterInProgress = time.Second

// storeTimeout bounds each store call made after the operation ran, which must
// not be skipped because the client has gone.
const storeTimeout = 10 * time.Second

// Config configures a Service. The zero value is usable: keys optional, records
// kept 24 h.
type Config struct {
	// TTL is how long a completed record is replayed, from its completion; after
	// it the key is new again. Default DefaultTTL.
	TTL time.Duration
	// LockFor is how long an in-flight marker holds a key: requests with the key
	// get 409 meanwhile, and after it a retry runs as if the first request had
	// never been. It must exceed the operation's longest run (see the package doc
	// for what happens otherwise). Default DefaultLockFor.
	LockFor time.Duration
	// Required makes Wrap answer 400 IDEMPOTENCY_KEY_REQUIRED to an unsafe request
	// without a key; otherwise such a request runs without idempotency.
	Required bool
	// MaxBody is the largest request body Wrap reads to fingerprint, in bytes; a
	// larger one gets 413 BODY_TOO_LARGE. Default DefaultMaxBody.
	MaxBody int64
	// ReplayHeaders are the response headers stored with a result and replayed.
	// Default DefaultReplayHeaders.
	ReplayHeaders []string
	// Logger receives store failures and late completions. Default slog.Default().
	Logger *slog.Logger
}

// Service decides what a request with an idempotency key gets (Do) and offers it
// to HTTP handlers (Wrap). It is safe for concurrent use; any number of Services,
// in any number of processes, may share a store.
type Service struct {
	store    idkeeper.IdempotencyStore
	ttl      time.Duration
	lockFor  time.Duration
	required bool
	maxBody  int64
	replay   []string // canonical header names
	log      *slog.Logger
}

// New returns a Service over store. It does no I/O. Negative or sub-millisecond
// durations and a negative MaxBody are an error.
func New(store idkeeper.IdempotencyStore, cfg Config) (*Service, error) {
	if store == nil {
		return nil, errors.New("idempotency: no store")
	}
	s := &Service{store: store, ttl: cfg.TTL, lockFor: cfg.LockFor, required: cfg.Required, maxBody: cfg.MaxBody, log: cfg.Logger}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"TTL", &s.ttl, DefaultTTL}, {"LockFor", &s.lockFor, DefaultLockFor}} {
		switch {
		case *d.v == 0:
			*d.v = d.def
		case *d.v < time.Millisecond:
			return nil, fmt.Errorf("idempotency: %s %v is below 1ms", d.name, *d.v)
		}
	}
	switch {
	case s.maxBody == 0:
		s.maxBody = DefaultMaxBody
	case s.maxBody < 0:
		return nil, fmt.Errorf("idempotency: MaxBody %d is negative", s.maxBody)
	}
	names := cfg.ReplayHeaders
	if names == nil {
		names = DefaultReplayHeaders
	}
	for _, n := range names {
		s.replay = append(s.replay, http.CanonicalHeaderKey(n))
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s, nil
}

// TTL is how long completed records are kept.
func (s *Service) TTL() time.Duration { return s.ttl }

// Required reports whether Wrap requires a key.
func (s *Service) Required() bool { return s.required }

// Response is the outcome of an operation: what is sent, and, when Replayable,
// stored (Header reduced to the replayable headers).
type Response struct {
	Status int // 0 means 200
	Header http.Header
	Body   []byte
}

// Result is what a request gets.
type Result struct {
	Response
	// Replayed is true when Response is the stored answer of an earlier request.
	Replayed bool
}

// Replayable reports whether a response with status is stored and replayed: every
// status below 500 except 408 Request Timeout, 425 Too Early and 429 Too Many
// Requests, which, like a 5xx, say that the request was not carried out.
func Replayable(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status < 500
}

// Do runs fn unless scope holds a live record, and returns what this request
// gets, following the rules of the package doc: fn's
// Response (Replayed false), or the stored one (Replayed true), or an error with
// code CodeInProgress or CodeKeyReused, or STORE_UNAVAILABLE when the store fails
// (fn has not run, or its Response could not be stored and must not be sent).
//
// scope is usually Scope(caller, operation, key) and fingerprint a Fingerprint.
// fn gets ctx. Do waits for fn and stores its Response (when Replayable) even if
// ctx has been cancelled meanwhile. If fn panics, the key is freed and the panic
// goes on.
func (s *Service) Do(ctx context.Context, scope, fingerprint string, fn func(context.Context) Response) (Result, error) {
	token := newToken()
	rec, started, err := s.store.Begin(ctx, scope, fingerprint, token, s.lockFor)
	if err != nil {
		return Result{}, s.storeError("begin", scope, err)
	}
	if !started {
		return decide(rec, fingerprint)
	}
	resp := s.run(ctx, scope, token, fn)
	return s.finish(ctx, scope, fingerprint, token, resp, false)
}

// decide is the answer to a request that found rec live under its scope.
func decide(rec *idkeeper.IdempotencyRecord, fingerprint string) (Result, error) {
	switch {
	case rec.Fingerprint != fingerprint:
		return Result{}, &idkeeper.Error{Code: CodeKeyReused,
			Message: "this Idempotency-Key was used for a different request; use a new key for a new request"}
	case rec.State == idkeeper.IdempotencyCompleted:
		return Result{Response: Response{Status: rec.Status, Header: http.Header(rec.Header), Body: rec.Body}, Replayed: true}, nil
	}
	return Result{}, &idkeeper.Error{Code: CodeInProgress,
		Message: "a request with this Idempotency-Key is still running; retry later with the same key"}
}

// run calls fn; if fn panics it frees the key and panics on.
func (s *Service) run(ctx context.Context, scope, token string, fn func(context.Context) Response) Response {
	defer func() {
		if p := recover(); p != nil {
			s.abort(ctx, scope, token)
			panic(p)
		}
	}()
	resp := fn(ctx)
	if resp.Status == 0 {
		resp.Status = http.StatusOK
	}
	return resp
}

// finish stores resp under token's marker, or frees the key for a response that
// is not replayable, and returns what the request gets. again is set on the
// second attempt, after the marker was lost once.
func (s *Service) finish(ctx context.Context, scope, fingerprint, token string, resp Response, again bool) (Result, error) {
	if !Replayable(resp.Status) {
		s.abort(ctx, scope, token)
		return Result{Response: resp}, nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	err := s.store.Complete(sctx, scope, token, idkeeper.IdempotencyResult{Status: resp.Status, Header: s.replayable(resp.Header), Body: resp.Body}, s.ttl)
	switch {
	case err == nil:
		return Result{Response: resp}, nil
	case errors.Is(err, idkeeper.ErrIdempotencyMarkerLost) && !again:
		// The marker lapsed while fn ran, so another request may have run too.
		// Our response is unsent: answer what the store holds now, or claim the
		// key afresh and store ours.
		s.log.Warn("idempotent request outlived its lock; settling with the store", "scope", scope, "lockFor", s.lockFor)
		token = newToken()
		rec, started, err := s.store.Begin(sctx, scope, fingerprint, token, s.lockFor)
		if err != nil {
			return Result{}, s.storeError("begin", scope, err)
		}
		if !started {
			return decide(rec, fingerprint)
		}
		return s.finish(ctx, scope, fingerprint, token, resp, true)
	}
	// Unstored, the response must not be sent: a retry could get another one.
	s.abort(ctx, scope, token)
	return Result{}, s.storeError("complete", scope, err)
}

// abort frees token's marker; when that fails the marker lapses after LockFor.
func (s *Service) abort(ctx context.Context, scope, token string) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if err := s.store.Abort(sctx, scope, token); err != nil {
		s.log.Warn("idempotency store: cannot free a key; it stays locked until its marker lapses",
			"scope", scope, "lockFor", s.lockFor, "err", err)
	}
}

func (s *Service) storeError(op, scope string, err error) error {
	var e *idkeeper.Error
	if errors.As(err, &e) {
		return err
	}
	if !errors.Is(err, context.Canceled) {
		s.log.Error("idempotency store failed", "op", op, "scope", scope, "err", err)
	}
	return &idkeeper.Error{Code: idkeeper.CodeStoreUnavailable,
		Message: "the idempotency store is unavailable; retry later with the same key", Err: err}
}

// replayable is h reduced to the headers the Service replays.
func (s *Service) replayable(h http.Header) map[string][]string {
	var out map[string][]string
	for _, name := range s.replay {
		if v := h.Values(name); len(v) > 0 {
			if out == nil {
				out = map[string][]string{}
			}
			out[name] = append([]string(nil), v...)
		}
	}
	return out
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
