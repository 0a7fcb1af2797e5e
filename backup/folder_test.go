package backup

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/protocol"
)

// names returns the names of es.
func names(es []Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return out
}

// A Folder writes complete files under names of the pattern, lists them newest
// first with the trailer's checksum (read off the end, plain or compressed),
// opens them for download, and deletes them; the files import back.
func TestFolderCreateListOpenDelete(t *testing.T) {
	for _, gz := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "gzip"}[gz], func(t *testing.T) {
			ctx := context.Background()
			clk := fakeclock.New(t0)
			s := openBolt(t, clk)
			populate(t, s, clk)
			f := Folder{Dir: filepath.Join(t.TempDir(), "backups"), Gzip: gz} // created by Create
			if es, err := f.List(); err != nil || len(es) != 0 {
				t.Fatalf("List of a missing folder = %v, %v", es, err)
			}
			st, err := s.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var made []Entry
			for i := range 3 {
				at := t0.Add(time.Duration(i)*time.Hour + 1500*time.Millisecond)
				e, sum, err := f.Create(ctx, s, Source{Store: "bolt"}, at)
				if err != nil {
					t.Fatal(err)
				}
				want := FileName(at.Truncate(time.Second), st.Generation.ID, gz)
				if e.Name != want || !ValidName(e.Name) || e.Generation != st.Generation.ID[:8] || e.Compressed != gz {
					t.Fatalf("entry %+v, want the name %s", e, want)
				}
				if e.SHA256 != sum.SHA256 || e.Records != uint64(sum.Counts.Records()) || !e.TakenAt.Equal(at.Truncate(time.Second)) {
					t.Fatalf("entry %+v, summary %+v", e, sum)
				}
				fi, err := os.Stat(filepath.Join(f.Dir, e.Name))
				if err != nil || fi.Size() != e.Size || fi.Mode().Perm() != 0o600 {
					t.Fatalf("file %v %v, entry size %d", fi, err, e.Size)
				}
				if gz && e.Size >= sum.Bytes {
					t.Errorf("compressed %d bytes of %d", e.Size, sum.Bytes)
				}
				made = append(made, e)
			}
			if fi, err := os.Stat(f.Dir); err != nil || fi.Mode().Perm() != 0o700 {
				t.Fatalf("folder %v %v", fi, err)
			}
			// Other files are not backups.
			for _, n := range []string{"notes.txt", "idkeeper-20260101T000000Z-zzzzzzzz.idkbackup", "idkeeper-x.idkbackup.tmp"} {
				if err := os.WriteFile(filepath.Join(f.Dir, n), []byte("x\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			es, err := f.List()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := names(es), []string{made[2].Name, made[1].Name, made[0].Name}; !slices.Equal(got, want) {
				t.Fatalf("List = %v, want %v", got, want)
			}
			if !slices.Equal(es, []Entry{made[2], made[1], made[0]}) {
				t.Fatalf("List = %+v, Create said %+v", es, made)
			}
			// Open: the file, whole; it verifies and imports.
			file, e, err := f.Open(made[1].Name)
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(file)
			file.Close()
			if err != nil || int64(len(data)) != e.Size || e != made[1] {
				t.Fatalf("Open: %d bytes, %v, %+v", len(data), err, e)
			}
			if gz && (len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b) {
				t.Fatal("a .gz backup is not gzip")
			}
			sum, err := Verify(bytes.NewReader(data))
			if err != nil || sum.SHA256 != e.SHA256 {
				t.Fatalf("Verify: %+v, %v", sum, err)
			}
			target := openBolt(t, clk)
			plan, err := PlanFor(ctx, target, clk.Now(), time.Hour, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Import(ctx, target, bytes.NewReader(data), plan); err != nil {
				t.Fatalf("Import: %v", err)
			}
			// Delete.
			if err := f.Delete(made[1].Name); err != nil {
				t.Fatal(err)
			}
			if err := f.Delete(made[1].Name); protocol.ErrorCode(err) != protocol.CodeNotFound {
				t.Fatalf("Delete again: %v", err)
			}
			if _, _, err := f.Open(made[1].Name); protocol.ErrorCode(err) != protocol.CodeNotFound {
				t.Fatalf("Open deleted: %v", err)
			}
			if es, _ := f.List(); !slices.Equal(names(es), []string{made[2].Name, made[0].Name}) {
				t.Fatalf("after Delete: %v", names(es))
			}
		})
	}
}

