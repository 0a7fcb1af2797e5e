package client_test

import (
	"context"
	"maps"
	"os"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
)

// A session reports its host name and labels with its Alloc, and the registry
// keeps them in the lease history: an ID it minted maps back to it, with them.
func TestSessionReportsHostAndLabels(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	cfg := e.config()
	cfg.Labels = map[string]string{"service": "orders", "version": "1.4.2"}
	s := e.open(cfg)
	id, err := s.NextID()
	if err != nil {
		t.Fatal(err)
	}
	o, err := e.reg.Origin(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if len(o.Leases) != 1 || o.Leases[0].Client.Host != host || !maps.Equal(o.Leases[0].Client.Labels, cfg.Labels) ||
		o.Leases[0].Requester.Key() != s.Requester().Key() {
		t.Fatalf("origin of %d: %+v", id, o)
	}
}

// Config.Host "-" sends no host; labels out of bounds are refused by New.
func TestConfigHostAndLabels(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	cfg := e.config()
	cfg.Host = "-"
	s := e.open(cfg)
	id, err := s.NextID()
	if err != nil {
		t.Fatal(err)
	}
	if o, err := e.reg.Origin(context.Background(), id); err != nil || len(o.Leases) != 1 || !o.Leases[0].Client.IsZero() {
		t.Fatalf("origin with Host \"-\": %+v, %v", o, err)
	}
	for _, labels := range []map[string]string{{"a b": "x"}, {"k": strings.Repeat("v", 257)}} {
		cfg := e.config()
		cfg.Labels = labels
		if _, err := client.New(cfg); err == nil || !strings.Contains(err.Error(), "Labels") {
			t.Errorf("labels %v: New = %v", labels, err)
		}
	}
}
