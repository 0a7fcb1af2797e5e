package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snowflake"
)

// maxAnswer bounds the bodies read from the server.
const maxAnswer = 4 << 20

// maxLoggedBody bounds the error body kept in a ServerError.
const maxLoggedBody = 4 << 10

// Lease is one node ID the session holds. Times are the server's, UTC to the ms.
type Lease struct {
	NodeID int64
	// NotBefore is the first millisecond the generator may mint with.
	NotBefore time.Time
	// ExpiresAt is the last millisecond it may mint with, and the end of the lease.
	ExpiresAt time.Time
	// FencingToken grows with every new grant of the registry; hand it to downstream
	// stores that must fence off a previous holder of the node ID.
	FencingToken uint64
	// Receipt is the registry's signed statement of this lease, sent back with every
	// Renew: after a store reset it lets the registry restore the lease instead of
	// ending the session (DESIGN §7). Opaque; empty from a registry without a
	// receipt secret.
	Receipt string
}

// grant is a decoded 200 answer of Alloc or Renew.
type grant struct {
	layout    snowflake.Layout // Alloc only
	leases    []Lease
	serverNow time.Time
}

type api struct {
	reps    *replicas // the registry's URLs
	key     string
	hc      *http.Client
	timeout time.Duration
	notice  *keyNotice   // logs the key's announced expiry; nil: not logged
	client  *wire.Client // sent with Alloc for the lease history; nil: nothing
}

func requesterOf(r protocol.Requester) wire.Requester {
	return wire.Requester{MachineID: r.MachineID, PID: r.PID, StartedAt: wire.FormatTime(r.StartedAt), Instance: r.Instance}
}

// noRedirects returns a copy of hc that follows no redirect. The API key travels in
// X-API-Key, which net/http does not strip on a redirect to another host (it
// strips only Authorization and cookies): following one would hand the key to
// whoever the redirect names. The copy shares hc's transport and its connections.
func noRedirects(hc *http.Client) *http.Client {
	c := *hc
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

func (a *api) alloc(ctx context.Context, r protocol.Requester, count int, clientNow time.Time) (grant, error) {
	body := wire.AllocRequest{Requester: requesterOf(r), Count: count, ClientUtcNow: wire.FormatTime(clientNow), Client: a.client}
	var ans wire.AllocResponse
	if err := a.post(ctx, "alloc", "/v1/leases", body, &ans); err != nil {
		return grant{}, err
	}
	if ans.Layout == nil {
		return grant{}, &MalformedError{Op: "alloc", Err: errors.New(`no "layout" member`)}
	}
	epoch, err := parseTime(ans.Layout.Epoch, "layout.epoch")
	if err != nil {
		return grant{}, &MalformedError{Op: "alloc", Err: err}
	}
	g, err := decodeGrant("alloc", ans.Leases, ans.ServerUtcNow)
	g.layout = snowflake.Layout{Epoch: epoch, TimestampBits: ans.Layout.TimestampBits,
		NodeBits: ans.Layout.NodeBits, SequenceBits: ans.Layout.SequenceBits}
	return g, err
}

func (a *api) renew(ctx context.Context, r protocol.Requester, clientNow time.Time, tokens []uint64, receipts []string) (grant, error) {
	body := wire.RenewRequest{Requester: requesterOf(r), ClientUtcNow: wire.FormatTime(clientNow), FencingTokens: tokens, Receipts: receipts}
	var ans wire.RenewResponse
	if err := a.post(ctx, "renew", "/v1/leases/renew", body, &ans); err != nil {
		return grant{}, err
	}
	return decodeGrant("renew", ans.Leases, ans.ServerUtcNow)
}

// remove releases the requester's leases; a zero mintedUpTo is left out.
func (a *api) remove(ctx context.Context, r protocol.Requester, mintedUpTo time.Time) (int, error) {
	body := wire.RemoveRequest{Requester: requesterOf(r)}
	if !mintedUpTo.IsZero() {
		body.MintedUpTo = wire.FormatTime(mintedUpTo)
	}
	var ans wire.RemoveResponse
	if err := a.post(ctx, "remove", "/v1/leases/remove", body, &ans); err != nil {
		return 0, err
	}
	if ans.Removed == nil {
		return 0, &MalformedError{Op: "remove", Err: errors.New(`no "removed" member`)}
	}
	return *ans.Removed, nil
}

// decodeGrant checks and converts the members of an Alloc or Renew answer: a nil
// leases is a missing (or null) member.
func decodeGrant(op string, leases []wire.Lease, serverNow string) (grant, error) {
	if leases == nil {
		return grant{}, &MalformedError{Op: op, Err: errors.New(`no "leases" member`)}
	}
	now, err := parseTime(serverNow, "serverUtcNow")
	if err != nil {
		return grant{}, &MalformedError{Op: op, Err: err}
	}
	g := grant{serverNow: now, leases: make([]Lease, 0, len(leases))}
	for i, wl := range leases {
		if wl.NodeID == nil || wl.FencingToken == nil {
			return grant{}, &MalformedError{Op: op, Err: fmt.Errorf("leases[%d] lacks nodeId or fencingToken", i)}
		}
		l := Lease{NodeID: *wl.NodeID, FencingToken: *wl.FencingToken, Receipt: wl.Receipt}
		if l.NotBefore, err = parseTime(wl.NotBefore, fmt.Sprintf("leases[%d].notBefore", i)); err != nil {
			return grant{}, &MalformedError{Op: op, Err: err}
		}
		if l.ExpiresAt, err = parseTime(wl.ExpiresAt, fmt.Sprintf("leases[%d].expiresAt", i)); err != nil {
			return grant{}, &MalformedError{Op: op, Err: err}
		}
		g.leases = append(g.leases, l)
	}
	return g, nil
}

func parseTime(s, field string) (time.Time, error) {
	if s == "" {
		return time.Time{}, fmt.Errorf("%s is missing", field)
	}
	t, err := wire.ParseTime(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", field, err)
	}
	return t, nil
}

// encode returns body as JSON.
func encode(op string, body any) ([]byte, error) {
	payload, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("idkeeper client: %s: encode request: %w", op, err)
	}
	return payload, nil
}

