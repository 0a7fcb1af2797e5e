package idempotency_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idkeeper/idkeeper/idempotency"
)

func TestFingerprint(t *testing.T) {
	fp := func(body string) string { return idempotency.Fingerprint("POST", "/v1/ids", []byte(body)) }
	same := [][]string{
		{`{"count":1,"format":"string"}`, `{"format":"string","count":1}`, " {\n \"count\" : 1 ,\t\"format\":\"string\"}\r\n"},
		{`[1,{"b":2,"a":[true,null]}]`, `[ 1, { "a": [ true, null ], "b": 2 } ]`},
		{`"x\u0041"`, `"xA"`},
		{`"\ud83d\ude00"`, `"😀"`, ` "\uD83D\uDE00" `},
		{`{"a":{"x":1},"b":{"x":1}}`, `{"b":{"x":1},"a":{"x":1}}`}, // one name in two objects is no repeat
		{`{"big":123456789012345678901234567890}`, `{ "big" : 123456789012345678901234567890 }`},
	}
	for _, group := range same {
		for _, b := range group[1:] {
			if fp(b) != fp(group[0]) {
				t.Errorf("Fingerprint(%q) differs from Fingerprint(%q)", b, group[0])
			}
		}
	}
	distinct := []string{``, ` `, `{}`, `[]`, `null`, `"null"`, `{"count":1}`, `{"count":1.0}`, `{"count":1e0}`,
		`{"count":"1"}`, `{"count":2}`, `{"Count":1}`, `[1,2]`, `[2,1]`, `{"count":1} x`, `{"count":1}{}`,
		"not json", "not  json", `{"a":"\u00e9"}` + "\xff", "\x00",
		// A repeated member name is not its last value: {"count":1,"count":2} is not
		// {"count":2}, and its whitespace counts.
		`{"a":1,"a":2}`, `{"a":2}`, `{"a":2,"a":1}`, `{"a":1, "a":2}`, `{"a":1,"\u0061":2}`, `[{"a":1,"a":1}]`, `[{"a":1}]`,
		`{"o":{"a":1,"a":2}}`, `{"o":{"a":2}}`,
		// An unpaired surrogate is not U+FFFD, nor another unpaired one.
		`"\ud800"`, `"\ud801"`, `"\ufffd"`, `"\udc00\ud800"`, `"\ud800x"`}
	seen := map[string]string{}
	for _, b := range distinct {
		f := fp(b)
		if len(f) != 64 {
			t.Fatalf("Fingerprint = %q, want 64 hex digits", f)
		}
		if prev, dup := seen[f]; dup {
			t.Errorf("Fingerprint(%q) == Fingerprint(%q)", b, prev)
		}
		seen[f] = b
	}
	body := []byte(`{"count":1}`)
	base := idempotency.Fingerprint("POST", "/v1/ids", body)
	for _, other := range []string{
		idempotency.Fingerprint("PUT", "/v1/ids", body),
		idempotency.Fingerprint("POST", "/v1/ids?format=string", body),
		idempotency.Fingerprint("POST", "/v1/ids/", body),
		idempotency.Fingerprint("POST/v1/ids", "", body),
	} {
		if other == base {
			t.Error("method or target do not change the fingerprint")
		}
	}
}

func TestTarget(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/v1/ids", "/v1/ids"},
		{"/v1/ids?format=string", "/v1/ids?format=string"},
		{"/v1/ids?b=2&a=1&b=1", "/v1/ids?a=1&b=2&b=1"},
		{"/v1/a%2Fb?x=%zz", "/v1/a%2Fb?x=%zz"},
	} {
		u, err := url.ParseRequestURI(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := idempotency.Target(u); got != c.want {
			t.Errorf("Target(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzFingerprint checks that a fingerprint is 64 hex digits, depends on method
// and target, and, for a JSON body, ignores whitespace and member order, unless
// the body repeats a member name or escapes a surrogate: then a body that drops
// the repeat differs.
func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{`{"count":1}`, `{"b":[1,{"y":2,"x":1}],"a":"\u00e9"}`, `[1, 2.50, -0, 1e400]`,
		`{"a":1,"a":2}`, `"\ud800"`, "not json", "", " \n", `{"count":1} trailing`, "\xff"} {
		f.Add("POST", "/v1/ids", []byte(s))
	}
	f.Fuzz(func(t *testing.T, method, target string, body []byte) {
		got := idempotency.Fingerprint(method, target, body)
		if len(got) != 64 || strings.Trim(got, "0123456789abcdef") != "" {
			t.Fatalf("Fingerprint = %q, want 64 hex digits", got)
		}
		if idempotency.Fingerprint(method, target, body) != got {
			t.Fatal("Fingerprint is not deterministic")
		}
		if idempotency.Fingerprint(method+"X", target, body) == got || idempotency.Fingerprint(method, target+"X", body) == got {
			t.Fatal("method or target do not change the fingerprint")
		}
		if !utf8.Valid(body) || !json.Valid(body) {
			return
		}
		if repeats(body) {
			// Raw bytes: the body without the repeat (all the decoder keeps) differs.
			if idempotency.Fingerprint(method, target, reordered(t, body)) == got {
				t.Fatalf("Fingerprint(%q) matches its form without repeated names", body)
			}
			return
		}
		if bytes.Contains(bytes.ToLower(body), []byte(`\ud`)) {
			return // a surrogate escape, perhaps unpaired: TestFingerprint has cases
		}
		var indented, compact bytes.Buffer
		if err := json.Indent(&indented, body, "\n ", "\t"); err != nil {
			t.Fatal(err)
		}
		if err := json.Compact(&compact, body); err != nil {
			t.Fatal(err)
		}
		for _, b := range [][]byte{indented.Bytes(), compact.Bytes(), reordered(t, body)} {
			if idempotency.Fingerprint(method, target, b) != got {
				t.Fatalf("Fingerprint(%q) != Fingerprint(%q)", b, body)
			}
		}
	})
}

// repeats reports whether an object of body, valid JSON, repeats a member name:
// when it has more members (colons outside strings) than its decoded maps.
func repeats(body []byte) bool {
	colons, inString, escaped := 0, false, false
	for _, c := range body {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && c == ':':
			colons++
		}
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return false
	}
	var members func(v any) int
	members = func(v any) int {
		n := 0
		switch v := v.(type) {
		case map[string]any:
			n = len(v)
			for _, e := range v {
				n += members(e)
			}
		case []any:
			for _, e := range v {
				n += members(e)
			}
		}
		return n
	}
	return colons != members(v)
}

// reordered is body re-encoded with every object's members in reverse order.
func reordered(t *testing.T, body []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		// json.Valid accepted it, but the decoder may still refuse (nesting depth).
		t.Skip(err)
	}
	var b bytes.Buffer
	var write func(v any)
	write = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			keys := slices.Sorted(maps.Keys(v))
			slices.Reverse(keys)
			b.WriteString("{ ")
			for i, k := range keys {
				if i > 0 {
					b.WriteString(" , ")
				}
				kb, _ := json.Marshal(k)
				b.Write(kb)
				b.WriteString(" : ")
				write(v[k])
			}
			b.WriteString(" }")
		case []any:
			b.WriteString("[")
			for i, e := range v {
				if i > 0 {
					b.WriteString(",")
				}
				write(e)
			}
			b.WriteString("]")
		default:
			eb, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(eb)
		}
	}
	write(v)
	return b.Bytes()
}
