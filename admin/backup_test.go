package admin_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/admin"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snapshot"
)

// raw sends a request with body as it is (no Content-Type unless hdr gives one)
// and returns the answer undecoded; the transport decompresses nothing that the
// request's own Accept-Encoding asked for.
func (e *env) raw(method, path string, body []byte, hdr ...string) (*http.Response, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Cookie" {
			req.AddCookie(&http.Cookie{Name: admin.CookieName(e.srv.TLS != nil), Value: hdr[i+1]})
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, data
}

// snapshot is the store's state as a backup with a fixed time: equal for equal
// states.
func (e *env) snapshot() string {
	e.t.Helper()
	var buf bytes.Buffer
	if _, err := backup.Export(context.Background(), e.store.(snapshot.Store), &buf,
		backup.Source{Store: "x", TakenAt: time.Unix(0, 0)}); err != nil {
		e.t.Fatal(err)
	}
	return buf.String()
}

// backupLines splits a backup into its header (decoded), its record lines and
// its trailer line.
func backupLines(t *testing.T, data []byte) (backup.Header, []string, string) {
	t.Helper()
	rd, err := backup.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%v: %.200q", err, data)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) < 2 {
		t.Fatalf("a backup of %d lines", len(lines))
	}
	return rd.Header(), lines[1 : len(lines)-1], lines[len(lines)-1]
}

// settle waits until the registry's background audit entries of grants are
// written: the state stops changing under the exports.
func (e *env) settle(targets ...string) {
	e.t.Helper()
	for _, target := range targets {
		e.waitAudit(audit.LeaseGrant, target)
	}
}

// GET /admin/api/backup: the file is the store's, record for record, as an
// offline export writes it (only the time taken differs); named after the
// generation and the time; ?gzip=1 makes a gzip file; Accept-Encoding gzip
// compresses the transfer of the plain file. Wrong queries are 400.
func TestBackupExportAPI(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		plainID, _ := idkeeper.HashAPIKey(plainKey)
		who := idkeeper.Requester{MachineID: "m", PID: 1, StartedAt: start, Instance: "i"}
		if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who, Count: 1, Key: idkeeper.APIKey{ID: plainID}}); err != nil {
			t.Fatal(err)
		}
		tok := e.login("root", rootPW) // a full backup is an admin's (redacted_test.go: an operator's)
		e.settle("node:0")
		kind := map[bool]string{false: "bolt", true: "redis"}[e.redis != ""]

		var offline bytes.Buffer
		if _, err := backup.Export(ctx, e.store.(snapshot.Store), &offline, backup.Source{Store: kind, TakenAt: start.Add(-time.Hour)}); err != nil {
			t.Fatal(err)
		}
		resp, data := e.raw("GET", "/admin/api/backup", nil, "Cookie", tok)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != admin.BackupContentType ||
			resp.Header.Get("Content-Disposition") != `attachment; filename=idkeeper-1-20260301T100000Z.idkbackup` ||
			resp.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("export: %d %v %.300s", resp.StatusCode, resp.Header, data)
		}
		if _, err := backup.Verify(bytes.NewReader(data)); err != nil {
			t.Fatalf("the exported file does not verify: %v", err)
		}
		hOff, recOff, _ := backupLines(t, offline.Bytes())
		hAPI, recAPI, _ := backupLines(t, data)
		if !hAPI.TakenAt.Equal(start) || hAPI.Store != kind {
			t.Errorf("header: taken %v on %q", hAPI.TakenAt, hAPI.Store)
		}
		hAPI.TakenAt = hOff.TakenAt
		if hAPI != hOff || strings.Join(recAPI, "\n") != strings.Join(recOff, "\n") {
			t.Fatalf("the API's export differs from the offline one:\n%+v\n%+v\n%s\n---\n%s", hAPI, hOff,
				strings.Join(recAPI, "\n"), strings.Join(recOff, "\n"))
		}

		// A gzip file.
		resp, gz := e.raw("GET", "/admin/api/backup?gzip=1", nil, "Cookie", tok)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/gzip" || resp.Header.Get("Content-Encoding") != "" ||
			!strings.HasSuffix(resp.Header.Get("Content-Disposition"), `.idkbackup.gz`) || len(gz) < 2 || gz[0] != 0x1f || gz[1] != 0x8b {
			t.Fatalf("?gzip=1: %d %v", resp.StatusCode, resp.Header)
		}
		if sum, err := backup.Verify(bytes.NewReader(gz)); err != nil || sum.Counts.Nodes != 128 || sum.Counts.Leases != 1 {
			t.Fatalf("the gzip file: %+v, %v", sum, err)
		}
		// A plain file, its transfer compressed.
		resp, enc := e.raw("GET", "/admin/api/backup", nil, "Cookie", tok, "Accept-Encoding", "gzip")
		if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "gzip" || resp.Header.Get("Content-Type") != admin.BackupContentType {
			t.Fatalf("Accept-Encoding gzip: %d %v", resp.StatusCode, resp.Header)
		}
		zr, err := gzip.NewReader(bytes.NewReader(enc))
		if err != nil {
			t.Fatal(err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if _, recEnc, _ := backupLines(t, plain); strings.Join(recEnc, "\n") != strings.Join(recOff, "\n") {
			t.Fatal("the gzip-encoded transfer holds other records")
		}
		if resp, _ := e.raw("GET", "/admin/api/backup", nil, "Cookie", tok, "Accept-Encoding", "gzip;q=0"); resp.Header.Get("Content-Encoding") != "" {
			t.Fatal("gzip;q=0 was answered gzip-encoded")
		}

		for _, q := range []string{"?gzip=maybe", "?format=json", "?gzip=1&gzip=0"} {
			e.do("GET", "/admin/api/backup"+q, "", "Cookie", tok).problem(t, protocol.CodeInvalidRequest)
		}
	})
}

