package backup

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/snapshot"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// annWebhook is the Discord webhook of the sample's user ann.
const annWebhook = "https://discord.com/api/webhooks/123456789012345678/tok_ann-0123456789_abcdefghijklmnopqrstuvwxyz"

// sample is a small snapshot with every kind of record: 4 node IDs (node 1
// leased, node 2 quarantined), 2 API keys, 2 users, 2 allow-list entries, 2
// audit entries up to the head and 2 lease history records (node 1's grants).
func sample() (snapshot.Meta, []snapshot.Record) {
	a1 := audit.Entry{At: t0, Actor: "user:ann", Action: "apikey.create", Target: "key:0011", RemoteIP: "10.0.0.1", Detail: "billing <x> & \"y\""}.Seal(0, "")
	a2 := audit.Entry{At: t0.Add(time.Second), Actor: "system", Action: "lease.grant", Target: "node:1"}.Seal(a1.Seq, a1.Hash)
	meta := snapshot.Meta{Generation: idkeeper.Generation{ID: "0123456789abcdef0123456789abcdef", Number: 3,
		Origin: idkeeper.OriginRecovered, At: t0.Add(-time.Hour)}, Fence: 42, Nodes: 4, Layout: idkeeper.DefaultLayout,
		AuditSeq: a2.Seq, AuditHash: a2.Hash}
	h := sha256.Sum256([]byte("secret"))
	lease := &idkeeper.Lease{NodeID: 1, Requester: idkeeper.Requester{MachineID: "host-ü", PID: 7, StartedAt: t0.Add(-time.Minute), Instance: "abc_-9"},
		NotBefore: t0.Add(time.Millisecond), ExpiresAt: t0.Add(48 * time.Hour), FencingToken: 41, GrantedAt: t0, RenewedAt: t0.Add(time.Hour), KeyID: "0011223344556677"}
	recs := []snapshot.Record{
		{Node: &idkeeper.NodeState{NodeID: 0}},
		{Node: &idkeeper.NodeState{NodeID: 1, Lease: lease, Watermark: t0.Add(48 * time.Hour), LastToken: 41}},
		{Node: &idkeeper.NodeState{NodeID: 2, Watermark: t0, Floor: t0.Add(time.Hour), QuarantinedUntil: t0.Add(2 * time.Hour), LastToken: 40, Restorable: true}},
		{Node: &idkeeper.NodeState{NodeID: 3, Watermark: t0.Add(-time.Hour), LastToken: 12}},
		{Key: &idkeeper.APIKey{ID: "0011223344556677", Hash: h[:], Description: "billing\nline two", CreatedAt: t0, CreatedBy: "cli",
			ExpiresAt: t0.Add(90 * 24 * time.Hour), MaxNodes: 3, LastUsedAt: t0.Add(time.Minute)}},
		{Key: &idkeeper.APIKey{ID: "8899aabbccddeeff", Hash: h[:], Description: "admin", CreatedAt: t0, Admin: true, Bootstrap: true, RevokedAt: t0.Add(time.Hour)}},
		{User: &account.User{Name: "ann", Role: account.RoleAdmin, PasswordHash: "$argon2id$v=19$m=65536,t=3,p=4$c2FsdA$aGFzaA", CreatedAt: t0,
			Epoch: 2, PasswordChangedAt: t0, LastLoginAt: t0.Add(time.Hour), Version: 5, Webhook: annWebhook}},
		{User: &account.User{Name: "bob", Role: account.RoleViewer, PasswordHash: "$argon2id$x", Disabled: true, CreatedAt: t0, CreatedBy: "ann", Epoch: 1, Version: 1}},
		{Allow: &allowlist.Entry{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Note: "office", CreatedBy: "user:ann", CreatedAt: t0}},
		{Allow: &allowlist.Entry{Prefix: netip.MustParsePrefix("2001:db8::/32"), CreatedAt: t0}},
		{Audit: &a1},
		{Audit: &a2},
		{History: &idkeeper.HistoryRecord{NodeID: 1, Token: 40, Requester: idkeeper.Requester{MachineID: "host-ü", PID: 6, StartedAt: t0.Add(-2 * time.Hour)},
			KeyID: "0011223344556677", GrantedAt: t0.Add(-2 * time.Hour), NotBefore: t0.Add(-2 * time.Hour), WindowEnd: t0.Add(-time.Minute),
			End: idkeeper.EndRemoved, EndedAt: t0.Add(-time.Minute), MintedUpTo: t0.Add(-time.Minute)}},
		{History: &idkeeper.HistoryRecord{NodeID: 1, Token: 41, Requester: lease.Requester, KeyID: lease.KeyID,
			Client:    idkeeper.ClientInfo{Host: "web-1.example", Labels: map[string]string{"service": "billing", "version": "1.2.3"}},
			GrantedAt: t0, NotBefore: lease.NotBefore, WindowEnd: lease.ExpiresAt}},
	}
	return meta, recs
}

