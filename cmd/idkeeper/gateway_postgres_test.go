package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/harness/pgtest"
)

// The gateway's --idempotency-store on PostgreSQL (issue #32): the first gateway
// creates the schema's tables, two gateways share the records (a replay gets the
// same IDs from either, another body 422), the lapsed records are purged, and
// the URL's password is in no log line.
func TestGateway_IdempotencyOnPostgres(t *testing.T) {
	pg := pgtest.Start(t)
	ctx, reg := purgingGatewayRegistry(t)
	store := pg.URL() + "&schema=gwidem" // pgtest's URLs have a query (sslmode)
	// The URL holds a password: from the environment, never argv.
	env := map[string]string{"IDKEEPER_API_KEY": bootstrapKey, "IDKEEPER_IDEMPOTENCY_STORE": store}
	args := []string{"--server", "http://" + reg.Addr().String()}
	a := startGatewayCmd(t, args, env)
	b := startGatewayCmd(t, args, env)

	const body = `{"count":3}`
	st, replayed, first := idemPost(t, a.base, "pg-key-1", body)
	if st != http.StatusOK || replayed != "" {
		t.Fatalf("first request: %d replayed=%q %s", st, replayed, first)
	}
	for _, g := range []*gatewayProc{a, b} {
		if st, replayed, again := idemPost(t, g.base, "pg-key-1", body); st != http.StatusOK || replayed != "true" || again != first {
			t.Fatalf("replay on %s: %d replayed=%q\n%s\nwant\n%s", g.base, st, replayed, again, first)
		}
	}
	st, _, p := idemPost(t, b.base, "pg-key-1", `{"count":5}`)
	var prob struct{ Code string }
	if err := json.Unmarshal([]byte(p), &prob); err != nil || st != http.StatusUnprocessableEntity || prob.Code != string(idempotency.CodeKeyReused) {
		t.Fatalf("another body with the key: %d %s; want 422 %s", st, p, idempotency.CodeKeyReused)
	}
	count := func() (n int, scopes string) {
		t.Helper()
		c, err := pgx.Connect(ctx, pg.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if err := c.QueryRow(ctx, `SELECT count(*), coalesce(string_agg(scope, ' '), '') FROM gwidem.idempotency`).Scan(&n, &scopes); err != nil {
			t.Fatal(err)
		}
		return n, scopes
	}
	if n, _ := count(); n != 1 {
		t.Fatalf("%d records in gwidem.idempotency, want 1", n)
	}

	c := startGatewayCmd(t, append(args, "--idempotency-ttl", "50ms"), env)
	if st, _, p := idemPost(t, c.base, "pg-key-3", body); st != http.StatusOK {
		t.Fatalf("short TTL: %d %s", st, p)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, scopes := count()
		if n == 1 && !strings.Contains(scopes, "pg-key-3") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lapsed record was not purged: %d records: %s", n, scopes)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, g := range []*gatewayProc{a, b, c} {
		if code := g.stop(); code != exitOK {
			t.Fatalf("stop: exit %d:\n%s", code, g.logs)
		}
		if logs := g.logs.String(); strings.Contains(logs, pg.Password()) || !strings.Contains(logs, "gateway stopped") {
			t.Fatalf("the log holds the password, or no clean stop:\n%s", logs)
		}
	}
}
