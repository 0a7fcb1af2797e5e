package http_test

import (
	"net/http"
	"testing"

	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/protocol"
)

// Options.Admin serves every path under /admin/, and nothing else; without it
// /admin/ is a 404 like any unknown path.
func TestAdminMount(t *testing.T) {
	var seen []string
	admin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.Path)
		w.WriteHeader(http.StatusTeapot)
	})
	h := newBolt(t, withOptions(func(o *idkhttp.Options) { o.Admin = admin }))
	for _, p := range []string{"/admin/", "/admin/api/keys", "/admin/x/y"} {
		if r := h.get(p); r.status != http.StatusTeapot {
			t.Fatalf("%s: %d", p, r.status)
		}
	}
	if r := h.post("/admin/api/keys", `{}`); r.status != http.StatusTeapot {
		t.Fatalf("POST: %d", r.status)
	}
	h.get("/v1/leases/remaining").ok(t)
	if len(seen) != 4 {
		t.Fatalf("the admin handler saw %v", seen)
	}
	newBolt(t).get("/admin/api/keys").problem(t, protocol.CodeNotFound)
}
