package client

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/registrytest"
	"github.com/idkeeper/idkeeper/protocol"
)

// TestServerErrorUnwraps: a refusal of a real registry comes out of the client as
// the *idkeeper.Error the server had, its code, message, field and details, so
// that protocol.ErrorCode and errors.As work on the client side of the wire too.
func TestServerErrorUnwraps(t *testing.T) {
	srv := registrytest.Start(t, registrytest.Options{})
	a := &api{reps: newReplicas([]string{srv.URL}, slog.New(slog.DiscardHandler)), key: srv.APIKey, hc: srv.Client, timeout: 10 * time.Second}
	r := idkeeper.Requester{MachineID: "unwrap-test", PID: 7, StartedAt: time.Now().Add(-time.Hour), Instance: "i1"}
	ctx := t.Context()

	_, err := a.alloc(ctx, r, 0, time.Now())
	var ie *idkeeper.Error
	if protocol.ErrorCode(err) != protocol.CodeInvalidRequest || !errors.As(err, &ie) || ie.Field != "count" ||
		ie.Message == "" || ie.Details != nil {
		t.Fatalf("count 0: %v (%+v); want INVALID_REQUEST naming count", err, ie)
	}

	if _, err := a.alloc(ctx, r, 1, time.Now()); err != nil {
		t.Fatal(err)
	}
	_, err = a.alloc(ctx, r, 2, time.Now())
	var se *ServerError
	if protocol.ErrorCode(err) != protocol.CodeRequesterCountMismatch || !errors.As(err, &ie) || !errors.As(err, &se) {
		t.Fatalf("count 2 after 1: %v; want REQUESTER_COUNT_MISMATCH", err)
	}
	if ie.Code != se.Code || ie.Message != se.Detail || ie.Field != "" ||
		ie.Details["held"] != float64(1) || ie.Details["requested"] != float64(2) || len(ie.Details) != 2 {
		t.Fatalf("unwrapped %+v from %+v", ie, se)
	}

	// A bad key, then an answer that is not problem+json: the latter has no code, so
	// nothing to unwrap.
	bad := *a
	bad.key = "idk_not-a-key-the-registry-knows-at-all"
	if _, err := bad.alloc(ctx, r, 1, time.Now()); protocol.ErrorCode(err) != protocol.CodeAPIKeyInvalid {
		t.Fatalf("bad key: %v", err)
	}
	plain := &ServerError{Op: "alloc", Status: 502, Body: "bad gateway"}
	if plain.Unwrap() != nil || protocol.ErrorCode(plain) != protocol.CodeInternal {
		t.Fatalf("a ServerError without code unwraps to %v", plain.Unwrap())
	}
}
