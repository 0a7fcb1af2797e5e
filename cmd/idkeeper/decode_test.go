package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/snowflake"
)

// decodeCLI is run("decode", args…) in-process with the environment env.
func decodeCLI(env map[string]string, args ...string) (code int, stdout, stderr string) {
	return runInProcess(context.Background(), append([]string{"decode"}, args...), env)
}

// compose is l.Compose(ts, node, seq), failing the test on an error.
func compose(t *testing.T, l snowflake.Layout, ts, node, seq int64) int64 {
	t.Helper()
	id, err := l.Compose(ts, node, seq)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func lines(s string) []string {
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// Issue #16: decode prints an ID's time, node ID and sequence, aligned, under the
// default layout and under one the layout flags (or their variables) give; --json
// prints one object per ID.
func TestDecodeLayouts(t *testing.T) {
	def := idkeeper.DefaultLayout
	t0 := time.Date(2026, 11, 29, 19, 44, 7, 201_000_000, time.UTC)
	ts, _ := def.Timestamp(t0)
	a := compose(t, def, ts, 17, 3)
	b := compose(t, def, def.MaxTimestamp(), def.MaxNode(), def.MaxSequence())

	code, out, stderr := decodeCLI(nil, strconv.FormatInt(a, 10), strconv.FormatInt(b, 10), "0")
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := []string{
		fmt.Sprintf("%-19d  2026-11-29T19:44:07.201Z  node 17    seq 3", a),
		"9223372036854775807  2095-09-07T15:47:35.551Z  node 4095  seq 1023",
		"0                    2026-01-01T00:00:00.000Z  node 0     seq 0",
	}
	if got := lines(out); !slices.Equal(got, want) {
		t.Fatalf("decode:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A custom layout: epoch 2020, 39 timestamp, 8 node, 16 sequence bits; flags
	// after and between the IDs, one layout setting from the environment.
	custom := snowflake.Layout{Epoch: time.Date(2020, 3, 1, 0, 0, 0, 0, time.UTC), TimestampBits: 39, NodeBits: 8, SequenceBits: 16}
	c := compose(t, custom, 86_400_000+5, 255, 65_000)
	d := compose(t, custom, 1, 2, 3)
	code, out, stderr = decodeCLI(map[string]string{"IDKEEPER_SEQUENCE_BITS": "16"},
		"--epoch", "2020-03-01T01:00:00+01:00", strconv.FormatInt(c, 10), "--timestamp-bits=39", `"`+strconv.FormatInt(d, 10)+`"`, "--node-bits", "8")
	if code != exitOK || stderr != "" {
		t.Fatalf("custom layout: exit %d: %s", code, stderr)
	}
	want = []string{
		fmt.Sprintf("%-19d  2020-03-02T00:00:00.005Z  node 255  seq 65000", c),
		fmt.Sprintf("%-19d  2020-03-01T00:00:00.001Z  node 2    seq 3", d),
	}
	if got := lines(out); !slices.Equal(got, want) {
		t.Fatalf("custom layout:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The epoch as a date, as init, server and dev take it (issue #22).
	code, out, stderr = decodeCLI(map[string]string{"IDKEEPER_SEQUENCE_BITS": "16"},
		"--epoch", "2020-03-01", "--timestamp-bits=39", "--node-bits", "8", strconv.FormatInt(d, 10))
	if code != exitOK || stderr != "" || !slices.Equal(lines(out), want[1:]) {
		t.Fatalf("epoch as a date: exit %d: %s %q", code, stderr, out)
	}

	// --json: one object per line, the ID as a string, timestampMs the field.
	code, out, _ = decodeCLI(nil, "--json", strconv.FormatInt(a, 10))
	if code != exitOK {
		t.Fatalf("--json: exit %d", code)
	}
	wantJSON := fmt.Sprintf(`{"id":"%d","time":"2026-11-29T19:44:07.201Z","timestampMs":%d,"nodeId":17,"sequence":3}`+"\n", a, ts)
	if out != wantJSON {
		t.Fatalf("--json: %q, want %q", out, wantJSON)
	}
	code, out, _ = decodeCLI(map[string]string{"IDKEEPER_JSON": "true", "IDKEEPER_EPOCH": "2020-03-01T00:00:00Z",
		"IDKEEPER_TIMESTAMP_BITS": "39", "IDKEEPER_NODE_BITS": "8", "IDKEEPER_SEQUENCE_BITS": "16"}, strconv.FormatInt(c, 10))
	var j decodedJSON
	if code != exitOK || json.Unmarshal([]byte(out), &j) != nil ||
		j != (decodedJSON{ID: strconv.FormatInt(c, 10), Time: "2020-03-02T00:00:00.005Z", TimestampMs: 86_400_005, NodeID: 255, Sequence: 65_000}) {
		t.Fatalf("--json from the environment: exit %d, %q", code, out)
	}
}

// IDs from standard input: with no ID argument or with "-"; blanks and line ends
// separate them, JSON strings and \r\n included; a line longer than 64 KiB and
// more than 100000 IDs end the run with exit status 1, after what came before.
func TestDecodeStdin(t *testing.T) {
	l := idkeeper.DefaultLayout
	ids := []int64{compose(t, l, 1000, 1, 1), compose(t, l, 2000, 2, 2), compose(t, l, 3000, 3, 3), compose(t, l, 4000, 4, 4)}
	in := fmt.Sprintf("%d %d\r\n\n\t\"%d\"  \n%d", ids[0], ids[1], ids[2], ids[3])
	for _, args := range [][]string{nil, {"-"}, {"--json", "-"}} {
		withStdin(t, in)
		code, out, stderr := decodeCLI(nil, args...)
		if code != exitOK || stderr != "" {
			t.Fatalf("%q: exit %d: %s", args, code, stderr)
		}
		got := lines(out)
		if len(got) != len(ids) {
			t.Fatalf("%q: %d lines:\n%s", args, len(got), out)
		}
		for i, id := range ids {
			node := fmt.Sprintf("node %d ", i+1)
			if slices.Contains(args, "--json") {
				node = fmt.Sprintf(`"nodeId":%d,`, i+1)
			}
			if !strings.Contains(got[i], strconv.FormatInt(id, 10)) || !strings.Contains(got[i], node) {
				t.Errorf("%q: line %d: %q", args, i, got[i])
			}
		}
	}

	// A bad ID on a line is named with its line number.
	withStdin(t, fmt.Sprintf("%d\n%d 12x\n", ids[0], ids[1]))
	code, out, stderr := decodeCLI(nil)
	if code != exitFail || len(lines(out)) != 2 || !strings.Contains(stderr, `decode: line 2: snowflake: invalid ID "12x"`) {
		t.Fatalf("a bad ID on line 2: exit %d, %q, %q", code, out, stderr)
	}

	// A line of 64 KiB is read; one byte more is refused.
	withStdin(t, "1\n"+strings.Repeat(" ", maxDecodeLine-1)+"2\n3\n")
	if code, out, stderr := decodeCLI(nil); code != exitOK || len(lines(out)) != 3 {
		t.Fatalf("a line of 64 KiB: exit %d, %q, %s", code, out, stderr)
	}
	withStdin(t, "1\n"+strings.Repeat(" ", maxDecodeLine)+"2\n3\n")
	code, out, stderr = decodeCLI(nil)
	if code != exitFail || len(lines(out)) != 1 || !strings.Contains(stderr, "standard input, line 2: longer than 64 KiB") {
		t.Fatalf("a line over 64 KiB: exit %d, %q, %q", code, out, stderr)
	}

	// 100000 IDs are decoded; the 100001st ends the run.
	withStdin(t, strings.Repeat("7\n", maxDecodeIDs))
	if code, out, stderr := decodeCLI(nil); code != exitOK || strings.Count(out, "\n") != maxDecodeIDs {
		t.Fatalf("%d IDs: exit %d, %d lines, %s", maxDecodeIDs, code, strings.Count(out, "\n"), stderr)
	}
	withStdin(t, strings.Repeat("7 7 7 7 7 7 7 7 7 7\n", maxDecodeIDs/10)+"7\n")
	code, out, stderr = decodeCLI(nil)
	if code != exitFail || strings.Count(out, "\n") != maxDecodeIDs || !strings.Contains(stderr, "more than 100000 IDs") {
		t.Fatalf("%d IDs: exit %d, %d lines, %q", maxDecodeIDs+1, code, strings.Count(out, "\n"), stderr)
	}
}

// A bad ID among good ones is reported on stderr, naming it; the others are
// decoded, in order, and the exit status is 1.
func TestDecodeBadIDAmongGood(t *testing.T) {
	code, out, stderr := decodeCLI(nil, "1", "12a", "2", "-5", "99999999999999999999", "", "3")
	if code != exitFail {
		t.Fatalf("exit %d, want %d", code, exitFail)
	}
	got := lines(out)
	if len(got) != 3 || !strings.HasPrefix(got[0], "1 ") || !strings.HasPrefix(got[1], "2 ") || !strings.HasPrefix(got[2], "3 ") {
		t.Fatalf("stdout: %q", out)
	}
	for _, want := range []string{
		`idkeeper: decode: snowflake: invalid ID "12a": 'a' is not a decimal digit`,
		`idkeeper: decode: snowflake: invalid ID "-5": a sign is not allowed`,
		`idkeeper: decode: snowflake: invalid ID "99999999999999999999": larger than 9223372036854775807`,
		`idkeeper: decode: snowflake: invalid ID "": empty`,
		"idkeeper: decode: 4 of 7 IDs failed",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	// After --, an argument that looks like a flag is an ID.
	if code, _, stderr := decodeCLI(nil, "--", "--json"); code != exitFail || !strings.Contains(stderr, `invalid ID "--json"`) {
		t.Fatalf("-- --json: exit %d, %q", code, stderr)
	}
}

// Usage errors exit 2 before anything is decoded; -h prints the usage and the
// flags with their variables, exit 0.
func TestDecodeUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--origin", "1"}, nil, "--origin needs --server URL"},
		{[]string{"1"}, map[string]string{"IDKEEPER_ORIGIN": "true"}, "--origin needs --server URL"},
		{[]string{"--node-bits", "13", "1"}, nil, "widths add up to 64, want 63"},
		{[]string{"--node-bits", "0", "--sequence-bits", "22", "1"}, nil, "every width must be positive"},
		{[]string{"--node-bits", "33", "--timestamp-bits", "20", "1"}, nil, "at most 32 bits"},
		{[]string{"1"}, map[string]string{"IDKEEPER_TIMESTAMP_BITS": "40"}, "widths add up to 62, want 63"},
		{[]string{"1"}, map[string]string{"IDKEEPER_NODE_BITS": "many"}, "invalid value \"many\" for IDKEEPER_NODE_BITS"},
		{[]string{"--epoch", "yesterday", "1"}, nil, `epoch "yesterday" is neither a date`},
		{[]string{"--epoch", "2026-01-01T00:00:00.0005Z", "1"}, nil, "is not a whole millisecond"},
		{[]string{"--epoch", "2026-01-01T00:00:00Z", "--server", "http://127.0.0.1:1", "1"}, nil, "give the layout flags or --server, not both"},
		{[]string{"--server", "ftp://x", "1"}, nil, "want the registry's http:// or https:// base URL"},
		{[]string{"--server", "http://127.0.0.1:1", "--origin", "1"}, nil, "--server needs an admin API key"},
		{[]string{"--no-such-flag", "1"}, nil, "decode: unknown flag --no-such-flag (run 'idkeeper decode -h' for help)"},
	} {
		code, out, stderr := decodeCLI(c.env, c.args...)
		if code != exitUsage || out != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%q %v: exit %d, %q, %q; want %d and %q", c.args, c.env, code, out, stderr, exitUsage, c.want)
		}
	}
	code, _, stderr := decodeCLI(nil, "-h")
	if code != exitOK || !strings.Contains(stderr, "Usage: idkeeper decode [flags] ID…") || !strings.Contains(stderr, "[IDKEEPER_NODE_BITS] (default 12)") {
		t.Fatalf("-h: exit %d, %s", code, stderr)
	}
	if code, out, _ := runInProcess(context.Background(), []string{"help"}, nil); code != exitOK || !strings.Contains(out, "\n  decode ID…") {
		t.Fatalf("idkeeper help: exit %d, %s", code, out)
	}
}

// splitDecodeArgs tells IDs from flags and their values.
func TestSplitDecodeArgs(t *testing.T) {
	fs := newFlagSet("decode", nil)
	new(decodeFlags).register(fs)
	flags, ids := splitDecodeArgs(fs, []string{"1", "--json", "2", "--node-bits", "8", "-", "--epoch=x", "-5", "--origin=true", "3", "--", "--json", "-h"})
	if want := []string{"--json", "--node-bits", "8", "--epoch=x", "--origin=true"}; !slices.Equal(flags, want) {
		t.Errorf("flags %q, want %q", flags, want)
	}
	if want := []string{"1", "2", "-", "-5", "3", "--json", "-h"}; !slices.Equal(ids, want) {
		t.Errorf("IDs %q, want %q", ids, want)
	}
}

// --server: the layout comes from a real registry's GET /v1/version (started in
// this process), with no key; and from any server's answer, a custom layout
// included. A gateway before its first lease (layout null), an error answer and
// an invalid layout fail with exit status 1.
func TestDecodeLayoutFromServer(t *testing.T) {
	store := "bolt:" + filepath.Join(t.TempDir(), "idkeeper.db")
	initInProcess(t, store)
	s, code := startInProcess(t, []string{"--store", store}, nil)
	if s.base == "" {
		t.Fatalf("the server exited with %d:\n%s", code, s.logs)
	}
	l := idkeeper.DefaultLayout
	id := compose(t, l, 123_456_789, 4000, 1000)
	_, offline, _ := decodeCLI(nil, strconv.FormatInt(id, 10))
	code, out, stderr := decodeCLI(map[string]string{"IDKEEPER_SERVER": s.base}, strconv.FormatInt(id, 10))
	if code != exitOK || out != offline || !strings.Contains(out, "node 4000  seq 1000") {
		t.Fatalf("--server %s: exit %d, %q (offline %q), %s", s.base, code, out, offline, stderr)
	}
	if code := s.stop(); code != exitOK {
		t.Fatalf("server exit %d", code)
	}

	var answer string
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("X-API-Key"))
		mu.Unlock()
		if r.URL.Path != "/v1/version" {
			http.NotFound(w, r)
			return
		}
		if answer == "" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"code":"NOT_READY","detail":"not yet"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(answer))
	}))
	defer srv.Close()

	custom := snowflake.Layout{Epoch: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), TimestampBits: 42, NodeBits: 10, SequenceBits: 11}
	cid := compose(t, custom, 1_000, 1023, 2047)
	answer = `{"version":"v1","commit":"c","layout":{"epoch":"2024-01-01T00:00:00.000Z","timestampBits":42,"nodeBits":10,"sequenceBits":11}}`
	code, out, stderr = decodeCLI(map[string]string{AdminKeyEnv: adminKey}, "--server", srv.URL+"/", strconv.FormatInt(cid, 10))
	if want := fmt.Sprintf("%-19d  2024-01-01T00:00:01.000Z  node 1023  seq 2047\n", cid); code != exitOK || out != want {
		t.Fatalf("custom layout from the server: exit %d, %q, want %q; %s", code, out, want, stderr)
	}
	mu.Lock()
	if !slices.Equal(keys, []string{""}) {
		t.Errorf("GET /v1/version sent the keys %q, want none", keys)
	}
	mu.Unlock()

	for _, c := range []struct{ answer, want string }{
		{"", "503 NOT_READY: not yet"},
		{`{"version":"v1","commit":"c","layout":null}`, "names no layout (a gateway before its first lease?)"},
		{`{"version":"v1","layout":{"epoch":"2024-01-01T00:00:00.000Z","timestampBits":42,"nodeBits":10,"sequenceBits":12}}`, "widths add up to 64"},
		{`{"version":"v1","layout":{"epoch":"soon","timestampBits":41,"nodeBits":12,"sequenceBits":10}}`, "layout.epoch"},
		{`<html>`, "not the expected JSON"},
	} {
		answer = c.answer
		code, out, stderr := decodeCLI(nil, "--server", srv.URL, "1")
		if code != exitFail || out != "" || !strings.Contains(stderr, "decode: the layout from "+srv.URL) || !strings.Contains(stderr, c.want) {
			t.Errorf("answer %q: exit %d, %q, %q; want %q", c.answer, code, out, stderr, c.want)
		}
	}
}

