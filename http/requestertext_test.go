package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/idkeeper/idkeeper/protocol"
)

// notTextRunes are one of each Unicode category a caller's text must not hold
// (issue #29, finding 6): a bidi override and a zero-width space (Cf), a C1
// control (Cc), the line and paragraph separators (Zl, Zp).
var notTextRunes = []rune{'\u202E', '\u200B', '\u0085', '\u2028', '\u2029'}

// TestRequesterTextRefused sends every such rune in every text field a key holder
// sends with Alloc, Renew and Remove: each is 400 INVALID_REQUEST naming the field,
// and the store grants nothing. Printable non-ASCII text is still accepted.
func TestRequesterTextRefused(t *testing.T) {
	stores(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		requester := func(machine, instance string) map[string]any {
			return map[string]any{"machineId": machine, "pid": 7, "startedAt": "2026-03-01T09:00:00.000Z", "instance": instance}
		}
		body := func(m map[string]any) string {
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		before, err := h.store.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range notTextRunes {
			bad := "a" + string(r) + "b"
			cases := []struct{ path, body, field string }{
				{"/v1/leases", body(map[string]any{"requester": requester(bad, "inst"), "count": 1}), "requester.machineId"},
				{"/v1/leases", body(map[string]any{"requester": requester("m", bad), "count": 1}), "requester.instance"},
				{"/v1/leases", body(map[string]any{"requester": requester("m", "inst"), "count": 1,
					"client": map[string]any{"host": bad}}), "client.host"},
				{"/v1/leases", body(map[string]any{"requester": requester("m", "inst"), "count": 1,
					"client": map[string]any{"labels": map[string]string{"service": bad}}}), "client.labels"},
				{"/v1/leases/renew", body(map[string]any{"requester": requester(bad, "inst")}), "requester.machineId"},
				{"/v1/leases/remove", body(map[string]any{"requester": requester(bad, "inst")}), "requester.machineId"},
			}
			for _, c := range cases {
				res := h.post(c.path, c.body).problem(t, protocol.CodeInvalidRequest)
				if res.str("field") != c.field {
					t.Errorf("U+%04X %s: field %q, want %q (%s)", r, c.path, res.str("field"), c.field, res.str("detail"))
				}
			}
		}
		after, err := h.store.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if after.Fence != before.Fence {
			t.Fatalf("the store's fencing counter moved from %d to %d: a refused request was granted", before.Fence, after.Fence)
		}

		// Printable text beyond ASCII is text.
		for i, s := range []string{"café-é", "日本-ホスト"} {
			res := h.post("/v1/leases", body(map[string]any{"requester": requester(s, fmt.Sprintf("inst%d", i)), "count": 1,
				"client": map[string]any{"host": s, "labels": map[string]string{"team": s}}})).ok(t)
			if n := len(res.leases(t)); n != 1 {
				t.Fatalf("%q: %d leases, want 1", s, n)
			}
		}
	})
}
