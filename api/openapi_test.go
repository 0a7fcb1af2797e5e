package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/admin"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/api"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/discord"
	"github.com/idkeeper/idkeeper/gateway"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/problem"
	"github.com/idkeeper/idkeeper/password"
	"github.com/idkeeper/idkeeper/snowflake"
)

// The servers a path item names in x-idkeeper-servers.
const (
	registrySrv = "registry"
	gatewaySrv  = "gateway"
)

// loadDoc parses the embedded document with kin-openapi's loader and validates
// it: the OpenAPI 3.1 structure, every $ref resolved, the schemas' keywords.
func loadDoc(t testing.TB) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.Spec)
	if err != nil {
		t.Fatalf("api/openapi.yaml does not load: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Fatalf("openapi: %q, want 3.1.x", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("api/openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	return doc
}

// operation is one documented operation: the path template, the method and the
// servers that answer it.
type operation struct {
	path, method string
	servers      []string
	op           *openapi3.Operation
}

func (o operation) key() string { return o.method + " " + o.path }

// operations lists the document's operations, sorted by path and method.
func operations(t testing.TB, doc *openapi3.T) []operation {
	t.Helper()
	var out []operation
	for _, path := range slices.Sorted(maps.Keys(doc.Paths.Map())) {
		item := doc.Paths.Value(path)
		servers := stringList(item.Extensions["x-idkeeper-servers"])
		if len(servers) == 0 {
			t.Errorf("%s: no x-idkeeper-servers", path)
		}
		for _, s := range servers {
			if s != registrySrv && s != gatewaySrv {
				t.Errorf("%s: unknown server %q in x-idkeeper-servers", path, s)
			}
		}
		for _, m := range slices.Sorted(maps.Keys(item.Operations())) {
			out = append(out, operation{path: path, method: m, servers: servers, op: item.Operations()[m]})
		}
	}
	return out
}

func stringList(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, e := range l {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

const problemPrefix = "#/components/schemas/Problem_"

// problemCodes returns the codes a problem+json response lists: its schema is one
// Problem_<CODE> reference or a oneOf of them. ok is false for any other shape.
func problemCodes(resp *openapi3.Response) (codes []string, ok bool) {
	mt := resp.Content.Get(problem.ContentType)
	if mt == nil || mt.Schema == nil {
		return nil, false
	}
	refs := []*openapi3.SchemaRef{mt.Schema}
	if mt.Schema.Ref == "" {
		if mt.Schema.Value == nil || len(mt.Schema.Value.OneOf) == 0 {
			return nil, false
		}
		refs = mt.Schema.Value.OneOf
	}
	for _, r := range refs {
		code, found := strings.CutPrefix(r.Ref, problemPrefix)
		if !found {
			return nil, false
		}
		codes = append(codes, code)
	}
	return codes, true
}

// opCodes returns the codes each status of op lists.
func opCodes(op *openapi3.Operation) map[string][]string {
	out := map[string][]string{}
	for status, r := range op.Responses.Map() {
		if codes, ok := problemCodes(r.Value); ok {
			out[status] = codes
		}
	}
	return out
}

// The document is a valid OpenAPI 3.1 document (kin-openapi's loader and
// validator), and follows the project's rules: unique operation IDs, a success
// answer, a tag and a summary for every operation; every error answer is
// problem+json listing its codes (the one exception, the plain-text 416 of
// Go's ServeContent, is named); every 503 says Retry-After; every component is
// used.
func TestOpenAPIDocumentValid(t *testing.T) {
	doc := loadDoc(t)
	ids := map[string]string{}
	for _, o := range operations(t, doc) {
		name := o.key()
		switch prev, dup := ids[o.op.OperationID]; {
		case o.op.OperationID == "":
			t.Errorf("%s: no operationId", name)
		case dup:
			t.Errorf("%s: operationId %q is %s's too", name, o.op.OperationID, prev)
		}
		ids[o.op.OperationID] = name
		if o.op.Summary == "" || len(o.op.Tags) == 0 {
			t.Errorf("%s: no summary or tag", name)
		}
		if o.op.Security == nil {
			t.Errorf("%s: no security requirement (say security: [] for a public route)", name)
		}
		success := false
		for status, r := range o.op.Responses.Map() {
			n, err := strconv.Atoi(status)
			if err != nil {
				t.Errorf("%s: response %q is not a status", name, status)
				continue
			}
			if n < 400 {
				success = success || n < 300
				continue
			}
			if n == http.StatusRequestedRangeNotSatisfiable && r.Value.Content.Get("text/plain") != nil {
				continue // Go's http.ServeContent, on the backup download
			}
			if _, ok := problemCodes(r.Value); !ok {
				t.Errorf("%s %s: not application/problem+json with Problem_<CODE> schemas", name, status)
			}
			if len(r.Value.Content) != 1 {
				t.Errorf("%s %s: an error has one media type, problem+json", name, status)
			}
			if n == http.StatusServiceUnavailable && r.Value.Headers["Retry-After"] == nil {
				t.Errorf("%s 503: no Retry-After header", name)
			}
		}
		if !success {
			t.Errorf("%s: no 2xx answer", name)
		}
	}
	// Every component is used: a $ref names it somewhere in the document.
	refs := string(api.Spec)
	for kind, names := range map[string][]string{
		"schemas":    slices.Collect(maps.Keys(doc.Components.Schemas)),
		"responses":  slices.Collect(maps.Keys(doc.Components.Responses)),
		"parameters": slices.Collect(maps.Keys(doc.Components.Parameters)),
		"headers":    slices.Collect(maps.Keys(doc.Components.Headers)),
	} {
		for _, n := range names {
			if kind == "responses" && n == "MethodNotAllowed" {
				continue // any path answers it; no operation lists it
			}
			if !strings.Contains(refs, "'#/components/"+kind+"/"+n+"'") {
				t.Errorf("components/%s/%s is never referenced", kind, n)
			}
		}
	}
	for name := range doc.Components.SecuritySchemes {
		if !regexp.MustCompile(`\{` + name + `: \[\]\}`).MatchString(refs) {
			t.Errorf("security scheme %s is never required", name)
		}
	}
}

// Every error code the servers can send is in the document, and every code in it
// exists: the code enum is exactly internal/problem's table, which holds the root
// package's codes and those that idempotency, gateway and admin register (this
// test links all three, and checks that no other package registers codes).
// Each code has its Problem_<CODE> schema with the table's status and title; every
// status of every operation lists only codes of that status; every code is
// answered by some operation, but METHOD_NOT_ALLOWED, which any path answers.
func TestOpenAPIErrorCodes(t *testing.T) {
	doc := loadDoc(t)
	// Who registers codes: a package the test does not link would be missing
	// from problem.Codes().
	linked := map[string]bool{"admin": true, "gateway": true, "idempotency": true}
	for _, dir := range registeringPackages(t) {
		if !linked[dir] {
			t.Errorf("package %s registers error codes (problem.Register) but this test does not import it", dir)
		}
	}

	var registered []string
	for _, c := range problem.Codes() {
		registered = append(registered, string(c))
	}
	enum := doc.Components.Schemas["ProblemCode"]
	if enum == nil {
		t.Fatal("components/schemas/ProblemCode is missing")
	}
	var documented []string
	for _, v := range enum.Value.Enum {
		documented = append(documented, fmt.Sprint(v))
	}
	slices.Sort(documented)
	if d := diff(registered, documented); d != "" {
		t.Errorf("ProblemCode enum vs the codes the servers register:\n%s", d)
	}

	var schemas []string
	for name := range doc.Components.Schemas {
		if code, ok := strings.CutPrefix(name, "Problem_"); ok {
			schemas = append(schemas, code)
		}
	}
	slices.Sort(schemas)
	if d := diff(registered, schemas); d != "" {
		t.Errorf("Problem_<CODE> schemas vs the registered codes:\n%s", d)
	}
	for _, code := range registered {
		s := doc.Components.Schemas["Problem_"+code]
		if s == nil {
			continue
		}
		entry, _ := problem.Lookup(idkeeper.Code(code))
		props := s.Value.Properties
		if c := props["code"]; c == nil || c.Value.Const != code {
			t.Errorf("Problem_%s: code is not const %s", code, code)
		}
		if st := props["status"]; st == nil || fmt.Sprint(st.Value.Const) != strconv.Itoa(entry.Status) {
			t.Errorf("Problem_%s: status is not const %d", code, entry.Status)
		}
		if s.Value.Title != entry.Title {
			t.Errorf("Problem_%s: title %q, the table's is %q", code, s.Value.Title, entry.Title)
		}
		if len(s.Value.AllOf) != 1 || s.Value.AllOf[0].Ref != "#/components/schemas/Problem" {
			t.Errorf("Problem_%s: not allOf [Problem]", code)
		}
	}

	answered := map[string]bool{}
	check := func(where string, status string, codes []string) {
		for _, code := range codes {
			answered[code] = true
			entry, ok := problem.Lookup(idkeeper.Code(code))
			switch {
			case !ok:
				t.Errorf("%s %s: code %s is registered by no package", where, status, code)
			case strconv.Itoa(entry.Status) != status:
				t.Errorf("%s %s: code %s is sent with status %d", where, status, code, entry.Status)
			}
		}
	}
	for _, o := range operations(t, doc) {
		for status, codes := range opCodes(o.op) {
			check(o.key(), status, codes)
		}
	}
	// Any path answers 405 for a method it does not take: no operation lists it.
	if r := doc.Components.Responses["MethodNotAllowed"]; r == nil {
		t.Error("components/responses/MethodNotAllowed is missing")
	} else {
		codes, _ := problemCodes(r.Value)
		check("components/responses/MethodNotAllowed", "405", codes)
	}
	for _, code := range registered {
		if !answered[code] {
			t.Errorf("no operation answers %s", code)
		}
	}
}

// registeringPackages returns the directories (relative to the module root) of
// the non-test files that call problem.Register.
func registeringPackages(t *testing.T) []string {
	t.Helper()
	root := filepath.Join("..")
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte("problem.Register(")) {
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			if rel != filepath.Join("internal", "problem") && !slices.Contains(dirs, rel) {
				dirs = append(dirs, rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 3 {
		t.Fatalf("found problem.Register in %v only: the scan is broken", dirs)
	}
	return dirs
}

func diff(want, got []string) string {
	var b strings.Builder
	for _, w := range want {
		if !slices.Contains(got, w) {
			fmt.Fprintf(&b, "  missing from the document: %s\n", w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			fmt.Fprintf(&b, "  in the document, unknown to the servers: %s\n", g)
		}
	}
	return b.String()
}

// muxPatterns returns the ServeMux patterns registered in the non-test files of
// package dir: the string literal first argument of every call of Handle,
// HandleFunc or handle (the gateway's helper). A route registered with a
// pattern that is not a literal would escape it: the live test below then finds
// the document's operation unanswered, or the route undocumented.
func muxPatterns(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var out []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			var name string
			switch fn := call.Fun.(type) {
			case *ast.Ident:
				name = fn.Name
			case *ast.SelectorExpr:
				name = fn.Sel.Name
			}
			if name != "Handle" && name != "HandleFunc" && name != "handle" {
				return true
			}
			if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				p, err := strconv.Unquote(lit.Value)
				if err == nil && strings.Contains(p, "/") {
					out = append(out, p)
				}
			}
			return true
		})
	}
	slices.Sort(out)
	return out
}

// Every route is documented, and every documented route exists, compared by
// their tables: the registry's mux (http/*.go) and the gateway's (gateway/*.go),
// read from their source, and the admin API's route table (admin.APIRoutes),
// with each route's least role, whether it is for logged-in users only, and
// whether it takes an Idempotency-Key.
func TestOpenAPIRouteTables(t *testing.T) {
	doc := loadDoc(t)
	ops := operations(t, doc)
	documented := func(server string, adminAPI bool) []string {
		var out []string
		for _, o := range ops {
			if slices.Contains(o.servers, server) && strings.HasPrefix(o.path, admin.APIPrefix) == adminAPI {
				out = append(out, o.key())
			}
		}
		slices.Sort(out)
		return out
	}

	var regRoutes []string
	mounted := false
	for _, p := range muxPatterns(t, "http") {
		if p == "/admin/" {
			mounted = true
			continue
		}
		regRoutes = append(regRoutes, p)
	}
	if !mounted {
		t.Error(`http/: the admin handler's mount "/admin/" was not found`)
	}
	if !slices.Contains(regRoutes, "GET /v1/version") || !slices.Contains(regRoutes, "GET /openapi.yaml") {
		t.Fatalf("http/: the routes found, %v, lack GET /v1/version or GET /openapi.yaml: the scan is broken", regRoutes)
	}
	if d := diff(regRoutes, documented(registrySrv, false)); d != "" {
		t.Errorf("the registry's routes (http/server.go) vs the document:\n%s", d)
	}
	gwRoutes := muxPatterns(t, "gateway")
	if !slices.Contains(gwRoutes, "POST /v1/ids") {
		t.Fatalf("gateway/: the routes found, %v, lack POST /v1/ids: the scan is broken", gwRoutes)
	}
	if d := diff(gwRoutes, documented(gatewaySrv, false)); d != "" {
		t.Errorf("the gateway's routes (gateway/gateway.go) vs the document:\n%s", d)
	}
	if d := diff(nil, documented(gatewaySrv, true)); d != "" {
		t.Errorf("the gateway serves no admin route:\n%s", d)
	}

	table := admin.APIRoutes()
	var adminRoutes []string
	for _, rt := range table {
		adminRoutes = append(adminRoutes, rt.Method+" "+rt.Path)
	}
	slices.Sort(adminRoutes)
	if d := diff(adminRoutes, documented(registrySrv, true)); d != "" {
		t.Errorf("the admin API's route table (admin/routes.go) vs the document:\n%s", d)
	}
	for _, rt := range table {
		o := doc.Paths.Find(rt.Path)
		if o == nil || o.GetOperation(rt.Method) == nil {
			continue
		}
		op := o.GetOperation(rt.Method)
		name := rt.Method + " " + rt.Path
		role := string(rt.Role)
		if role == "" {
			role = "none"
		}
		if got := fmt.Sprint(op.Extensions["x-idkeeper-role"]); got != role {
			t.Errorf("%s: x-idkeeper-role %s, the route table's role is %s", name, got, role)
		}
		if got := op.Extensions["x-idkeeper-user-only"] == true; got != rt.UserOnly {
			t.Errorf("%s: x-idkeeper-user-only %v, the table's %v", name, got, rt.UserOnly)
		}
		idem := false
		for _, p := range op.Parameters {
			idem = idem || p.Value.Name == idempotency.HeaderKey && p.Value.In == "header"
		}
		if idem != rt.Idempotent {
			t.Errorf("%s: Idempotency-Key parameter %v, the table's %v", name, idem, rt.Idempotent)
		}
		var schemes []string
		for _, req := range *op.Security {
			for s := range req {
				schemes = append(schemes, s)
			}
		}
		slices.Sort(schemes)
		want := []string{"AdminSession", "ApiKey"}
		switch {
		case rt.Role == "":
			want = nil
		case rt.UserOnly:
			want = []string{"AdminSession"}
		}
		if !slices.Equal(schemes, want) {
			t.Errorf("%s: security %v, want %v", name, schemes, want)
		}
	}
}

// ---------------------------------------------------------------- live servers

// The credentials of the live test.
const (
	plainKey    = "idk_plain-key-of-the-openapi-test-0123456789"
	adminKey    = "idk_admin-key-of-the-openapi-test-0123456789"
	consumerKey = "gw-consumer-key-of-the-openapi-test-0123456789"
	rootPW      = "root-password-0123"
)

// servers is a registry with its admin API and a gateway, each served over real
// HTTP on loopback, and the document they are checked against.
type servers struct {
	t       *testing.T
	doc     *openapi3.T
	ops     map[string]operation // by key
	reg     *httptest.Server
	gw      *httptest.Server
	client  *http.Client
	covered map[string]bool // server + " " + operation key
	session string          // the Cookie header of a logged-in admin
}

func startServers(t *testing.T) *servers {
	t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	st, err := bolt.Open(filepath.Join(dir, "idk.db"), bolt.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, err := st.Init(ctx, idkeeper.PoolSpec{Nodes: 64}); err != nil {
		t.Fatal(err)
	}
	acct, err := account.New(st, password.Hasher{Params: password.Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}},
		account.Config{Logger: quiet, ValidWebhook: discord.ValidWebhookURL})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := idkeeper.NewRegistry(st, idkeeper.Config{Logger: quiet, Nodes: 64, Audit: acct,
		ReceiptSecret: []byte("receipt-secret-of-the-openapi-test-0123456789")})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	if _, err := reg.EnsureAPIKey(ctx, plainKey, "plain"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.EnsureAdminKey(ctx, adminKey); err != nil {
		t.Fatal(err)
	}
	if _, err := acct.EnsureFirstAdmin(ctx, "root", rootPW); err != nil {
		t.Fatal(err)
	}
	allow := allowlist.New(nil, st)
	if err := allow.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	sched, err := cron.ParseStandard("@daily")
	if err != nil {
		t.Fatal(err)
	}
	job, err := backup.NewJob(backup.JobConfig{Folder: backup.Folder{Dir: filepath.Join(dir, "backups"), Gzip: true},
		Store: st, StoreKind: "bolt", Locker: st, Owner: "openapi-test", Schedule: sched, Spec: "@daily", Keep: 14,
		Audit: acct, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	adminIdem, err := idempotency.New(st.Idempotency(), idempotency.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(admin.Config{Registry: reg, Accounts: acct, Store: st, AllowList: allow, Logger: quiet,
		Idempotency: adminIdem, Snapshots: st, SnapshotKind: "bolt", Backups: job, MaxRestoreBytes: 1 << 20,
		RestoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	regSrv, err := idkhttp.NewServer(reg, idkhttp.Options{Logger: quiet, Gatherer: prometheus.NewRegistry(), AllowList: allow,
		Admin: h, Version: "v0.0.0-test", Commit: "test"})
	if err != nil {
		t.Fatal(err)
	}
	s := &servers{t: t, doc: loadDoc(t), ops: map[string]operation{}, covered: map[string]bool{}}
	for _, o := range operations(t, s.doc) {
		s.ops[o.key()] = o
	}
	s.reg = httptest.NewServer(regSrv.Handler())
	t.Cleanup(s.reg.Close)

	idemStore, err := bolt.OpenIdempotency(filepath.Join(dir, "gateway-idem.db"), bolt.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idemStore.Close() })
	gwIdem, err := idempotency.New(idemStore, idempotency.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := gateway.ParseConsumerKeys(consumerKey, "test")
	if err != nil {
		t.Fatal(err)
	}
	pr := prometheus.NewRegistry()
	gw, err := gateway.New(&counterSource{}, gateway.Options{Idempotency: gwIdem, ConsumerKeys: keys, Logger: quiet,
		Registerer: pr, Gatherer: pr, Version: "v0.0.0-test", Commit: "test"})
	if err != nil {
		t.Fatal(err)
	}
	s.gw = httptest.NewServer(gw.Handler())
	t.Cleanup(s.gw.Close)
	s.client = s.reg.Client()
	return s
}

// counterSource mints consecutive IDs in the default layout, from a recent
// timestamp.
type counterSource struct{ n atomic.Int64 }

func (c *counterSource) NextIDs(dst []int64) error {
	base := time.Since(snowflake.DefaultLayout.Epoch).Milliseconds() << 22
	last := c.n.Add(int64(len(dst)))
	for i := range dst {
		dst[i] = base + last - int64(len(dst)) + int64(i) + 1
	}
	return nil
}
func (c *counterSource) NumGenerators() int       { return 1 }
func (c *counterSource) Check() error             { return nil }
func (c *counterSource) Layout() snowflake.Layout { return snowflake.DefaultLayout }

// req is one request of the live test: to server, matching the documented
// operation method + tmpl; want is the status it must get (0: any documented
// one). hdr are header pairs; a body is sent as application/json unless hdr sets
// Content-Type.
type req struct {
	server, method, tmpl, path string
	body                       string
	hdr                        []string
	want                       int
}

// answer is a response, read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, a.body)
	}
	return m
}

// do sends r and checks the answer against the document: the operation exists
// and r.path is an instance of its template; the status is one the operation
// documents; the body has the documented media type and validates against its
// schema, with no member the schema does not name; a problem's code is one the
// status lists. An answer that is neither 404 nor 405 counts the operation as
// answered by the server.
func (s *servers) do(r req) answer {
	t := s.t
	t.Helper()
	base := s.reg.URL
	if r.server == gatewaySrv {
		base = s.gw.URL
	}
	path := r.path
	if path == "" {
		path = r.tmpl
	}
	hr, err := http.NewRequest(r.method, base+path, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if r.body != "" {
		hr.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(r.hdr); i += 2 {
		hr.Header.Set(r.hdr[i], r.hdr[i+1])
	}
	resp, err := s.client.Do(hr)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, path, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: resp.StatusCode, header: resp.Header, body: body}
	name := fmt.Sprintf("%s: %s %s (%s %s)", r.server, r.method, path, r.method, r.tmpl)
	if r.want != 0 && a.status != r.want {
		t.Errorf("%s: status %d, want %d: %s", name, a.status, r.want, body)
	}
	method := r.method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	o, ok := s.ops[method+" "+r.tmpl]
	if !ok {
		t.Errorf("%s: the document has no operation %s %s", name, method, r.tmpl)
		return a
	}
	if !slices.Contains(o.servers, r.server) {
		t.Errorf("%s: the document does not list %s among the servers of %s", name, r.server, r.tmpl)
	}
	if !templateMatches(r.tmpl, strings.SplitN(path, "?", 2)[0]) {
		t.Fatalf("%s: the path is no instance of the template", name)
	}
	ref := o.op.Responses.Status(a.status)
	if ref == nil || ref.Value == nil {
		t.Errorf("%s: status %d is not documented: %s", name, a.status, body)
		return a
	}
	if a.status != http.StatusNotFound && a.status != http.StatusMethodNotAllowed {
		s.covered[r.server+" "+o.key()] = true
	}
	s.checkBody(name, ref.Value, a, r.method == http.MethodHead)
	return a
}

// checkBody checks a's body against the documented response resp.
func (s *servers) checkBody(name string, resp *openapi3.Response, a answer, head bool) {
	t := s.t
	t.Helper()
	if len(resp.Content) == 0 {
		if len(a.body) > 0 {
			t.Errorf("%s: %d documents no body, got %q", name, a.status, a.body)
		}
		return
	}
	ct := a.header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		t.Errorf("%s: Content-Type %q: %v", name, ct, err)
		return
	}
	media := resp.Content.Get(mt)
	if media == nil || resp.Content[mt] == nil {
		t.Errorf("%s: %d answered %s, the document says %v", name, a.status, mt, slices.Collect(maps.Keys(resp.Content)))
		return
	}
	if head || (mt != "application/json" && mt != problem.ContentType) {
		return
	}
	var v any
	if err := json.Unmarshal(a.body, &v); err != nil {
		t.Errorf("%s: not JSON: %v: %s", name, err, a.body)
		return
	}
	if err := media.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		t.Errorf("%s: the body does not match the documented schema: %v\n%s", name, err, a.body)
	}
	if extra := undocumented(media.Schema, v, ""); len(extra) > 0 {
		t.Errorf("%s: members the schema does not name: %v\n%s", name, extra, a.body)
	}
	if mt == problem.ContentType {
		codes, _ := problemCodes(resp)
		code, _ := v.(map[string]any)["code"].(string)
		if !slices.Contains(codes, code) {
			t.Errorf("%s: code %s is not among the codes documented for %d: %v", name, code, a.status, codes)
		}
	}
}

// undocumented returns the paths of the members of v that sref does not name
// (following $ref, allOf, and every branch of oneOf and anyOf).
func undocumented(sref *openapi3.SchemaRef, v any, at string) []string {
	if sref == nil || sref.Value == nil {
		return nil
	}
	props := map[string]*openapi3.SchemaRef{}
	var items []*openapi3.SchemaRef
	var collect func(s *openapi3.SchemaRef)
	collect = func(s *openapi3.SchemaRef) {
		if s == nil || s.Value == nil {
			return
		}
		for k, p := range s.Value.Properties {
			if props[k] == nil {
				props[k] = p
			}
		}
		if s.Value.Items != nil {
			items = append(items, s.Value.Items)
		}
		for _, l := range []openapi3.SchemaRefs{s.Value.AllOf, s.Value.OneOf, s.Value.AnyOf} {
			for _, sub := range l {
				collect(sub)
			}
		}
	}
	collect(sref)
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, mv := range v {
			p, ok := props[k]
			if !ok {
				out = append(out, at+"."+k)
				continue
			}
			out = append(out, undocumented(p, mv, at+"."+k)...)
		}
	case []any:
		for i, e := range v {
			for _, it := range items {
				if it.Value.VisitJSON(e, openapi3.EnableJSONSchema2020()) == nil {
					out = append(out, undocumented(it, e, fmt.Sprintf("%s[%d]", at, i))...)
					break
				}
			}
		}
	}
	return out
}

// templateMatches reports whether path is an instance of the path template
// tmpl: the same segments, a {param} matching any non-empty one.
func templateMatches(tmpl, path string) bool {
	ts, ps := strings.Split(tmpl, "/"), strings.Split(path, "/")
	if len(ts) != len(ps) {
		return false
	}
	for i, seg := range ts {
		param := strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}")
		if param && ps[i] == "" || !param && seg != ps[i] {
			return false
		}
	}
	return true
}

// credentials returns the headers that get a request to o past authentication.
func (s *servers) credentials(server string, o operation) []string {
	switch {
	case server == gatewaySrv:
		return []string{"X-API-Key", consumerKey}
	case !strings.HasPrefix(o.path, admin.APIPrefix):
		return []string{"X-API-Key", plainKey}
	case o.op.Extensions["x-idkeeper-user-only"] == true:
		return []string{"Cookie", s.session}
	default:
		return []string{"X-API-Key", adminKey}
	}
}

// sample fills the path parameters of tmpl with values that exist.
func sample(tmpl string) string {
	return strings.NewReplacer("{id}", "1", "{node}", "0", "{name}", "nobody").Replace(tmpl)
}

// Every documented operation is answered by the server(s) it names, and what they
// answer is documented: a registry with its admin API and a gateway, served over
// real HTTP, get a request for every operation that succeeds, then the failures
// every operation can meet (no credentials, a body that is not JSON, of the wrong
// media type or too large), and a few operation-specific ones; every answer's
// status, media type, body schema and error code must be in the document.
func TestOpenAPIAnswered(t *testing.T) {
	s := startServers(t)
	jsonKey := func(k string) []string { return []string{"X-API-Key", k} }
	reg := func(method, tmpl, path, body string, want int, hdr ...string) answer {
		t.Helper()
		return s.do(req{server: registrySrv, method: method, tmpl: tmpl, path: path, body: body, want: want, hdr: hdr})
	}
	gw := func(method, tmpl, path, body string, want int, hdr ...string) answer {
		t.Helper()
		return s.do(req{server: gatewaySrv, method: method, tmpl: tmpl, path: path, body: body, want: want, hdr: hdr})
	}

	// The service routes of both servers.
	for _, srv := range []string{registrySrv, gatewaySrv} {
		for _, p := range []string{"/v1/version", "/livez", "/readyz", "/metrics", "/openapi.yaml"} {
			a := s.do(req{server: srv, method: http.MethodGet, tmpl: p, want: http.StatusOK})
			if p == "/openapi.yaml" && !bytes.Equal(a.body, api.Spec) {
				t.Errorf("%s GET /openapi.yaml is not the embedded document", srv)
			}
		}
		s.do(req{server: srv, method: http.MethodHead, tmpl: "/v1/version", want: http.StatusOK})
	}
	gw(http.MethodGet, "/health", "", "", http.StatusOK)
	reg(http.MethodGet, "/health", "", "", http.StatusOK)

	// Log in: the session of the user-only routes.
	a := reg(http.MethodPost, "/admin/api/login", "", `{"name":"root","password":"`+rootPW+`"}`, http.StatusOK)
	for _, c := range (&http.Response{Header: a.header}).Cookies() {
		if c.Name == admin.CookieName(false) {
			s.session = c.Name + "=" + c.Value
		}
	}
	if s.session == "" {
		t.Fatal("the login set no session cookie")
	}

	// The failures every operation can meet, before anything is created.
	for _, key := range slices.Sorted(maps.Keys(s.ops)) {
		o := s.ops[key]
		for _, srv := range o.servers {
			if o.op.Security != nil && len(*o.op.Security) > 0 {
				// Authentication required: none sent.
				s.do(req{server: srv, method: o.method, tmpl: o.path, path: sample(o.path), want: http.StatusUnauthorized})
			}
			if o.op.RequestBody == nil {
				continue
			}
			cred := s.credentials(srv, o)
			p := sample(o.path)
			s.do(req{server: srv, method: o.method, tmpl: o.path, path: p, body: "x", want: http.StatusUnsupportedMediaType,
				hdr: append([]string{"Content-Type", "text/plain"}, cred...)})
			if o.op.RequestBody.Value.Content.Get("application/json") == nil {
				continue
			}
			s.do(req{server: srv, method: o.method, tmpl: o.path, path: p, body: "[", want: http.StatusBadRequest, hdr: cred})
			s.do(req{server: srv, method: o.method, tmpl: o.path, path: p, body: `{"x":` + strings.Repeat(" ", 70<<10) + `1}`,
				want: http.StatusRequestEntityTooLarge, hdr: cred})
		}
	}
	// The codes of the routing layers: unknown paths and methods.
	for _, srv := range []string{registrySrv, gatewaySrv} {
		base := s.reg.URL
		if srv == gatewaySrv {
			base = s.gw.URL
		}
		s.routingProblem(base+"/nowhere", http.MethodGet, http.StatusNotFound)
		s.routingProblem(base+"/v1/version", http.MethodDelete, http.StatusMethodNotAllowed)
	}
	s.routingProblem(s.reg.URL+"/admin/api/nowhere", http.MethodGet, http.StatusNotFound)
	s.routingProblem(s.reg.URL+"/admin/api/keys", http.MethodDelete, http.StatusMethodNotAllowed)

	// Registry: a session's leases.
	requester := `{"machineId":"openapi-test","pid":42,"startedAt":"2026-11-30T10:00:00.000Z","instance":"AAAAAAAAAAAAAAAAAAAAAA"}`
	key := jsonKey(plainKey)
	alloc := reg(http.MethodPost, "/v1/leases", "", `{"requester":`+requester+`,"count":2,"clientUtcNow":"`+
		time.Now().UTC().Format(time.RFC3339Nano)+`"}`, http.StatusOK, key...).json(t)
	lease := alloc["leases"].([]any)[0].(map[string]any)
	node, token := int(lease["nodeId"].(float64)), int64(lease["fencingToken"].(float64))
	reg(http.MethodPost, "/v1/leases", "", `{"requester":`+requester+`,"count":3}`, http.StatusConflict, key...)
	reg(http.MethodPost, "/v1/leases", "", `{"requester":`+requester+`,"count":5000}`, http.StatusBadRequest, key...)
	reg(http.MethodPost, "/v1/leases", "", `{"requester":{"machineId":"other","pid":1,"startedAt":"2026-11-30T10:00:00Z"},"count":64}`,
		http.StatusConflict, key...)
	reg(http.MethodPost, "/v1/leases/renew", "", `{"requester":`+requester+`,"receipts":["`+lease["receipt"].(string)+`"]}`,
		http.StatusOK, key...)
	reg(http.MethodGet, "/v1/leases/remaining", "", "", http.StatusOK, key...)
	reg(http.MethodGet, "/v1/leases/remaining", "", "", http.StatusUnauthorized, "X-API-Key", "idk_no-such-key-0123456789abcdefghijk")

	// Admin API, with the admin key unless the route is for users.
	ak := jsonKey(adminKey)
	sess := []string{"Cookie", s.session}
	reg(http.MethodGet, "/admin/api/me", "", "", http.StatusOK, ak...)
	reg(http.MethodGet, "/admin/api/me", "", "", http.StatusOK, sess...)
	reg(http.MethodGet, "/admin/api/keys", "", "", http.StatusForbidden, key...) // ADMIN_KEY_REQUIRED
	reg(http.MethodGet, "/admin/api/users", "", "", http.StatusOK, sess...)
	reg(http.MethodPost, "/admin/api/me/webhook", "", `{"url":"https://discord.com/api/webhooks/1/openapi-token-0123456789"}`,
		http.StatusOK, sess...)
	reg(http.MethodGet, "/admin/api/users", "", "", http.StatusOK, ak...)
	reg(http.MethodPost, "/admin/api/me/webhook/test", "", "", http.StatusConflict, sess...) // ALERTS_NOT_CONFIGURED
	reg(http.MethodPost, "/admin/api/me/webhook/remove", "", "", http.StatusNoContent, sess...)
	reg(http.MethodPost, "/admin/api/me/webhook", "", `{"url":"http://example.com/hook"}`, http.StatusBadRequest, sess...)
	reg(http.MethodPost, "/admin/api/users", "", `{"name":"bob","role":"viewer","password":"bob-password-0123"}`,
		http.StatusCreated, append(sess, "Idempotency-Key", "user-bob")...)
	reg(http.MethodPost, "/admin/api/users", "", `{"name":"bob","role":"viewer","password":"bob-password-0123"}`,
		http.StatusConflict, sess...)
	reg(http.MethodPost, "/admin/api/users", "", `{"name":"bob","role":"viewer","password":"bob-password-0123"}`,
		http.StatusForbidden, ak...) // an API key on a route for users
	reg(http.MethodPost, "/admin/api/users/{name}", "/admin/api/users/bob", `{"role":"operator"}`, http.StatusOK, sess...)
	reg(http.MethodPost, "/admin/api/users/{name}", "/admin/api/users/root", `{"role":"viewer"}`, http.StatusForbidden, sess...)
	reg(http.MethodPost, "/admin/api/users/{name}/password", "/admin/api/users/bob/password", `{"password":"bob-password-4567"}`,
		http.StatusNoContent, sess...)
	reg(http.MethodPost, "/admin/api/users/{name}/password", "/admin/api/users/nobody/password", `{"password":"bob-password-4567"}`,
		http.StatusNotFound, sess...)

	reg(http.MethodGet, "/admin/api/keys", "", "", http.StatusOK, ak...)
	created := reg(http.MethodPost, "/admin/api/keys", "", `{"description":"openapi","expiresIn":"720h","maxNodes":4}`,
		http.StatusCreated, append(ak, "Idempotency-Key", "key-1")...).json(t)
	replay := reg(http.MethodPost, "/admin/api/keys", "", `{"description":"openapi","expiresIn":"720h","maxNodes":4}`,
		http.StatusCreated, append(ak, "Idempotency-Key", "key-1")...)
	if replay.header.Get(idempotency.HeaderReplayed) != "true" {
		t.Errorf("the key create was not replayed: %s", replay.body)
	}
	reg(http.MethodPost, "/admin/api/keys", "", `{"description":"another"}`, http.StatusUnprocessableEntity,
		append(ak, "Idempotency-Key", "key-1")...)
	reg(http.MethodPost, "/admin/api/keys", "", `{"description":"openapi"}`, http.StatusBadRequest,
		append(ak, "Idempotency-Key", "a,b")...)
	id := created["key"].(map[string]any)["id"].(string)
	newKey := created["secret"].(string)
	reg(http.MethodGet, "/admin/api/keys/{id}", "/admin/api/keys/"+id, "", http.StatusOK, ak...)
	reg(http.MethodGet, "/admin/api/keys/{id}", "/admin/api/keys/0000000000000000", "", http.StatusNotFound, ak...)
	reg(http.MethodPost, "/admin/api/keys/{id}", "/admin/api/keys/"+id, `{"expiresAt":null,"maxNodes":2}`, http.StatusOK, ak...)
	// The new key may not touch the plain key's leases.
	reg(http.MethodPost, "/v1/leases/remove", "", `{"requester":`+requester+`}`, http.StatusForbidden, jsonKey(newKey)...)
	reg(http.MethodPost, "/v1/leases", "", `{"requester":{"machineId":"quota","pid":1,"startedAt":"2026-11-30T10:00:00Z"},"count":3}`,
		http.StatusConflict, jsonKey(newKey)...) // API_KEY_QUOTA_EXCEEDED
	reg(http.MethodPost, "/admin/api/keys/{id}/revoke", "/admin/api/keys/"+id+"/revoke", "", http.StatusOK, ak...)
	reg(http.MethodPost, "/admin/api/keys/{id}", "/admin/api/keys/"+id, `{"maxNodes":1}`, http.StatusConflict, ak...)
	reg(http.MethodGet, "/v1/leases/remaining", "", "", http.StatusUnauthorized, jsonKey(newKey)...)

	reg(http.MethodGet, "/admin/api/allowlist", "", "", http.StatusOK, ak...)
	reg(http.MethodPost, "/admin/api/allowlist", "", `{"prefix":"127.0.0.0/8","note":"the test client"}`, http.StatusCreated,
		append(ak, "Idempotency-Key", "allow-1")...)
	reg(http.MethodPost, "/admin/api/allowlist", "", `{"prefix":"127.0.0.0/8","note":"again"}`, http.StatusConflict, ak...)
	reg(http.MethodPost, "/admin/api/allowlist/remove", "", `{"prefix":"127.0.0.0/8"}`, http.StatusConflict, ak...)
	reg(http.MethodPost, "/admin/api/allowlist/remove", "", `{"prefix":"127.0.0.0/8","allowAll":true}`, http.StatusNoContent, ak...)
	reg(http.MethodPost, "/admin/api/allowlist/remove", "", `{"prefix":"127.0.0.0/8"}`, http.StatusNotFound, ak...)

	reg(http.MethodGet, "/admin/api/pool", "", "", http.StatusOK, ak...)
	reg(http.MethodGet, "/admin/api/leases", "/admin/api/leases?status=leased", "", http.StatusOK, ak...)
	reg(http.MethodGet, "/admin/api/leases", "/admin/api/leases?nope=1", "", http.StatusBadRequest, ak...)
	reg(http.MethodGet, "/admin/api/nodes/{node}", fmt.Sprintf("/admin/api/nodes/%d", node), "", http.StatusOK, ak...)
	reg(http.MethodGet, "/admin/api/nodes/{node}", "/admin/api/nodes/9999", "", http.StatusNotFound, ak...)
	reg(http.MethodGet, "/admin/api/nodes/{node}", "/admin/api/nodes/x", "", http.StatusBadRequest, ak...)
	reg(http.MethodPost, "/admin/api/leases/{node}/revoke", fmt.Sprintf("/admin/api/leases/%d/revoke", node),
		fmt.Sprintf(`{"fencingToken":%d}`, token), http.StatusOK, ak...)
	reg(http.MethodPost, "/admin/api/leases/{node}/revoke", fmt.Sprintf("/admin/api/leases/%d/revoke", node),
		fmt.Sprintf(`{"fencingToken":%d}`, token), http.StatusNotFound, ak...)
	reg(http.MethodGet, "/admin/api/audit", "/admin/api/audit?limit=5&action=apikey", "", http.StatusOK, ak...)
	reg(http.MethodGet, "/admin/api/audit", "/admin/api/audit?limit=0", "", http.StatusBadRequest, ak...)
	reg(http.MethodGet, "/admin/api/store", "", "", http.StatusOK, ak...)

	reg(http.MethodGet, "/admin/api/backups", "", "", http.StatusOK, ak...)
	bf := reg(http.MethodPost, "/admin/api/backups", "", "", http.StatusCreated, ak...).json(t)
	name := bf["name"].(string)
	reg(http.MethodGet, "/admin/api/backups", "", "", http.StatusOK, ak...)
	reg(http.MethodGet, "/admin/api/backups/{name}", "/admin/api/backups/"+name, "", http.StatusOK, ak...)
	reg(http.MethodGet, "/admin/api/backups/{name}", "/admin/api/backups/"+name, "", http.StatusPartialContent,
		append(ak, "Range", "bytes=0-9")...)
	reg(http.MethodGet, "/admin/api/backups/{name}", "/admin/api/backups/"+name, "", http.StatusRequestedRangeNotSatisfiable,
		append(ak, "Range", "bytes=999999999-")...)
	reg(http.MethodPost, "/admin/api/backups/{name}/delete", "/admin/api/backups/"+name+"/delete", "", http.StatusNoContent, ak...)
	reg(http.MethodGet, "/admin/api/backups/{name}", "/admin/api/backups/"+name, "", http.StatusNotFound, ak...)
	reg(http.MethodGet, "/admin/api/backups/schedule", "", "", http.StatusOK, ak...)
	reg(http.MethodPut, "/admin/api/backups/schedule", "", `{"schedule":"0 3 * * *","version":0}`, http.StatusOK, ak...)
	reg(http.MethodPut, "/admin/api/backups/schedule", "", `{"schedule":"61 * * * *","version":1}`, http.StatusBadRequest, ak...)
	reg(http.MethodPut, "/admin/api/backups/schedule", "", `{"schedule":"off","version":0}`, http.StatusConflict, ak...)
	reg(http.MethodPut, "/admin/api/backups/schedule", "", `{"schedule":"off"}`, http.StatusOK, append(ak, "If-Match", `"1"`)...)
	reg(http.MethodGet, "/admin/api/backup", "/admin/api/backup?gzip=2", "", http.StatusBadRequest, ak...)
	file := reg(http.MethodGet, "/admin/api/backup", "", "", http.StatusOK, ak...).body

	// Gateway.
	ck := jsonKey(consumerKey)
	gw(http.MethodPost, "/v1/ids", "", `{"count":3}`, http.StatusOK, ck...)
	gw(http.MethodPost, "/v1/ids", "/v1/ids?format=string", `{"count":3}`, http.StatusOK, ck...)
	gw(http.MethodPost, "/v1/ids", "/v1/ids?fromat=string", `{"count":3}`, http.StatusBadRequest, ck...)
	gw(http.MethodPost, "/v1/ids", "", `{"count":10001}`, http.StatusBadRequest, ck...)
	gw(http.MethodPost, "/v1/ids", "", `{"count":2}`, http.StatusOK, append(ck, "Idempotency-Key", "ids-1")...)
	if a := gw(http.MethodPost, "/v1/ids", "", `{"count":2}`, http.StatusOK, append(ck, "Idempotency-Key", "ids-1")...); a.header.Get(idempotency.HeaderReplayed) != "true" {
		t.Error("the issue was not replayed")
	}
	gw(http.MethodPost, "/v1/ids", "", `{"count":3}`, http.StatusUnprocessableEntity, append(ck, "Idempotency-Key", "ids-1")...)
	gw(http.MethodPost, "/v1/ids", "", `{"count":3}`, http.StatusBadRequest, append(ck, "Idempotency-Key", "a,b")...)
	gw(http.MethodPost, "/v1/ids", "", `{"count":3}`, http.StatusUnauthorized, "X-API-Key", "wrong-key-0123456789abcdefghijklmnopq")
	gw(http.MethodGet, "/v1/ids/{id}", "/v1/ids/120610764938543104", "", http.StatusOK, ck...)
	gw(http.MethodGet, "/v1/ids/{id}", "/v1/ids/-1", "", http.StatusBadRequest, ck...)

	// Last: the changes that end sessions or replace the store.
	reg(http.MethodPost, "/admin/api/me/password", "", `{"oldPassword":"wrong-password-000","newPassword":"root-password-4567"}`,
		http.StatusBadRequest, sess...)
	reg(http.MethodPost, "/admin/api/me/password", "", `{"oldPassword":"`+rootPW+`","newPassword":"root-password-4567"}`,
		http.StatusNoContent, sess...)
	reg(http.MethodGet, "/admin/api/me", "", "", http.StatusUnauthorized, sess...) // SESSION_EXPIRED
	reg(http.MethodPost, "/admin/api/login", "", `{"name":"root","password":"`+rootPW+`"}`, http.StatusUnauthorized)
	reg(http.MethodPost, "/admin/api/logout", "", "", http.StatusForbidden, "Sec-Fetch-Site", "cross-site")
	reg(http.MethodPost, "/admin/api/logout", "", "", http.StatusNoContent, sess...)
	reg(http.MethodPost, "/v1/leases/remove", "", `{"requester":`+requester+`,"mintedUpTo":"2026-01-01T00:00:00.000Z"}`,
		http.StatusOK, key...)
	// A restore: an admin's session, a preview, then the password again.
	a = reg(http.MethodPost, "/admin/api/login", "", `{"name":"root","password":"root-password-4567"}`, http.StatusOK)
	for _, c := range (&http.Response{Header: a.header}).Cookies() {
		if c.Name == admin.CookieName(false) {
			sess = []string{"Cookie", c.Name + "=" + c.Value}
		}
	}
	reg(http.MethodPost, "/admin/api/restore/preview", "", string(file), http.StatusForbidden,
		append(ak, "Content-Type", "application/octet-stream")...)
	reg(http.MethodPost, "/admin/api/restore/preview", "", "not a backup", http.StatusBadRequest,
		append(sess, "Content-Type", "application/octet-stream")...)
	reg(http.MethodPost, "/admin/api/restore/preview", "", strings.Repeat("x", 2<<20), http.StatusRequestEntityTooLarge,
		append(sess, "Content-Type", "application/octet-stream")...)
	pv := reg(http.MethodPost, "/admin/api/restore/preview", "", string(file), http.StatusOK,
		append(sess, "Content-Type", "application/octet-stream")...).json(t)
	confirm := func(pw string) string {
		b, _ := json.Marshal(map[string]string{"preview": fmt.Sprint(pv["preview"]), "sha256": fmt.Sprint(pv["sha256"]), "password": pw})
		return string(b)
	}
	reg(http.MethodPost, "/admin/api/restore", "", confirm(""), http.StatusBadRequest, sess...)
	reg(http.MethodPost, "/admin/api/restore", "", `{"preview":"`+strings.Repeat("a", 32)+`","sha256":"`+strings.Repeat("0", 64)+`","password":"root-password-4567"}`,
		http.StatusNotFound, sess...)
	reg(http.MethodPost, "/admin/api/restore", "", confirm("root-password-4567"), http.StatusOK, sess...)

	// Every documented operation was answered by each server it names.
	for _, key := range slices.Sorted(maps.Keys(s.ops)) {
		o := s.ops[key]
		for _, srv := range o.servers {
			if !s.covered[srv+" "+key] {
				t.Errorf("%s: %s was never answered by a handler (only 404/405, or not probed)", srv, key)
			}
		}
	}
}

// routingProblem checks the answer of a request no route takes: the problem of
// its status (components/responses NotFound or MethodNotAllowed, with Allow).
func (s *servers) routingProblem(url, method string, status int) {
	t := s.t
	t.Helper()
	hr, _ := http.NewRequest(method, url, nil)
	resp, err := s.client.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	name := map[int]string{http.StatusNotFound: "NotFound", http.StatusMethodNotAllowed: "MethodNotAllowed"}[status]
	r := s.doc.Components.Responses[name]
	if r == nil {
		t.Fatalf("components/responses/%s is missing", name)
	}
	if resp.StatusCode != status {
		t.Fatalf("%s %s: %d, want %d", method, url, resp.StatusCode, status)
	}
	if status == http.StatusMethodNotAllowed && resp.Header.Get("Allow") == "" {
		t.Errorf("%s %s: 405 without Allow", method, url)
	}
	s.checkBody(method+" "+url, r.Value, answer{status: resp.StatusCode, header: resp.Header, body: body}, false)
}
