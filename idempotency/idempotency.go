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
// Which responses are stored (see Replayable): every status below 500 that says
// what the operation did, failures included (a 409 is replayed like a 200). Not
// stored, so that the key is free again at once:
//
//   - a 5xx, 408, 425 or 429: "not done, try again";
//   - a 400, 411, 413, 414, 415, 422 or 431: the request itself is malformed. The
//     same request gets the same answer whenever it is sent, so there is nothing
//     to remember, and a corrected request may use the key. With BindKeyOn, the
//     operation's own refusals of a request bind the key to that request without
//     storing the answer: the same request is refused afresh, another gets 422.
//
// Handlers must therefore answer those statuses only when the operation had no
// effect that a retry would repeat (the gateway drops the IDs of a failed request,
// DESIGN §5, and mints nothing for a request it refuses).
//
// Records live in an Store (bolt for one process, redis for
// several), never only in memory, for Config.TTL after completion (24 h by
// default). The decisions are the Service's (Do); Wrap is the HTTP layer over it.
//
// # Bounds
//
// Wrap reads at most Config.MaxBody bytes of a body (MaxBody lowers it for one
// operation). With Config.MaxRecords, a caller of an operation holds at most that
// many records: a request with a new key beyond it gets 429
// IDEMPOTENCY_RECORDS_EXHAUSTED with Retry-After, counted atomically by the store
// (CountingStore). A Codec stores an operation's answers compactly. Collector
// exports the store's records and bytes.
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
	"slices"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/problem"
	"github.com/idkeeper/idkeeper/protocol"
)

// Error codes of the component, sent as the `code` member of problem+json by
// every service that uses it. Their HTTP status and title are registered with
// internal/problem below.
const (
	// CodeKeyRequired (400): the operation requires an Idempotency-Key and the
	// request has none.
	CodeKeyRequired idkeeper.Code = "IDEMPOTENCY_KEY_REQUIRED"
	// CodeKeyInvalid (400): the Idempotency-Key is malformed or repeated.
	CodeKeyInvalid idkeeper.Code = "IDEMPOTENCY_KEY_INVALID"
	// CodeInProgress (409, Retry-After): a request with the same key and the same
	// fingerprint is still running.
	CodeInProgress idkeeper.Code = "IDEMPOTENCY_REQUEST_IN_PROGRESS"
	// CodeKeyReused (422): the key was first used for another request.
	CodeKeyReused idkeeper.Code = "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST"
	// CodeRecordsExhausted (429, Retry-After): the caller holds Config.MaxRecords
	// records; the problem carries maxRecords and retryAfter (seconds).
	CodeRecordsExhausted idkeeper.Code = "IDEMPOTENCY_RECORDS_EXHAUSTED"
)

func init() {
	problem.Register(map[idkeeper.Code]problem.Entry{
		CodeKeyRequired:      {Status: http.StatusBadRequest, Title: "Idempotency key required"},
		CodeKeyInvalid:       {Status: http.StatusBadRequest, Title: "Idempotency key invalid"},
		CodeInProgress:       {Status: http.StatusConflict, Title: "Request with this idempotency key in progress"},
		CodeKeyReused:        {Status: http.StatusUnprocessableEntity, Title: "Idempotency key reused with a different request"},
		CodeRecordsExhausted: {Status: http.StatusTooManyRequests, Title: "Too many idempotency records"},
	})
}

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
	// larger one gets 413 BODY_TOO_LARGE. Default DefaultMaxBody. The MaxBody
	// Option lowers it for one operation.
	MaxBody int64
	// MaxRecords caps the live records of one caller of one operation (in-flight
	// markers and stored answers): a request with a key that has no record, from a
	// caller that holds MaxRecords, gets 429 IDEMPOTENCY_RECORDS_EXHAUSTED with
	// Retry-After until the caller's earliest record lapses. Requests whose key has
	// a record (replays, 409, 422) are answered as usual. Wrap's caller is its
	// caller function's; Do counts only with OwnedBy. 0: no cap. It needs a store
	// that is a CountingStore (bolt and redis are).
	MaxRecords int
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
	store      Store
	counting   CountingStore // nil when store is not one
	ttl        time.Duration
	lockFor    time.Duration
	required   bool
	maxBody    int64
	maxRecords int
	replay     []string // canonical header names
	log        *slog.Logger
	m          *serviceMetrics
}