// originJSON is an answer of GET /admin/api/ids/{id}/origin in the shape the
// registry gives it: one held lease and one ended, restored from a receipt.
const originJSON = `{
  "id": "%d",
  "decoded": {"time": "2026-11-29T19:44:07.201Z", "timestampMs": 28755847201, "nodeId": 5, "sequence": 3},
  "leases": [
    {"nodeId": 5, "fencingToken": 42,
     "requester": {"machineId": "m-1", "pid": 4242, "startedAt": "2026-11-29T10:00:00.000Z", "instance": "session-1"},
     "keyId": "k_abc", "client": {"host": "web-7", "labels": {"service": "billing", "env": "prod"}},
     "grantedAt": "2026-11-29T10:00:00.000Z", "notBefore": "2026-11-29T10:00:00.000Z", "windowEnd": "2026-12-01T10:00:00.000Z",
     "end": "", "fromReceipt": false},
    {"nodeId": 5, "fencingToken": 41,
     "requester": {"machineId": "m 2", "pid": 7, "startedAt": "2026-11-28T10:00:00.000Z", "instance": ""},
     "keyId": "k_def", "client": {"host": "", "labels": {"x": "\u001b[31mred"}},
     "grantedAt": "2026-11-28T10:00:00.000Z", "notBefore": "2026-11-28T10:00:00.000Z", "windowEnd": "2026-11-29T10:00:00.000Z",
     "end": "removed", "endedAt": "2026-11-29T09:00:00.000Z", "mintedUpTo": "2026-11-29T08:59:59.999Z", "fromReceipt": true}
  ]
}`

