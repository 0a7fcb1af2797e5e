package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	idkclient "github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/snowflake"
)

// Issue #22: node ranges and layouts from the command line, on real bolt files and
// real HTTP on loopback.

// rangeServer inits a bolt store in its own directory with the pool flags, starts
// a server on it with the same flags and returns it with its store's path.
func rangeServer(t *testing.T, pool ...string) (*inProcess, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idkeeper.db")
	initInProcess(t, "bolt:"+path, pool...)
	// Sessions of the bootstrap key lease whole ranges here: no default quota.
	s, code := startInProcess(t, append([]string{"--store", "bolt:" + path, "--cleanup-grace", "0", "--key-max-nodes-default", "0"}, pool...), bootstrapEnv)
	if s.base == "" {
		t.Fatalf("server %v exited with %d:\n%s", pool, code, s.logs)
	}
	return s, path
}

// openSession opens a client Session of count node IDs against base.
func openSession(t *testing.T, base string, count int) *idkclient.Session {
	t.Helper()
	sess, err := idkclient.New(idkclient.Config{ServerURL: base, APIKey: bootstrapKey, Count: count,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnFatal: func(err error) { t.Errorf("session lost its lease: %v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := sess.Open(ctx); err != nil {
		t.Fatalf("open a session of %d node IDs on %s: %v", count, base, err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	return sess
}

// Two registries with disjoint ranges on separate stores: a session of each
// leases every node ID of its registry, all inside its range and none shared, and
// the IDs minted by both are unique. /v1/version and remaining report each range.
func TestDisjointRangesNeverShareANodeID(t *testing.T) {
	ranges := []struct{ first, last int64 }{{0, 63}, {64, 127}}
	seenNode := map[int64]int{}
	seenID := map[int64]bool{}
	for i, r := range ranges {
		s, _ := rangeServer(t, "--node-range", fmt.Sprintf("%d-%d", r.first, r.last))
		c := s.client(bootstrapKey)
		v := c.do("GET", "/v1/version", "", 200)
		if nr, _ := v["nodeRange"].(map[string]any); nr["first"] != float64(r.first) || nr["last"] != float64(r.last) {
			t.Fatalf("registry %d: /v1/version %v, want nodeRange %d-%d", i, v, r.first, r.last)
		}
		size := int(r.last - r.first + 1)
		sess := openSession(t, s.base, size)
		for _, l := range sess.Leases() {
			if l.NodeID < r.first || l.NodeID > r.last {
				t.Fatalf("registry %d granted node ID %d outside %d-%d", i, l.NodeID, r.first, r.last)
			}
			if j, dup := seenNode[l.NodeID]; dup {
				t.Fatalf("node ID %d granted by registries %d and %d", l.NodeID, j, i)
			}
			seenNode[l.NodeID] = i
		}
		if len(sess.Leases()) != size {
			t.Fatalf("registry %d: %d leases, want %d", i, len(sess.Leases()), size)
		}
		rem := c.do("GET", "/v1/leases/remaining", "", 200)
		if rem["first"] != float64(r.first) || rem["last"] != float64(r.last) || rem["total"] != float64(size) || rem["remaining"] != 0.0 {
			t.Fatalf("registry %d: remaining %v", i, rem)
		}
		ids := make([]int64, 4*size)
		if err := sess.NextIDs(ids); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			p, err := snowflake.DefaultLayout.Decode(id)
			if err != nil || p.Node < r.first || p.Node > r.last {
				t.Fatalf("registry %d: ID %d decodes to %+v, %v", i, id, p, err)
			}
			if seenID[id] {
				t.Fatalf("ID %d minted twice", id)
			}
			seenID[id] = true
		}
	}
	if len(seenNode) != 128 {
		t.Fatalf("%d node IDs leased in all, want 128", len(seenNode))
	}
}

// A store keeps its range and layout: a restart with another range, another
// layout or another epoch is refused with POOL_MISMATCH, naming both and the
// flags that serve the store, and changes nothing; the same range extended upward
// grows the pool; init asked for another range says so and fails.
func TestRestartWithAnotherPoolIsRefused(t *testing.T) {
	pool := []string{"--node-range", "100-163", "--layout", "41/12/10", "--epoch", "2026-01-01"}
	s, path := rangeServer(t, pool...)
	if code := s.stop(); code != exitOK {
		t.Fatalf("stop: %d", code)
	}
	stored := "node IDs 100-163 (64) on layout 41/12/10@2026-01-01T00:00:00.000Z"
	for _, c := range []struct {
		name string
		args []string
		asks string
	}{
		{"another range", []string{"--node-range", "0-63"}, "node IDs 0-63 (64) on layout 41/12/10@"},
		{"an overlapping range", []string{"--node-range", "90-163"}, "node IDs 90-163 (74)"},
		{"no range", nil, "node IDs 0-4095 (4096)"},
		{"another layout", []string{"--node-range", "100-163", "--layout", "41/10/12"}, "on layout 41/10/12@2026-01-01"},
		{"another epoch", []string{"--node-range", "100-163", "--epoch", "2026-02-01"}, "on layout 41/12/10@2026-02-01T00:00:00.000Z"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, code := startInProcess(t, append([]string{"--store", "bolt:" + path}, c.args...), bootstrapEnv)
			if s.base != "" {
				s.stop()
				t.Fatalf("served a store of %s with %v", stored, c.args)
			}
			logs := s.logs.String()
			if code != exitFail || !strings.Contains(logs, "POOL_MISMATCH") || !strings.Contains(logs, stored) ||
				!strings.Contains(logs, c.asks) || !strings.Contains(logs, "--node-range 100-163 --layout 41/12/10 --epoch 2026-01-01T00:00:00.000Z") {
				t.Fatalf("exit %d; want 1 with POOL_MISMATCH, %q, %q and the flags that serve the store:\n%s", code, stored, c.asks, logs)
			}
		})
	}
	code, _, stderr := runInProcess(context.Background(), []string{"init", "--store", "bolt:" + path, "--node-range", "0-63"}, nil)
	if code != exitFail || !strings.Contains(stderr, "POOL_MISMATCH") || !strings.Contains(stderr, stored) {
		t.Fatalf("init with another range: exit %d, %s", code, stderr)
	}
	// Shrinking is refused too.
	if s, code := startInProcess(t, []string{"--store", "bolt:" + path, "--node-range", "100-131"}, bootstrapEnv); s.base != "" || code == exitOK {
		t.Fatalf("served a shrunk range (exit %d)", code)
	}
	st := storeStatus(t, path)
	if st.Pool.First != 100 || st.Pool.Nodes != 64 || !idkeeper.SameLayout(st.Pool.LayoutOrDefault(), idkeeper.DefaultLayout) {
		t.Fatalf("the refused starts changed the store's pool: %s", st.Pool)
	}
	// The range extended upward grows the pool; a start without a size then serves
	// the store's size as it is (it does not grow it to the whole layout).
	s, code = startInProcess(t, []string{"--store", "bolt:" + path, "--node-range", "100-227"}, bootstrapEnv)
	if s.base == "" {
		t.Fatalf("the range extended upward was refused (exit %d):\n%s", code, s.logs)
	}
	if rem := s.client(bootstrapKey).do("GET", "/v1/leases/remaining", "", 200); rem["first"] != 100.0 || rem["last"] != 227.0 {
		t.Fatalf("after growing: %v", rem)
	}
	s.stop()
	if st := storeStatus(t, path); st.Pool.First != 100 || st.Pool.Nodes != 128 {
		t.Fatalf("grown pool: %s", st.Pool)
	}
}

// storeStatus reads the status of the bolt store at path.
func storeStatus(t *testing.T, path string) idkeeper.StoreStatus {
	t.Helper()
	b, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st, err := b.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A server given no --nodes and no --node-range serves an initialised store's
// pool at its size: a default never extends a range.
func TestServerWithoutSizeKeepsTheStoresPool(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idkeeper.db")
	initInProcess(t, "bolt:"+path, "--nodes", "64")
	s, code := startInProcess(t, []string{"--store", "bolt:" + path}, bootstrapEnv)
	if s.base == "" {
		t.Fatalf("exit %d:\n%s", code, s.logs)
	}
	defer s.stop()
	if rem := s.client(bootstrapKey).do("GET", "/v1/leases/remaining", "", 200); rem["total"] != 64.0 || rem["last"] != 63.0 {
		t.Fatalf("remaining %v; want the store's 64 node IDs", rem)
	}
}

// Bad pool flags are usage errors (exit 2) naming the flag and the rule, found
// before the store is touched.
func TestPoolFlagsUsage(t *testing.T) {
	future := time.Now().UTC().AddDate(0, 2, 0).Format("2006-01-02")
	cases := []struct {
		cmds []string // the commands that refuse it
		args []string
		want string
	}{
		{[]string{"init"}, []string{"--layout", "0/53/10"}, "every width must be positive"},
		{[]string{"init", "server", "dev"}, []string{"--layout", "41/12/11"}, "widths add up to 64, want 63"},
		{[]string{"init", "server"}, []string{"--layout", "41-12-10"}, "--layout"},
		{[]string{"init"}, []string{"--epoch", future}, "is after now"},
		{[]string{"init"}, []string{"--layout", "38/15/10"}, "less than 10 years after now"},
		{[]string{"init", "server", "dev"}, []string{"--epoch", "yesterday"}, "--epoch"},
		{[]string{"init", "server", "dev"}, []string{"--node-range", "64-0"}, "FIRST is above LAST"},
		{[]string{"init", "server"}, []string{"--node-range", "10"}, "want FIRST-LAST"},
		{[]string{"init", "server", "dev"}, []string{"--node-range", "4000-4096"}, "does not fit the layout 41/12/10"},
		{[]string{"init", "server"}, []string{"--node-range", "0-1023", "--layout", "41/10/12", "--nodes", "1023"}, "--nodes 1023 and --node-range 0-1023 disagree"},
		{[]string{"init", "server"}, []string{"--nodes", "2000", "--layout", "41/10/12"}, "nodes = 2000 is outside its range 1..1024"},
	}
	for _, c := range cases {
		for _, cmd := range c.cmds {
			dir := t.TempDir()
			db := filepath.Join(dir, "idkeeper.db")
			var args []string
			switch cmd {
			case "init":
				args = []string{"init", "--store", "bolt:" + db}
			case "server":
				args = []string{"server", "--listen", "127.0.0.1:0", "--store", "bolt:" + db}
			case "dev":
				args = []string{"dev", "--listen", "127.0.0.1:0", "--gateway-listen", "127.0.0.1:0", "--data", dir}
				db = filepath.Join(dir, "idkeeper.db")
			}
			code, _, stderr := runInProcess(context.Background(), append(args, c.args...), nil)
			if code != exitUsage || !strings.Contains(stderr, c.want) {
				t.Errorf("%s %v: exit %d, %q; want exit 2 and %q", cmd, c.args, code, stderr, c.want)
			}
			if _, err := os.Stat(db); err == nil {
				t.Errorf("%s %v: the store was created before the flags were checked", cmd, c.args)
			}
		}
	}
	// The same from the environment.
	code, _, stderr := runInProcess(context.Background(), []string{"init", "--store", "bolt:" + filepath.Join(t.TempDir(), "x.db")},
		map[string]string{"IDKEEPER_NODE_RANGE": "0-63", "IDKEEPER_NODES": "32"})
	if code != exitUsage || !strings.Contains(stderr, "disagree") {
		t.Errorf("from the environment: exit %d, %q", code, stderr)
	}
}

// A 41/10/12 deployment serves that layout: a client session mints with it, from
// node IDs of its range, and the IDs decode with it; dev on a fresh data directory
// initialises its store with the layout and range given, and its gateway mints with
// them.
func TestAnotherLayoutIsServedAndMintedWith(t *testing.T) {
	want := snowflake.Layout{Epoch: snowflake.DefaultEpoch, TimestampBits: 41, NodeBits: 10, SequenceBits: 12}
	s, _ := rangeServer(t, "--layout", "41/10/12", "--node-range", "1000-1023")
	v := s.client(bootstrapKey).do("GET", "/v1/version", "", 200)
	if l, _ := v["layout"].(map[string]any); l["nodeBits"] != 10.0 || l["sequenceBits"] != 12.0 || l["timestampBits"] != 41.0 {
		t.Fatalf("/v1/version %v", v)
	}
	sess := openSession(t, s.base, 2)
	if got := sess.Layout(); !idkeeper.SameLayout(got, want) {
		t.Fatalf("the session mints with %s, want %s", got, want)
	}
	ids := make([]int64, 5000) // more than one millisecond of one node ID on 41/12/10
	if err := sess.NextIDs(ids); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		p, err := want.Decode(id)
		if err != nil || p.Node < 1000 || p.Node > 1023 || p.Sequence > want.MaxSequence() {
			t.Fatalf("ID %d decodes on 41/10/12 to %+v, %v", id, p, err)
		}
	}

	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, stderr := &lockedBuffer{}, &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		args := []string{"dev", "--listen", "127.0.0.1:0", "--gateway-listen", "127.0.0.1:0", "--data", dir,
			"--layout", "41/10/12", "--node-range", "512-575"}
		done <- run(ctx, args, func(string) (string, bool) { return "", false }, stdout, stderr)
	}()
	re := regexp.MustCompile(`registry\s+(http://\S+)\n\s+API key\s+(\S+)\n\s+gateway\s+(http://\S+)\n`)
	var m []string
	for deadline := time.Now().Add(20 * time.Second); m == nil; time.Sleep(20 * time.Millisecond) {
		if m = re.FindStringSubmatch(stdout.String()); m != nil && !strings.Contains(stdout.String(), "Stop with Ctrl-C") {
			m = nil
		}
		select {
		case code := <-done:
			t.Fatalf("dev exited with %d:\n%s", code, stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev did not start:\n%s", stderr)
		}
	}
	reg, gw := &client{t: t, base: m[1], key: m[2]}, &client{t: t, base: m[3]}
	if nr := reg.do("GET", "/v1/version", "", 200)["nodeRange"].(map[string]any); nr["first"] != 512.0 || nr["last"] != 575.0 {
		t.Fatalf("dev's registry: nodeRange %v", nr)
	}
	if l, _ := gw.do("GET", "/v1/version", "", 200)["layout"].(map[string]any); l["nodeBits"] != 10.0 || l["sequenceBits"] != 12.0 {
		t.Fatalf("dev's gateway: layout %v", l)
	}
	got := gw.do("POST", "/v1/ids?format=string", `{"count":5}`, 200)["ids"].([]any)
	for _, x := range got {
		id, _ := strconv.ParseInt(x.(string), 10, 64)
		p, err := want.Decode(id)
		if err != nil || p.Node < 512 || p.Node > 575 {
			t.Fatalf("the gateway's ID %v decodes on 41/10/12 to %+v, %v", x, p, err)
		}
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("dev exited with %d:\n%s", code, stderr)
	}
	if st := storeStatus(t, filepath.Join(dir, "idkeeper.db")); st.Pool.First != 512 || st.Pool.Nodes != 64 || !idkeeper.SameLayout(st.Pool.Layout, want) {
		t.Fatalf("dev's store: %s", st.Pool)
	}
}
