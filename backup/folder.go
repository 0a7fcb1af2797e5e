package backup

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snapshot"
)

// A backup folder (issue #12): the files the scheduled and manual backups of a
// server write, one per backup, named
//
//	idkeeper-YYYYMMDDTHHMMSSZ-GGGGGGGG.idkbackup[.gz]
//
// after the time the snapshot was taken (UTC, to the second) and the first 8 hex
// digits of the store's generation ID. Nothing else in the folder is listed,
// opened or deleted: a name that does not match the pattern exactly is refused,
// so no name reaches outside the folder.

// FileExt ends the name of every backup in a Folder (before ".gz").
const FileExt = ".idkbackup"

// nameTime is the time part of a backup's name.
const nameTime = "20060102T150405Z"

var nameRE = regexp.MustCompile(`^idkeeper-([0-9]{8}T[0-9]{6}Z)-([0-9a-f]{8})\.idkbackup(\.gz)?$`)

// staleTemp is how old a temporary file (".tmp") of a Folder must be before Prune
// deletes it: a crash's leftover, never a backup still being written.
const staleTemp = 24 * time.Hour

// Folder is a directory of backup files. Its zero value is unusable: Dir is
// required. Safe for concurrent use (it holds no state); two Creates of the same
// second are refused rather than mixed up.
type Folder struct {
	Dir string
	// Gzip makes Create compress its files as a whole (NAME.idkbackup.gz): the
	// content as one gzip member and the trailer line as a second, stored
	// uncompressed, so List reads the checksum off the end of the file as it does
	// of a plain one. Either kind is listed, opened and imported.
	Gzip bool
}

// Entry is one backup file of a Folder.
type Entry struct {
	Name    string
	Size    int64     // bytes on disk
	TakenAt time.Time // when the snapshot was taken, from the name (UTC, to the second)
	// Generation is the first 8 hex digits of the store's generation ID, from the name.
	Generation string
	Compressed bool
	// SHA256 and Records are the trailer's: the checksum of the content and its
	// number of records, as the file claims them (List reads only the trailer;
	// Verify checks the whole file). Both are empty when the trailer cannot be
	// read: the file is damaged.
	SHA256  string
	Records uint64
}

// ValidName reports whether name is the name of a backup a Folder may hold.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// FileName is the name of a backup taken at t of a store whose generation ID is
// gen, compressed or not.
func FileName(t time.Time, gen string, compressed bool) string {
	if len(gen) > 8 {
		gen = gen[:8]
	}
	name := "idkeeper-" + t.UTC().Format(nameTime) + "-" + strings.ToLower(gen) + FileExt
	if compressed {
		name += ".gz"
	}
	return name
}

// notFound is the error of a name that is not a backup of the folder.
func notFound(name string) error {
	if !ValidName(name) {
		return protocol.Errorf(protocol.CodeNotFound, "no backup named %q: a backup's name is "+
			"idkeeper-YYYYMMDDTHHMMSSZ-GENERATION%s[.gz]", name, FileExt)
	}
	return protocol.Errorf(protocol.CodeNotFound, "no backup named %q", name)
}

// parseName returns what the name of a backup says, ok false when it is none.
func parseName(name string) (e Entry, ok bool) {
	m := nameRE.FindStringSubmatch(name)
	if m == nil {
		return Entry{}, false
	}
	t, err := time.Parse(nameTime, m[1])
	if err != nil {
		return Entry{}, false
	}
	return Entry{Name: name, TakenAt: t, Generation: m[2], Compressed: m[3] != ""}, true
}