// New returns a Service over store. It does no I/O. Negative or sub-millisecond
// durations, a negative MaxBody or MaxRecords, MaxRecords with a store that is not
// a CountingStore, and a replay header that is not a valid field name are an
// error.
func New(store Store, cfg Config) (*Service, error) {
	if store == nil {
		return nil, errors.New("idempotency: no store")
	}
	s := &Service{store: store, ttl: cfg.TTL, lockFor: cfg.LockFor, required: cfg.Required, maxBody: cfg.MaxBody,
		maxRecords: cfg.MaxRecords, log: cfg.Logger, m: newServiceMetrics()}
	s.counting, _ = store.(CountingStore)
	switch {
	case s.maxRecords < 0:
		return nil, fmt.Errorf("idempotency: MaxRecords %d is negative", s.maxRecords)
	case s.maxRecords > 0 && s.counting == nil:
		return nil, fmt.Errorf("idempotency: MaxRecords needs a store that counts records; %T does not", store)
	}
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
		if !validFieldName(n) {
			return nil, fmt.Errorf("idempotency: replay header %q is not a valid field name", n)
		}
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

// Check reports whether the store answers, through its Ping (Pinger) when it has
// one, within ctx: nil, or a STORE_UNAVAILABLE Error. A service that requires a
// key cannot serve while its store is down, so its health check should include
// this.
func (s *Service) Check(ctx context.Context) error {
	p, ok := s.store.(Pinger)
	if !ok {
		return nil
	}
	if err := p.Ping(ctx); err != nil {
		return &idkeeper.Error{Code: protocol.CodeStoreUnavailable, Message: "the idempotency store does not answer", Err: err}
	}
	return nil
}

// MaxRecords is the cap on one caller's records; 0 for none.
func (s *Service) MaxRecords() int { return s.maxRecords }

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
// status below 500 except
//
//   - 408 Request Timeout, 425 Too Early and 429 Too Many Requests, which, like a
//     5xx, say that the request was not carried out; and
//   - 400 Bad Request, 411 Length Required, 413 Content Too Large, 414 URI Too
//     Long, 415 Unsupported Media Type, 422 Unprocessable Content and 431 Request
//     Header Fields Too Large, which say that the request is malformed: the same
//     request gets the same answer again without a record, and the key stays free
//     for the corrected one.
func Replayable(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests,
		http.StatusBadRequest, http.StatusLengthRequired, http.StatusRequestEntityTooLarge, http.StatusRequestURITooLong,
		http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity, http.StatusRequestHeaderFieldsTooLarge:
		return false
	}
	return status < 500
}

// Do runs fn unless scope holds a live record, and returns what this request
// gets, following the rules of the package doc: fn's
// Response (Replayed false), or the stored one (Replayed true), or an error with
// code CodeInProgress, CodeKeyReused or CodeRecordsExhausted, or STORE_UNAVAILABLE
// when the store fails (fn has not run, or its Response could not be stored and
// must not be sent).
//
// scope is usually Scope(caller, operation, key) and fingerprint a Fingerprint.
// fn gets ctx. Do waits for fn and stores its Response (when Replayable) even if
// ctx has been cancelled meanwhile. If fn panics, the key is freed and the panic
// goes on. The options WithCodec, OwnedBy and BindKeyOn apply.
func (s *Service) Do(ctx context.Context, scope, fingerprint string, fn func(context.Context) Response, opts ...Option) (Result, error) {
	o := collect(opts)
	owner := ""
	if o.owned {
		owner = o.owner
	}
	return s.do(ctx, s.request(owner, o.owned, o, scope, fingerprint), fn)
}

// request is one request's business with the store.
type request struct {
	st                 Store // where its key is claimed: capped by MaxRecords for its owner
	again              Store // the same owner uncapped: to claim the key again once it ran
	codec              *Codec
	bind               []int // BindKeyOn
	lockFor            time.Duration
	scope, fingerprint string
}

