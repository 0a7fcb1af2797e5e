package alert_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/alert"
	"github.com/idkeeper/idkeeper/discord"
	"github.com/idkeeper/idkeeper/protocol"
)

// allocAt sends an Alloc for requester i whose clock reads behind by skew; it
// returns the registry's error (a refused Alloc is one).
func (e *env) allocAt(k idkeeper.APIKey, i int, skew time.Duration) error {
	client := e.clk.Now().Add(-skew)
	_, err := e.rs[0].reg.Alloc(context.Background(), idkeeper.AllocRequest{Requester: requester(i), Count: 1, Key: k,
		ClientNow: &client, RemoteIP: fmt.Sprintf("10.0.0.%d", i)})
	return err
}

func (e *env) renewAt(k idkeeper.APIKey, i int, skew time.Duration) {
	e.t.Helper()
	client := e.clk.Now().Add(-skew)
	if _, err := e.rs[0].reg.Renew(context.Background(), idkeeper.RenewRequest{Requester: requester(i), KeyID: k.ID, ClientNow: &client}); err != nil {
		e.t.Fatal(err)
	}
}

// The clock-skew alert runs on the hour: refused requesters first (they hold no
// node ID), then warned ones, at the severity the registry stored; it repeats
// every hour while any stands and resolves once healthy readings replaced them.
func TestClockSkewAlertOnTheHour(t *testing.T) {
	for _, redis := range []bool{false, true} {
		t.Run(map[bool]string{false: "bolt", true: "redis"}[redis], func(t *testing.T) {
			e := newEnv(t, envOpts{redis: redis})
			k := e.key("k")
			if err := e.allocAt(k, 1, 11*time.Minute); protocol.ErrorCode(err) != protocol.CodeClockSkewTooLarge {
				t.Fatalf("Alloc 11 min behind: %v, want CLOCK_SKEW_TOO_LARGE", err)
			}
			for i, skew := range map[int]time.Duration{2: 6 * time.Minute, 3: -7 * time.Minute, 4: time.Second} {
				if err := e.allocAt(k, i, skew); err != nil {
					t.Fatalf("Alloc of requester %d: %v", i, err)
				}
			}
			e.check(0) // 12:30: the first check ever evaluates at once
			cs := e.calls(2)
			for _, c := range cs {
				if title(c) != "IdKeeper: clock skew: 1 refused, 2 warned" || c.Message.Embeds[0].Color != 0xE74C3C {
					t.Errorf("title %q colour %x", title(c), c.Message.Embeds[0].Color)
				}
				d := c.Message.Embeds[0].Description
				i1, i3, i2 := strings.Index(d, "`host-1`"), strings.Index(d, "`host-3`"), strings.Index(d, "`host-2`")
				if i1 < 0 || i3 < 0 || i2 < 0 || !(i1 < i3 && i3 < i2) || strings.Contains(d, "host-4") {
					t.Errorf("want host-1 (refused), then host-3 (7 min ahead), then host-2 (6 min behind), not host-4:\n%s", d)
				}
				for _, want := range []string{"**Refused** `host-1` pid 101: clock 11m0s behind (threshold 10m0s), alloc from `10.0.0.1`",
					"**Warned** `host-3` pid 103: clock 7m0s ahead", "**Warned** `host-2` pid 102: clock 6m0s behind"} {
					if !strings.Contains(d, want) {
						t.Errorf("description lacks %q:\n%s", want, d)
					}
				}
			}

			e.clk.Set(time.Date(2026, 11, 30, 12, 59, 0, 0, time.UTC))
			e.check(0)
			e.calls(2)
			e.clk.Set(time.Date(2026, 11, 30, 13, 0, 30, 0, time.UTC))
			e.check(0)
			cs = e.calls(4)
			if !strings.HasPrefix(title(cs[3]), "IdKeeper: clock skew:") {
				t.Errorf("the 13:00 repeat is %q", title(cs[3]))
			}
			e.clk.Advance(time.Minute)
			e.check(0)
			e.calls(4)

			// NTP fixed: a healthy reading replaces each stored one.
			if err := e.allocAt(k, 1, 0); err != nil {
				t.Fatal(err)
			}
			e.renewAt(k, 2, 0)
			e.renewAt(k, 3, 0)
			e.clk.Set(time.Date(2026, 11, 30, 14, 0, 5, 0, time.UTC))
			e.check(0)
			cs = e.calls(6)
			if !strings.Contains(title(cs[5]), "resolved: no clock skew") || !strings.Contains(text(cs[5]), "lasted 1h30m5s") {
				t.Errorf("resolved message %q\n%s", title(cs[5]), text(cs[5]))
			}
			e.clk.Set(time.Date(2026, 11, 30, 15, 0, 5, 0, time.UTC))
			e.check(0)
			e.calls(6)
			if n := e.deliveries(0, alert.ClockSkew, "delivered"); n != 6 {
				t.Errorf("deliveries %v, want 6", n)
			}
		})
	}
}

// A refused requester that never comes back stops the alert once its reading
// lapses (lease + grace after it was made): the store drops it on read.
func TestClockSkewAlertStopsWhenReadingsLapse(t *testing.T) {
	e := newEnv(t, envOpts{})
	k := e.key("k")
	if err := e.allocAt(k, 1, time.Hour); err == nil {
		t.Fatal("Alloc an hour behind was granted")
	}
	e.check(0)
	e.calls(2)
	lapse := idkeeper.DefaultLeaseDuration + idkeeper.DefaultGrace
	e.clk.Advance(lapse - time.Hour)
	e.clk.Set(e.clk.Now().Truncate(time.Hour).Add(time.Second))
	e.check(0)
	e.calls(4) // still standing
	e.clk.Advance(2 * time.Hour)
	e.check(0)
	cs := e.calls(6)
	if !strings.Contains(title(cs[5]), "resolved") {
		t.Errorf("after the reading lapsed: %q", title(cs[5]))
	}
}

// A long list is cut to Discord's limit with "… and N more", refused ones first.
func TestClockSkewAlertLongList(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	for i := range 300 {
		lvl, skew := idkeeper.SkewWarn, 6*time.Minute
		if i%3 == 0 {
			lvl, skew = idkeeper.SkewReject, 20*time.Minute
		}
		o := idkeeper.SkewObservation{Requester: requester(1000 + i), Skew: skew, Threshold: 10 * time.Minute, Level: lvl,
			ObservedAt: e.clk.Now(), Operation: "alloc"}
		if err := e.rs[0].st.RecordSkew(ctx, o, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	e.check(0)
	cs := e.calls(2)
	em := cs[0].Message.Embeds[0]
	if n := utf8.RuneCountInString(em.Description); n > discord.MaxDescription {
		t.Fatalf("description of %d characters", n)
	}
	if em.Title != "IdKeeper: clock skew: 100 refused, 200 warned" || !strings.Contains(em.Description, "more") {
		t.Errorf("title %q, description ends %q", em.Title, em.Description[len(em.Description)-40:])
	}
	if strings.Contains(em.Description, "**Warned**") {
		t.Errorf("a warned requester listed while refused ones were cut")
	}
}
