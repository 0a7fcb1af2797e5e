package idempotency_test

import (
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/protocol"
)

func TestParseKey(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"abc", "abc"},
		{"8e0f3a52-4c8e-4f7e-9b1a-2d6c0f4e8a11", "8e0f3a52-4c8e-4f7e-9b1a-2d6c0f4e8a11"},
		{`"abc"`, "abc"},
		{" \tabc\t ", "abc"},
		{` "abc" `, "abc"},
		{`"a b"`, "a b"},
		{`" "`, " "},
		{`"a\"b"`, `a"b`},
		{`"a\\b"`, `a\b`},
		{`"a,b;c=d"`, "a,b;c=d"},
		{"a;b=c", "a;b=c"},
		{"~!#$%&'*+-.^_`|:/?=@[]{}()<>", "~!#$%&'*+-.^_`|:/?=@[]{}()<>"},
		{strings.Repeat("k", 255), strings.Repeat("k", 255)},
		{`"` + strings.Repeat("k", 255) + `"`, strings.Repeat("k", 255)},
		{`"` + strings.Repeat(`\\`, 255) + `"`, strings.Repeat(`\`, 255)},
	} {
		got, err := idempotency.ParseKey(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{
		"", " ", `""`, `"`, `"abc`, `abc"`, `"a"b"`, `"abc" x`, `"abc";p=1`, `"a\b"`, `"a\`, `"a` + "\x7f" + `"`,
		"a b", "a,b", `a"b`, `a\b`, "a\x00b", "ключ", "caf\xc3\xa9", "\x7f",
		strings.Repeat("k", 256), `"` + strings.Repeat("k", 256) + `"`, `"` + strings.Repeat(`\\`, 256) + `"`,
	} {
		got, err := idempotency.ParseKey(in)
		if protocol.ErrorCode(err) != idempotency.CodeKeyInvalid {
			t.Errorf("ParseKey(%q) = %q, %v; want IDEMPOTENCY_KEY_INVALID", in, got, err)
		}
		if err != nil && len(in) > 3 && strings.Contains(err.Error(), in) {
			t.Errorf("ParseKey(%q): the error %q repeats the key", in, err)
		}
	}
}

func TestScope(t *testing.T) {
	a := idempotency.Scope("caller", "op", "key")
	if !strings.HasPrefix(a, "op:") || len(a) != len("op:")+64 || a != idempotency.Scope("caller", "op", "key") {
		t.Fatalf("Scope = %q", a)
	}
	for _, other := range [][3]string{{"caller2", "op", "key"}, {"caller", "op2", "key"}, {"caller", "op", "key2"},
		{"calle", "rop", "key"}, {"", "op", "callerkey"}} {
		if idempotency.Scope(other[0], other[1], other[2]) == a {
			t.Errorf("Scope%v collides with Scope(caller, op, key)", other)
		}
	}
	if strings.Contains(a, "key") {
		t.Errorf("Scope %q shows the key", a)
	}
}

// sfQuote serialises key as an RFC 8941 sf-string.
func sfQuote(key string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
}

func validKey(s string) bool {
	if s == "" || len(s) > idempotency.MaxKeyLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// FuzzParseKey checks that ParseKey never panics, accepts only 1–255 printable
// ASCII characters, reads each accepted value in its one canonical way, and
// accepts every valid key in sf-string form.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, ` "a\"b\\c" `, `"abc`, `"a\b"`, `"abc";p=1`, "a b", "a,b", "",
		`""`, "\t\"x\"\t", strings.Repeat("k", 255), `"` + strings.Repeat(`\\`, 200) + `"`, "ключ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		key, err := idempotency.ParseKey(in)
		if err != nil {
			if protocol.ErrorCode(err) != idempotency.CodeKeyInvalid {
				t.Fatalf("ParseKey(%q): %v, want IDEMPOTENCY_KEY_INVALID", in, err)
			}
		} else {
			if !validKey(key) {
				t.Fatalf("ParseKey(%q) = %q: not 1–255 printable ASCII characters", in, key)
			}
			trimmed := strings.Trim(in, " \t")
			if strings.HasPrefix(trimmed, `"`) {
				if trimmed != sfQuote(key) {
					t.Fatalf("ParseKey(%q) = %q, but %q is its only sf-string form", in, key, sfQuote(key))
				}
			} else if trimmed != key {
				t.Fatalf("ParseKey(%q) = %q, want the bare value %q", in, key, trimmed)
			}
		}
		if validKey(in) {
			if got, err := idempotency.ParseKey(sfQuote(in)); err != nil || got != in {
				t.Fatalf("ParseKey(%q) = %q, %v; want %q", sfQuote(in), got, err, in)
			}
		}
	})
}
