package redis_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/redis"
)

// lockedBuffer is a bytes.Buffer safe for the pool's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// go-redis's own log lines (here: the pool giving up dialling a closed port) reach
// the program's slog handler as JSON records at level WARN, not standard error.
func TestRouteClientLogs(t *testing.T) {
	var out lockedBuffer
	redis.RouteClientLogs(slog.New(slog.NewJSONHandler(&out, nil)))
	t.Cleanup(func() { redis.RouteClientLogs(slog.New(slog.DiscardHandler)) })
	s, err := redis.Open("redis://127.0.0.1:1/0?dial_timeout=100ms", redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping of a closed port succeeded")
	}
	var rec struct {
		Level, Msg, Component string
	}
	for line := range strings.SplitSeq(strings.TrimSpace(out.String()), "\n") {
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON record: %q", line)
		}
		if strings.Contains(rec.Msg, "failed to dial") {
			break
		}
	}
	if rec.Level != "WARN" || rec.Component != "go-redis" || !strings.HasPrefix(rec.Msg, "connection pool: failed to dial") {
		t.Fatalf("last record %+v; want go-redis's dial failure at WARN (all output: %q)", rec, out.String())
	}
}