// redactURL is u with any password replaced, for logs.
func redactURL(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Redacted()
	}
	return u
}

// postTo sends payload to the replica at base and decodes a 200 answer into out.
// Errors: a transport error (wrapped, with the context's error when it ran out),
// *ServerError for any other status, *MalformedError for a 200 whose body is not
// the expected JSON.
func (a *api) postTo(ctx context.Context, base, op, path string, payload []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("idkeeper client: %s: %w", op, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("X-API-Key", a.key)
	resp, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("idkeeper client: %s: %w", op, err)
	}
	defer resp.Body.Close()
	a.notice.observe(resp.Header)
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("idkeeper client: %s: read answer: %w", op, err)
	}
	if resp.StatusCode != http.StatusOK {
		e := serverError(op, resp, data)
		e.Server = redactURL(base)
		return e
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &MalformedError{Op: op, Err: err}
	}
	return nil
}

func serverError(op string, resp *http.Response, data []byte) *ServerError {
	e := &ServerError{Op: op, Status: resp.StatusCode, Body: string(data[:min(len(data), maxLoggedBody)])}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		e.Detail = "redirected to " + resp.Header.Get("Location") + "; redirects are not followed (the API key would go " +
			"with them): set ServerURL to the registry's own address"
		return e
	}
	if strings.Contains(resp.Header.Get("Content-Type"), "json") {
		var p wire.Problem
		if json.Unmarshal(data, &p) == nil {
			e.Code, e.Detail, e.Field = protocol.Code(p.Code), p.Detail, p.Field
			if e.Detail == "" {
				e.Detail = p.Title
			}
			e.Details = problemDetails(data)
		}
	}
	return e
}

// problemDetails returns the extension members of a problem+json body (every
// member but wire.ProblemMembers), as encoding/json decodes them into an any; nil
// when there are none.
func problemDetails(data []byte) map[string]any {
	var members map[string]any
	if json.Unmarshal(data, &members) != nil {
		return nil
	}
	for _, m := range wire.ProblemMembers {
		delete(members, m)
	}
	if len(members) == 0 {
		return nil
	}
	return members
}
