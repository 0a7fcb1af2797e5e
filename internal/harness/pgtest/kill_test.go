package pgtest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Kill leaves no process of the server running: the postmaster, its auxiliary
// processes and the backend of an open connection.
func TestKillLeavesNoProcess(t *testing.T) {
	s := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	s.mu.Lock()
	pm := s.proc.cmd.Process.Pid
	s.mu.Unlock()
	kids := children(pm)
	if len(kids) < 2 {
		t.Fatalf("the postmaster has %d children, want its auxiliary processes and a backend", len(kids))
	}
	s.Kill(t)
	if live := slices.DeleteFunc(append(kids, pm), func(p int) bool { return !alive(p) }); len(live) > 0 {
		t.Fatalf("processes of the killed server still run: %v", live)
	}
	if err := c.Ping(ctx); err == nil {
		t.Fatal("a connection of the killed server still answers")
	}
}