// --origin: each ID's line is followed by its leases, looked up with the admin
// key (X-API-Key) on GET /admin/api/ids/{id}/origin; none known prints the note;
// --json prints the server's answer as it is, on one line. The server refusing
// one ID (400) is reported and the run goes on; a refused key ends it.
func TestDecodeOrigin(t *testing.T) {
	l := idkeeper.DefaultLayout
	held := compose(t, l, 28_755_847_201, 5, 3)
	none := compose(t, l, 1, 6, 0)
	refused := compose(t, l, 2, 7, 0)
	var mu sync.Mutex
	var seen []string // method, path and key of each origin request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/version" {
			w.Write([]byte(`{"version":"v","commit":"c","layout":{"epoch":"2026-01-01T00:00:00.000Z","timestampBits":41,"nodeBits":12,"sequenceBits":10}}`))
			return
		}
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("X-API-Key"))
		mu.Unlock()
		if r.Header.Get("X-API-Key") != adminKey {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"code":"ADMIN_KEY_REQUIRED","detail":"an admin key is needed"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case fmt.Sprintf("/admin/api/ids/%d/origin", held):
			fmt.Fprintf(w, originJSON, held)
		case fmt.Sprintf("/admin/api/ids/%d/origin", none):
			fmt.Fprintf(w, `{"id":"%d","decoded":{"time":"2026-01-01T00:00:00.001Z","timestampMs":1,"nodeId":6,"sequence":0},"leases":[],"note":"no lease history reaches back to 2026-01-01T00:00:00.001Z"}`, none)
		default:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"code":"INVALID_REQUEST","detail":"no such thing"}`))
		}
	}))
	defer srv.Close()

	keyFile := filepath.Join(t.TempDir(), "admin.key")
	if err := os.WriteFile(keyFile, []byte(adminKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{AdminKeyEnv + "_FILE": keyFile}
	args := []string{"--server", srv.URL, "--origin", strconv.FormatInt(held, 10), strconv.FormatInt(none, 10), strconv.FormatInt(refused, 10)}
	code, out, stderr := decodeCLI(env, args...)
	want := []string{
		fmt.Sprintf("%-19d  2026-11-29T19:44:07.201Z  node 5     seq 3", held),
		"  lease: token 42, requester m-1 pid 4242 started 2026-11-29T10:00:00.000Z instance session-1, key k_abc, host web-7, " +
			"labels env=prod,service=billing, window 2026-11-29T10:00:00.000Z .. 2026-12-01T10:00:00.000Z, granted 2026-11-29T10:00:00.000Z, held",
		`  lease: token 41, requester "m 2" pid 7 started 2026-11-28T10:00:00.000Z, key k_def, labels x="\x1b[31mred", ` +
			"window 2026-11-28T10:00:00.000Z .. 2026-11-29T10:00:00.000Z, granted 2026-11-28T10:00:00.000Z, " +
			"ended removed at 2026-11-29T09:00:00.000Z, minted up to 2026-11-29T08:59:59.999Z, restored from a receipt",
		fmt.Sprintf("%-19d  2026-01-01T00:00:00.001Z  node 6     seq 0", none),
		"  lease: none known (no lease history reaches back to 2026-01-01T00:00:00.001Z)",
		fmt.Sprintf("%-19d  2026-01-01T00:00:00.002Z  node 7     seq 0", refused),
	}
	if got := lines(out); code != exitFail || !slices.Equal(got, want) {
		t.Fatalf("--origin: exit %d:\n%s\nwant:\n%s\nstderr: %s", code, strings.Join(got, "\n"), strings.Join(want, "\n"), stderr)
	}
	if !strings.Contains(stderr, fmt.Sprintf("decode: the origin of %d: the server answered 400 INVALID_REQUEST: no such thing", refused)) ||
		!strings.Contains(stderr, "1 of 3 IDs failed") {
		t.Fatalf("--origin stderr: %s", stderr)
	}
	mu.Lock()
	wantSeen := []string{
		fmt.Sprintf("GET /admin/api/ids/%d/origin %s", held, adminKey),
		fmt.Sprintf("GET /admin/api/ids/%d/origin %s", none, adminKey),
		fmt.Sprintf("GET /admin/api/ids/%d/origin %s", refused, adminKey),
	}
	if !slices.Equal(seen, wantSeen) {
		t.Errorf("requests %q, want %q", seen, wantSeen)
	}
	seen = nil
	mu.Unlock()

	// --json: the server's answers, each on one line, as they are.
	code, out, _ = decodeCLI(map[string]string{AdminKeyEnv: adminKey}, "--json", "--server", srv.URL, "--origin", strconv.FormatInt(held, 10), strconv.FormatInt(none, 10))
	got := lines(out)
	if code != exitOK || len(got) != 2 {
		t.Fatalf("--origin --json: exit %d, %q", code, out)
	}
	var ans originAnswer
	if err := json.Unmarshal([]byte(got[0]), &ans); err != nil || ans.ID != strconv.FormatInt(held, 10) || len(ans.Leases) != 2 ||
		ans.Leases[1].Client.Labels["x"] != "\x1b[31mred" || !ans.Leases[1].FromReceipt || ans.Decoded.TimestampMs != 28755847201 {
		t.Fatalf("--origin --json: %v, %+v", err, ans)
	}
	if strings.Contains(got[0], "\n  ") || !strings.HasPrefix(got[0], `{"id":"`) || !strings.HasSuffix(got[1], `"note":"no lease history reaches back to 2026-01-01T00:00:00.001Z"}`) {
		t.Fatalf("--origin --json: not the answers on one line each: %q", out)
	}

	// A key the server refuses ends the run at the first ID.
	code, out, stderr = decodeCLI(map[string]string{AdminKeyEnv: "idk_not-an-admin-key-0123456789abcdef"}, args...)
	if code != exitFail || out != "" || !strings.Contains(stderr, "403 ADMIN_KEY_REQUIRED") || strings.Count(stderr, "idkeeper:") != 1 {
		t.Fatalf("a refused key: exit %d, %q, %q", code, out, stderr)
	}
	// A zero-padded ID is looked up in its canonical form.
	mu.Lock()
	seen = nil
	mu.Unlock()
	code, _, stderr = decodeCLI(env, "--server", srv.URL, "--origin", fmt.Sprintf("%020d", held))
	mu.Lock()
	defer mu.Unlock()
	if want := fmt.Sprintf("GET /admin/api/ids/%d/origin %s", held, adminKey); code != exitOK || !slices.Equal(seen, []string{want}) {
		t.Fatalf("a zero-padded ID: exit %d, requests %q, %s", code, seen, stderr)
	}
}

