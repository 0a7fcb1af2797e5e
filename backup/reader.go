package backup

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"

	"github.com/idkeeper/idkeeper/snapshot"
)

// Reader reads one backup. NewReader reads and checks the header; Next returns
// the records one at a time (it implements snapshot.Source), checking
// every line as it goes — its JSON (strict and canonical), its bounds, its place
// in the snapshot — and returns io.EOF only after the trailer: the record count
// and the SHA-256 of every byte before the trailer match, and nothing follows.
// Any other end is an error (a *FormatError for a fault of the file), and stays
// the answer of every later Next. A gzip-compressed file is read as the file it
// compresses. A Reader holds one line (at most MaxLine bytes) and a few counters,
// never the records. Not safe for concurrent use.
type Reader struct {
	br    *bufio.Reader
	h     hash.Hash
	line  int   // lines read
	bytes int64 // bytes read, uncompressed
	hdr   Header
	chk   checker
	err   error
	sum   string
}

// headerStart is how every backup begins; a damaged header that begins so is
// damaged, not "not a backup".
var headerStart = []byte(`{"format":"` + FormatName + `"`)

// NewReader reads the header of the backup r. Errors: a *FormatError wrapping
// ErrNotBackup (an empty file, anything but a backup header), ErrNewerVersion
// (a format version above Version: upgrade idkeeper), ErrTruncated or ErrDamaged
// (a malformed header); or the error of r.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, MaxLine+1)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, readErr(1, err)
		}
		br = bufio.NewReaderSize(zr, MaxLine+1)
	}
	rd := &Reader{br: br, h: sha256.New()}
	line, err := rd.readLine()
	switch {
	case errors.Is(err, io.EOF):
		return nil, &FormatError{Kind: ErrNotBackup, Msg: "the file is empty"}
	case err != nil && len(line) > 0 && !bytes.HasPrefix(line, headerStart) && !bytes.HasPrefix(headerStart, line):
		// A first line cut short or too long that cannot begin a header.
		return nil, &FormatError{Kind: ErrNotBackup, Msg: "it does not start with a backup header line"}
	case err != nil:
		return nil, err
	}
	var probe struct {
		Format  any `json:"format"`
		Version any `json:"version"`
	}
	if json.Unmarshal(line, &probe) != nil || probe.Format != FormatName {
		if bytes.HasPrefix(line, headerStart) {
			return nil, &FormatError{Line: 1, Kind: ErrDamaged, Msg: "the header is not JSON"}
		}
		return nil, &FormatError{Kind: ErrNotBackup, Msg: "it does not start with a backup header line"}
	}
	v, ok := probe.Version.(float64)
	switch {
	case !ok || v != math.Trunc(v) || v < 1:
		return nil, &FormatError{Line: 1, Kind: ErrDamaged, Msg: "the header's version is not a format version"}
	case v > Version:
		return nil, &FormatError{Line: 1, Kind: ErrNewerVersion,
			Msg: fmt.Sprintf("format version %.0f; this idkeeper reads version %d: upgrade idkeeper to import it", v, Version)}
	}
	if rd.hdr, err = decodeHeader(line); err != nil {
		return nil, &FormatError{Line: 1, Kind: ErrDamaged, Msg: "header: " + err.Error()}
	}
	if rd.chk, err = newChecker(rd.hdr.Meta); err != nil {
		return nil, &FormatError{Line: 1, Kind: ErrDamaged, Msg: "header: " + err.Error()}
	}
	rd.hash(line)
	return rd, nil
}

// Header is the file's header.
func (r *Reader) Header() Header { return r.hdr }

// Summary is what was read so far; SHA256 is set once Next returned io.EOF.
func (r *Reader) Summary() Summary {
	return Summary{Header: r.hdr, Counts: r.chk.counts, Bytes: r.bytes, SHA256: r.sum}
}

// Next returns the next record, or io.EOF after the trailer proved the file whole.
func (r *Reader) Next() (snapshot.Record, error) {
	if r.err != nil {
		return snapshot.Record{}, r.err
	}
	rec, err := r.next()
	if err != nil {
		r.err = err
	}
	return rec, err
}

func (r *Reader) damaged(format string, args ...any) error {
	return &FormatError{Line: r.line, Kind: ErrDamaged, Msg: fmt.Sprintf(format, args...)}
}

