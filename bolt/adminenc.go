package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"

	bbolt "go.etcd.io/bbolt"
)

// The records of the admin web (account.Store) live in buckets of their own,
// created by the first write that needs them, so a file written before they
// existed opens unchanged and reads as holding none:
//
//	users         name → user record
//	sessions      ID → session record
//	usersessions  len(user) u16 | user | ID → ∅   (the sessions of each user)
//	allowlist     family u8 (0 IPv4, 1 IPv6) | 16-byte address | bits u8 → entry record
//	audit         Seq u64 → audit record
//	meta          "audithead": Seq u64 | Hash of the last entry ever appended
//
// A record is a format byte (adminFormat), then its fields in a fixed order:
// integers 8 bytes big-endian, times int64 Unix milliseconds, strings a uvarint
// length and the bytes as given (not JSON, so text that is not UTF-8 keeps every
// byte and the audit hashes stay true). Decoding checks every length against the
// record: a corrupt record is an error, never a panic.

// adminFormat is the record format of the admin buckets this build reads and writes.
const adminFormat = 1

var (
	bucketUsers        = []byte("users")
	bucketSessions     = []byte("sessions")
	bucketUserSessions = []byte("usersessions")
	bucketAllow        = []byte("allowlist")
	bucketAudit        = []byte("audit")

	keyAuditHead = []byte("audithead")
)

// writeBucket returns the named bucket of a read-write transaction, creating it
// when a file written before it lacks it.
func writeBucket(t *txn, name []byte) (*bbolt.Bucket, error) {
	return t.tx.CreateBucketIfNotExists(name)
}

// recWriter appends the fields of a record.
type recWriter []byte

func newRec(size int) recWriter { return append(make(recWriter, 0, 1+size), adminFormat) }

func (w recWriter) u64(v uint64) recWriter { return binary.BigEndian.AppendUint64(w, v) }
func (w recWriter) ms(v int64) recWriter   { return w.u64(uint64(v)) }

func (w recWriter) flag(v bool) recWriter {
	if v {
		return append(w, 1)
	}
	return append(w, 0)
}

func (w recWriter) str(s string) recWriter {
	return append(binary.AppendUvarint(w, uint64(len(s))), s...)
}

// recReader reads the fields of a record in the order they were written. The first
// failure sticks: later reads return zero values, and end reports it.
type recReader struct {
	what string // names the record in errors
	b    []byte
	err  error
}

// readRec starts reading record v, checking its format byte.
func readRec(what string, v []byte) *recReader {
	r := &recReader{what: what}
	switch {
	case len(v) == 0:
		r.err = errors.New("empty")
	case v[0] != adminFormat:
		r.err = fmt.Errorf("format %d, this build reads %d", v[0], adminFormat)
	default:
		r.b = v[1:]
	}
	return r
}

func (r *recReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
	r.b = nil
}

func (r *recReader) u64() uint64 {
	if len(r.b) < 8 {
		r.fail("truncated")
		return 0
	}
	v := binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *recReader) ms() int64 { return int64(r.u64()) }

func (r *recReader) flag() bool {
	if len(r.b) < 1 || r.b[0] > 1 {
		r.fail("truncated or bad flag")
		return false
	}
	v := r.b[0] == 1
	r.b = r.b[1:]
	return v
}

func (r *recReader) str() string {
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > uint64(len(r.b)-k) {
		r.fail("bad string length")
		return ""
	}
	s := string(r.b[k : k+int(n)])
	r.b = r.b[k+int(n):]
	return s
}

// end reports the first failure, or trailing bytes, as a corrupt record.
func (r *recReader) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d trailing bytes", len(r.b))
	}
	if r.err != nil {
		return fmt.Errorf("corrupt %s: %w", r.what, r.err)
	}
	return nil
}
