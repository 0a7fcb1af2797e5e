package gateway

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/problem"
	"github.com/idkeeper/idkeeper/protocol"
)

// Buffers larger than these are not kept for reuse: a rare huge request must not
// pin its memory for good.
const (
	maxPooledIDs  = 1 << 16
	maxPooledJSON = 1 << 21
)

// buffers are one request's scratch space, pooled so that issuing allocates
// nothing per ID: the body, the IDs, and their JSON.
type buffers struct {
	body []byte
	ids  []int64
	out  []byte
}

var bufferPool = sync.Pool{New: func() any { return &buffers{body: make([]byte, 0, 512)} }}

func putBuffers(b *buffers) {
	if cap(b.ids) > maxPooledIDs {
		b.ids = nil
	}
	if cap(b.out) > maxPooledJSON {
		b.out = nil
	}
	bufferPool.Put(b)
}

// admit checks a POST /v1/ids: frame, then parse. It returns the count and
// format asked for, or the error to answer.
func (s *Server) admit(r *http.Request, b *buffers) (count int, f format, err error) {
	if err := frame(r, b); err != nil {
		return 0, 0, err
	}
	return s.parse(r, b)
}

// frame checks what can be refused without reading the request: the media type
// and the size of the body (refused unread when Content-Length declares more
// than MaxBodyBytes, and never read past MaxBodyBytes+1 bytes); then it reads the
// body into b.body.
func frame(r *http.Request, b *buffers) (err error) {
	if err := problem.CheckJSONContentType(r.Header.Get("Content-Type")); err != nil {
		return err
	}
	if r.ContentLength > MaxBodyBytes {
		return errTooLarge
	}
	b.body, err = readBody(r.Body, b.body)
	return err
}

// parse checks the query and the body that frame read.
func (s *Server) parse(r *http.Request, b *buffers) (count int, f format, err error) {
	if f, err = parseQuery(r.URL.RawQuery); err != nil {
		return 0, 0, err
	}
	if count, err = decodeCount(b.body, s.maxCount); err != nil {
		return 0, 0, err
	}
	return count, f, nil
}

// refuse answers a request that admit refused. A 413 closes the connection, so
// that net/http does not read the rest of the body to reuse it.
func refuse(w http.ResponseWriter, err error) {
	if protocol.ErrorCode(err) == protocol.CodeBodyTooLarge {
		w.Header().Set("Connection", "close")
	}
	writeProblem(w, err)
}

// admitted passes to next (the idempotency layer) only the POST /v1/ids that
// frame accepts, with the body it read; it answers the others (415, 413) itself.
// So a request refused for its media type or size claims no Idempotency-Key and
// leaves no record, and the layer never reads more than the MaxBodyBytes that
// frame did. A request refused for its query or body does reach the layer: issue
// refuses it there with 400, which binds the key to that request without storing
// the answer (idempotency.BindKeyOn), so that the same key with another body is
// 422, never a mint. A request without the header goes to next as it is: the
// layer reads no body of it, and issue checks it.
func (s *Server) admitted(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, keyed := r.Header[idempotency.HeaderKey]; !keyed {
			next.ServeHTTP(w, r)
			return
		}
		b := bufferPool.Get().(*buffers)
		defer putBuffers(b)
		if err := frame(r, b); err != nil {
			refuse(w, err)
			return
		}
		checked := r.WithContext(r.Context()) // a shallow copy: handlers leave r alone
		checked.Body = io.NopCloser(bytes.NewReader(b.body))
		checked.ContentLength = int64(len(b.body))
		next.ServeHTTP(w, checked)
	})
}

// issue serves POST /v1/ids. Behind the idempotency layer it checks the request
// again; admitted has read the same body already, so it passes.
func (s *Server) issue(w http.ResponseWriter, r *http.Request) {
	b := bufferPool.Get().(*buffers)
	defer putBuffers(b)
	count, f, err := s.admit(r, b)
	if err != nil {
		refuse(w, err)
		return
	}
	b.ids = slices.Grow(b.ids[:0], count)[:count]
	if err := s.mint(b.ids); err != nil {
		writeProblem(w, unavailable(err))
		return
	}
	b.out = appendIDs(b.out[:0], b.ids, f)
	h := w.Header()
	problem.SetHeaders(h, "application/json")
	// net/http computes the length of a short answer itself; a long one would be
	// sent chunked without it.
	if len(b.out) >= 2048 {
		h.Set("Content-Length", strconv.Itoa(len(b.out)))
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.out)
	s.m.issued.Add(float64(count))
}

// chunkSource is an IDSource that mints on a given generator: *client.Session
// (NextIDsOn). i is taken modulo NumGenerators.
type chunkSource interface {
	NextIDsOn(i int, dst []int64) error
}

// nodeIDCounter is the optional NumNodeIDs of an IDSource, as *client.Session
// has: the node IDs it mints with now, which grows and shrinks when it leases node
// IDs on demand. NextIDsOn takes its i modulo that count.
type nodeIDCounter interface {
	NumNodeIDs() int
}

// nextChunk spreads the first chunk of successive large requests over the
// generators.
var nextChunk atomic.Uint64

// mint fills dst, all or nothing. A request larger than one millisecond of one
// generator is split into up to NumGenerators chunks minted in parallel, each on its
// own generator when the source is a chunkSource: each chunk is then claimed in one
// step (fair waiting: the requests for one node ID are served in the order they
// claim). The chunks interleave by timestamp, so the whole is sorted again. When a
// chunk fails the others still finish (they write into dst), and everything is
// dropped.
func (s *Server) mint(dst []int64) error {
	n := s.src.NumGenerators()
	if c, ok := s.src.(nodeIDCounter); ok {
		n = c.NumNodeIDs() // node IDs on demand: every node ID held now
	}
	chunk := 1024
	if l, ok := s.currentLayout(); ok {
		chunk = int(l.MaxSequence()) + 1
	}
	parts := min(n, (len(dst)+chunk-1)/chunk)
	if parts <= 1 {
		return s.src.NextIDs(dst)
	}
	cs, perGen := s.src.(chunkSource)
	first := int(nextChunk.Add(uint64(parts)) % uint64(n))
	mintPart := func(i int, part []int64) error {
		if perGen {
			return cs.NextIDsOn(first+i, part)
		}
		return s.src.NextIDs(part)
	}
	size := (len(dst) + parts - 1) / parts
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for i := 1; i < parts; i++ {
		part := dst[i*size : min((i+1)*size, len(dst))]
		wg.Go(func() { errs[i] = mintPart(i, part) })
	}
	errs[0] = mintPart(0, dst[:size])
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	slices.Sort(dst)
	return nil
}

// appendIDs appends {"ids":[…]} and a newline to out, the IDs as JSON numbers or
// strings.
func appendIDs(out []byte, ids []int64, f format) []byte {
	per := 20 // 19 digits and a comma
	if f == formatString {
		per += 2
	}
	out = slices.Grow(out, len(`{"ids":[]}`)+1+len(ids)*per)
	out = append(out, `{"ids":[`...)
	for i, id := range ids {
		if i > 0 {
			out = append(out, ',')
		}
		if f == formatString {
			out = append(out, '"')
			out = strconv.AppendInt(out, id, 10)
			out = append(out, '"')
		} else {
			out = strconv.AppendInt(out, id, 10)
		}
	}
	return append(out, "]}\n"...)
}