// A name that is not a backup's is refused by Open, Stat and Delete as NOT_FOUND,
// whatever it points at: no path traversal, no symlink, no other file.
func TestFolderRefusesOtherNames(t *testing.T) {
	root := t.TempDir()
	f := Folder{Dir: filepath.Join(root, "backups")}
	if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(root, "idkeeper-20260101T000000Z-0123abcd.idkbackup")
	if err := os.WriteFile(secret, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := "idkeeper-20260102T000000Z-0123abcd.idkbackup"
	if err := os.Symlink(secret, filepath.Join(f.Dir, link)); err != nil {
		t.Fatal(err)
	}
	dir := "idkeeper-20260103T000000Z-0123abcd.idkbackup"
	if err := os.Mkdir(filepath.Join(f.Dir, dir), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", ".", "..", "../idkeeper-20260101T000000Z-0123abcd.idkbackup",
		"..%2fidkeeper-20260101T000000Z-0123abcd.idkbackup", "/etc/passwd", "idkeeper-20260101T000000Z-0123abcd.idkbackup/..",
		"sub/idkeeper-20260101T000000Z-0123abcd.idkbackup", "idkeeper-20260101T000000Z-0123ABCD.idkbackup",
		"idkeeper-20260101T000000Z-0123abcd.idkbackup.tmp", "idkeeper-20260101T000000Z-0123abcd.idkbackup.gz.gz",
		"idkeeper-20260101T000000Z-0123abcd.idkbackup\x00", " idkeeper-20260101T000000Z-0123abcd.idkbackup",
		"idkeeper-20260101T000000Z-0123abcd.idkbackup\n", "idkeeper-20261301T000000Z-0123abcd.idkbackup",
		link, dir, "idkeeper-20260101T000000Z-0123abcd.idkbackup"} {
		if _, err := f.Stat(name); protocol.ErrorCode(err) != protocol.CodeNotFound {
			t.Errorf("Stat(%q): %v", name, err)
		}
		if file, _, err := f.Open(name); protocol.ErrorCode(err) != protocol.CodeNotFound {
			if file != nil {
				file.Close()
			}
			t.Errorf("Open(%q): %v", name, err)
		}
		if err := f.Delete(name); protocol.ErrorCode(err) != protocol.CodeNotFound {
			t.Errorf("Delete(%q): %v", name, err)
		}
	}
	if _, err := os.Stat(secret); err != nil {
		t.Fatalf("the file outside the folder: %v", err)
	}
	if es, err := f.List(); err != nil || len(es) != 0 {
		t.Fatalf("List = %v, %v", es, err)
	}
	if (Folder{}).Delete("idkeeper-20260101T000000Z-0123abcd.idkbackup") == nil {
		t.Fatal("a Folder without Dir deleted something")
	}
}

// Two backups of one second: the second is refused, the first stays whole.
func TestFolderCreateSameSecond(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	s := openBolt(t, clk)
	populate(t, s, clk)
	f := Folder{Dir: t.TempDir()}
	e, _, err := f.Create(ctx, s, Source{Store: "bolt"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Create(ctx, s, Source{Store: "bolt"}, t0.Add(300*time.Millisecond)); protocol.ErrorCode(err) != protocol.CodeConflict {
		t.Fatalf("second Create of the second: %v", err)
	}
	// A backup of that second being written (its temporary file is there).
	tmp := filepath.Join(f.Dir, "idkeeper-"+t0.Add(time.Second).Format(nameTime)+FileExt+".tmp")
	if err := os.WriteFile(tmp, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Create(ctx, s, Source{Store: "bolt"}, t0.Add(time.Second)); protocol.ErrorCode(err) != protocol.CodeConflict ||
		!strings.Contains(err.Error(), "being written") {
		t.Fatalf("Create beside a temporary file: %v", err)
	}
	if es, err := f.List(); err != nil || len(es) != 1 || es[0] != e {
		t.Fatalf("List = %+v, %v", es, err)
	}
}

// A failed backup leaves nothing: no file, no temporary file.
func TestFolderCreateFails(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	s := openBolt(t, clk) // not initialised: STORE_NOT_INITIALISED
	f := Folder{Dir: t.TempDir(), Gzip: true}
	if _, _, err := f.Create(ctx, s, Source{Store: "bolt"}, t0); protocol.ErrorCode(err) != protocol.CodeStoreNotInitialised {
		t.Fatalf("Create on an empty store: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	populate(t, s, clk)
	if _, _, err := f.Create(cctx, s, Source{Store: "bolt"}, t0); err == nil {
		t.Fatal("Create with an ended context succeeded")
	}
	if des, _ := os.ReadDir(f.Dir); len(des) != 0 {
		t.Fatalf("left behind: %v", des)
	}
	// A folder that cannot be created.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := (Folder{Dir: filepath.Join(file, "sub")}).Create(ctx, s, Source{Store: "bolt"}, t0); err == nil {
		t.Fatal("Create under a file succeeded")
	}
}

// The trailer of a damaged file is not made up; a gzip file written by another
// tool (one member) is read whole for it.
func TestFolderListReadsTrailers(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	s := openBolt(t, clk)
	populate(t, s, clk)
	f := Folder{Dir: t.TempDir()}
	e, _, err := f.Create(ctx, s, Source{Store: "bolt"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(f.Dir, e.Name))
	if err != nil {
		t.Fatal(err)
	}
	// The same content, gzipped in one member by another tool.
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write(data)
	zw.Close()
	other := FileName(t0.Add(time.Hour), e.Generation, true)
	if err := os.WriteFile(filepath.Join(f.Dir, other), zb.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	// Cut short: no trailer.
	cut := FileName(t0.Add(2*time.Hour), e.Generation, false)
	if err := os.WriteFile(filepath.Join(f.Dir, cut), data[:len(data)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	// A trailer that is not canonical.
	bad := FileName(t0.Add(3*time.Hour), e.Generation, false)
	if err := os.WriteFile(filepath.Join(f.Dir, bad), []byte(`{"end": true,"records":1,"sha256":"`+e.SHA256+`"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	es, err := f.List()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Entry{}
	for _, x := range es {
		got[x.Name] = x
	}
	if x := got[other]; x.SHA256 != e.SHA256 || x.Records != e.Records || !x.Compressed {
		t.Errorf("one-member gzip: %+v, want sha256 %s", x, e.SHA256)
	}
	for _, n := range []string{cut, bad} {
		if x := got[n]; x.SHA256 != "" || x.Records != 0 || x.Size == 0 {
			t.Errorf("damaged %s: %+v", n, x)
		}
	}
}

// Prune keeps the newest keep backups and none older than maxAge, never the
// newest, and removes a crash's stale temporary files.
func TestFolderPrune(t *testing.T) {
	dir := t.TempDir()
	f := Folder{Dir: dir}
	var all []string // newest first
	for i := 9; i >= 0; i-- {
		n := FileName(t0.Add(time.Duration(i)*24*time.Hour), "0123abcd", i%2 == 0)
		all = append(all, n)
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	oldTmp := filepath.Join(dir, "idkeeper-"+t0.Format(nameTime)+FileExt+".tmp")
	newTmp := filepath.Join(dir, "idkeeper-"+t0.Add(time.Hour).Format(nameTime)+FileExt+".tmp")
	foreign := filepath.Join(dir, "keep-me.tmp")
	for _, p := range []string{oldTmp, newTmp, foreign} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	now := t0.Add(9*24*time.Hour + time.Hour)
	if err := os.Chtimes(oldTmp, now.Add(-25*time.Hour), now.Add(-25*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(newTmp, now.Add(-time.Hour), now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	list := func() []string {
		es, err := f.List()
		if err != nil {
			t.Fatal(err)
		}
		return names(es)
	}
	// No limits: no backup goes; the temporary file over a day old does.
	if gone, err := f.Prune(0, 0, now); err != nil || len(gone) != 0 {
		t.Fatalf("Prune(0, 0) = %v, %v", names(gone), err)
	}
	for p, want := range map[string]bool{oldTmp: false, newTmp: true, foreign: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s there: %v, want %t", filepath.Base(p), err == nil, want)
		}
	}
	// By count.
	gone, err := f.Prune(7, 0, now)
	if err != nil || !slices.Equal(names(gone), all[7:]) || !slices.Equal(list(), all[:7]) {
		t.Fatalf("Prune(7) deleted %v (%v), left %v", names(gone), err, list())
	}
	// By age: taken more than 4 days before now (all[k] is k days and an hour old).
	gone, err = f.Prune(0, 4*24*time.Hour, now)
	if err != nil || !slices.Equal(names(gone), all[4:7]) || !slices.Equal(list(), all[:4]) {
		t.Fatalf("Prune(0, 4d) deleted %v (%v), left %v", names(gone), err, list())
	}
	// Both; the newest stays however old.
	gone, err = f.Prune(3, time.Hour, now.Add(365*24*time.Hour))
	if err != nil || !slices.Equal(names(gone), all[1:4]) || !slices.Equal(list(), all[:1]) {
		t.Fatalf("Prune(3, 1h) deleted %v (%v), left %v", names(gone), err, list())
	}
	if gone, err = f.Prune(1, time.Nanosecond, now.Add(365*24*time.Hour)); err != nil || len(gone) != 0 {
		t.Fatalf("Prune of the last one: %v, %v", names(gone), err)
	}
}

// splitGzip makes one gzip stream of whatever writes it is given, with the last
// line stored, CRC-32 and length checked, at the end of the file.
func TestSplitGzip(t *testing.T) {
	trailer := `{"end":true,"records":3,"sha256":"` + strings.Repeat("0f", 32) + `"}` + "\n"
	for _, size := range []int{0, 10, 255, 256, 257, 1000, 70000} {
		var content bytes.Buffer
		for i := 0; content.Len() < size; i++ {
			content.WriteString(strings.Repeat("x", i%97) + "\n")
		}
		content.WriteString(trailer)
		want := content.Bytes()
		for _, chunk := range []int{1, 7, 255, 256, 300, 1 << 16} {
			var out bytes.Buffer
			g := &splitGzip{out: &out, zw: gzip.NewWriter(&out)}
			for rest := want; len(rest) > 0; {
				n := min(chunk, len(rest))
				if k, err := g.Write(rest[:n]); err != nil || k != n {
					t.Fatalf("Write: %d %v", k, err)
				}
				rest = rest[n:]
			}
			if err := g.finish(); err != nil {
				t.Fatal(err)
			}
			zr, err := gzip.NewReader(bytes.NewReader(out.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(zr)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("size %d, chunks of %d: %d bytes back, %v", size, chunk, len(got), err)
			}
			path := filepath.Join(t.TempDir(), "f.gz")
			if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			tl, ok := readTrailer(f, int64(out.Len()), true)
			f.Close()
			if !ok || tl.Records != 3 || !bytes.Contains(out.Bytes()[max(0, out.Len()-tailSize):], []byte(trailer)) {
				t.Fatalf("size %d, chunks of %d: trailer %+v %t", size, chunk, tl, ok)
			}
		}
	}
}
