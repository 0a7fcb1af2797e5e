package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

// TestJSONLogValues: the JSON logs of every command write durations as Go
// duration strings, not integer nanoseconds, and addresses as host:port strings,
// in groups too; the text format writes the same.
func TestJSONLogValues(t *testing.T) {
	var buf bytes.Buffer
	log := (&logFlags{level: "info", format: "json"}).logger(&buf)
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	log.Info("listening", "addr", addr, "leaseDuration", 90*time.Second, slog.Group("req", "elapsed", 1500*time.Microsecond))
	var got struct {
		Addr          any `json:"addr"`
		LeaseDuration any `json:"leaseDuration"`
		Req           struct {
			Elapsed any `json:"elapsed"`
		} `json:"req"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	if got.Addr != "127.0.0.1:8080" || got.LeaseDuration != "1m30s" || got.Req.Elapsed != "1.5ms" {
		t.Fatalf("addr %#v, leaseDuration %#v, req.elapsed %#v; want \"127.0.0.1:8080\", \"1m30s\", \"1.5ms\": %s",
			got.Addr, got.LeaseDuration, got.Req.Elapsed, buf.Bytes())
	}

	buf.Reset()
	log = (&logFlags{level: "info", format: "text"}).logger(&buf)
	log.Info("listening", "addr", addr, "leaseDuration", 90*time.Second)
	if s := buf.String(); !strings.Contains(s, "addr=127.0.0.1:8080") || !strings.Contains(s, "leaseDuration=1m30s") {
		t.Fatalf("text log %q", s)
	}
}