// Create writes a backup of s taken at now into the folder (created, mode 0700,
// when missing) and returns its entry and the export's summary. It writes
// NAME.tmp (mode 0600: a backup holds key and password hashes), syncs it to disk,
// renames it to NAME and syncs the folder: a crash or an error never leaves a
// half file under a backup's name (on an error the temporary file is removed).
// src.TakenAt is set to now. Errors: CONFLICT when a backup of the same second
// exists or is being written, and those of Export.
func (f Folder) Create(ctx context.Context, s snapshot.Store, src Source, now time.Time) (Entry, Summary, error) {
	if f.Dir == "" {
		return Entry{}, Summary{}, errors.New("backup: the folder has no Dir")
	}
	if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		return Entry{}, Summary{}, fmt.Errorf("backup: create the folder: %w", err)
	}
	now = now.UTC().Truncate(time.Second)
	src.TakenAt = now
	// The generation is known once the snapshot's header is read: the file is
	// named after it when it is complete.
	tmp := filepath.Join(f.Dir, "idkeeper-"+now.Format(nameTime)+FileExt+".tmp")
	file, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return Entry{}, Summary{}, protocol.Errorf(protocol.CodeConflict,
			"a backup taken at %s is being written: wait a second and try again", now.Format(time.RFC3339))
	}
	if err != nil {
		return Entry{}, Summary{}, fmt.Errorf("backup: %w", err)
	}
	name, sum, err := f.write(ctx, file, s, src)
	if cerr := file.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("backup: %w", cerr)
	}
	if err == nil {
		final := filepath.Join(f.Dir, name)
		if _, serr := os.Lstat(final); serr == nil {
			err = protocol.Errorf(protocol.CodeConflict, "a backup named %s exists: wait a second and try again", name)
		} else if err = os.Rename(tmp, final); err != nil {
			err = fmt.Errorf("backup: %w", err)
		}
	}
	if err != nil {
		_ = os.Remove(tmp)
		return Entry{}, sum, err
	}
	syncFolder(f.Dir)
	e, err := f.Stat(name)
	if err != nil {
		return Entry{}, sum, err
	}
	return e, sum, nil
}

// write exports s into file, compressed when f.Gzip, and syncs it; it returns the
// backup's name.
func (f Folder) write(ctx context.Context, file *os.File, s snapshot.Store, src Source) (string, Summary, error) {
	bw := bufio.NewWriterSize(file, 256<<10)
	var w io.Writer = bw
	var zw *splitGzip
	if f.Gzip {
		zw = &splitGzip{out: bw, zw: gzip.NewWriter(bw)}
		w = zw
	}
	sum, err := Export(ctx, s, w, src)
	if err == nil && zw != nil {
		err = zw.finish()
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = file.Sync()
	}
	if err != nil {
		return "", sum, err
	}
	return FileName(src.TakenAt, sum.Header.Meta.Generation.ID, f.Gzip), sum, nil
}

// syncFolder makes a rename or a removal in dir durable; a failure only costs
// that guarantee.
func syncFolder(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}

// holdBack is how many bytes splitGzip keeps back: more than a trailer line.
const holdBack = 256

// splitGzip compresses what is written to it as one gzip member, but for its last
// line, the trailer, which finish writes as a second member stored uncompressed:
// the trailer's text then stands, with its CRC-32 and length, at the end of the
// file. Concatenated members are one gzip stream to every reader (gzip -d, Go's
// gzip.Reader).
type splitGzip struct {
	out  io.Writer
	zw   *gzip.Writer
	hold []byte
}

func (g *splitGzip) Write(p []byte) (int, error) {
	n := len(p)
	if len(g.hold)+len(p) <= holdBack {
		g.hold = append(g.hold, p...)
		return n, nil
	}
	over := len(g.hold) + len(p) - holdBack // bytes that can go now
	if over <= len(g.hold) {
		if _, err := g.zw.Write(g.hold[:over]); err != nil {
			return 0, err
		}
		g.hold = append(g.hold[:copy(g.hold, g.hold[over:])], p...)
		return n, nil
	}
	if _, err := g.zw.Write(g.hold); err != nil {
		return 0, err
	}
	cut := over - len(g.hold)
	if _, err := g.zw.Write(p[:cut]); err != nil {
		return 0, err
	}
	g.hold = append(g.hold[:0], p[cut:]...)
	return n, nil
}