// write writes meta and recs as a backup.
func write(t testing.TB, meta snapshot.Meta, recs []snapshot.Record) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, Source{Store: "bolt", TakenAt: t0.Add(2 * time.Hour)})
	if err := w.WriteMeta(meta); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.WriteRecord(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readAll reads a backup to its end.
func readAll(data []byte) (Header, []snapshot.Record, Summary, error) {
	rd, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return Header{}, nil, Summary{}, err
	}
	var recs []snapshot.Record
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return rd.Header(), recs, rd.Summary(), nil
		}
		if err != nil {
			return rd.Header(), recs, rd.Summary(), err
		}
		recs = append(recs, rec)
	}
}

// lines splits a backup into its lines, without line feeds.
func lines(data []byte) [][]byte {
	return bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
}

// reseal joins lines into a file whose trailer counts and checksums what comes
// before it, so that a test reaches the check it means rather than the checksum.
func reseal(ls [][]byte) []byte {
	var body []byte
	for _, l := range ls[:len(ls)-1] {
		body = append(append(body, l...), '\n')
	}
	sum := sha256.Sum256(body)
	return fmt.Appendf(body, `{"end":true,"records":%d,"sha256":"%s"}`+"\n", len(ls)-2, hex.EncodeToString(sum[:]))
}

// TestReadsVersion2: a version 2 file (no meta.first, no meta.layout) reads as a
// pool from node ID 0 on the default layout (the zero Layout). The file under
// testdata was written by the version 2 writer itself (the sample of commit
// 3ccbf1d^, before format version 3) and is kept frozen: never regenerate it.
func TestReadsVersion2(t *testing.T) {
	data, err := os.ReadFile("testdata/version2.backup")
	if err != nil {
		t.Fatal(err)
	}
	h, got, sum, err := readAll(data)
	if err != nil {
		t.Fatal(err)
	}
	if h.Version != 2 || h.Meta.First != 0 || h.Meta.Layout != (idkeeper.Layout{}) || h.Meta.Nodes != 4 ||
		h.Meta.Fence != 42 || h.Meta.AuditSeq != 2 || h.Store != "bolt" || !h.TakenAt.Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("version 2 header %+v", h)
	}
	if len(got) != 14 || sum.Counts != (Counts{Nodes: 4, Leases: 1, Keys: 2, Users: 2, Allow: 2, Audit: 2, History: 2}) {
		t.Fatalf("version 2 records: %d, summary %+v", len(got), sum)
	}
	n1 := got[1].Node
	if n1 == nil || n1.NodeID != 1 || n1.Lease == nil || n1.Lease.Requester.MachineID != "host-ü" ||
		n1.Lease.FencingToken != 41 || !n1.Lease.ExpiresAt.Equal(t0.Add(48*time.Hour)) || n1.LastToken != 41 {
		t.Fatalf("node 1 of the version 2 file: %+v", n1)
	}
	if k := got[4].Key; k == nil || k.ID != "0011223344556677" || k.MaxNodes != 3 || k.Description != "billing\nline two" {
		t.Fatalf("first key of the version 2 file: %+v", k)
	}
}

