// Package api holds the machine-readable contract of IdKeeper's HTTP APIs: the
// OpenAPI 3.1 document openapi.yaml (the registry's /v1 routes, the gateway's,
// the admin JSON API under /admin/api/, the health probes, every error code),
// embedded in the binary. Package http and package gateway serve it at
// GET /openapi.yaml with Handler.
//
// openapi_test.go checks the document against the real handlers both ways:
// every route the servers answer and every error code they can send is in it,
// and every route and code in it exists. docs/api.md, docs/gateway.md and
// docs/idempotency.md are the prose.
package api

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"net/http"
	"time"
)

// Spec is the OpenAPI document, api/openapi.yaml, as it is. Read-only.
//
//go:embed openapi.yaml
var Spec []byte

// Path is where the servers serve Spec.
const Path = "/openapi.yaml"

// ContentType is the media type Spec is served with.
const ContentType = "application/yaml"

// etag is Spec's entity tag: a strong validator of its content.
var etag = func() string {
	sum := sha256.Sum256(Spec)
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}()

// Handler serves Spec: 200 application/yaml, with an ETag (If-None-Match
// answers 304), Range and HEAD as http.ServeContent does them. It takes no
// credentials: the document holds nothing secret.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", ContentType)
		h.Set("ETag", etag)
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(Spec))
	})
}
