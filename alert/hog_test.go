package alert_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/apikey"
)

// A key whose leases and node IDs cooling after its Removes hold more than half
// the pool fires the capacity alert, though free node IDs are above the
// threshold; the message names the key by ID and description, never its secret,
// and the alert resolves once its cooling node IDs are ready (issue #29).
func TestCapacityAlertNamesHoggingKey(t *testing.T) {
	for _, redis := range []bool{false, true} {
		t.Run(map[bool]string{false: "bolt", true: "redis"}[redis], func(t *testing.T) {
			e := newEnv(t, envOpts{redis: redis, nodes: 20})
			secret, hog, err := apikey.NewAdmin(e.rs[0].reg).Create(context.Background(), apikey.Spec{Description: "batch jobs"})
			if err != nil {
				t.Fatal(err)
			}
			other := e.key("web")
			e.alloc(other, 9, 2)
			e.alloc(hog, 1, 6)
			e.remove(hog, 1)   // 6 cooling, charged to the hog
			e.alloc(hog, 2, 4) // 10 of 20: half, not more
			e.clk.Advance(time.Minute)
			e.check(0)
			e.calls(0)

			e.alloc(hog, 3, 1) // 11 of 20, 5 of them leased
			e.clk.Advance(time.Minute)
			e.check(0)
			cs := e.calls(2)
			for _, c := range cs {
				body := text(c)
				if !strings.Contains(title(c), "one API key holds 11 of 20 node IDs") {
					t.Errorf("title %q", title(c))
				}
				i := strings.Index(body, "API keys holding more than half the pool: ")
				if i < 0 {
					t.Fatalf("no field names the key:\n%s", body)
				}
				field := body[i:]
				field = field[:strings.Index(field, "\n")]
				if !strings.Contains(field, "`"+hog.ID+"`") || !strings.Contains(field, "`batch jobs`: 11 (6 of them cooling") ||
					strings.Contains(field, other.ID) {
					t.Errorf("the field names not just the hogging key with its charge:\n%s", field)
				}
				if strings.Contains(body, secret) || strings.Contains(body, string(hog.Hash)) {
					t.Errorf("the message holds the key's secret or hash:\n%s", body)
				}
			}

			// Its Removes of the rest leave all 11 cooling, each until its lease's
			// expiry (10 min after its grant): still firing, then resolved.
			e.remove(hog, 2)
			e.remove(hog, 3)
			e.clk.Advance(7 * time.Minute)
			e.check(0)
			e.calls(2)
			e.clk.Advance(3 * time.Minute)
			e.check(0)
			cs = e.calls(4)
			if !strings.HasPrefix(title(cs[3]), "IdKeeper: resolved") {
				t.Errorf("after the cooling ended: %q", title(cs[3]))
			}
		})
	}
}
