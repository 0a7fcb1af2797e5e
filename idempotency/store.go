package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// CountingStore is the part of a store that bounds and measures its records,
// beside the Store contract. The bolt and redis stores
// implement it; a Service needs it for Config.MaxRecords and for the gauges of its
// Collector.
//
// Every record belongs to an owner: the caller of one operation (Owner), or ""
// for the records written through the plain Store methods.
type CountingStore interface {
	// Owned returns the store's view of owner's records: its Begin, Complete and
	// Abort are those of the Store contract, for records that count
	// against owner. When scope has no live record and owner already holds
	// maxRecords live records (in-flight markers and completed records alike),
	// Begin writes nothing and returns an *CapError (its
	// RetryAfter: whole seconds, at least 1, until the earliest of owner's live
	// records lapses), which a Service answers with CodeRecordsExhausted. The
	// check and the write are one atomic step, so concurrent Begins never take
	// owner past maxRecords. A live record of scope is returned as usual, whatever
	// owner holds. maxRecords 0 means no cap; an owner
	// longer than MaxScopeLen bytes is an INVALID_REQUEST
	// Error from every method.
	//
	// Complete and Abort of the view find only markers that its Begin wrote for the
	// same owner (and markers written before the store counted records).
	Owned(owner string, maxRecords int) Store

	// Stats returns the number of live records in the store, of every owner, and
	// their size in bytes as the store counts it (the stored record: scope,
	// fingerprint, times, status, headers and body; not the store's indexes).
	// A lapsed record may still be counted for up to a minute (redis counts by the
	// minute); records written before the store counted records are not counted.
	Stats(ctx context.Context) (records, bytes int64, err error)
}

// Owner names the owner of the records of caller for operation: the operation, a
// colon, and 32 hex digits of the SHA-256 of caller and operation (each
// length-prefixed, as in Scope). The caller itself is never stored.
func Owner(caller, operation string) string {
	h := sha256.New()
	for _, s := range []string{caller, operation} {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(s))))
		h.Write([]byte(s))
	}
	return operation + ":" + hex.EncodeToString(h.Sum(nil)[:16])
}

// Pinger is the optional interface of a store that can tell whether it answers;
// both stores of this module have it.
type Pinger interface {
	Ping(ctx context.Context) error
}

// HeaderEncoding is the name under which a stored record's Metadata (the
// replayable headers) holds the name of the Codec that encoded its body. It is not a valid HTTP field name, so
// it can never be a header of an answer; a Service strips it before replaying. A
// record without it holds the body as it was sent.
const HeaderEncoding = ":encoding"

// encodingRefusal is the HeaderEncoding of a record that binds a key to a refused
// request (BindKeyOn): it holds a status and no answer. A space is not allowed in
// a Codec's Name, so no codec can write it.
const encodingRefusal = "refused request"
