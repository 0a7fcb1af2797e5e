package admin

import (
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/clientip"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The IP allow-list routes: the entries kept in the store, which apply to every
// API-key request (/v1 and here) at once on this replica, and on the others at
// their next refresh (allowlist.DefaultRefresh); the floor (--allowed-ips) and
// the trusted proxies come from the configuration and are only shown.

var (
	addAllowMembers    = wire.Members(wire.AddAllowEntryRequest{})
	removeAllowMembers = wire.Members(wire.RemoveAllowEntryRequest{})
)

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

func (h *Handler) getAllowList(_ http.ResponseWriter, r *http.Request, _ *principal) (any, error) {
	es, err := h.store.AllowEntries(r.Context())
	if err != nil {
		return nil, storeErr(err)
	}
	out := wire.AllowList{Floor: prefixStrings(h.allow.Floor()), TrustedProxies: prefixStrings(h.cfg.TrustedProxies),
		Entries: make([]wire.AllowEntry, len(es))}
	for i, e := range es {
		out.Entries[i] = wire.AllowEntry{Prefix: e.Prefix.String(), Note: e.Note, CreatedBy: e.CreatedBy,
			CreatedAt: wire.FormatTime(e.CreatedAt)}
	}
	return out, nil
}

// prefixMember reads the member prefix: a CIDR prefix (masked) or a bare address.
func prefixMember(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return netip.Prefix{}, protocol.Invalidf("prefix", "prefix is required: a CIDR prefix such as 10.0.0.0/8, or an address")
	}
	p, err := clientip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, protocol.Invalidf("prefix", "%v", err)
	}
	return p, nil
}

// refresh puts the store's allow-list in force on this replica at once.
func (h *Handler) refresh(r *http.Request) {
	if err := h.allow.Refresh(r.Context()); err != nil {
		h.log.Warn("the allow-list changed, but reading it failed; it applies at the next refresh", "err", err)
	}
}

// addAllowEntry lists a prefix, with a note saying why. Note that an allow-list
// with no prefix at all allows every address: the first entry (with an empty
// floor) restricts API keys to the listed prefixes.
func (h *Handler) addAllowEntry(w http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	m, err := h.body(w, r, addAllowMembers)
	if err != nil {
		return nil, err
	}
	raw, err := m.String("", "prefix")
	if err != nil {
		return nil, err
	}
	prefix, err := prefixMember(raw)
	if err != nil {
		return nil, err
	}
	note, err := m.String("", "note")
	if err != nil {
		return nil, err
	}
	note, ok := idkeeper.CleanText(note, allowlist.MaxNoteLen)
	switch {
	case !ok:
		return nil, protocol.Invalidf("note", "note must be printable UTF-8 text of at most %d bytes", allowlist.MaxNoteLen)
	case note == "":
		return nil, protocol.Invalidf("note", "note is required: why the prefix is on the list")
	}
	e := allowlist.Entry{Prefix: prefix, Note: note, CreatedBy: p.actor, CreatedAt: protocol.Millis(h.reg.Now())}
	if err := h.store.AddAllowEntry(r.Context(), e); errors.Is(err, idkeeper.ErrConflict) {
		return nil, protocol.Errorf(protocol.CodeConflict, "%s is on the allow-list already", prefix)
	} else if err != nil {
		return nil, storeErr(err)
	}
	h.refresh(r)
	h.log.Info("allow-list entry added", "prefix", prefix.String(), "note", note, "by", p.actor, "remoteIp", p.remote)
	h.audit(r.Context(), audit.Entry{Actor: p.actor, Action: audit.AllowAdd, Target: "ip:" + prefix.String(), Detail: note})
	return created{location: APIPrefix + "allowlist",
		body: wire.AllowEntry{Prefix: prefix.String(), Note: note, CreatedBy: e.CreatedBy, CreatedAt: wire.FormatTime(e.CreatedAt)}}, nil
}

// removeAllowEntry removes a prefix from the stored entries. A floor prefix
// cannot be removed (409: it is configuration). Removing the last entry of a list
// whose floor is empty would allow every address: that takes "allowAll": true.
func (h *Handler) removeAllowEntry(w http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	m, err := h.body(w, r, removeAllowMembers)
	if err != nil {
		return nil, err
	}
	raw, err := m.String("", "prefix")
	if err != nil {
		return nil, err
	}
	prefix, err := prefixMember(raw)
	if err != nil {
		return nil, err
	}
	allowAll, _, err := m.Bool("", "allowAll")
	if err != nil {
		return nil, err
	}
	ctx := r.Context()
	es, err := h.store.AllowEntries(ctx)
	if err != nil {
		return nil, storeErr(err)
	}
	listed := slices.ContainsFunc(es, func(e allowlist.Entry) bool { return e.Prefix == prefix })
	switch {
	case !listed && slices.Contains(h.allow.Floor(), prefix):
		return nil, protocol.Errorf(protocol.CodeConflict, "%s is part of the floor (--allowed-ips), which is configuration: "+
			"change the flag and restart the server to remove it", prefix)
	case !listed:
		return nil, protocol.Errorf(protocol.CodeNotFound, "%s is not on the allow-list", prefix)
	case len(es) == 1 && len(h.allow.Floor()) == 0 && !allowAll:
		return nil, protocol.Errorf(protocol.CodeConflict, "%s is the last entry and the floor is empty: without it every "+
			"address may use API keys; send \"allowAll\": true to mean that", prefix)
	}
	if err := h.store.RemoveAllowEntry(ctx, prefix); errors.Is(err, idkeeper.ErrNotFound) {
		return nil, protocol.Errorf(protocol.CodeNotFound, "%s is not on the allow-list", prefix)
	} else if err != nil {
		return nil, storeErr(err)
	}
	h.refresh(r)
	h.log.Info("allow-list entry removed", "prefix", prefix.String(), "by", p.actor, "remoteIp", p.remote)
	h.audit(ctx, audit.Entry{Actor: p.actor, Action: audit.AllowRemove, Target: "ip:" + prefix.String()})
	return noContent{}, nil
}
