package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// Issue #11: the server's admin web takes a user's Discord webhook (checked by
// discord.ValidWebhookURL), shows it masked, and has a Discord sender for the
// test message: without a webhook the test says so, not "alerts not configured".
// Nothing here reaches Discord.
func TestAdminWebhookWired(t *testing.T) {
	store := "bolt:" + filepath.Join(t.TempDir(), "idkeeper.db")
	initInProcess(t, store)
	s, _ := startInProcess(t, []string{"--store", store}, map[string]string{BootstrapKeyEnv: bootstrapKey, AdminPasswordEnv: firstAdminPW})
	if s.base == "" {
		t.Fatalf("the server did not start:\n%s", s.logs)
	}
	defer s.stop()
	code, cookie := adminLogin(t, s.base, "admin", firstAdminPW)
	if code != http.StatusOK || cookie == nil {
		t.Fatalf("login: %d", code)
	}
	post := func(path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("POST", s.base+"/admin/api/"+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		req.AddCookie(cookie)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		if strings.Contains(string(raw), "tok_wired") {
			t.Fatalf("%s: the answer holds the token: %s", path, raw)
		}
		return resp.StatusCode, m
	}
	hook := "https://discord.com/api/webhooks/123456/tok_wired-0123456789abcdef"
	if code, m := post("me/webhook", `{"url":"`+hook+`"}`); code != http.StatusOK || m["webhook"] != "https://discord.com/api/webhooks/123456/••••cdef" {
		t.Fatalf("set: %d %v", code, m)
	}
	if code, m := post("me/webhook", `{"url":"https://example.com/api/webhooks/1/tok_wired"}`); code != http.StatusBadRequest ||
		m["code"] != "INVALID_REQUEST" {
		t.Fatalf("a URL that is no Discord webhook: %d %v", code, m)
	}
	if code, _ := post("me/webhook/remove", ""); code != http.StatusNoContent {
		t.Fatalf("remove: %d", code)
	}
	if code, m := post("me/webhook/test", ""); code != http.StatusConflict || m["code"] != "WEBHOOK_NOT_SET" {
		t.Fatalf("test without a webhook: %d %v", code, m)
	}
}
