package backup

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/snapshot"
)

// writeRedacted writes meta and recs as a redacted backup.
func writeRedacted(t testing.TB, meta snapshot.Meta, recs []snapshot.Record) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, Source{Store: "bolt", TakenAt: t0.Add(2 * time.Hour), Redacted: true})
	if err := w.WriteMeta(meta); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.WriteRecord(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Issue #29: a redacted backup holds no key hash, password hash or webhook URL,
// says so in its header, reads and checks as any backup (the same records but
// their secrets), and never restores: Import refuses it and writes nothing. The
// writer's records are not changed by the redaction.
func TestRedactedBackup(t *testing.T) {
	meta, recs := sample()
	full := write(t, meta, recs)
	data := writeRedacted(t, meta, recs)
	ls := lines(data)
	if !bytes.HasSuffix(ls[0], []byte(`,"redacted":true}`)) || bytes.Contains(lines(full)[0], []byte("redacted")) {
		t.Fatalf("the headers:\n%s\n%s", ls[0], lines(full)[0])
	}
	for _, secret := range []string{"argon2id", annWebhook, "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"} {
		if !bytes.Contains(full, []byte(secret)) {
			t.Fatalf("the full backup lacks %q: the test checks nothing", secret)
		}
		if bytes.Contains(data, []byte(secret)) {
			t.Errorf("the redacted backup holds %q", secret)
		}
	}
	if recs[4].Key.Hash == nil || recs[6].User.PasswordHash == "" || recs[6].User.Webhook == "" {
		t.Fatal("the redaction changed the writer's records")
	}
	h, got, sum, err := readAll(data)
	if err != nil || !h.Redacted {
		t.Fatalf("read the redacted backup: %v, header %+v", err, h)
	}
	want := make([]snapshot.Record, len(recs))
	for i, r := range recs {
		want[i] = redact(r)
	}
	if !reflect.DeepEqual(got, want) || sum.Counts.Keys != 2 || sum.Counts.Users != 2 {
		t.Fatalf("the redacted records: %d, counts %+v", len(got), sum.Counts)
	}
	if _, err := Verify(bytes.NewReader(data)); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if err := CheckRestorable(h); !errors.Is(err, ErrRedacted) {
		t.Fatalf("CheckRestorable: %v", err)
	}

	// A file marked redacted that holds a secret is damaged.
	for i, from := range map[int]string{5: `"hash":""`, 7: `"role":"admin"`} {
		bad := bytes.Clone(ls[i])
		to := `"hash":"` + strings.Repeat("ab", 32) + `"`
		if i == 7 {
			to = `"role":"admin","passwordHash":"x"`
		}
		bad = bytes.Replace(bad, []byte(from), []byte(to), 1)
		c := append([][]byte{}, ls...)
		c[i] = bad
		if _, _, _, err := readAll(reseal(c)); !errors.Is(err, ErrDamaged) {
			t.Errorf("line %d with a secret: %v", i+1, err)
		}
	}

	ctx := context.Background()
	for _, op := range openers(t) {
		t.Run(op.kind, func(t *testing.T) {
			clk := fakeclock.New(t0)
			s, dump := op.dump(t, clk)
			populate(t, s, clk)
			before, raw := read(t, s).String(), dump()
			plan, err := PlanFor(ctx, s, clk.Now(), lease, grace)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Import(ctx, s, bytes.NewReader(data), plan)
			if !errors.Is(err, ErrRedacted) || !strings.Contains(err.Error(), "never restored") {
				t.Fatalf("import of a redacted backup: %v", err)
			}
			if read(t, s).String() != before || dump() != raw {
				t.Fatal("a refused import of a redacted backup changed the store")
			}
		})
	}
}