// request returns the request of owner for scope, with the options o; capped
// says whether MaxRecords applies.
func (s *Service) request(owner string, capped bool, o options, scope, fingerprint string) request {
	r := request{st: s.store, again: s.store, codec: o.codec, bind: o.bind, lockFor: s.lockFor, scope: scope,
		fingerprint: fingerprint}
	if o.lockFor > 0 {
		r.lockFor = o.lockFor
	}
	if s.counting != nil {
		r.again = s.counting.Owned(owner, 0)
		r.st = r.again
		if capped && s.maxRecords > 0 {
			r.st = s.counting.Owned(owner, s.maxRecords)
		}
	}
	return r
}

func (s *Service) do(ctx context.Context, req request, fn func(context.Context) Response) (Result, error) {
	token := newToken()
	rec, started, err := req.st.Begin(ctx, req.scope, req.fingerprint, token, req.lockFor)
	if err != nil {
		return Result{}, s.storeError("begin", req.scope, err)
	}
	if !started {
		if refusal(rec) && rec.Fingerprint == req.fingerprint {
			return s.rerun(ctx, fn)
		}
		return s.decide(rec, req)
	}
	resp := s.run(ctx, req, token, fn)
	return s.finish(ctx, req, token, resp, false)
}

// refusal reports whether rec binds its key to a refused request (BindKeyOn).
func refusal(rec *Record) bool {
	enc := rec.Metadata[HeaderEncoding]
	return rec.State == Completed && len(enc) == 1 && enc[0] == encodingRefusal
}

// rerun runs fn for a request whose key a refusal of the same request holds, and
// answers afresh; see BindKeyOn.
func (s *Service) rerun(ctx context.Context, fn func(context.Context) Response) (Result, error) {
	resp := fn(ctx)
	if resp.Status == 0 {
		resp.Status = http.StatusOK
	}
	return s.afterRefusal(resp)
}

// afterRefusal is what a request gets whose key was bound to the same request by
// an earlier refusal, resp being its own answer: resp when it is not stored
// either, else 422, since the key's record cannot take it.
func (s *Service) afterRefusal(resp Response) (Result, error) {
	if !Replayable(resp.Status) {
		return Result{Response: resp}, nil
	}
	return Result{}, &idkeeper.Error{Code: CodeKeyReused,
		Message: "this Idempotency-Key was refused for this request before; use a new key for the request"}
}

// decide is the answer to req that found rec live under its scope.
func (s *Service) decide(rec *Record, req request) (Result, error) {
	switch {
	case rec.Fingerprint != req.fingerprint:
		return Result{}, &idkeeper.Error{Code: CodeKeyReused,
			Message: "this Idempotency-Key was used for a different request; use a new key for a new request"}
	case rec.State == Completed:
		resp, err := s.stored(rec, req.codec)
		if err != nil {
			return Result{}, err
		}
		return Result{Response: resp, Replayed: true}, nil
	}
	return Result{}, &idkeeper.Error{Code: CodeInProgress,
		Message: "a request with this Idempotency-Key is still running; retry later with the same key"}
}

// stored is the response a completed record holds, its body decoded when a Codec
// encoded it. A record this Service cannot decode is never replayed as it is
// stored: it is a STORE_UNAVAILABLE Error (a newer build may have written it).
func (s *Service) stored(rec *Record, codec *Codec) (Response, error) {
	enc := rec.Metadata[HeaderEncoding]
	if enc == nil {
		return Response{Status: rec.Outcome, Header: http.Header(rec.Metadata), Body: rec.Body}, nil
	}
	var err error
	switch {
	case len(enc) != 1 || codec == nil || enc[0] != codec.Name:
		err = fmt.Errorf("the stored answer has the encoding %q, which this operation does not read", enc)
	default:
		var body []byte
		if body, err = codec.Decode(rec.Body); err == nil {
			h := make(http.Header, len(rec.Metadata)-1)
			for name, v := range rec.Metadata {
				if name != HeaderEncoding {
					h[name] = v
				}
			}
			return Response{Status: rec.Outcome, Header: h, Body: body}, nil
		}
	}
	s.log.Error("idempotency store: cannot read a stored answer", "scope", rec.Scope, "err", err)
	return Response{}, &idkeeper.Error{Code: protocol.CodeStoreUnavailable,
		Message: "the stored answer of this Idempotency-Key cannot be read by this server; retry later with the same key", Err: err}
}