func TestRoundTrip(t *testing.T) {
	meta, recs := sample()
	data := write(t, meta, recs)
	h, got, sum, err := readAll(data)
	if err != nil {
		t.Fatal(err)
	}
	want := Header{Version: 3, TakenAt: t0.Add(2 * time.Hour), Store: "bolt", Meta: meta}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("header %+v, want %+v", h, want)
	}
	if !reflect.DeepEqual(got, recs) {
		for i := range got {
			if !reflect.DeepEqual(got[i], recs[i]) {
				t.Errorf("record %d: got %s, want %s", i, show(got[i]), show(recs[i]))
			}
		}
		t.Fatalf("%d records, want %d", len(got), len(recs))
	}
	wantCounts := Counts{Nodes: 4, Leases: 1, Keys: 2, Users: 2, Allow: 2, Audit: 2, History: 2}
	if sum.Counts != wantCounts || sum.Bytes != int64(len(data)) || len(sum.SHA256) != 64 || !strings.Contains(string(data), sum.SHA256) {
		t.Fatalf("summary %+v, want counts %+v and %d bytes", sum, wantCounts, len(data))
	}
	// The format as documented: the header first, the records in order, the trailer.
	ls := lines(data)
	if !bytes.HasPrefix(ls[0], []byte(`{"format":"idkeeper-backup","version":3,"takenAt":"2026-03-01T14:00:00.000Z","source":{"store":"bolt","generation":{"id":"0123456789abcdef0123456789abcdef","number":3,"origin":"recovered","at":"2026-03-01T11:00:00.000Z"}},"meta":{"fence":42,"nodes":4,"layout":"41/12/10@2026-01-01T00:00:00.000Z","auditSeq":2,"auditHash":"`)) ||
		string(ls[1]) != `{"kind":"node","id":0}` ||
		!bytes.HasPrefix(ls[len(ls)-1], []byte(`{"end":true,"records":14,"sha256":"`)) {
		t.Fatalf("the file:\n%s", data)
	}
	if bytes.Contains(data, []byte("secret")) {
		t.Fatal("a secret in the file")
	}
	// A user's webhook is kept as it is, token and all: the alerts need it.
	if !bytes.Contains(ls[7], []byte(`"version":5,"webhook":"`+annWebhook+`"}`)) || bytes.Contains(ls[8], []byte("webhook")) {
		t.Fatalf("the users' lines:\n%s\n%s", ls[7], ls[8])
	}
	// A compressed file reads as the file it compresses.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(data)
	zw.Close()
	if _, got2, sum2, err := readAll(gz.Bytes()); err != nil || !reflect.DeepEqual(got2, recs) || sum2.SHA256 != sum.SHA256 {
		t.Fatalf("gzip: %v, %d records, %s", err, len(got2), sum2.SHA256)
	}
	// A file the Reader accepts is exactly what a Writer writes of its records.
	if again := write(t, meta, got); !bytes.Equal(again, data) {
		t.Fatalf("rewritten:\n%s\nwant:\n%s", again, data)
	}
}