// finish writes what is held back but the last line into the first member, ends
// it, and writes the last line as the second member.
func (g *splitGzip) finish() error {
	last := 0
	if len(g.hold) > 1 {
		last = bytes.LastIndexByte(g.hold[:len(g.hold)-1], '\n') + 1
	}
	if _, err := g.zw.Write(g.hold[:last]); err != nil {
		return err
	}
	if err := g.zw.Close(); err != nil {
		return err
	}
	tw, err := gzip.NewWriterLevel(g.out, gzip.NoCompression)
	if err != nil {
		return err
	}
	if _, err := tw.Write(g.hold[last:]); err != nil {
		return err
	}
	return tw.Close()
}

// List returns the backups of the folder, newest first (by the time in their
// names); other files are left out. A missing folder has none. It reads only the
// end of each file (its trailer); a compressed file that was not written by
// Create is read whole.
func (f Folder) List() ([]Entry, error) {
	des, err := os.ReadDir(f.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []Entry{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("backup: read the folder: %w", err)
	}
	out := []Entry{}
	for _, de := range des {
		if !de.Type().IsRegular() || !ValidName(de.Name()) {
			continue
		}
		e, err := f.Stat(de.Name())
		if err != nil {
			if protocol.ErrorCode(err) == protocol.CodeNotFound {
				continue // deleted meanwhile
			}
			return nil, err
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		if c := b.TakenAt.Compare(a.TakenAt); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
	return out, nil
}

// Stat returns the entry of the backup name. Errors: NOT_FOUND for a name that
// is not a backup's or a file that is not there (or is no regular file).
func (f Folder) Stat(name string) (Entry, error) {
	file, e, err := f.Open(name)
	if err != nil {
		return Entry{}, err
	}
	defer file.Close()
	return e, nil
}

// Open opens the backup name for reading (a download) and returns its entry.
// Errors: NOT_FOUND for a name that is not a backup's (never a path: no name with
// a separator or "..") or a file that is not there or is no regular file.
func (f Folder) Open(name string) (*os.File, Entry, error) {
	e, ok := parseName(name)
	if !ok || f.Dir == "" {
		return nil, Entry{}, notFound(name)
	}
	path := filepath.Join(f.Dir, name)
	if st, err := os.Lstat(path); err != nil || !st.Mode().IsRegular() {
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil, Entry{}, notFound(name)
		}
		return nil, Entry{}, fmt.Errorf("backup: %w", err)
	}
	file, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, Entry{}, notFound(name)
	}
	if err != nil {
		return nil, Entry{}, fmt.Errorf("backup: %w", err)
	}
	st, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, Entry{}, fmt.Errorf("backup: %w", err)
	}
	e.Size = st.Size()
	if t, ok := readTrailer(file, e.Size, e.Compressed); ok {
		e.SHA256, e.Records = t.SHA256, t.Records
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		file.Close()
		return nil, Entry{}, fmt.Errorf("backup: %w", err)
	}
	return file, e, nil
}

// tailSize is how much of a file's end readTrailer reads.
const tailSize = 512

// readTrailer reads the trailer off the end of a backup file of size bytes: its
// last line, or, compressed, the stored last member that Create writes (the
// trailer's text followed by the member's CRC-32 and length, which must match
// it). A compressed file written otherwise is read whole. ok is false when there
// is no well-formed trailer.
func readTrailer(file *os.File, size int64, compressed bool) (trailerLine, bool) {
	n := min(size, tailSize)
	tail := make([]byte, n)
	if _, err := file.ReadAt(tail, size-n); err != nil {
		return trailerLine{}, false
	}
	if !compressed {
		if len(tail) == 0 || tail[len(tail)-1] != '\n' {
			return trailerLine{}, false
		}
		line := tail[bytes.LastIndexByte(tail[:len(tail)-1], '\n')+1 : len(tail)-1]
		return parseTrailer(line)
	}
	if len(tail) >= 8 {
		if i := bytes.LastIndex(tail, []byte(`{"end":`)); i >= 0 {
			if j := bytes.IndexByte(tail[i:], '\n'); j > 0 {
				text := tail[i : i+j+1]
				foot := tail[len(tail)-8:]
				if binary.LittleEndian.Uint32(foot) == crc32.ChecksumIEEE(text) &&
					binary.LittleEndian.Uint32(foot[4:]) == uint32(len(text)) {
					return parseTrailer(text[:len(text)-1])
				}
			}
		}
	}
	// Not Create's layout: the last line of the whole content.
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return trailerLine{}, false
	}
	zr, err := gzip.NewReader(bufio.NewReaderSize(file, 64<<10))
	if err != nil {
		return trailerLine{}, false
	}
	br := bufio.NewReaderSize(zr, 64<<10)
	var last []byte
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
			last = nil
			continue
		}
		if err == io.EOF && len(line) == 0 {
			break
		}
		if err != nil {
			return trailerLine{}, false
		}
		last = append(last[:0], line[:len(line)-1]...)
	}
	return parseTrailer(last)
}

