package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/internal/harness/chaos/history"
)

// The checker must pass a clean history and catch every kind of violation in a
// doctored one: a checker that cannot fail proves nothing.

var testLayout = history.Layout{EpochMs: 1767225600000, TimestampBits: 41, NodeBits: 12, SequenceBits: 10}

// base is a point in time well inside the layout's range, in Unix ms.
const base = 1795000000000

func id(tsMs, node, seq int64) int64 {
	return (tsMs-testLayout.EpochMs)<<22 | node<<10 | seq
}

// fakeClient writes one client's history and ID files.
type fakeClient struct {
	t    *testing.T
	dir  string
	h    *history.Writer
	ids  map[int]*history.IDWriter
	name string
}

func newFakeClient(t *testing.T, root, name string) *fakeClient {
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := history.Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return &fakeClient{t: t, dir: dir, h: h, ids: map[int]*history.IDWriter{}, name: name}
}

func (f *fakeClient) write(e history.Event) {
	if err := f.h.Write(e); err != nil {
		f.t.Fatal(err)
	}
}

// session records a session of slot s, generation g holding one node ID: acquired
// at real time acqMs, minting one ID per millisecond from ts to ts+n−1 (sequence 0),
// valid until lastValidMs, closed normally when closed.
func (f *fakeClient) session(s, g int, l history.Lease, acqMs, lastValidMs, ts, n int64, closed bool) {
	w := f.ids[s]
	if w == nil {
		var err error
		if w, err = history.CreateIDs(f.dir, s); err != nil {
			f.t.Fatal(err)
		}
		f.ids[s] = w
		f.t.Cleanup(func() { w.Close() })
	}
	f.write(history.Event{T: acqMs * 1e6, Ev: history.EvAcquired, S: s, G: g, Leases: []history.Lease{l}, Layout: &testLayout, Off: w.Off()})
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = id(ts+int64(i), l.Node, 0)
	}
	if err := w.Write(ids); err != nil {
		f.t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		f.t.Fatal(err)
	}
	ev := history.EvLost
	if closed {
		ev = history.EvClosing
	}
	f.write(history.Event{T: lastValidMs * 1e6, Ev: ev, S: s, G: g, Digest: &history.Digest{N: n, LastValid: lastValidMs * 1e6}})
}

func (f *fakeClient) run(startMs int64) ClientRun {
	return ClientRun{Name: f.name, Dir: f.dir, Start: time.UnixMilli(startMs)}
}

func check(t *testing.T, in CheckInput) *Report {
	t.Helper()
	r, err := Check(in)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r)
	return r
}

func wantOnly(t *testing.T, r *Report, props ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, p := range props {
		want[p] = true
		if !r.Violated(p) {
			t.Errorf("%q not reported", p)
		}
	}
	for p := range r.Violations {
		if !want[p] {
			t.Errorf("%q reported, unexpected", p)
		}
	}
}

// handOver is node 7 passing from a to b: a holds it from base to base+1000 and
// mints until base+999; b is granted it after a's watermark.
func handOver(t *testing.T, bWindowStart, bMintFrom, bAcq int64, bToken uint64) CheckInput {
	root := t.TempDir()
	a, b := newFakeClient(t, root, "a"), newFakeClient(t, root, "b")
	a.session(0, 1, history.Lease{Node: 7, Token: 3, NotBefore: base, ExpiresAt: base + 1000}, base, base+999, base, 1000, false)
	b.session(0, 1, history.Lease{Node: 7, Token: bToken, NotBefore: bWindowStart, ExpiresAt: bWindowStart + 1000}, bAcq, bAcq+900, bMintFrom, 500, false)
	return CheckInput{Clients: []ClientRun{a.run(base - 100), b.run(base - 100)}, End: time.UnixMilli(base + 2500)}
}

func TestCheckerPassesACleanHandOver(t *testing.T) {
	r := check(t, handOver(t, base+1001, base+1001, base+1100, 4))
	wantOnly(t, r)
	if r.IDs != 1500 || r.Grants != 2 {
		t.Fatalf("counted %d IDs, %d grants", r.IDs, r.Grants)
	}
}

func TestCheckerCatchesOverlappingHolders(t *testing.T) {
	// b's window opens inside a's, and b mints a's last 100 milliseconds again.
	r := check(t, handOver(t, base+900, base+900, base+1100, 4))
	wantOnly(t, r, PropMintedRanges, PropWindows, PropUnique)
	if n := r.Violations[PropUnique]; n != 100 {
		t.Fatalf("%d duplicates reported, want 100", n)
	}
}

func TestCheckerCatchesMintingOutsideTheWindow(t *testing.T) {
	// b's window is clear of a's, but b mints before it opens (a window check off).
	r := check(t, handOver(t, base+1001, base+950, base+1100, 4))
	wantOnly(t, r, PropMintedRanges, PropInWindow, PropUnique)
}

func TestCheckerCatchesSimultaneousHolders(t *testing.T) {
	// b is granted the node while a still finds its lease valid.
	r := check(t, handOver(t, base+1001, base+1001, base+990, 4))
	wantOnly(t, r, PropRealTime)
}

