package account_test

import (
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func wantCode(t *testing.T, err error, code idkeeper.Code) {
	t.Helper()
	if protocol.ErrorCode(err) != code {
		t.Fatalf("err = %v, want %s", err, code)
	}
}