func show(r snapshot.Record) string {
	b, err := encodeRecord(r)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// refusal is a damaged file and what the Reader must say of it.
type refusal struct {
	name string
	data []byte
	kind error  // ErrNotBackup, ErrNewerVersion, ErrTruncated, ErrDamaged
	msg  string // in the error's text
}

// refusals are the files every reader and every import must refuse, built from the
// valid file data.
func refusals(t testing.TB, data []byte) []refusal {
	edit := func(i int, old, new string) []byte {
		ls := lines(data)
		if !bytes.Contains(ls[i], []byte(old)) {
			t.Fatalf("line %d has no %q: %s", i, old, ls[i])
		}
		ls[i] = bytes.Replace(ls[i], []byte(old), []byte(new), 1)
		return reseal(ls)
	}
	ls := lines(data)
	n := len(ls)
	rs := []refusal{
		{"empty", nil, ErrNotBackup, "empty"},
		{"not a backup", []byte("hello, world\n"), ErrNotBackup, "header"},
		{"JSON but not a backup", []byte(`{"format":"tar","version":1}` + "\n"), ErrNotBackup, "header"},
		{"binary", bytes.Repeat([]byte{0, 1, 2, 0xff}, 30000), ErrNotBackup, "header"},
		{"version 4", edit(0, `"version":3`, `"version":4`), ErrNewerVersion, "format version 4; this idkeeper reads version 3: upgrade idkeeper"},
		{"version 0", edit(0, `"version":3`, `"version":0`), ErrDamaged, "version"},
		{"version as a string", edit(0, `"version":3`, `"version":"3"`), ErrDamaged, "version"},
		{"version 2 with a layout", edit(0, `"version":3`, `"version":2`), ErrDamaged, "version 2 has no meta.first or meta.layout"},
		{"version 3 without a layout", edit(0, `,"layout":"41/12/10@2026-01-01T00:00:00.000Z"`, ``), ErrDamaged, "meta.layout is required"},
		{"layout not canonical", edit(0, `"layout":"41/12/10@2026-01-01T00:00:00.000Z"`, `"layout":"41/12/10@2026-01-01T00:00:00Z"`), ErrDamaged, "meta.layout"},
		{"layout invalid", edit(0, `"layout":"41/12/10@`, `"layout":"41/12/11@`), ErrDamaged, "meta.layout"},
		{"pool past the layout", edit(0, `"nodes":4,`, `"nodes":4,"first":4093,`), ErrDamaged, "do not fit the layout"},
		{"header without its meta", edit(0, `,"meta":{`, `,"neta":{`), ErrDamaged, "unknown member"},
		{"header not JSON", []byte(`{"format":"idkeeper-backup","version":3,` + "\n"), ErrDamaged, "header"},
		{"checksum flipped", flipChecksum(data), ErrDamaged, "checksum mismatch"},
		{"content changed, checksum kept", bytes.Replace(data, []byte(`"maxNodes":3`), []byte(`"maxNodes":4`), 1), ErrDamaged, "checksum mismatch"},
		{"record count wrong", bytes.Replace(data, []byte(`"records":14`), []byte(`"records":13`), 1), ErrDamaged, "counts 13 records"},
		{"trailing garbage", append(bytes.Clone(data), "x"...), ErrDamaged, "data after the trailer"},
		{"a second trailer", append(bytes.Clone(data), ls[n-1]...), ErrDamaged, "data after the trailer"},
		{"unknown member", edit(1, `"id":0`, `"id":0,"color":"red"`), ErrDamaged, `unknown member "color"`},
		{"wrong type", edit(1, `"id":0`, `"id":"0"`), ErrDamaged, `member "id"`},
		{"node out of range", edit(4, `"id":3`, `"id":4`), ErrDamaged, "outside the pool"},
		{"node missing", reseal(append(append([][]byte{}, ls[:4]...), ls[5:]...)), ErrDamaged, "holds 3 of the 4 nodes"},
		{"node repeated", reseal(append(append([][]byte{}, ls[:5]...), ls[4:]...)), ErrDamaged, "repeated or out of order"},
		{"negative node", edit(1, `"id":0`, `"id":-1`), ErrDamaged, "outside"},
		{"token above the counter", edit(2, `"token":41`, `"token":43`), ErrDamaged, "fencing counter"},
		{"unknown kind", edit(5, `"kind":"key"`, `"kind":"secret"`), ErrDamaged, `unknown record kind "secret"`},
		{"no kind", edit(5, `"kind":"key",`, ``), ErrDamaged, `"kind"`},
		{"duplicate member", edit(1, `"id":0`, `"id":0,"id":0`), ErrDamaged, "canonical"},
		{"white space", edit(1, `"id":0`, `"id": 0`), ErrDamaged, "canonical"},
		{"CR LF", edit(1, `}`, "}\r"), ErrDamaged, "canonical"},
		{"bad time", edit(3, `"watermark":"2026-03-01T12:00:00.000Z"`, `"watermark":"2026-03-01T12:00:00Z"`), ErrDamaged, "not a time"},
		{"bad hash", edit(5, `"hash":"2bb8`, `"hash":"XX`), ErrDamaged, "hash"},
		{"bad prefix", edit(9, `"10.0.0.0/8"`, `"10.1.0.0/8"`), ErrDamaged, "masked"},
		{"bad role", edit(7, `"role":"admin"`, `"role":"root"`), ErrDamaged, "role"},
		{"webhook not https", edit(7, `"webhook":"https://`, `"webhook":"http://`), ErrDamaged,
			"line 8: user ann: webhook: discord: invalid webhook URL: scheme must be https"},
		{"webhook elsewhere", edit(7, `"webhook":"https://discord.com/`, `"webhook":"https://evil.example/`), ErrDamaged,
			`line 8: user ann: webhook: discord: invalid webhook URL: host "evil.example"`},
		{"webhook empty member", edit(7, `"webhook":"`+annWebhook+`"`, `"webhook":""`), ErrDamaged, "canonical"},
		{"records out of order", reseal(append(append(append([][]byte{}, ls[:5]...), ls[7], ls[5], ls[6]), ls[8:]...)), ErrDamaged, "after"},
		{"empty line", reseal(append(append(append([][]byte{}, ls[:2]...), []byte{}), ls[2:]...)), ErrDamaged, "not JSON"},
		{"line too long", append(append(bytes.Clone(ls[0]), '\n'), bytes.Repeat([]byte("x"), MaxLine+10)...), ErrDamaged, "longer than"},
		{"no trailer, ends at a line feed", joinLines(ls[:n-1]), ErrTruncated, "without its trailer"},
		{"history token above the counter", edit(n-2, `"token":41`, `"token":43`), ErrDamaged, "fencing counter"},
		{"history out of order", reseal(append(append(append([][]byte{}, ls[:n-3]...), ls[n-2], ls[n-3]), ls[n-1])), ErrDamaged, "out of order"},
		{"history unknown end", edit(n-3, `"ended":"removed"`, `"ended":"lost"`), ErrDamaged, "history record of node 1 token 40"},
		{"history bad label", edit(n-2, `"service":"billing"`, `"serv ice":"billing"`), ErrDamaged, "label"},
		{"history before the audit log", reseal(append(append(append([][]byte{}, ls[:n-5]...), ls[n-2], ls[n-5], ls[n-4], ls[n-3]), ls[n-1])), ErrDamaged, "after"},
	}
	// Truncated at every line boundary and inside every line.
	off := 0
	for i, l := range ls {
		if i > 0 && i < n-1 {
			rs = append(rs, refusal{fmt.Sprintf("cut after line %d", i), data[:off], ErrTruncated, "without its trailer"})
		}
		for _, cut := range []int{1, len(l) / 2, len(l)} {
			rs = append(rs, refusal{fmt.Sprintf("cut inside line %d at %d", i+1, cut), data[:off+cut], ErrTruncated, "ends inside this line"})
		}
		off += len(l) + 1
	}
	return rs
}

func joinLines(ls [][]byte) []byte {
	var b []byte
	for _, l := range ls {
		b = append(append(b, l...), '\n')
	}
	return b
}

func flipChecksum(data []byte) []byte {
	d := bytes.Clone(data)
	i := bytes.LastIndex(d, []byte(`"sha256":"`)) + len(`"sha256":"`)
	if d[i] == '0' {
		d[i] = '1'
	} else {
		d[i] = '0'
	}
	return d
}

func TestReaderRefuses(t *testing.T) {
	meta, recs := sample()
	data := write(t, meta, recs)
	for _, c := range refusals(t, data) {
		_, _, _, err := readAll(c.data)
		var fe *FormatError
		if !errors.Is(err, c.kind) || !errors.As(err, &fe) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v; want %v saying %q", c.name, err, c.kind, c.msg)
		}
	}
	// The error stays: a store that calls Next again does not get io.EOF.
	rd, err := NewReader(bytes.NewReader(data[:len(data)-3]))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err = rd.Next(); err != nil {
			break
		}
	}
	if _, again := rd.Next(); again != err || errors.Is(err, io.EOF) {
		t.Fatalf("Next after %v: %v", err, again)
	}
}

