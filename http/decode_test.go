package http

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

const goodRequester = `{"machineId":"host-a","pid":42,"startedAt":"2026-03-01T10:00:00.123Z"}`

func TestDecodeAllocRequestValid(t *testing.T) {
	req, err := decodeAllocRequest([]byte(`{"requester":` + goodRequester + `,"count":3,"clientUtcNow":"2026-03-01T11:00:00.5+09:00"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := idkeeper.Requester{MachineID: "host-a", PID: 42, StartedAt: time.Date(2026, 3, 1, 10, 0, 0, 123e6, time.UTC)}
	if req.Requester != want || req.Count != 3 {
		t.Fatalf("got %+v", req)
	}
	if req.ClientNow == nil || !req.ClientNow.Equal(time.Date(2026, 3, 1, 2, 0, 0, 500e6, time.UTC)) || req.ClientNow.Location() != time.UTC {
		t.Fatalf("clientUtcNow = %v", req.ClientNow)
	}
	// Optional members may be absent or null.
	req, err = decodeAllocRequest([]byte(` {"count":1,"clientUtcNow":null,"requester":` + goodRequester + `} ` + "\n"))
	if err != nil || req.ClientNow != nil {
		t.Fatalf("got %+v, %v", req, err)
	}
}

// manyLabels is n label members "k0":"v", "k1":"v", ….
func manyLabels(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, fmt.Sprintf(`"k%d":"v"`, i))
	}
	return strings.Join(parts, ",")
}

func TestDecodeAllocClient(t *testing.T) {
	req, err := decodeAllocRequest([]byte(`{"requester":` + goodRequester + `,"count":1,"client":{"host":"web-7.example",` +
		`"labels":{"service":"orders","app.kubernetes.io/version":"1.4.2"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if req.Client.Host != "web-7.example" || len(req.Client.Labels) != 2 || req.Client.Labels["app.kubernetes.io/version"] != "1.4.2" {
		t.Fatalf("client %+v", req.Client)
	}
	req, err = decodeAllocRequest([]byte(`{"requester":` + goodRequester + `,"count":1,"client":{"labels":{` + manyLabels(16) + `}}}`))
	if err != nil || len(req.Client.Labels) != 16 || req.Client.Host != "" {
		t.Fatalf("16 labels: %+v, %v", req.Client, err)
	}
	if req, err := decodeAllocRequest([]byte(`{"requester":` + goodRequester + `,"count":1,"client":null}`)); err != nil || !req.Client.IsZero() {
		t.Fatalf("null client: %+v, %v", req.Client, err)
	}
}

func TestDecodeInvalid(t *testing.T) {
	r := goodRequester
	cases := []struct {
		name, body, field string
	}{
		{"empty", ``, "body"},
		{"blank", "  \n", "body"},
		{"malformed", `{"requester":`, "body"},
		{"not an object", `[1,2]`, "body"},
		{"string body", `"x"`, "body"},
		{"trailing data", `{"requester":` + r + `,"count":1} {}`, "body"},
		{"trailing garbage", `{"requester":` + r + `,"count":1}x`, "body"},
		{"invalid utf8", "{\"requester\":{\"machineId\":\"\xff\"}}", "body"},
		{"unknown member", `{"requester":` + r + `,"count":1,"extra":1}`, "extra"},
		{"case-folded member", `{"requester":` + r + `,"Count":1}`, "Count"},
		{"unknown requester member", `{"requester":{"machineId":"a","pid":1,"startedAt":"2026-01-01T00:00:00Z","uid":0},"count":1}`, "requester.uid"},
		{"long unknown member", `{"` + strings.Repeat("é", 100) + `":1}`, strings.Repeat("é", 32) + "…"},
		{"duplicate member", `{"requester":` + r + `,"count":1,"count":2}`, "count"},
		{"missing requester", `{"count":1}`, "requester"},
		{"null requester", `{"requester":null,"count":1}`, "requester"},
		{"requester not object", `{"requester":"host","count":1}`, "requester"},
		{"missing count", `{"requester":` + r + `}`, "count"},
		{"count zero", `{"requester":` + r + `,"count":0}`, "count"},
		{"count negative", `{"requester":` + r + `,"count":-1}`, "count"},
		{"count past int64", `{"requester":` + r + `,"count":9223372036854775808}`, "count"},
		{"count fraction", `{"requester":` + r + `,"count":1.5}`, "count"},
		{"count exponent", `{"requester":` + r + `,"count":1e2}`, "count"},
		{"count string", `{"requester":` + r + `,"count":"1"}`, "count"},
		{"count huge", `{"requester":` + r + `,"count":99999999999999999999999}`, "count"},
		{"machineId missing", `{"requester":{"pid":1,"startedAt":"2026-01-01T00:00:00Z"},"count":1}`, "requester.machineId"},
		{"machineId empty", `{"requester":{"machineId":"","pid":1,"startedAt":"2026-01-01T00:00:00Z"},"count":1}`, "requester.machineId"},
		{"machineId number", `{"requester":{"machineId":7,"pid":1,"startedAt":"2026-01-01T00:00:00Z"},"count":1}`, "requester.machineId"},
		{"machineId control", `{"requester":{"machineId":"a\u0000b","pid":1,"startedAt":"2026-01-01T00:00:00Z"},"count":1}`, "requester.machineId"},
		{"machineId too long", `{"requester":{"machineId":"` + strings.Repeat("m", 257) + `","pid":1,"startedAt":"2026-01-01T00:00:00Z"},"count":1}`, "requester.machineId"},
		{"pid missing", `{"requester":{"machineId":"a","startedAt":"2026-01-01T00:00:00Z"},"count":1}`, "requester.pid"},
		{"pid zero", `{"requester":{"machineId":"a","pid":0,"startedAt":"2026-01-01T00:00:00Z"},"count":1}`, "requester.pid"},
		{"pid negative", `{"requester":{"machineId":"a","pid":-5,"startedAt":"2026-01-01T00:00:00Z"},"count":1}`, "requester.pid"},
		{"pid too big", `{"requester":{"machineId":"a","pid":4294967296,"startedAt":"2026-01-01T00:00:00Z"},"count":1}`, "requester.pid"},
		{"startedAt missing", `{"requester":{"machineId":"a","pid":1},"count":1}`, "requester.startedAt"},
		{"startedAt bad", `{"requester":{"machineId":"a","pid":1,"startedAt":"yesterday"},"count":1}`, "requester.startedAt"},
		{"startedAt no zone", `{"requester":{"machineId":"a","pid":1,"startedAt":"2026-01-01T00:00:00"},"count":1}`, "requester.startedAt"},
		{"startedAt number", `{"requester":{"machineId":"a","pid":1,"startedAt":1767225600000},"count":1}`, "requester.startedAt"},
		{"startedAt zero time", `{"requester":{"machineId":"a","pid":1,"startedAt":"0001-01-01T00:00:00Z"},"count":1}`, "requester.startedAt"},
		{"clientUtcNow bad", `{"requester":` + r + `,"count":1,"clientUtcNow":"2026-13-01T00:00:00Z"}`, "clientUtcNow"},
		{"client not an object", `{"requester":` + r + `,"count":1,"client":"web-1"}`, "client"},
		{"client unknown member", `{"requester":` + r + `,"count":1,"client":{"hostname":"x"}}`, "client.hostname"},
		{"client host number", `{"requester":` + r + `,"count":1,"client":{"host":7}}`, "client.host"},
		{"client host too long", `{"requester":` + r + `,"count":1,"client":{"host":"` + strings.Repeat("h", 254) + `"}}`, "client.host"},
		{"client host control", `{"requester":` + r + `,"count":1,"client":{"host":"a\u0007b"}}`, "client.host"},
		{"labels not an object", `{"requester":` + r + `,"count":1,"client":{"labels":["a"]}}`, "client.labels"},
		{"label value number", `{"requester":` + r + `,"count":1,"client":{"labels":{"a":1}}}`, "client.labels"},
		{"label repeated", `{"requester":` + r + `,"count":1,"client":{"labels":{"a":"1","a":"2"}}}`, "client.labels"},
		{"label name empty", `{"requester":` + r + `,"count":1,"client":{"labels":{"":"1"}}}`, "client.labels"},
		{"label name blank", `{"requester":` + r + `,"count":1,"client":{"labels":{"a b":"1"}}}`, "client.labels"},
		{"label name too long", `{"requester":` + r + `,"count":1,"client":{"labels":{"` + strings.Repeat("k", 64) + `":"1"}}}`, "client.labels"},
		{"label value too long", `{"requester":` + r + `,"count":1,"client":{"labels":{"k":"` + strings.Repeat("v", 257) + `"}}}`, "client.labels"},
		{"too many labels", `{"requester":` + r + `,"count":1,"client":{"labels":{` + manyLabels(17) + `}}}`, "client.labels"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := decodeAllocRequest([]byte(c.body))
			assertInvalid(t, err, c.field)
		})
	}
}

func TestDecodeRenewRequest(t *testing.T) {
	req, err := decodeRenewRequest([]byte(`{"requester":` + goodRequester + `,"clientUtcNow":"2026-03-01T10:00:00Z","fencingTokens":[9,9007199254740991],"receipts":["abc",""]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(req.FencingTokens, []uint64{9, 1<<53 - 1}) || req.ClientNow == nil || !reflect.DeepEqual(req.Receipts, []string{"abc", ""}) {
		t.Fatalf("got %+v", req)
	}
	if req, err = decodeRenewRequest([]byte(`{"requester":` + goodRequester + `}`)); err != nil || req.FencingTokens != nil || req.ClientNow != nil || req.Receipts != nil {
		t.Fatalf("got %+v, %v", req, err)
	}
	// Issue #8 item 8: tokens are 1 … 2^53−1; anything else is refused at the door.
	for body, field := range map[string]string{
		`{"requester":` + goodRequester + `,"count":1}`:                                       "count",
		`{"requester":` + goodRequester + `,"fencingTokens":9}`:                               "fencingTokens",
		`{"requester":` + goodRequester + `,"fencingTokens":[1,-2]}`:                          "fencingTokens[1]",
		`{"requester":` + goodRequester + `,"fencingTokens":[1.5]}`:                           "fencingTokens[0]",
		`{"requester":` + goodRequester + `,"fencingTokens":["1"]}`:                           "fencingTokens[0]",
		`{"requester":` + goodRequester + `,"fencingTokens":[0]}`:                             "fencingTokens[0]",
		`{"requester":` + goodRequester + `,"fencingTokens":[1,9007199254740992]}`:            "fencingTokens[1]",
		`{"requester":` + goodRequester + `,"fencingTokens":[18446744073709551615]}`:          "fencingTokens[0]",
		`{"requester":` + goodRequester + `,"receipts":"abc"}`:                                "receipts",
		`{"requester":` + goodRequester + `,"receipts":[1]}`:                                  "receipts[0]",
		`{"requester":` + goodRequester + `,"receipts":["` + strings.Repeat("A", 129) + `"]}`: "receipts[0]",
		`{"requester":` + goodRequester + `,"clientUtcNow":"tomorrow"}`:                       "clientUtcNow",
		`{"clientUtcNow":"2026-03-01T10:00:00Z"}`:                                             "requester",
	} {
		_, err := decodeRenewRequest([]byte(body))
		assertInvalid(t, err, field)
	}
	many := `{"requester":` + goodRequester + `,"fencingTokens":[` + strings.Repeat("1,", protocol.MaxCount) + `1]}`
	_, err = decodeRenewRequest([]byte(many))
	assertInvalid(t, err, "fencingTokens")
	many = `{"requester":` + goodRequester + `,"receipts":[` + strings.Repeat(`"a",`, protocol.MaxCount) + `"a"]}`
	_, err = decodeRenewRequest([]byte(many))
	assertInvalid(t, err, "receipts")
}

// The requester's instance is optional, base64url and bounded (DESIGN §10).
func TestDecodeRequesterInstance(t *testing.T) {
	withInstance := func(v string) string {
		return `{"requester":{"machineId":"m","pid":1,"startedAt":"2026-03-01T10:00:00Z","instance":` + v + `},"count":1}`
	}
	req, err := decodeAllocRequest([]byte(withInstance(`"AbC-_09xyzABCDEFGHIJKL"`)))
	if err != nil || req.Requester.Instance != "AbC-_09xyzABCDEFGHIJKL" {
		t.Fatalf("got %+v, %v", req, err)
	}
	for _, v := range []string{`"a/b"`, `"a b"`, `"ä"`, `"` + strings.Repeat("a", 65) + `"`, `7`} {
		_, err := decodeAllocRequest([]byte(withInstance(v)))
		assertInvalid(t, err, "requester.instance")
	}
}

func TestDecodeRemoveRequest(t *testing.T) {
	req, err := decodeRemoveRequest([]byte(`{"requester":` + goodRequester + `,"mintedUpTo":"2026-03-01T10:05:00.0009Z"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !req.MintedUpTo.Equal(time.Date(2026, 3, 1, 10, 5, 0, 0, time.UTC)) {
		t.Fatalf("mintedUpTo = %v, want truncated to the millisecond", req.MintedUpTo)
	}
	if req, err = decodeRemoveRequest([]byte(`{"requester":` + goodRequester + `}`)); err != nil || !req.MintedUpTo.IsZero() {
		t.Fatalf("got %+v, %v", req, err)
	}
	_, err = decodeRemoveRequest([]byte(`{"requester":` + goodRequester + `,"mintedUpTo":""}`))
	assertInvalid(t, err, "mintedUpTo")
	_, err = decodeRemoveRequest([]byte(`{"requester":` + goodRequester + `,"count":2}`))
	assertInvalid(t, err, "count")
}

func assertInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var e *idkeeper.Error
	if !errors.As(err, &e) || e.Code != protocol.CodeInvalidRequest {
		t.Fatalf("err = %v, want INVALID_REQUEST", err)
	}
	if e.Field != field {
		t.Fatalf("field = %q, want %q (%v)", e.Field, field, err)
	}
	if e.Message == "" {
		t.Fatal("no message")
	}
}

// encodeRequester is the canonical wire form of a decoded requester, for the
// round-trip property of the fuzz tests.
func encodeRequester(r idkeeper.Requester) map[string]any {
	m := map[string]any{"machineId": r.MachineID, "pid": r.PID, "startedAt": wire.FormatTime(r.StartedAt)}
	if r.Instance != "" {
		m["instance"] = r.Instance
	}
	return m
}

func encodeTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return wire.FormatTime(*t)
}

func fuzzSeeds(f *testing.F, bodies ...string) {
	for _, b := range bodies {
		f.Add([]byte(b))
	}
	f.Add([]byte(``))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"requester":{"machineId":"\ud800","pid":1,"startedAt":"2026-01-01T00:00:00Z"},"count":1}`))
	f.Add([]byte(`{"requester":{"machineId":"a","pid":1,"startedAt":"2026-01-01T00:00:00Z"}}{`))
	f.Add([]byte(`{"requester":{"machineId":"a","pid":1e0,"startedAt":"2026-01-01T00:00:00-00:00"},"count":01}`))
}

// checkDecoded asserts the fuzz property shared by every decoder: an error is an
// INVALID_REQUEST naming a field; a success passes every check of the wire format and
// round-trips through its canonical encoding.
func checkDecoded(t *testing.T, err error, r idkeeper.Requester, times []*time.Time, redo func() (any, error), got any) {
	t.Helper()
	if err != nil {
		var e *idkeeper.Error
		if !errors.As(err, &e) || e.Code != protocol.CodeInvalidRequest || e.Field == "" || e.Message == "" {
			t.Fatalf("bad error %#v", err)
		}
		return
	}
	if verr := r.Validate(); verr != nil {
		t.Fatalf("decoded an invalid requester %+v: %v", r, verr)
	}
	if r.PID > MaxPID {
		t.Fatalf("pid %d", r.PID)
	}
	for _, tm := range append(times, &r.StartedAt) {
		if tm != nil && (tm.IsZero() || tm.Location() != time.UTC || !tm.Equal(tm.Truncate(time.Millisecond))) {
			t.Fatalf("time %v not a UTC millisecond", tm)
		}
	}
	again, err := redo()
	if err != nil {
		t.Fatalf("canonical form does not decode: %v", err)
	}
	if !reflect.DeepEqual(again, got) {
		t.Fatalf("round trip: %+v != %+v", again, got)
	}
}

func FuzzDecodeAllocRequest(f *testing.F) {
	fuzzSeeds(f,
		`{"requester":`+goodRequester+`,"count":2,"clientUtcNow":"2026-03-01T10:00:00.000Z"}`,
		`{"requester":`+goodRequester+`,"count":4096}`,
		`{"requester":`+goodRequester+`,"count":1,"count":1}`,
		`{"requester":`+goodRequester+`,"count":1,"client":{"host":"h","labels":{"a":"b","c.d/e":""}}}`,
		`{"requester":`+goodRequester+`,"count":1,"client":{"labels":{"a":"b","a":"c"}}}`,
		`{"requester":`+goodRequester+`,"count":1,"client":{"host":"h\u202Ex","labels":{"a":"\u2028"}}}`,
		`{"requester":{"machineId":"\u200B","pid":1,"startedAt":"2026-03-01T10:00:00Z","instance":"a"},"count":1}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeAllocRequest(body)
		if err == nil && (req.Count < 1 || req.Count > protocol.MaxCount) {
			t.Fatalf("count %d", req.Count)
		}
		if err == nil && req.Client.Validate() != nil {
			t.Fatalf("an invalid client accepted: %+v", req.Client)
		}
		checkDecoded(t, err, req.Requester, []*time.Time{req.ClientNow}, func() (any, error) {
			m := map[string]any{"requester": encodeRequester(req.Requester), "count": req.Count, "clientUtcNow": encodeTime(req.ClientNow)}
			if !req.Client.IsZero() {
				m["client"] = map[string]any{"host": req.Client.Host, "labels": req.Client.Labels}
			}
			b, _ := json.Marshal(m)
			return decodeAllocRequest(b)
		}, req)
	})
}

func FuzzDecodeRenewRequest(f *testing.F) {
	fuzzSeeds(f,
		`{"requester":`+goodRequester+`,"clientUtcNow":"2026-03-01T10:00:00.000Z","fencingTokens":[1,2,3]}`,
		`{"requester":`+goodRequester+`,"fencingTokens":[]}`,
		`{"requester":{"machineId":"m","pid":1,"startedAt":"2026-03-01T10:00:00Z","instance":"x_y-Z"},"receipts":["AQAAAAE"],"fencingTokens":[9007199254740991]}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeRenewRequest(body)
		if err == nil && (len(req.FencingTokens) > maxFencingTokens || len(req.Receipts) > maxFencingTokens) {
			t.Fatalf("%d tokens, %d receipts", len(req.FencingTokens), len(req.Receipts))
		}
		for _, tok := range req.FencingTokens {
			if err == nil && (tok < 1 || tok > idkeeper.MaxFencingToken) {
				t.Fatalf("token %d decoded", tok)
			}
		}
		checkDecoded(t, err, req.Requester, []*time.Time{req.ClientNow}, func() (any, error) {
			m := map[string]any{"requester": encodeRequester(req.Requester), "clientUtcNow": encodeTime(req.ClientNow)}
			if req.FencingTokens != nil {
				m["fencingTokens"] = req.FencingTokens
			}
			if req.Receipts != nil {
				m["receipts"] = req.Receipts
			}
			b, _ := json.Marshal(m)
			return decodeRenewRequest(b)
		}, req)
	})
}

func FuzzDecodeRemoveRequest(f *testing.F) {
	fuzzSeeds(f,
		`{"requester":`+goodRequester+`,"mintedUpTo":"2026-03-01T10:00:00.000Z"}`,
		`{"requester":`+goodRequester+`}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeRemoveRequest(body)
		var minted *time.Time
		if !req.MintedUpTo.IsZero() {
			minted = &req.MintedUpTo
		}
		checkDecoded(t, err, req.Requester, []*time.Time{minted}, func() (any, error) {
			b, _ := json.Marshal(map[string]any{"requester": encodeRequester(req.Requester), "mintedUpTo": encodeTime(minted)})
			return decodeRemoveRequest(b)
		}, req)
	})
}

// FuzzDecodeAllocFields fuzzes the values rather than the syntax: the body is always
// well-formed JSON, so the fuzzer spends its time on the value checks. A decoded
// request must carry exactly the values sent.
func FuzzDecodeAllocFields(f *testing.F) {
	f.Add("host-a", int64(42), "2026-03-01T10:00:00.123Z", int64(2), "2026-03-01T10:00:00Z")
	f.Add("", int64(0), "", int64(0), "")
	f.Add("h\x7f", int64(1<<32), "2026-03-01T10:00:00+25:00", int64(4097), "0000-01-01T00:00:00+00:01")
	f.Add(strings.Repeat("é", 128), int64(MaxPID), "9999-12-31T23:59:59.9999999999Z", int64(protocol.MaxCount), "2026-01-01T00:00:00.000-23:59")
	// Issue #29: a bidi override, a zero-width space, a C1 control, the line and
	// paragraph separators are refused; 日本 is text.
	f.Add("m\u202Eexe.txt", int64(1), "2026-03-01T10:00:00Z", int64(1), "")
	f.Add("m\u200B\u0085\u2028\u2029", int64(1), "2026-03-01T10:00:00Z", int64(1), "")
	f.Add("日本-host", int64(1), "2026-03-01T10:00:00Z", int64(1), "")
	f.Fuzz(func(t *testing.T, machineID string, pid int64, startedAt string, count int64, clientNow string) {
		m := map[string]any{
			"requester": map[string]any{"machineId": machineID, "pid": pid, "startedAt": startedAt},
			"count":     count,
		}
		if clientNow != "" {
			m["clientUtcNow"] = clientNow
		}
		body, err := json.Marshal(m)
		if err != nil {
			t.Skip()
		}
		req, err := decodeAllocRequest(body)
		if err != nil {
			var e *idkeeper.Error
			if !errors.As(err, &e) || e.Code != protocol.CodeInvalidRequest || e.Field == "" || e.Field == "body" {
				t.Fatalf("bad error for well-formed JSON: %#v", err)
			}
			return
		}
		var sent string
		_ = json.Unmarshal(mustMarshal(machineID), &sent) // json.Marshal coerces invalid UTF-8
		st, perr := time.Parse(time.RFC3339Nano, startedAt)
		if req.Requester.MachineID != sent || int64(req.Requester.PID) != pid || int64(req.Count) != count ||
			perr != nil || !req.Requester.StartedAt.Equal(protocol.Millis(st)) {
			t.Fatalf("decoded %+v from %s", req, body)
		}
		if pid < 1 || pid > MaxPID || count < 1 || count > protocol.MaxCount || req.Requester.Validate() != nil {
			t.Fatalf("accepted out-of-range values: %s", body)
		}
		if strings.ContainsFunc(req.Requester.MachineID, func(r rune) bool {
			return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp)
		}) {
			t.Fatalf("accepted a machine ID that is not text: %q", req.Requester.MachineID)
		}
		if (clientNow == "") != (req.ClientNow == nil) {
			t.Fatalf("clientUtcNow %q decoded as %v", clientNow, req.ClientNow)
		}
	})
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// BenchmarkDecodeAllocRequest is the HTTP layer's own parsing cost per Alloc.
func BenchmarkDecodeAllocRequest(b *testing.B) {
	body := []byte(`{"requester":` + goodRequester + `,"count":2,"clientUtcNow":"2026-03-01T10:00:00.000Z"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeAllocRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}