func (r *Reader) next() (snapshot.Record, error) {
	var none snapshot.Record
	line, err := r.readLine()
	if errors.Is(err, io.EOF) {
		return none, &FormatError{Kind: ErrTruncated, Msg: fmt.Sprintf("the file ends after line %d, without its trailer", r.line)}
	}
	if err != nil {
		return none, err
	}
	var probe struct {
		Kind json.RawMessage `json:"kind"`
		End  json.RawMessage `json:"end"`
	}
	if err := json.Unmarshal(line, &probe); err != nil {
		return none, r.damaged("%v", jsonProblem(err))
	}
	if probe.End != nil {
		return none, r.trailer(line)
	}
	var kind string
	if err := json.Unmarshal(probe.Kind, &kind); err != nil {
		return none, r.damaged("a record needs a member \"kind\" naming its kind")
	}
	rec, err := decodeRecord(kind, line, r.hdr.Redacted)
	if err == nil {
		err = r.chk.add(rec)
	}
	if err != nil {
		return none, r.damaged("%v", err)
	}
	r.hash(line)
	return rec, nil
}

// trailer checks the trailer line and that nothing follows it.
func (r *Reader) trailer(line []byte) error {
	var t trailerLine
	if err := strict(line, &t); err != nil {
		return r.damaged("trailer: %v", err)
	}
	if !t.End {
		return r.damaged("trailer: end must be true")
	}
	if err := r.chk.finish(); err != nil {
		return r.damaged("%v", err)
	}
	if n := r.chk.counts.Records(); t.Records != uint64(n) {
		return r.damaged("the trailer counts %d records, the file holds %d", t.Records, n)
	}
	sum := hex.EncodeToString(r.h.Sum(nil))
	if t.SHA256 != sum {
		return r.damaged("checksum mismatch: the trailer says sha256 %.16s…, the content has %.16s…", t.SHA256, sum)
	}
	switch _, err := r.br.ReadByte(); {
	case err == nil:
		return &FormatError{Line: r.line + 1, Kind: ErrDamaged, Msg: "data after the trailer"}
	case !errors.Is(err, io.EOF):
		return readErr(r.line+1, err)
	}
	r.sum = sum
	return io.EOF
}

func (r *Reader) hash(line []byte) {
	r.h.Write(line)
	r.h.Write([]byte{'\n'})
}

// readLine reads the next line, without its line feed. At the end of the file it
// returns io.EOF; a last line without its line feed is ErrTruncated, one longer
// than MaxLine ErrDamaged; with an error, what was read of the line is returned
// too.
func (r *Reader) readLine() ([]byte, error) {
	b, err := r.br.ReadSlice('\n')
	if err == nil {
		r.line++
		r.bytes += int64(len(b))
		return b[:len(b)-1], nil
	}
	n := r.line + 1
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return b, &FormatError{Line: n, Kind: ErrDamaged, Msg: fmt.Sprintf("the line is longer than %d bytes", MaxLine)}
	case errors.Is(err, io.EOF) && len(b) == 0:
		return nil, io.EOF
	case errors.Is(err, io.EOF):
		return b, &FormatError{Line: n, Kind: ErrTruncated, Msg: "the file ends inside this line"}
	}
	return b, readErr(n, err)
}

// readErr classifies an error of the underlying reader: a compressed stream that
// is cut short or corrupt is the file's fault.
func readErr(line int, err error) error {
	var ce flate.CorruptInputError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &FormatError{Line: line, Kind: ErrTruncated, Msg: "the compressed stream ends early"}
	case errors.Is(err, gzip.ErrChecksum), errors.Is(err, gzip.ErrHeader), errors.As(err, &ce):
		return &FormatError{Line: line, Kind: ErrDamaged, Msg: "the compressed stream is corrupt: " + err.Error()}
	}
	return fmt.Errorf("read the backup: %w", err)
}

// Verify reads the whole backup r, checking it as Import would, and summarises
// it: the way to check a file before a store is touched.
func Verify(r io.Reader, opts ...Option) (Summary, error) {
	o := collect(opts)
	rd, err := NewReader(r)
	if err != nil {
		return Summary{}, err
	}
	for n := 1; ; n++ {
		if _, err := rd.Next(); errors.Is(err, io.EOF) {
			return rd.Summary(), nil
		} else if err != nil {
			return rd.Summary(), err
		}
		o.progress(n)
	}
}