func TestReaderRefusesDamagedGzip(t *testing.T) {
	meta, recs := sample()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(write(t, meta, recs))
	zw.Close()
	z := gz.Bytes()
	for i, c := range []struct {
		data []byte
		kind error
	}{
		{z[:len(z)/2], ErrTruncated},
		{z[:30], ErrTruncated}, // before the first line is complete
		{z[:len(z)-4], ErrTruncated},
		{append(bytes.Clone(z[:len(z)-8]), 0, 0, 0, 0, 0, 0, 0, 0), ErrDamaged}, // CRC and size wrong
		{append(bytes.Clone(z), "garbage after the stream"...), ErrDamaged},
	} {
		if _, _, _, err := readAll(c.data); !errors.Is(err, c.kind) {
			t.Errorf("case %d: %v, want %v", i, err, c.kind)
		}
	}
}

// A Writer refuses what a Reader would: export fails rather than write a file
// import refuses.
func TestWriterRefusesWhatImportWould(t *testing.T) {
	meta, recs := sample()
	bad := []struct {
		name string
		edit func(m *snapshot.Meta, rs []snapshot.Record) []snapshot.Record
		msg  string
	}{
		{"node missing", func(_ *snapshot.Meta, rs []snapshot.Record) []snapshot.Record {
			return append(rs[:3:3], rs[4:]...)
		}, "holds 3 of the 4 nodes"},
		{"token above the counter", func(m *snapshot.Meta, rs []snapshot.Record) []snapshot.Record {
			m.Fence = 40
			return rs
		}, "fencing counter"},
		{"keys out of order", func(_ *snapshot.Meta, rs []snapshot.Record) []snapshot.Record {
			rs[4], rs[5] = rs[5], rs[4]
			return rs
		}, "out of order"},
		{"a time past year 9999", func(_ *snapshot.Meta, rs []snapshot.Record) []snapshot.Record {
			rs[3] = snapshot.Record{Node: &idkeeper.NodeState{NodeID: 3, Watermark: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}
			return rs
		}, "not a time"},
		{"a key hash that is no SHA-256", func(_ *snapshot.Meta, rs []snapshot.Record) []snapshot.Record {
			k := *rs[4].Key
			k.Hash = []byte("short")
			rs[4] = snapshot.Record{Key: &k}
			return rs
		}, "SHA-256"},
		{"two fields set", func(_ *snapshot.Meta, rs []snapshot.Record) []snapshot.Record {
			rs[4].User = rs[6].User
			return rs
		}, "2 fields"},
	}
	for _, c := range bad {
		m := meta
		rs := c.edit(&m, append([]snapshot.Record(nil), recs...))
		var buf bytes.Buffer
		w := NewWriter(&buf, Source{Store: "bolt", TakenAt: t0})
		err := w.WriteMeta(m)
		for _, r := range rs {
			if err != nil {
				break
			}
			err = w.WriteRecord(r)
		}
		if err == nil {
			err = w.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.msg)
		}
		if bytes.Contains(buf.Bytes(), []byte(`"end":true`)) {
			t.Errorf("%s: a trailer was written", c.name)
		}
	}
	if err := NewWriter(io.Discard, Source{Store: "Bolt!"}).WriteMeta(meta); err == nil {
		t.Error("a store name that is no word was written")
	}
}
