package http_test

import (
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/internal/problem"
	"github.com/idkeeper/idkeeper/protocol"
)

// scrape reads GET /metrics over HTTP and returns its samples: the series, its
// labels sorted by name as the exposition format writes them, and the value.
func scrape(t *testing.T, base string, hc *http.Client) map[string]float64 {
	t.Helper()
	resp, err := hc.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return parseSamples(t, string(b))
}

// parseSamples parses the Prometheus text format's sample lines.
func parseSamples(t *testing.T, text string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for line := range strings.SplitSeq(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// series is the text format's name of a series: labels as name, value pairs,
// written sorted by name.
func series(name string, labels ...string) string {
	var ls []string
	for i := 0; i+1 < len(labels); i += 2 {
		ls = append(ls, labels[i]+`="`+labels[i+1]+`"`)
	}
	if len(ls) == 0 {
		return name
	}
	slices.Sort(ls)
	return name + "{" + strings.Join(ls, ",") + "}"
}

// TestRejectedRequestsCounted: every answer of status 400 or above is counted in
// idkeeper_http_rejected_total by the route's name (never the raw path) and the
// problem code; an answer that is not problem+json by its status. The API-key
// series of the lease routes exist at 0 before any rejection, for increase().
func TestRejectedRequestsCounted(t *testing.T) {
	h := newBolt(t, withOptions(func(o *idkhttp.Options) {
		o.Admin = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/admin/page" {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				w.WriteHeader(http.StatusForbidden)
				_, _ = w.Write([]byte("<p>no</p>"))
				return
			}
			_ = problem.From(protocol.Errorf(protocol.CodeConflict, "taken")).Write(w, 0)
		})
	}))
	before := scrape(t, h.baseURL, h.client)
	for _, route := range []string{"alloc", "renew", "remove", "remaining"} {
		s := series("idkeeper_http_rejected_total", "route", route, "code", "API_KEY_INVALID")
		if v, ok := before[s]; !ok || v != 0 {
			t.Errorf("before any request: %s = %v (present %v), want 0", s, v, ok)
		}
	}

	wrong := "idk_wrong-key-0123456789abcdefghijklm"
	for range 3 {
		h.post("/v1/leases", `{"requester":`+requesterJSON(1)+`,"count":1}`, "X-API-Key", wrong).problem(t, protocol.CodeAPIKeyInvalid)
	}
	h.get("/v1/leases/remaining", "X-API-Key", "").problem(t, protocol.CodeAPIKeyMissing)
	h.post("/v1/leases", `{"requester":`).problem(t, protocol.CodeInvalidRequest)
	h.post("/v1/leases/renew", `{}`, "Content-Type", "text/plain").problem(t, protocol.CodeUnsupportedMediaType)
	h.get("/v1/nowhere/17").problem(t, protocol.CodeNotFound)
	h.get("/v1/nowhere/18").problem(t, protocol.CodeNotFound)
	h.call(http.MethodDelete, "/v1/version", "").problem(t, protocol.CodeMethodNotAllowed)
	h.get("/admin/api/x").problem(t, protocol.CodeConflict)
	if r := h.get("/admin/page"); r.status != http.StatusForbidden {
		t.Fatalf("admin page: status %d", r.status)
	}
	h.post("/v1/leases", `{"requester":`+requesterJSON(1)+`,"count":1}`).ok(t)
	h.get("/v1/version").ok(t)

	got := scrape(t, h.baseURL, h.client)
	for _, c := range []struct {
		route, code string
		want        float64
	}{
		{"alloc", "API_KEY_INVALID", 3},
		{"remaining", "API_KEY_MISSING", 1},
		{"alloc", "INVALID_REQUEST", 1},
		{"renew", "UNSUPPORTED_MEDIA_TYPE", 1},
		{"other", "NOT_FOUND", 2},
		{"other", "METHOD_NOT_ALLOWED", 1},
		{"admin", "CONFLICT", 1},
		{"admin", "403", 1},
		{"renew", "API_KEY_INVALID", 0},
	} {
		s := series("idkeeper_http_rejected_total", "route", c.route, "code", c.code)
		if v, ok := got[s]; !ok || v != c.want {
			t.Errorf("%s = %v (present %v), want %v", s, v, ok, c.want)
		}
	}
	var total float64
	for s, v := range got {
		if strings.HasPrefix(s, "idkeeper_http_rejected_total{") {
			total += v
			if strings.Contains(s, "nowhere") || strings.Contains(s, "/v1/") {
				t.Errorf("a raw path in a label: %s", s)
			}
			if strings.Contains(s, `code="OK"`) || strings.Contains(s, `code="200"`) {
				t.Errorf("a success counted as rejected: %s", s)
			}
		}
	}
	if total != 11 {
		t.Errorf("rejected answers counted: %v, want 11", total)
	}
}