// allocV1 allocates count node IDs for the requester named through /v1.
func (e *env) allocV1(name string, count int) []wire.Lease {
	e.t.Helper()
	var a wire.AllocResponse
	e.do("POST", "/v1/leases", e.requester(name, fmt.Sprintf(`"count":%d`, count)), "X-API-Key", plainKey).ok(e.t).decode(e.t, &a)
	return a.Leases
}

// requester is a /v1 body of the requester named, with the members extra.
func (e *env) requester(name, extra string) string {
	return fmt.Sprintf(`{"requester":{"machineId":"%s","pid":7,"startedAt":"%s","instance":"%s-instance"},%s}`, name, ts(start.Add(-time.Hour)), name, extra)
}

// renewV1 renews the requester's leases with their receipts through /v1.
func (e *env) renewV1(name string, held []wire.Lease) []wire.Lease {
	e.t.Helper()
	var rcpts []string
	for _, l := range held {
		rcpts = append(rcpts, l.Receipt)
	}
	body, _ := json.Marshal(rcpts)
	var rr wire.RenewResponse
	e.do("POST", "/v1/leases/renew", e.requester(name, `"receipts":`+string(body)), "X-API-Key", plainKey).ok(e.t).decode(e.t, &rr)
	return rr.Leases
}

// POST /admin/api/restore end to end, on both stores: a backup taken through
// the API, a process that got a node ID after it, a key made after it; the
// restore answers what was quarantined until when (the registry's lease duration
// and grace) and which leases were kept, audits it, and ends the sessions; the
// registry then meets the new generation and recovers as from a reset: a new
// process gets nothing while the quarantine lasts (no stale grant of the node ID
// the backup shows free), the holders renew with their receipts and keep their
// leases, and after the quarantine a new grant's window starts after it. The
// store's health and page show the restore and the reset.
func TestRestoreAPI(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		a := e.allocV1("holder-a", 2)
		e.settle("nodes:0-1")
		resp, file := e.raw("GET", "/admin/api/backup", nil, "X-API-Key", adminKey)
		if resp.StatusCode != 200 {
			t.Fatalf("export: %d %s", resp.StatusCode, file)
		}
		_, _, trailer := backupLines(t, file)

		// After the backup: holder B gets a node ID, an API key is made.
		e.clk.Advance(time.Minute)
		b := e.allocV1("holder-b", 1)
		bNode := *b[0].NodeID
		e.do("POST", "/admin/api/keys", `{"description":"after the backup"}`, "X-API-Key", adminKey).status1(t, 201)
		tok := e.login("root", rootPW)

		e.clk.Advance(time.Minute)
		restoredAt := e.clk.Now()
		cfg := e.reg.Config()
		until := restoredAt.Add(cfg.LeaseDuration + cfg.Grace)
		var sum wire.Restore
		pv := e.preview(tok, file).ok(t)
		e.confirm(tok, pv, rootPW).ok(t).decode(t, &sum)
		want := wire.Restore{At: ts(restoredAt), Actor: "user:root", SHA256: regexp.MustCompile(`"sha256":"([0-9a-f]{64})"`).FindStringSubmatch(trailer)[1],
			Bytes: int64(len(file)), Backup: wire.RestoreBackup{TakenAt: ts(start), Store: map[bool]string{false: "bolt", true: "redis"}[e.redis != ""], Generation: 1},
			Records:    wire.RestoreRecords{Nodes: 128, Leases: 2, Keys: 2, Users: 1, Audit: sum.Records.Audit},
			Generation: 2, FencingCounter: *b[0].FencingToken, LeaseDurationMs: cfg.LeaseDuration.Milliseconds(),
			GraceMs: cfg.Grace.Milliseconds(), QuarantineEnd: ts(until),
			Quarantined: wire.RestoreNodes{Nodes: "2-127", Count: 126}, Kept: wire.RestoreNodes{Nodes: "0-1", Count: 2}, Live: 2}
		if sum != want || sum.Records.Audit < 2 {
			t.Fatalf("restore answered\n%+v\nwant\n%+v", sum, want)
		}
		entry := e.waitAudit(audit.BackupRestore, "store")
		if entry.Actor != "user:root" || !strings.Contains(entry.Detail, "node IDs 2-127 quarantined until "+ts(until)) ||
			!strings.Contains(entry.Detail, "2 leases kept (node IDs 0-1)") || !strings.Contains(entry.Detail, want.SHA256) {
			t.Fatalf("audit entry %+v", entry)
		}
		// The state is the backup's: the key made after it is gone; the sessions ended.
		var keys wire.APIKeyList
		e.do("GET", "/admin/api/keys", "", "X-API-Key", adminKey).ok(t).decode(t, &keys)
		if len(keys.Keys) != 2 {
			t.Fatalf("keys after the restore: %+v", keys.Keys)
		}
		e.do("GET", "/admin/api/me", "", "Cookie", tok).problem(t, protocol.CodeSessionExpired)

		// A new process: nothing is free, B's node ID above all (the backup shows it free).
		r := e.do("POST", "/v1/leases", e.requester("holder-c", `"count":1`), "X-API-Key", plainKey)
		r.problem(t, protocol.CodeNodeIDsExhausted)
		if g := e.reg.Generation(); g.Number != 2 || g.Origin != idkeeper.OriginRecovered {
			t.Fatalf("the registry serves generation %+v after the restore", g)
		}
		// The holders renew with their receipts and keep their leases.
		if got := e.renewV1("holder-b", b); len(got) != 1 || *got[0].NodeID != bNode || *got[0].FencingToken != *b[0].FencingToken {
			t.Fatalf("holder B after the restore: %+v", got)
		}
		if got := e.renewV1("holder-a", a); len(got) != 2 || *got[0].NodeID != *a[0].NodeID || *got[1].NodeID != *a[1].NodeID {
			t.Fatalf("holder A after the restore: %+v", got)
		}
		e.do("POST", "/v1/leases", e.requester("holder-c", `"count":1`), "X-API-Key", plainKey).problem(t, protocol.CodeNodeIDsExhausted)

		// The store's health: the restore, and the reset the registry recovered from.
		var s wire.StoreHealth
		e.do("GET", "/admin/api/store", "", "X-API-Key", adminKey).ok(t).decode(t, &s)
		if s.LastRestore == nil || *s.LastRestore != sum || s.Reset == nil || s.Reset.Generation != 2 || s.Reset.At != ts(restoredAt) ||
			s.Reset.Why == nil || !strings.Contains(*s.Reset.Why, "generation") {
			t.Fatalf("store health after the restore: lastRestore %+v, reset %+v", s.LastRestore, s.Reset)
		}
		tok = e.login("root", rootPW)
		page := string(e.do("GET", "/admin/store", "", "Cookie", tok).status1(t, 200).raw)
		for _, w := range []string{"restored from a backup", "user:root", sum.SHA256, ">2-127<", ">0-1<",
			"This server recovered it", "backup.restore"} {
			if !strings.Contains(page, w) {
				t.Errorf("the store page lacks %q", w)
			}
		}
		if strings.Contains(page, "never reset") {
			t.Error("the store page says the store was never reset")
		}

		// After the quarantine, a new grant's window starts after it.
		e.clk.Set(until.Add(time.Millisecond))
		c := e.allocV1("holder-c", 1)
		nb, _ := wire.ParseTime(c[0].NotBefore)
		if n := *c[0].NodeID; n == bNode || n == *a[0].NodeID || n == *a[1].NodeID || !nb.After(until) {
			t.Fatalf("after the quarantine: node %d from %s (quarantine until %s)", n, c[0].NotBefore, ts(until))
		}
		_ = ctx
	}, func(s *setup) { s.receipt = true })
}

