package http_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/idkeeper/idkeeper/api"
)

// GET /openapi.yaml answers the embedded OpenAPI document as it is, without an
// API key: application/yaml, with an ETag that If-None-Match honours; HEAD
// answers the headers alone.
func TestOpenAPIServed(t *testing.T) {
	h := newBolt(t)
	r := h.get("/openapi.yaml", "X-API-Key", "")
	if r.status != http.StatusOK || !bytes.Equal(r.raw, api.Spec) {
		t.Fatalf("status %d, %d bytes; want 200 and the %d bytes of api.Spec", r.status, len(r.raw), len(api.Spec))
	}
	if ct := r.header.Get("Content-Type"); ct != api.ContentType {
		t.Fatalf("Content-Type %q, want %q", ct, api.ContentType)
	}
	etag := r.header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	if r := h.get("/openapi.yaml", "If-None-Match", etag); r.status != http.StatusNotModified || len(r.raw) != 0 {
		t.Fatalf("If-None-Match: status %d, %d bytes; want 304 and none", r.status, len(r.raw))
	}
	if r := h.call(http.MethodHead, "/openapi.yaml", ""); r.status != http.StatusOK || len(r.raw) != 0 {
		t.Fatalf("HEAD: status %d, %d bytes", r.status, len(r.raw))
	}
}
