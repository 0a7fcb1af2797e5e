package http

import (
	"errors"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/problem"
	"github.com/idkeeper/idkeeper/protocol"
)

func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	cases := []struct {
		remote, xff, want string
		err               bool
	}{
		{"192.0.2.1:1234", "", "192.0.2.1", false},
		{"192.0.2.1:1234", "203.0.113.9", "192.0.2.1", false}, // untrusted peer: XFF ignored
		{"[::ffff:192.0.2.1]:80", "", "192.0.2.1", false},     // IPv4-mapped becomes IPv4
		{"[fe80::1%eth0]:80", "", "fe80::1", false},           // zone dropped
		{"10.1.1.1:80", "203.0.113.9", "203.0.113.9", false},
		{"10.1.1.1:80", "198.51.100.1, 203.0.113.9, 10.2.2.2", "203.0.113.9", false},
		{"10.1.1.1:80", "10.3.3.3, 10.2.2.2", "10.3.3.3", false}, // all trusted: the leftmost
		{"10.1.1.1:80", "", "10.1.1.1", false},
		{"[fd00::5]:80", "[2001:db8::7]:4711", "2001:db8::7", false},
		{"10.1.1.1:80", "garbage", "", true},
		{"10.1.1.1:80", "garbage, 203.0.113.9", "203.0.113.9", false}, // never read past the client
		{"not-an-address", "", "", true},
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		got, err := clientIP(r, trusted)
		if (err != nil) != c.err || (!c.err && got.String() != c.want) {
			t.Errorf("%s / %q: %v, %v; want %s (error %v)", c.remote, c.xff, got, err, c.want, c.err)
		}
	}
}

func TestParsePrefixes(t *testing.T) {
	ps, err := ParsePrefixes(" 10.1.2.3/8, 192.0.2.7,,::1, 2001:db8::/32 ")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.0.2.7/32", "::1/128", "2001:db8::/32"}
	if len(ps) != len(want) {
		t.Fatalf("%v", ps)
	}
	for i := range want {
		if ps[i].String() != want[i] {
			t.Fatalf("%v, want %v", ps, want)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "host.example", "1.2.3"} {
		if _, err := ParsePrefixes(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestProblemBody(t *testing.T) {
	status, body := problemBody(&idkeeper.Error{
		Code: protocol.CodeNodeIDsExhausted, Message: "no",
		Details: map[string]any{"remaining": 1, "code": "HIJACK", "status": 200},
	})
	if status != 409 || body["code"] != "NODE_IDS_EXHAUSTED" || body["status"] != 409 || body["remaining"] != 1 {
		t.Fatalf("%d %v", status, body)
	}
	if body["type"] != "https://idkeeper.dev/problems/node-ids-exhausted" || body["title"] != "Node IDs exhausted" {
		t.Fatalf("%v", body)
	}
	if _, ok := body["field"]; ok {
		t.Fatal("field on a non-INVALID_REQUEST problem")
	}
	status, body = problemBody(errors.New("disk on fire at /var/lib/x"))
	if status != 500 || body["code"] != "INTERNAL" || body["detail"] != "internal error" {
		t.Fatalf("%d %v", status, body)
	}
	// A code without a title of its own gets the status text.
	if _, body = problemBody(protocol.Errorf("SOMETHING_NEW", "x")); body["title"] != "Internal Server Error" {
		t.Fatalf("%v", body)
	}
	for _, code := range problem.Codes() {
		if e, _ := problem.Lookup(code); e.Status == 500 && code != protocol.CodeInternal {
			t.Errorf("%s has no status of its own", code)
		}
	}
}

// A machine ID becomes a label of at most maxMachineLabel bytes, valid UTF-8, and
// two long ones that share their first bytes keep apart.
func TestMachineLabel(t *testing.T) {
	if got := machineLabel("pod-7f9c"); got != "pod-7f9c" {
		t.Errorf("short machine ID %q became %q", "pod-7f9c", got)
	}
	long := strings.Repeat("ä", 100) // 200 bytes
	a, b := machineLabel(long+"a"), machineLabel(long+"b")
	if len(a) > maxMachineLabel || !utf8.ValidString(a) || a == b || !strings.HasPrefix(a, "ää") {
		t.Errorf("labels %q (%d bytes) and %q", a, len(a), b)
	}
}