// Refused restores write nothing: damaged, truncated, newer, foreign, empty,
// too large (by Content-Length or by its bytes), another media type, another
// site; a viewer and an operator may not restore.
func TestRestoreRefusals(t *testing.T) {
	e := newEnv(t, func(s *setup) { s.nodes, s.maxRestore = 16, 16<<10 })
	e.user("operator", account.RoleOperator)
	opTok := e.login("operator", userPW)
	tok := e.login("root", rootPW)
	_, file := e.raw("GET", "/admin/api/backup", nil, "Cookie", tok)
	if _, err := backup.Verify(bytes.NewReader(file)); err != nil || len(file) > 16<<10 {
		t.Fatalf("the backup (%d bytes): %v", len(file), err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(file)
	zw.Close()
	before := e.snapshot()
	big := bytes.Repeat([]byte("x"), 100<<10)
	post := func(body []byte, hdr ...string) response {
		return e.do("POST", "/admin/api/restore/preview", string(body), append([]string{"Cookie", tok, "Content-Type", "application/octet-stream"}, hdr...)...)
	}
	for _, c := range []struct {
		name string
		r    response
		code idkeeper.Code
		msg  string
	}{
		{"truncated", post(file[:len(file)-10]), protocol.CodeInvalidRequest, "truncated"},
		{"cut at a line", post(file[:bytes.LastIndexByte(file[:len(file)-1], '\n')+1]), protocol.CodeInvalidRequest, "without its trailer"},
		{"newer", post(bytes.Replace(file, []byte(`"version":3`), []byte(`"version":4`), 1)), protocol.CodeInvalidRequest, "upgrade idkeeper"},
		{"damaged", post(bytes.Replace(file, []byte(`"kind":"node","id":7`), []byte(`"kind":"node","id":8`), 1)), protocol.CodeInvalidRequest, "damaged"},
		{"foreign", post([]byte("SQLite format 3\x00")), protocol.CodeInvalidRequest, "not an IdKeeper backup file"},
		{"empty", post(nil), protocol.CodeInvalidRequest, "empty"},
		{"gzip cut", post(gz.Bytes()[:gz.Len()-20]), protocol.CodeInvalidRequest, "truncated"},
		{"too large", post(big), protocol.CodeBodyTooLarge, "16384 bytes"},
		{"too large, no length", e.chunked("/admin/api/restore/preview", big, "Cookie", tok), protocol.CodeBodyTooLarge, "16384 bytes"},
		{"json", e.do("POST", "/admin/api/restore/preview", string(file), "Cookie", tok), protocol.CodeUnsupportedMediaType, "application/octet-stream"},
		{"cross-site", post(file, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"), protocol.CodeForbidden, "cross-origin"},
		{"operator", e.do("POST", "/admin/api/restore/preview", string(file), "Cookie", opTok, "Content-Type", "application/octet-stream"), protocol.CodeForbidden, "role admin"},
		{"the file as the confirmation", e.do("POST", "/admin/api/restore", string(file), "Cookie", tok, "Content-Type", "application/octet-stream"), protocol.CodeUnsupportedMediaType, "application/json"},
	} {
		c.r.problem(t, c.code)
		if !strings.Contains(c.r.str("detail"), c.msg) {
			t.Errorf("%s: %s", c.name, c.r.raw)
		}
		if c.code == protocol.CodeInvalidRequest && !strings.Contains(c.r.str("detail"), "nothing was written") {
			t.Errorf("%s: %s", c.name, c.r.raw)
		}
		if e.snapshot() != before {
			t.Fatalf("%s: the store changed", c.name)
		}
	}
	for _, x := range e.auditAll("Cookie", tok) {
		if x.Action == audit.BackupRestore {
			t.Fatalf("a refused restore was audited: %+v", x)
		}
	}
	// The gzip file itself restores.
	var sum wire.Restore
	e.confirm(tok, post(gz.Bytes()).ok(t), rootPW).ok(t).decode(t, &sum)
	if sum.Generation != 2 || sum.Quarantined.Count != 16 || sum.Bytes != int64(len(file)) {
		t.Fatalf("restore of the gzip file: %+v", sum)
	}
}

// preview uploads file for a restore preview with the session tok.
func (e *env) preview(tok string, file []byte) response {
	e.t.Helper()
	return e.do("POST", "/admin/api/restore/preview", string(file), "Cookie", tok, "Content-Type", "application/octet-stream")
}

// confirm applies the preview pv (an answer of preview) with the password pw.
func (e *env) confirm(tok string, pv response, pw string) response {
	e.t.Helper()
	body, _ := json.Marshal(wire.RestoreConfirm{Preview: pv.str("preview"), SHA256: pv.str("sha256"), Password: pw})
	return e.do("POST", "/admin/api/restore", string(body), "Cookie", tok)
}

// chunked POSTs body as application/octet-stream without a Content-Length.
func (e *env) chunked(path string, body []byte, hdr ...string) response {
	e.t.Helper()
	req, err := http.NewRequest("POST", e.srv.URL+path, io.MultiReader(bytes.NewReader(body)))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Cookie" {
			req.AddCookie(&http.Cookie{Name: admin.CookieName(e.srv.TLS != nil), Value: hdr[i+1]})
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	r := response{status: resp.StatusCode, header: resp.Header}
	r.raw, _ = io.ReadAll(resp.Body)
	if err := json.Unmarshal(r.raw, &r.body); err != nil {
		e.t.Fatalf("%s: %v: %s", path, err, r.raw)
	}
	return r
}
