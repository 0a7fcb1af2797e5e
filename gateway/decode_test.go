package gateway

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

func errorField(err error) string {
	var e *idkeeper.Error
	if errors.As(err, &e) {
		return e.Field
	}
	return ""
}

func TestDecodeCount(t *testing.T) {
	for _, c := range []struct {
		body  string
		count int
		code  idkeeper.Code
		field string
	}{
		{`{"count":1}`, 1, "", ""},
		{"\t{ \"count\" :\r\n 10000 }\n", 10000, "", ""},
		{`{"\u0063ount":3}`, 3, "", ""},
		{`{"count":123456789}`, 0, protocol.CodeCountTooLarge, "count"},
		{`{"count":10001}`, 0, protocol.CodeCountTooLarge, "count"},
		{`{"count":0}`, 0, protocol.CodeInvalidRequest, "count"},
		{`{"count":-0}`, 0, protocol.CodeInvalidRequest, "count"},
		{`{"count":01}`, 0, protocol.CodeInvalidRequest, "body"},
		{`{"count":1.0}`, 0, protocol.CodeInvalidRequest, "count"},
		{`{"count":true}`, 0, protocol.CodeInvalidRequest, "count"},
		{`{"count":{}}`, 0, protocol.CodeInvalidRequest, "count"},
		{`{"count":1,"x":2}`, 0, protocol.CodeInvalidRequest, "x"},
		{`{"x":2,"count":1}`, 0, protocol.CodeInvalidRequest, "x"},
		{`"count"`, 0, protocol.CodeInvalidRequest, "body"},
		{"{\"count\":1}\x00", 0, protocol.CodeInvalidRequest, "body"},
		{"{\"count\":1,\"\xff\":1}", 0, protocol.CodeInvalidRequest, "body"},
		{``, 0, protocol.CodeInvalidRequest, "body"},
	} {
		n, err := decodeCount([]byte(c.body), DefaultMaxCount)
		if n != c.count || protocol.ErrorCode(err) != c.code || errorField(err) != c.field {
			t.Errorf("%q: %d, %v (field %q); want %d, %s, field %q", c.body, n, err, errorField(err), c.count, c.code, c.field)
		}
	}
}

func TestParseQuery(t *testing.T) {
	for _, c := range []struct {
		raw   string
		f     format
		field string
	}{
		{"", formatNumber, ""},
		{"format=number", formatNumber, ""},
		{"format=string", formatString, ""},
		{"&format=string&", formatString, ""},
		{"form%61t=str%69ng", formatString, ""},
		{"format=String", 0, "format"},
		{"format", 0, "format"},
		{"format=string;x=1", 0, "query"},
		{"format=%zz", 0, "query"},
		{"count=5", 0, "count"},
		{"=x", 0, ""},
	} {
		f, err := parseQuery(c.raw)
		if f != c.f || errorField(err) != c.field || (err == nil) != (c.field == "" && c.raw != "=x") {
			t.Errorf("%q: %v, %v; want %v, field %q", c.raw, f, err, c.f, c.field)
		}
	}
}

// FuzzDecodeCount checks the hand-written decoder against encoding/json: what it
// accepts is one JSON object whose only member is "count", an integer in range;
// its fast path never disagrees with the general one; it never panics.
func FuzzDecodeCount(f *testing.F) {
	for _, s := range []string{`{"count":1}`, `{"count":10000}`, ` {"count" : 5 } `, `{"count":1e3}`, `{"count":"5"}`,
		`{"count":1,"count":2}`, `{"\u0063ount":7}`, `{"count":0001}`, `[]`, `{"count":99999999999}`, `{"count":-1}`, "{\"count\":\xff}"} {
		f.Add([]byte(s), 10000)
	}
	f.Fuzz(func(t *testing.T, body []byte, max int) {
		if max < 1 || max > MaxMaxCount {
			return
		}
		n, err := decodeCount(body, max)
		slowN, slowErr := slowCount(body, max)
		if err == nil && slowErr == nil && n != slowN || (err == nil) != (slowErr == nil) {
			t.Fatalf("%q: fast path %d, %v; general %d, %v", body, n, err, slowN, slowErr)
		}
		if err != nil {
			if c := protocol.ErrorCode(err); c != protocol.CodeInvalidRequest && c != protocol.CodeCountTooLarge {
				t.Fatalf("%q: error code %s", body, c)
			}
			return
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil || len(m) != 1 {
			t.Fatalf("%q accepted but is not a one-member JSON object", body)
		}
		var v int
		if json.Unmarshal(m["count"], &v) != nil || v != n || n < 1 || n > max || strings.ContainsAny(string(m["count"]), ".eE") {
			t.Fatalf("%q accepted as %d", body, n)
		}
	})
}

// FuzzParseQuery checks the query parser against url.ParseQuery: it accepts
// exactly the queries whose only parameter is one format=number|string.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"", "format=string", "format=number", "format=string&format=number", "a=b", "format=str%69ng", "format=%", ";", "&&"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := parseQuery(raw)
		vals, refErr := url.ParseQuery(raw)
		want := refErr == nil && len(vals) <= 1 && (len(vals) == 0 || len(vals["format"]) == 1 &&
			(vals["format"][0] == "number" || vals["format"][0] == "string"))
		if (err == nil) != want {
			t.Fatalf("%q: parseQuery %v, %v; url.ParseQuery %v, %v", raw, got, err, vals, refErr)
		}
		if err == nil && (got == formatString) != (len(vals) == 1 && vals["format"][0] == "string") {
			t.Fatalf("%q: format %v, url.ParseQuery %v", raw, got, vals)
		}
	})
}