// TestBuildInfo: the registry exports idkeeper_build_info{version,commit,goversion} 1
// with the Options' Version and Commit.
func TestBuildInfo(t *testing.T) {
	h := newBolt(t)
	got := scrape(t, h.baseURL, h.client)
	s := series("idkeeper_build_info", "version", "v1.2.3", "commit", "abc123", "goversion", runtime.Version())
	if got[s] != 1 {
		var have []string
		for k := range got {
			if strings.HasPrefix(k, "idkeeper_build_info") {
				have = append(have, k)
			}
		}
		t.Fatalf("%s = %v; build_info series: %v", s, got[s], have)
	}
}

// TestHealthLikeGateway: GET /health answers as the gateway's does, 200
// {"status":"ok"} with no API key, when the registry is ready; the 503 of /readyz
// while it is not.
func TestHealthLikeGateway(t *testing.T) {
	h := newBolt(t)
	r := h.get("/health", "X-API-Key", "").ok(t)
	if len(r.body) != 1 || r.str("status") != "ok" {
		t.Fatalf("/health = %s, want {\"status\":\"ok\"}", r.raw)
	}
	u := newHarnessNoInit(t)
	u.get("/health", "X-API-Key", "").problem(t, protocol.CodeStoreNotInitialised)
	u.get("/readyz", "X-API-Key", "").problem(t, protocol.CodeStoreNotInitialised)
}

// TestCountErrorNamesItsBounds: a count that is no count at all names the counts
// a client may ask for, 1 to protocol.MaxCount, never the bounds of int64.
func TestCountErrorNamesItsBounds(t *testing.T) {
	h := newBolt(t)
	want := "1 to " + strconv.Itoa(protocol.MaxCount)
	for _, count := range []string{`0`, `-1`, `1.5`, `"1"`, `9223372036854775808`, `1e2`} {
		r := h.post("/v1/leases", `{"requester":`+requesterJSON(1)+`,"count":`+count+`}`).problem(t, protocol.CodeInvalidRequest)
		if d := r.str("detail"); !strings.Contains(d, want) || strings.Contains(d, "9223372036854775807") || r.str("field") != "count" {
			t.Errorf("count %s: field %q, detail %q; want field count and the bounds %s", count, r.str("field"), d, want)
		}
	}
	h.post("/v1/leases", `{"requester":`+requesterJSON(1)+`,"count":5000}`).problem(t, protocol.CodeCountTooLarge)
}

// TestRefusedAllocLogsRequesterFields: the registry's log line of an Alloc it
// refuses (here for clock skew) gives the requester as fields of a JSON object,
// not as one string.
func TestRefusedAllocLogsRequesterFields(t *testing.T) {
	h := newBolt(t)
	h.post("/v1/leases", `{"requester":`+requesterJSON(7)+`,"count":1,"clientUtcNow":"`+ts(start.Add(-time.Hour))+`"}`).
		problem(t, protocol.CodeClockSkewTooLarge)
	var found bool
	for line := range strings.SplitSeq(h.logs.String(), "\n") {
		if !strings.Contains(line, "alloc rejected") {
			continue
		}
		found = true
		var e struct {
			Requester struct {
				Key       string  `json:"key"`
				MachineID string  `json:"machineId"`
				PID       float64 `json:"pid"`
				StartedAt string  `json:"startedAt"`
			} `json:"requester"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		r := e.Requester
		if r.MachineID != "host-a" || r.PID != 7 || r.StartedAt != "2026-03-01T09:00:00Z" || !strings.HasPrefix(r.Key, "7/") {
			t.Fatalf("requester fields %+v in %s", r, line)
		}
	}
	if !found {
		t.Fatalf("no log line of the refused Alloc:\n%s", h.logs.String())
	}
}
