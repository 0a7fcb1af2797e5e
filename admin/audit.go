package admin

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The audit log.

// Bounds of GET /admin/api/audit.
const (
	DefaultAuditLimit = 100  // entries per page when ?limit= is absent
	MaxAuditLimit     = 1000 // the most entries per page
	// MaxAuditScan bounds the entries one filtered request reads: a filter that
	// matches little answers a short page and a next to go on from.
	MaxAuditScan = 10000
)

// auditMatch reports whether e passes the filters: action is an action
// ("apikey.create") or, without a dot, a family of them ("apikey"); actor an
// actor ("user:bob", "key:ID", "system").
func auditMatch(e audit.Entry, action, actor string) bool {
	switch {
	case actor != "" && e.Actor != actor:
		return false
	case action == "" || e.Action == action:
		return true
	}
	return !strings.Contains(action, ".") && strings.HasPrefix(e.Action, action+".")
}

// auditLog answers a page of the audit log, newest first: ?before=SEQ (entries
// below that Seq; absent: from the newest), ?limit=N (1..MaxAuditLimit), ?action=
// and ?actor= (auditMatch). It reads the log in pages of the store
// (AuditEntriesBefore) and filters them here, reading at most MaxAuditScan
// entries; next is the before of the following page, null when the log has no
// older entry.
func (h *Handler) auditLog(_ http.ResponseWriter, r *http.Request, _ *principal) (any, error) {
	q, err := query(r, "before", "limit", "action", "actor")
	if err != nil {
		return nil, err
	}
	var before uint64
	if s := q.Get("before"); s != "" {
		if before, err = strconv.ParseUint(s, 10, 64); err != nil || before == 0 {
			return nil, protocol.Invalidf("before", "before must be the positive sequence number of an entry (a page's next)")
		}
	}
	limit := DefaultAuditLimit
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > MaxAuditLimit {
			return nil, protocol.Invalidf("limit", "limit must be an integer between 1 and %d", MaxAuditLimit)
		}
	}
	action, actor := q.Get("action"), q.Get("actor")
	filtered := action != "" || actor != ""
	out := wire.AuditPage{Entries: []wire.AuditEntry{}}
	scanned := 0
	for {
		n := limit - len(out.Entries)
		if filtered {
			n = min(MaxAuditLimit, MaxAuditScan-scanned)
		}
		es, err := h.store.AuditEntriesBefore(r.Context(), before, n)
		if err != nil {
			return nil, storeErr(err)
		}
		scanned += len(es)
		for i, e := range es {
			before = e.Seq
			if !auditMatch(e, action, actor) {
				continue
			}
			out.Entries = append(out.Entries, auditJSON(e))
			if len(out.Entries) == limit {
				if e.Seq > 1 && (i < len(es)-1 || len(es) == n) {
					next := e.Seq
					out.Next = &next
				}
				return out, nil
			}
		}
		switch {
		case len(es) < n || before <= 1:
			return out, nil // the log's start
		case scanned >= MaxAuditScan:
			next := before
			out.Next = &next
			return out, nil
		}
	}
}
