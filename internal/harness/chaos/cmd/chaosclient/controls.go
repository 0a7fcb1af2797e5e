package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/snowflake"
)

// The client controls of the fault-injection suite's negative controls (--control):
// each switches one of the client library's safety mechanisms off from outside the
// library, which runs unchanged.
const (
	// controlNoWindow mints with bare snowflake generators, one per node ID the
	// session holds, that have no window: the session's lease deadline still stops
	// them (they mint only while Session.Check finds the lease valid), but they
	// mint before a cooling node ID's NotBefore and past ExpiresAt on a skewed
	// clock. The session's own generators mint nothing, so Close attests no
	// mintedUpTo.
	controlNoWindow = "no-window"
	// controlNoInstance sends every request without the requester's instance (the
	// library's per-session one): sessions with equal machine ID, PID and start time
	// then share one requester on the registry, as before DESIGN §3 was amended.
	controlNoInstance = "no-instance"
)

func checkControl(name string) error {
	switch name {
	case "", controlNoWindow, controlNoInstance:
		return nil
	}
	return fmt.Errorf("unknown --control %q (want %s or %s)", name, controlNoWindow, controlNoInstance)
}

// bareMinter mints a batch at a time with generators that ignore the lease window,
// for as long as the session's lease is valid.
type bareMinter struct {
	s    *client.Session
	gens []*snowflake.Generator
	next int
}

func newBareMinter(s *client.Session, clk client.Clock, maxBackward time.Duration) (*bareMinter, error) {
	b := &bareMinter{s: s}
	for _, l := range s.Leases() {
		g, err := snowflake.New(s.Layout(), l.NodeID, snowflake.Options{Now: clk.Now, MaxBackwardStep: maxBackward})
		if err != nil {
			return nil, err
		}
		b.gens = append(b.gens, g)
	}
	return b, nil
}

// NextIDs fills dst from one generator, the next in turn, when the lease is valid
// before and after minting, as the library's issuing path checks it.
func (b *bareMinter) NextIDs(dst []int64) error {
	if err := leaseValid(b.s); err != nil {
		return err
	}
	b.next = (b.next + 1) % len(b.gens)
	if _, err := b.gens[b.next].NextIDs(dst); err != nil {
		return err
	}
	return leaseValid(b.s)
}

// leaseValid is Session.Check without its window check.
func leaseValid(s *client.Session) error {
	err := s.Check()
	if errors.Is(err, snowflake.ErrBeforeWindow) || errors.Is(err, snowflake.ErrWindowEnded) {
		return nil
	}
	return err
}

// stripInstance is an HTTP transport that removes the requester's instance from
// every request body that names a requester (Alloc, Renew, Remove).
type stripInstance struct{ base http.RoundTripper }

func (t stripInstance) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil {
		return t.base.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	var msg map[string]json.RawMessage
	if json.Unmarshal(body, &msg) == nil && msg["requester"] != nil {
		var r map[string]json.RawMessage
		if err := json.Unmarshal(msg["requester"], &r); err != nil {
			return nil, err
		}
		delete(r, "instance")
		if msg["requester"], err = json.Marshal(r); err != nil {
			return nil, err
		}
		if body, err = json.Marshal(msg); err != nil {
			return nil, err
		}
	}
	req = req.Clone(req.Context())
	req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return t.base.RoundTrip(req)
}
