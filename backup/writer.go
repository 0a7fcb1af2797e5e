package backup

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snapshot"
)

// Source tells a Writer where a snapshot comes from.
type Source struct {
	Store   string    // the store's kind: "bolt", "redis" (a-z, 0-9, '-', '_')
	TakenAt time.Time // when the snapshot was read; zero: time.Now at WriteMeta
	// Redacted writes a redacted backup (Header.Redacted): the header says so, and
	// every record is written without its secrets. Such a file never restores.
	Redacted bool
}

// Writer writes one backup: WriteMeta, then WriteRecord for every record in
// snapshot order, then Close for the trailer. Every line is checked as a Reader
// will check it before it is written, so a Writer never writes a file that
// import refuses: a record out of bounds or out of order fails the write. It
// keeps no record; its output is buffered and flushed by Close. Not safe for
// concurrent use.
type Writer struct {
	w     *bufio.Writer
	h     hash.Hash
	src   Source
	hdr   Header
	chk   checker
	bytes int64
	state int // 0: new, 1: meta written, 2: closed
	err   error
	sum   string
}

// NewWriter returns a Writer to w. It does not close w.
func NewWriter(w io.Writer, src Source) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 64<<10), h: sha256.New(), src: src}
}

func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = err
	}
	return w.err
}

// WriteMeta writes the header: the format, the source and the snapshot's meta.
func (w *Writer) WriteMeta(meta snapshot.Meta) error {
	if w.err != nil {
		return w.err
	}
	if w.state != 0 {
		return w.fail(errors.New("backup: WriteMeta called twice"))
	}
	at := w.src.TakenAt
	if at.IsZero() {
		at = time.Now()
	}
	meta.Layout = meta.Pool().LayoutOrDefault() // version 3 spells the layout out
	w.hdr = Header{Version: Version, TakenAt: protocol.Millis(at).UTC(), Store: w.src.Store, Meta: meta, Redacted: w.src.Redacted}
	line, err := encodeHeader(w.hdr)
	if err == nil {
		_, err = decodeHeader(line)
	}
	if err != nil {
		return w.fail(fmt.Errorf("backup: the header cannot be written: %w", err))
	}
	if w.chk, err = newChecker(meta); err != nil {
		return w.fail(fmt.Errorf("backup: the header cannot be written: %w", err))
	}
	w.state = 1
	return w.line(line, true)
}

// WriteRecord writes one record; a lease's receipt is left out, and so are the
// secrets in a redacted backup (Source.Redacted).
func (w *Writer) WriteRecord(rec snapshot.Record) error {
	if w.err != nil {
		return w.err
	}
	if w.state != 1 {
		return w.fail(errors.New("backup: WriteRecord before WriteMeta or after Close"))
	}
	kind, err := kindOf(rec)
	if err != nil {
		return w.fail(fmt.Errorf("backup: %w", err))
	}
	if w.src.Redacted {
		rec = redact(rec)
	}
	line, err := encodeRecord(rec)
	if err == nil {
		var dec snapshot.Record
		if dec, err = decodeRecord(kind, line, w.src.Redacted); err == nil {
			err = w.chk.add(dec)
		}
	}
	if err != nil {
		return w.fail(fmt.Errorf("backup: record %d (%s) cannot be written: %w", w.chk.counts.Records()+1, kind, err))
	}
	return w.line(line, true)
}

func (w *Writer) line(b []byte, hashed bool) error {
	if hashed {
		w.h.Write(b)
		w.h.Write([]byte{'\n'})
	}
	w.bytes += int64(len(b)) + 1
	if _, err := w.w.Write(b); err != nil {
		return w.fail(err)
	}
	if err := w.w.WriteByte('\n'); err != nil {
		return w.fail(err)
	}
	return nil
}

// Close checks that every node of the pool was written, writes the trailer (the
// record count and the checksum) and flushes. It does not close the underlying
// writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.state != 1 {
		return w.fail(errors.New("backup: Close before WriteMeta, or twice"))
	}
	if err := w.chk.finish(); err != nil {
		return w.fail(fmt.Errorf("backup: %w", err))
	}
	w.state = 2
	w.sum = hex.EncodeToString(w.h.Sum(nil))
	t, err := json.Marshal(trailerLine{End: true, Records: uint64(w.chk.counts.Records()), SHA256: w.sum})
	if err != nil {
		return w.fail(err)
	}
	if err := w.line(t, false); err != nil {
		return err
	}
	if err := w.w.Flush(); err != nil {
		return w.fail(err)
	}
	return nil
}

// Summary is what was written so far; SHA256 is set once Close succeeded.
func (w *Writer) Summary() Summary {
	return Summary{Header: w.hdr, Counts: w.chk.counts, Bytes: w.bytes, SHA256: w.sum}
}
