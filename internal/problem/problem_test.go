package problem

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// codeAbove stands for a code that a package above this one defines and
// registers, as packages gateway and idempotency do with theirs.
const codeAbove idkeeper.Code = "WIDGETS_TOO_MANY"

func init() {
	Register(map[idkeeper.Code]Entry{codeAbove: {Status: http.StatusBadRequest, Title: "Too many widgets"}})
}

func TestWriteBytes(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", &idkeeper.Error{
		Code: codeAbove, Message: "too <many>", Field: "count", Err: errors.New("secret cause"),
		Details: map[string]any{"maxCount": 50, "code": "HIJACK", "status": 200, "type": "x", "title": "x", "detail": "x", "field": "x", "instance": "x"},
	})
	w := httptest.NewRecorder()
	if e := From(err).Write(w, 3); e != nil {
		t.Fatal(e)
	}
	const want = `{"code":"WIDGETS_TOO_MANY","detail":"too \u003cmany\u003e","field":"count","maxCount":50,"status":400,` +
		`"title":"Too many widgets","type":"https://idkeeper.dev/problems/widgets-too-many"}` + "\n"
	if w.Code != 400 || w.Body.String() != want {
		t.Fatalf("%d %s\nwant %s", w.Code, w.Body, want)
	}
	h := w.Header()
	for name, v := range map[string]string{"Content-Type": ContentType, "Content-Length": fmt.Sprint(len(want)),
		"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "Retry-After": "3"} {
		if h.Get(name) != v {
			t.Errorf("%s: %q, want %q", name, h.Get(name), v)
		}
	}

	w = httptest.NewRecorder()
	_ = From(protocol.Errorf(protocol.CodeNotReady, "no")).Write(w, 0)
	if _, ok := w.Header()["Retry-After"]; ok {
		t.Fatal("Retry-After without being asked for")
	}
}

func TestFrom(t *testing.T) {
	for _, err := range []error{nil, errors.New("disk on fire at /var/lib/x")} {
		p := From(err)
		if p.Code != protocol.CodeInternal || p.Status != 500 || p.Body["detail"] != "internal error" ||
			p.Body["title"] != "Internal server error" || p.Body["type"] != "https://idkeeper.dev/problems/internal" {
			t.Fatalf("%v: %+v", err, p)
		}
	}
	p := From(protocol.Errorf(protocol.CodeNodeIDsExhausted, "no"))
	if _, ok := p.Body["field"]; ok || p.Status != 409 || p.Body["status"] != 409 {
		t.Fatalf("%+v", p)
	}
	// A code that no package registered is a 500 with the status text as title.
	if e, ok := Lookup("SOMETHING_NEW"); ok || e != (Entry{500, "Internal Server Error"}) {
		t.Fatal(e, ok)
	}
	if p := From(protocol.Errorf("SOMETHING_NEW", "x")); p.Status != 500 || p.Body["title"] != "Internal Server Error" {
		t.Fatalf("%+v", p)
	}
}

// TestTable: every code in the table has a title and a status of its own (only
// INTERNAL is a 500), the registered code included.
func TestTable(t *testing.T) {
	codes := Codes()
	if !slices.Contains(codes, codeAbove) || !slices.Contains(codes, protocol.CodeInvalidRequest) {
		t.Fatalf("Codes() = %v", codes)
	}
	for _, code := range codes {
		e, ok := Lookup(code)
		if !ok || e.Title == "" || e.Status < 400 || e.Status > 599 || (e.Status == 500 && code != protocol.CodeInternal) {
			t.Errorf("%s: %+v, %v", code, e, ok)
		}
	}
}

// TestRegisterRefuses: a code registered twice, or an entry that is not an
// error status with a title, panics at start-up rather than answer wrongly later.
func TestRegisterRefuses(t *testing.T) {
	for name, entries := range map[string]map[idkeeper.Code]Entry{
		"root code":  {protocol.CodeNotFound: {Status: 404, Title: "Not found"}},
		"registered": {codeAbove: {Status: 400, Title: "Too many widgets"}},
		"empty code": {"": {Status: 400, Title: "x"}},
		"no title":   {"SOMETHING_NEW": {Status: 400}},
		"status 200": {"SOMETHING_NEW": {Status: 200, Title: "x"}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			Register(entries)
		}()
	}
	if _, ok := Lookup("SOMETHING_NEW"); ok {
		t.Fatal("a refused entry was registered")
	}
}

func TestWriteJSONUnencodable(t *testing.T) {
	w := httptest.NewRecorder()
	if err := WriteJSON(w, 200, "application/json", map[string]any{"f": func() {}}); err == nil {
		t.Fatal("no error")
	}
	const want = `{"type":"https://idkeeper.dev/problems/internal","title":"Internal server error","status":500,"code":"INTERNAL"}` + "\n"
	if w.Code != 500 || w.Body.String() != want || w.Header().Get("Content-Type") != ContentType {
		t.Fatalf("%d %v %s", w.Code, w.Header(), w.Body)
	}
}

func TestSetHeaders(t *testing.T) {
	h := http.Header{}
	SetHeaders(h, "text/plain; charset=utf-8")
	if h.Get("Content-Type") != "text/plain; charset=utf-8" || h.Get("Cache-Control") != "no-store" || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatal(h)
	}
	if n := testing.AllocsPerRun(100, func() { SetHeaders(h, "application/json"); SetHeaders(h, ContentType) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func TestCheckJSONContentType(t *testing.T) {
	for ct, ok := range map[string]bool{
		"application/json":                  true,
		"application/json; charset=utf-8":   true,
		"Application/JSON; Charset=UTF-8":   true,
		"":                                  false,
		"text/plain":                        false,
		"application/json; charset=latin-1": false,
		"application/json;;":                false,
	} {
		err := CheckJSONContentType(ct)
		if (err == nil) != ok || (err != nil && protocol.ErrorCode(err) != protocol.CodeUnsupportedMediaType) {
			t.Errorf("%q: %v", ct, err)
		}
	}
}
