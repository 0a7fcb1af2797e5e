package idempotency

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// A Codec stores the bodies of one operation's answers in a form of its own,
// smaller than the bytes sent: the gateway stores a batch of IDs as runs of
// consecutive IDs rather than as their JSON. A replay decodes the stored form back
// into exactly the bytes the first answer sent.
//
// A Codec may also keep out of the record what must never be stored: the admin
// API's key create stores its answer without the key's secret, and its Decode
// gives a replay that says the secret was shown once (docs/api.md). Such an
// operation documents its replay, which is then not the first answer's bytes.
//
// The record keeps the codec's Name (see HeaderEncoding). A Service reads a record
// only with the codec of that name; a record whose encoding it does not know (one
// written by a newer build) is answered with 503 STORE_UNAVAILABLE, never replayed
// as it is stored.
type Codec struct {
	// Name names the encoding and its version, e.g. "gateway.ids/1": printable
	// ASCII without spaces. A changed encoding gets a new name; the old one keeps
	// being decoded for as long as records written with it may live.
	Name string
	// Encode returns the stored form of an answer's body, or ok false to store the
	// body as it is (an answer the codec does not know). It must not keep body.
	Encode func(status int, header http.Header, body []byte) (stored []byte, ok bool)
	// Decode returns the body that Encode encoded into stored, byte for byte (or
	// the operation's documented replay, see above); an error means a corrupt
	// record.
	Decode func(stored []byte) ([]byte, error)
}

func (c *Codec) validate() error {
	if c.Name == "" || strings.IndexFunc(c.Name, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
		return fmt.Errorf("idempotency: invalid codec name %q", c.Name)
	}
	if c.Encode == nil || c.Decode == nil {
		return fmt.Errorf("idempotency: codec %s lacks Encode or Decode", c.Name)
	}
	return nil
}

// An Option adjusts Wrap or Do for one operation.
type Option func(*options)

type options struct {
	maxBody int64
	codec   *Codec
	owner   string
	owned   bool
	bind    []int // statuses that bind the key without storing the answer
	lockFor time.Duration
}

// MaxBody lowers Config.MaxBody for the wrapped operation: Wrap reads at most n
// bytes of a body (it refuses one that declares more in Content-Length without
// reading it). An operation that accepts small bodies only should pass its own
// limit, so that a large body costs no more than that. Wrap only; n ≤ 0 is ignored.
func MaxBody(n int64) Option { return func(o *options) { o.maxBody = n } }

// WithCodec stores the operation's answers with c (see Codec). It panics when c
// has no valid Name, Encode or Decode: it is a constant of the program.
func WithCodec(c *Codec) Option {
	if err := c.validate(); err != nil {
		panic(err.Error())
	}
	return func(o *options) { o.codec = c }
}

// BindKeyOn binds the key to the request when the operation answers one of
// statuses that Replayable does not store (the gateway passes 400 for a request
// whose body or query it refuses). The record keeps the request's fingerprint and
// the status, not the answer, so:
//
//   - the same request again runs the operation again, unclaimed, and gets its
//     answer afresh (no Idempotent-Replayed);
//   - a different request with the key gets 422
//     IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST, as after any other answer;
//   - should the same request now get a status that Replayable stores (the
//     operation's settings changed meanwhile), that answer is not sent: the client
//     gets 422 and must use a new key. The operation must therefore have had no
//     effect a retry would repeat when it answers such a status.
//
// Other statuses that Replayable refuses keep freeing the key. The record counts
// under Config.MaxRecords like any other.
func BindKeyOn(statuses ...int) Option {
	return func(o *options) { o.bind = append(o.bind, statuses...) }
}

// LockFor sets the in-flight marker's lifetime of the operation instead of
// Config.LockFor: for an operation that may run longer than that (the admin
// API's backup create runs up to its backup timeout), so that a retry meanwhile
// gets 409 IDEMPOTENCY_REQUEST_IN_PROGRESS rather than running it again. Wrap and
// Do; d ≤ 0 is ignored.
func LockFor(d time.Duration) Option { return func(o *options) { o.lockFor = d } }

// OwnedBy makes Do count the record against owner (see Owner), under
// Config.MaxRecords. Do only: Wrap's owner is its caller of its operation. Without
// it, Do's records belong to the owner "" and are not capped.
func OwnedBy(owner string) Option { return func(o *options) { o.owner, o.owned = owner, true } }

func collect(opts []Option) options {
	var o options
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o
}
