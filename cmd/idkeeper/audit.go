package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/wire"
)

const auditUsage = `Usage:
  idkeeper audit verify [--store …]
  idkeeper audit list [--limit N] [--before SEQ] [--format table|json] [--store …]

The audit log records every admin action (logins, accounts, API keys, the IP
allow-list) and every lease grant, removal, reclaim, revocation, restore after a
store reset and clock-skew rejection: who (the actor), what, on what (the
target), when, and from where. It is append-only and tamper-evident: each entry
holds the hash of the one before, so changing, removing or inserting an entry
breaks every link after it.

verify reads the whole log kept (entries older than the server's
--audit-retention are pruned) and checks every link up to the log's head. It
prints "audit log intact: entries A..B", or the first broken link and exits 1.

list prints the newest entries first: --limit of them (1..1000), below entry
--before for the next page.

Both read the store directly (a bolt file only while no server holds it).
`

// auditPage is how many entries verify reads at a time; a variable for tests.
var auditPage = 1000

// maxAuditList is the most entries list prints at once: the store's page bound.
const maxAuditList = 1000

// runAudit is the audit command: verify, list.
func runAudit(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) error {
	sub, args, done, err := subcommand("audit", auditUsage, []string{"verify", "list"}, args, stdout, stderr)
	if done || err != nil {
		return err
	}
	fs := newFlagSet("audit "+sub, stderr)
	var sf keyStoreFlags
	sf.register(fs)
	var limit int
	var before uint64
	format := "table"
	if sub == "list" {
		fs.IntVar(&limit, "limit", 50, "how many entries to print, newest first: 1..1000")
		fs.Uint64Var(&before, "before", 0, "print entries below this Seq (the next page); 0: from the newest")
		fs.StringVar(&format, "format", "table", "output format: table or json")
	}
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	if sub == "list" && (limit < 1 || limit > maxAuditList) {
		return usageError{&idkeeper.RangeError{Setting: "limit", Value: strconv.Itoa(limit), Min: "1", Max: strconv.Itoa(maxAuditList)}}
	}
	if format != "table" && format != "json" {
		return usagef("audit list: --format %q: want table or json", format)
	}
	s, err := sf.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	as, ok := s.(account.Store)
	if !ok {
		return errors.New("this store keeps no audit log")
	}
	if sub == "verify" {
		return verifyAudit(ctx, as, stdout)
	}
	es, err := as.AuditEntriesBefore(ctx, before, limit)
	if err != nil {
		return fmt.Errorf("read the audit log: %w", err)
	}
	return printAudit(stdout, es, format)
}

// verifyAudit checks the log up to the head it reads first (entries appended
// meanwhile are left for the next run), a page at a time, each page linked to the
// last entry of the one before.
func verifyAudit(ctx context.Context, as account.Store, stdout io.Writer) error {
	headSeq, headHash, err := as.AuditHead(ctx)
	if err != nil {
		return fmt.Errorf("read the audit log's head: %w", err)
	}
	if headSeq == 0 {
		fmt.Fprintln(stdout, "audit log empty: no entry was ever appended")
		return nil
	}
	var first uint64
	var last *audit.Entry
	for from := uint64(0); ; {
		page, err := as.AuditEntries(ctx, from, auditPage)
		if err != nil {
			return fmt.Errorf("read the audit log from entry %d: %w", from, err)
		}
		n := len(page)
		for len(page) > 0 && page[len(page)-1].Seq > headSeq {
			page = page[:len(page)-1] // appended after the head was read
		}
		if len(page) == 0 {
			break
		}
		if first == 0 {
			first = page[0].Seq
		}
		run := page
		if last != nil {
			run = append([]audit.Entry{*last}, page...)
		}
		if err := audit.Verify(run, 0, ""); err != nil {
			return err
		}
		last = &page[len(page)-1]
		if n < auditPage || last.Seq >= headSeq {
			break
		}
		from = last.Seq + 1
	}
	if last == nil {
		return fmt.Errorf("audit log: no entry is kept up to its head, entry %d: every entry was pruned by the "+
			"retention, or deleted", headSeq)
	}
	if err := audit.Verify([]audit.Entry{*last}, headSeq, headHash); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "audit log intact: entries %d..%d\n", first, headSeq)
	return nil
}

// auditRow is one entry as audit list prints it in JSON.
type auditRow struct {
	Seq      uint64 `json:"seq"`
	At       string `json:"at"`
	Actor    string `json:"actor"`
	Action   string `json:"action"`
	Target   string `json:"target"`
	RemoteIP string `json:"remoteIp"`
	Detail   string `json:"detail"`
	Hash     string `json:"hash"`
}

func printAudit(w io.Writer, es []audit.Entry, format string) error {
	if format == "json" {
		rows := make([]auditRow, len(es))
		for i, e := range es {
			rows[i] = auditRow{Seq: e.Seq, At: wire.FormatTime(e.At), Actor: e.Actor, Action: e.Action, Target: e.Target,
				RemoteIP: e.RemoteIP, Detail: e.Detail, Hash: e.Hash}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tAT\tACTOR\tACTION\tTARGET\tFROM\tDETAIL")
	for _, e := range es {
		from := e.RemoteIP
		if from == "" {
			from = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.At.UTC().Format(time.DateTime+"Z"), e.Actor, e.Action,
			oneLine(e.Target), from, oneLine(e.Detail))
	}
	return tw.Flush()
}