// lookupOrigin refuses an answer about another ID and one that is not JSON; a 404
// (a server without the route) ends the run with a hint.
func TestLookupOriginChecksTheAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/admin/api/ids/1/origin":
			w.Write([]byte(`{"id":"2","decoded":{},"leases":[]}`))
		case "/admin/api/ids/3/origin":
			w.Write([]byte(`{"id":"3",`))
		case "/v1/version":
			w.Write([]byte(`{"version":"v","layout":{"epoch":"2026-01-01T00:00:00.000Z","timestampBits":41,"nodeBits":12,"sequenceBits":10}}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	admin, err := newServerKeys(srv.URL, "", adminKey)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := context.Background()
	if _, err := lookupOrigin(ctx, admin, 1); err == nil || !strings.Contains(err.Error(), `answered about the ID "2", not 1`) {
		t.Errorf("another ID: %v", err)
	}
	if _, err := lookupOrigin(ctx, admin, 3); err == nil || !strings.Contains(err.Error(), "not the expected JSON") {
		t.Errorf("not JSON: %v", err)
	}
	code, _, stderr := decodeCLI(map[string]string{AdminKeyEnv: adminKey}, "--server", srv.URL, "--origin", "4", "5")
	if code != exitFail || !strings.Contains(stderr, "404") || !strings.Contains(stderr, "a server without GET /admin/api/ids/{id}/origin") ||
		strings.Count(stderr, "idkeeper:") != 1 {
		t.Errorf("404: exit %d, %s", code, stderr)
	}
}

// decode --origin end to end: a real server, a lease granted through its API with
// a host and labels, an ID in its window: the lease line names that process.
func TestDecodeOriginEndToEnd(t *testing.T) {
	store := "bolt:" + filepath.Join(t.TempDir(), "idkeeper.db")
	initInProcess(t, store)
	s, code := startInProcess(t, []string{"--store", store}, map[string]string{BootstrapKeyEnv: bootstrapKey, AdminKeyEnv: adminKey})
	if s.base == "" {
		t.Fatalf("the server exited with %d:\n%s", code, s.logs)
	}
	defer s.stop()
	body := `{"requester":{"machineId":"pod-7f9c","pid":4242,"startedAt":"2026-11-29T10:00:00.000Z","instance":"sess-1"},"count":1,` +
		`"client":{"host":"web-7.example","labels":{"service":"orders"}}}`
	req, _ := http.NewRequest(http.MethodPost, s.base+"/v1/leases", strings.NewReader(body))
	req.Header.Set("X-API-Key", bootstrapKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var grant wire.AllocResponse
	if err := json.NewDecoder(resp.Body).Decode(&grant); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("Alloc: %s, %v", resp.Status, err)
	}
	resp.Body.Close()
	l := grant.Leases[0]
	ts, err := idkeeper.DefaultLayout.Timestamp(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id, err := idkeeper.DefaultLayout.Compose(ts, *l.NodeID, 3)
	if err != nil {
		t.Fatal(err)
	}
	code, out, stderr := decodeCLI(map[string]string{AdminKeyEnv: adminKey}, "--server", s.base, "--origin", strconv.FormatInt(id, 10))
	if code != exitOK || !strings.Contains(out, "lease: token "+strconv.FormatUint(*l.FencingToken, 10)+", requester pod-7f9c pid 4242") ||
		!strings.Contains(out, "instance sess-1") || !strings.Contains(out, "host web-7.example, labels service=orders") || !strings.Contains(out, ", held") {
		t.Fatalf("decode --origin: exit %d, %q, %s", code, out, stderr)
	}
	// An ID of a node ID nobody held: none known.
	other, _ := idkeeper.DefaultLayout.Compose(ts, (*l.NodeID+1)%int64(idkeeper.DefaultLayout.Nodes()), 0)
	if code, out, _ := decodeCLI(map[string]string{AdminKeyEnv: adminKey}, "--server", s.base, "--origin", strconv.FormatInt(other, 10)); code != exitOK ||
		!strings.Contains(out, "lease: none known") {
		t.Fatalf("decode --origin of a free node ID: exit %d, %q", code, out)
	}
}
