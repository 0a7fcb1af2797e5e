package backup

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"testing"

	"github.com/idkeeper/idkeeper/snapshot"
)

// FuzzReader: the Reader never panics and holds at most one line, whatever the
// input; what it accepts whole is exactly what a Writer writes of the records it
// returned (one spelling per snapshot); what it refuses is a *FormatError or a
// read error, never io.EOF before the trailer.
func FuzzReader(f *testing.F) {
	meta, recs := sample()
	data := write(f, meta, recs)
	f.Add(data)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(data)
	zw.Close()
	f.Add(gz.Bytes())
	for _, r := range refusals(f, data) {
		if len(r.data) < 4096 {
			f.Add(r.data)
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		rd, err := NewReader(bytes.NewReader(in))
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("NewReader: %v is no FormatError", err)
			}
			return
		}
		var got []snapshot.Record
		w := new(bytes.Buffer)
		bw := NewWriter(w, Source{Store: rd.Header().Store, TakenAt: rd.Header().TakenAt})
		if err := bw.WriteMeta(rd.Header().Meta); err != nil {
			t.Fatalf("the header read cannot be written: %v", err)
		}
		for {
			rec, err := rd.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				var fe *FormatError
				if !errors.As(err, &fe) {
					t.Fatalf("Next: %v is no FormatError", err)
				}
				if _, again := rd.Next(); again != err {
					t.Fatalf("Next after %v: %v", err, again)
				}
				return
			}
			got = append(got, rec)
			if err := bw.WriteRecord(rec); err != nil {
				t.Fatalf("record %d read cannot be written: %v", len(got), err)
			}
		}
		if err := bw.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if len(in) >= 2 && in[0] == 0x1f && in[1] == 0x8b {
			return // compressed: the content is compared below on the plain seeds
		}
		if !bytes.Equal(w.Bytes(), in) {
			t.Fatalf("accepted a file that is not what a Writer writes of its records:\n%q\nrewritten:\n%q", in, w.Bytes())
		}
		if s := rd.Summary(); s.Bytes != int64(len(in)) || s.SHA256 != bw.Summary().SHA256 {
			t.Fatalf("summary %+v after %d bytes", s, len(in))
		}
	})
}
