package admin

import (
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snowflake"
)

// The "Find an ID" page (issue #16): a search box that answers what GET
// /admin/api/ids/{id}/origin answers (origin.go), for people: the ID decoded
// with the registry's layout, and the lease (the process) that held its node ID
// at its millisecond, from the lease history.

// originPath is the page; its form is a GET with the parameter id.
const originPath = "/admin/ids"

// maxIDInput bounds what the search box takes: 19 digits, quotes and blanks.
const maxIDInput = 64

// originPage is the data of the "Find an ID" page.
type originPage struct {
	Input      string        // what was typed, as the box shows it again
	InputError string        // why Input is not an ID; "" otherwise
	Result     *originResult // nil: no search, or a bad ID
}

// MaxInput is the box's maxlength.
func (originPage) MaxInput() int { return maxIDInput }

// originResult is the answer for one ID.
type originResult struct {
	ID       string
	Parts    snowflake.Parts
	Layout   idkeeper.Layout
	NodeLink bool // the node ID is in the pool: link its detail on the leases page
	Leases   []originLease
	Note     string
}

// Contested reports whether two or more leases held the node ID at the ID's
// millisecond: either may have minted it.
func (o originResult) Contested() bool { return len(o.Leases) > 1 }

// originLease is one lease of the answer, as the page shows it.
type originLease struct {
	idkeeper.HistoryRecord
	Labels []originLabel // the client's labels, sorted by name
	// OpenStart: the window opens at the layout's epoch (the node ID's first
	// grant); EmptyWindow: it holds no millisecond.
	OpenStart, EmptyWindow bool
	KeyKnown               bool // the key is in the store: link its page
	KeyDesc                string
	N                      int // 1, 2…: its place in the answer
}

// NoteText is the Note after the page's own "No lease known.": capitalised,
// ended with a full stop.
func (o originResult) NoteText() string {
	n := strings.TrimPrefix(o.Note, "no lease known: ")
	if n == "" {
		return n
	}
	n = strings.ToUpper(n[:1]) + n[1:]
	if !strings.HasSuffix(n, ".") {
		n += "."
	}
	return n
}

// originLabel is one client label.
type originLabel struct{ Name, Value string }

// EndLabel is the lease's end as its badge says it.
func (l originLease) EndLabel() string {
	if l.End == idkeeper.EndHeld {
		return "held"
	}
	return string(l.End)
}

// EndClass is the class of the end's badge (admin.css).
func (l originLease) EndClass() string {
	switch l.End {
	case idkeeper.EndHeld:
		return "leased"
	case idkeeper.EndReclaimed:
		return "expired"
	case idkeeper.EndRevoked:
		return "revoked"
	case idkeeper.EndContested:
		return "quarantined"
	}
	return "none"
}

// EndMeaning says what the end means, without its time.
func (l originLease) EndMeaning() string {
	switch l.End {
	case idkeeper.EndHeld:
		return "the lease has not ended: its holder may still be minting"
	case idkeeper.EndRemoved:
		return "its holder released it"
	case idkeeper.EndReclaimed:
		return "it expired and was reclaimed past the grace period"
	case idkeeper.EndRevoked:
		return "an operator revoked it"
	case idkeeper.EndContested:
		return "two holders claimed the node ID"
	}
	return ""
}

// originFind shows the page: the form alone without ?id=, the answer for a
// valid ID, the form with the error next to the box (400) for a bad one.
func (h *Handler) originFind(w http.ResponseWriter, r *http.Request, p *principal) {
	q := r.URL.Query()
	var d originPage
	if !q.Has("id") {
		v := h.baseView(w, r, p, "Find an ID", "ids")
		v.P = d
		h.render(w, r, http.StatusOK, "origin", v)
		return
	}
	d.Input = q.Get("id")
	if len(d.Input) > maxIDInput {
		d.Input = d.Input[:maxIDInput]
	}
	d.Input = strings.TrimSpace(strings.ToValidUTF8(d.Input, ""))
	bad := func(msg string) {
		d.InputError = msg
		v := h.baseView(w, r, p, "Find an ID", "ids")
		v.P = d
		h.render(w, r, http.StatusBadRequest, "origin", v)
	}
	id, err := snowflake.ParseID(q.Get("id"))
	if err != nil {
		bad(idInputError(err))
		return
	}
	o, err := h.reg.Origin(r.Context(), id)
	if err != nil {
		if protocol.ErrorCode(err) == protocol.CodeInvalidRequest {
			_, msg := errorText(err)
			bad(msg)
			return
		}
		h.pageError(w, r, p, err)
		return
	}
	d.Result = h.originResult(r, o)
	v := h.baseView(w, r, p, "ID "+d.Result.ID, "ids")
	v.P = d
	h.render(w, r, http.StatusOK, "origin", v)
}

// idInputError is what the page says of an ID ParseID refused.
func idInputError(err error) string {
	msg := err.Error()
	if errors.Is(err, snowflake.ErrInvalidID) {
		msg = strings.TrimPrefix(msg, snowflake.ErrInvalidID.Error()+" ")
	}
	return fmt.Sprintf("Not an ID: %s. An ID is decimal digits (at most %d), bare or between double quotes.",
		msg, int64(math.MaxInt64))
}

// originResult is o as the page shows it: the keys that still exist linked,
// with their descriptions.
func (h *Handler) originResult(r *http.Request, o idkeeper.IDOrigin) *originResult {
	ctx := r.Context()
	res := &originResult{ID: strconv.FormatInt(o.ID, 10), Parts: o.Parts, Layout: h.reg.Layout(), Note: o.Note}
	if p, ok := h.reg.Pool(ctx); ok && o.Parts.Node >= int64(p.First) && o.Parts.Node < int64(p.End()) {
		res.NodeLink = true
	}
	if len(o.Leases) == 0 {
		return res
	}
	keys := map[string]string{}
	known := true
	if ks, err := h.reg.Keys(ctx); err == nil {
		for _, k := range ks {
			keys[k.Key.ID] = k.Key.Description
		}
	} else {
		known = false
		h.log.Warn("read the API keys for the Find an ID page", "err", err)
	}
	epoch := res.Layout.Epoch
	for _, hr := range o.Leases {
		l := originLease{HistoryRecord: hr, OpenStart: hr.NotBefore.Before(epoch), EmptyWindow: hr.WindowEnd.Before(hr.NotBefore),
			N: len(res.Leases) + 1}
		for _, k := range hr.Client.LabelKeys() {
			l.Labels = append(l.Labels, originLabel{Name: k, Value: hr.Client.Labels[k]})
		}
		if desc, ok := keys[hr.KeyID]; ok && known && hr.KeyID != "" {
			l.KeyKnown, l.KeyDesc = true, desc
		}
		res.Leases = append(res.Leases, l)
	}
	return res
}

// msFormat is how the page shows a time: UTC, to the millisecond, as an ID
// holds it.
const msFormat = "2006-01-02 15:04:05.000Z"

// timeMsHTML shows t as a <time> element in UTC to the millisecond, "—" when
// it is zero.
func timeMsHTML(t time.Time) template.HTML { return timeElement(t, msFormat) }