func TestCheckerCatchesAFencingTokenGoingBack(t *testing.T) {
	r := check(t, handOver(t, base+1001, base+1001, base+1100, 2))
	wantOnly(t, r, PropFencing)
}

func TestCheckerCutsAReleasedWindowAtItsLastID(t *testing.T) {
	// a closed normally after minting until base+499: its Remove lowered the
	// watermark, so b's window may start at base+500.
	root := t.TempDir()
	a, b := newFakeClient(t, root, "a"), newFakeClient(t, root, "b")
	a.session(0, 1, history.Lease{Node: 7, Token: 3, NotBefore: base, ExpiresAt: base + 1000}, base, base+499, base, 500, true)
	b.session(0, 1, history.Lease{Node: 7, Token: 4, NotBefore: base + 500, ExpiresAt: base + 1500}, base+510, base+900, base+510, 300, false)
	wantOnly(t, check(t, CheckInput{Clients: []ClientRun{a.run(base - 100), b.run(base - 100)}}))
}

func TestCheckerUsesRenewedExpiry(t *testing.T) {
	// The grant said base+1000; a renew answer moved it to base+3000.
	root := t.TempDir()
	a := newFakeClient(t, root, "a")
	l := history.Lease{Node: 1, Token: 1, NotBefore: base, ExpiresAt: base + 1000}
	a.write(history.Event{T: base * 1e6, Ev: history.EvRenewAnswer, S: 0, G: 1, Status: 200,
		Leases: []history.Lease{{Node: 1, Token: 1, NotBefore: base, ExpiresAt: base + 3000}}})
	a.session(0, 1, l, base, base+2000, base, 2000, false)
	wantOnly(t, check(t, CheckInput{Clients: []ClientRun{a.run(base - 100)}}))
}

func TestCheckerCatchesAForeignNodeAndAStuckGenerator(t *testing.T) {
	root := t.TempDir()
	a := newFakeClient(t, root, "a")
	w, err := history.CreateIDs(a.dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	a.write(history.Event{T: base * 1e6, Ev: history.EvAcquired, S: 0, G: 1, Layout: &testLayout,
		Leases: []history.Lease{{Node: 1, Token: 1, NotBefore: base, ExpiresAt: base + 1000}}})
	_ = w.Write([]int64{id(base, 1, 0), id(base, 1, 0), id(base+1, 2, 0)})
	w.Close()
	r := check(t, CheckInput{Clients: []ClientRun{a.run(base - 100)}})
	wantOnly(t, r, PropRecord, PropUnique)
}

func TestCheckerLiveness(t *testing.T) {
	root := t.TempDir()
	a, b := newFakeClient(t, root, "a"), newFakeClient(t, root, "b")
	// a loses its lease at base+1000 and gets one again at base+3000; b never again.
	a.session(0, 1, history.Lease{Node: 1, Token: 1, NotBefore: base, ExpiresAt: base + 1000}, base, base+900, base, 10, false)
	a.session(0, 2, history.Lease{Node: 2, Token: 3, NotBefore: base + 2000, ExpiresAt: base + 9000}, base+3000, base+8000, base+3000, 10, false)
	b.session(0, 1, history.Lease{Node: 3, Token: 2, NotBefore: base, ExpiresAt: base + 1000}, base, base+900, base, 10, false)
	heal := time.UnixMilli(base + 1000)
	in := CheckInput{
		Clients: []ClientRun{a.run(base - 100), b.run(base - 100)},
		Faults:  []Fault{{Kind: "drop", Global: true, At: time.UnixMilli(base + 500), Heal: heal}},
		End:     time.UnixMilli(base + 9000),
		Bound:   4 * time.Second,
	}
	r := check(t, in)
	wantOnly(t, r, PropLiveness)
	if r.Violations[PropLiveness] != 1 {
		t.Fatalf("liveness violations: %v", r.Examples[PropLiveness])
	}
	// A point is judged only if no other fault disturbs the client within the
	// bound: b's lease is owed 4 s after its own fault's heal, not the first one.
	in.Faults = append(in.Faults, Fault{Kind: "drop", Target: "b", At: time.UnixMilli(base + 2000), Heal: time.UnixMilli(base + 2500)})
	r = check(t, in)
	if r.Violations[PropLiveness] != 1 || r.LivenessPoints != 2 || !strings.Contains(r.Examples[PropLiveness][0], "after 11:06:42.500") {
		t.Fatalf("%d points judged, violations: %v", r.LivenessPoints, r.Examples[PropLiveness])
	}
	// Killed before its deadline, b owes nothing.
	in.Clients[1].Killed = time.UnixMilli(base + 1200)
	wantOnly(t, check(t, in))
}

func TestReadEventsSkipsATornLastLine(t *testing.T) {
	root := t.TempDir()
	a := newFakeClient(t, root, "a")
	a.session(0, 1, history.Lease{Node: 1, Token: 1, NotBefore: base, ExpiresAt: base + 1000}, base, base+900, base, 10, false)
	f, err := os.OpenFile(filepath.Join(a.dir, "history.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"t":1,"ev":"prog`)
	f.Close()
	r := check(t, CheckInput{Clients: []ClientRun{a.run(base - 100)}})
	wantOnly(t, r)
	if r.IDs != 10 {
		t.Fatalf("%d IDs", r.IDs)
	}
}