// parseTrailer decodes a trailer line as the Reader does, without the checks
// that need the content.
func parseTrailer(line []byte) (trailerLine, bool) {
	var t trailerLine
	if len(line) == 0 || strict(line, &t) != nil || !t.End || hexHash("sha256", t.SHA256, true) != nil {
		return trailerLine{}, false
	}
	return t, true
}

// Delete deletes the backup name. Errors: NOT_FOUND for a name that is not a
// backup's or a file that is not there.
func (f Folder) Delete(name string) error {
	if _, ok := parseName(name); !ok || f.Dir == "" {
		return notFound(name)
	}
	path := filepath.Join(f.Dir, name)
	if st, err := os.Lstat(path); err != nil || !st.Mode().IsRegular() {
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return notFound(name)
		}
		return fmt.Errorf("backup: %w", err)
	}
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return notFound(name)
		}
		return fmt.Errorf("backup: %w", err)
	}
	syncFolder(f.Dir)
	return nil
}

// Prune deletes the backups past the retention and returns them: every backup
// but the keep newest (keep 0: no limit by count), and every backup taken more
// than maxAge before now (0: no limit by age) — never the newest, however old,
// so a folder that holds a backup keeps one. A backup with an unreadable trailer
// (damaged) counts like the others. It also deletes the temporary files that a
// crash left (".tmp", more than a day old). It goes on past a failed deletion and
// returns the errors joined.
func (f Folder) Prune(keep int, maxAge time.Duration, now time.Time) ([]Entry, error) {
	es, err := f.List()
	if err != nil {
		return nil, err
	}
	var deleted []Entry
	var errs []error
	for i, e := range es {
		if i == 0 {
			continue
		}
		if (keep > 0 && i >= keep) || (maxAge > 0 && now.Sub(e.TakenAt) > maxAge) {
			if err := f.Delete(e.Name); err != nil && protocol.ErrorCode(err) != protocol.CodeNotFound {
				errs = append(errs, err)
				continue
			}
			deleted = append(deleted, e)
		}
	}
	if des, err := os.ReadDir(f.Dir); err == nil {
		for _, de := range des {
			n := de.Name()
			if !de.Type().IsRegular() || !strings.HasSuffix(n, ".tmp") || !strings.HasPrefix(n, "idkeeper-") {
				continue
			}
			if _, ok := parseTempName(n); !ok {
				continue
			}
			if info, err := de.Info(); err == nil && now.Sub(info.ModTime()) > staleTemp {
				if err := os.Remove(filepath.Join(f.Dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, fmt.Errorf("backup: %w", err))
				}
			}
		}
	}
	return deleted, errors.Join(errs...)
}

var tempRE = regexp.MustCompile(`^idkeeper-([0-9]{8}T[0-9]{6}Z)\.idkbackup\.tmp$`)

// parseTempName returns the time of a temporary file's name, ok false when it is
// not Create's.
func parseTempName(name string) (time.Time, bool) {
	m := tempRE.FindStringSubmatch(name)
	if m == nil {
		return time.Time{}, false
	}
	t, err := time.Parse(nameTime, m[1])
	return t, err == nil
}