// run calls fn; if fn panics it frees the key and panics on.
func (s *Service) run(ctx context.Context, req request, token string, fn func(context.Context) Response) Response {
	defer func() {
		if p := recover(); p != nil {
			s.abort(ctx, req, token)
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
func (s *Service) finish(ctx context.Context, req request, token string, resp Response, again bool) (Result, error) {
	bound := !Replayable(resp.Status) && slices.Contains(req.bind, resp.Status)
	if !Replayable(resp.Status) && !bound {
		s.abort(ctx, req, token)
		return Result{Response: resp}, nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	res := s.result(resp, req.codec)
	if bound {
		res = Stored{Outcome: resp.Status, Metadata: map[string][]string{HeaderEncoding: {encodingRefusal}}}
	}
	err := req.st.Complete(sctx, req.scope, token, res, s.ttl)
	switch {
	case err == nil:
		s.m.stored.Inc()
		return Result{Response: resp}, nil
	case errors.Is(err, ErrMarkerLost) && !again:
		// The marker lapsed while fn ran, so another request may have run too.
		// Our response is unsent: answer what the store holds now, or claim the
		// key afresh and store ours. The cap does not refuse that claim: the
		// request was admitted, and its operation has run.
		s.log.Warn("idempotent request outlived its lock; settling with the store", "scope", req.scope, "lockFor", req.lockFor)
		token = newToken()
		req.st = req.again
		rec, started, err := req.st.Begin(sctx, req.scope, req.fingerprint, token, req.lockFor)
		if err != nil {
			return Result{}, s.storeError("begin", req.scope, err)
		}
		if !started {
			if refusal(rec) && rec.Fingerprint == req.fingerprint {
				return s.afterRefusal(resp)
			}
			return s.decide(rec, req)
		}
		return s.finish(ctx, req, token, resp, true)
	case bound:
		// The refusal is the right answer with or without the record: the key
		// is merely left free.
		s.abort(ctx, req, token)
		return Result{Response: resp}, nil
	}
	// Unstored, the response must not be sent: a retry could get another one.
	s.abort(ctx, req, token)
	return Result{}, s.storeError("complete", req.scope, err)
}

// result is what Complete stores of resp: the status as the Outcome, the
// replayable headers as the Metadata and the body, encoded by codec when it takes
// it (the Metadata then names the encoding).
func (s *Service) result(resp Response, codec *Codec) Stored {
	res := Stored{Outcome: resp.Status, Metadata: s.replayable(resp.Header), Body: resp.Body}
	if codec != nil {
		if b, ok := codec.Encode(resp.Status, resp.Header, resp.Body); ok {
			if res.Metadata == nil {
				res.Metadata = map[string][]string{}
			}
			res.Metadata[HeaderEncoding] = []string{codec.Name}
			res.Body = b
		}
	}
	return res
}

// abort frees token's marker; when that fails the marker lapses after LockFor.
func (s *Service) abort(ctx context.Context, req request, token string) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if err := req.st.Abort(sctx, req.scope, token); err != nil {
		s.log.Warn("idempotency store: cannot free a key; it stays locked until its marker lapses",
			"scope", req.scope, "lockFor", req.lockFor, "err", err)
	}
}

func (s *Service) storeError(op, scope string, err error) error {
	if ce, ok := errors.AsType[*CapError](err); ok {
		return s.exhausted(ce)
	}
	if _, ok := errors.AsType[*idkeeper.Error](err); ok {
		return err
	}
	if !errors.Is(err, context.Canceled) {
		s.log.Error("idempotency store failed", "op", op, "scope", scope, "err", err)
	}
	return &idkeeper.Error{Code: protocol.CodeStoreUnavailable,
		Message: "the idempotency store is unavailable; retry later with the same key", Err: err}
}

// exhausted is the client's error for the store's refusal e of a new record.
func (s *Service) exhausted(e *CapError) error {
	s.m.exhausted.Inc()
	limit, retry := e.MaxRecords, max(e.RetryAfter, 1)
	return &idkeeper.Error{Code: CodeRecordsExhausted,
		Message: fmt.Sprintf("this client holds %d Idempotency-Key records, the most this server keeps for one client "+
			"(a record is kept %v after its request); retry in %d s, or use fewer new keys", limit, s.ttl, retry),
		Details: map[string]any{"maxRecords": limit, "retryAfter": retry}, Err: e}
}

// validFieldName reports whether name is an HTTP field name (an RFC 9110 token).
func validFieldName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
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
