package clientmetrics_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/client/clientmetrics"
	"github.com/idkeeper/idkeeper/client/clienttest"
	"github.com/idkeeper/idkeeper/snowflake"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// logRecorder is a slog.Handler that keeps the records at warning level and above.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *logRecorder) WithGroup(string) slog.Handler                { return h }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}

// clockLines returns the messages and attributes of the records about the wall
// clock.
func (h *logRecorder) clockLines() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []slog.Record
	for _, r := range h.recs {
		if strings.Contains(r.Message, "wall clock") {
			out = append(out, r)
		}
	}
	return out
}

func attr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

// histograms returns every histogram of g as "name{node=…}" → its samples.
func histograms(t *testing.T, g prometheus.Gatherer) map[string]*dto.Histogram {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.Histogram{}
	for _, mf := range mfs {
		if mf.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			out[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = m.GetHistogram()
		}
	}
	return out
}

// cumulative returns the histogram's bucket counts in bound order.
func cumulative(h *dto.Histogram) (bounds []float64, counts []uint64) {
	for _, b := range h.GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
		counts = append(counts, b.GetCumulativeCount())
	}
	return bounds, counts
}

// A backward step of the wall clock absorbed with logical time, and one refused,
// reach the collector's histograms with their widths and the episode's duration,
// and each is logged once at warning level, however many calls it affects; a wait
// for the next millisecond reaches the wait histogram with its real duration.
func TestCollectorClockRollbackAndWaits(t *testing.T) {
	clk := clienttest.NewClock(t0)
	logs := &logRecorder{}
	s := openWith(t, clk, 2, slog.New(logs))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(clientmetrics.NewCollector(s))
	g0, g1 := s.Generator(0), s.Generator(1)
	n0, n1 := strconv.FormatInt(g0.NodeID(), 10), strconv.FormatInt(g1.NodeID(), 10)

	// Node 1: a whole millisecond used, and a call that waits for the next.
	if err := g1.NextIDs(make([]int64, 1024)); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		clk.StepWall(time.Millisecond)
	}()
	start := time.Now()
	if _, err := g1.NextID(); err != nil {
		t.Fatal(err)
	}
	waited := time.Since(start)

	// Node 0: a step back of 300 ms, absorbed by five calls, then caught up.
	if _, err := g0.NextID(); err != nil {
		t.Fatal(err)
	}
	clk.StepWall(-300 * time.Millisecond)
	for range 5 {
		if _, err := g0.NextID(); err != nil {
			t.Fatal(err)
		}
	}
	if lines := logs.clockLines(); len(lines) != 1 {
		t.Fatalf("while behind: %d log lines about the clock, want 1", len(lines))
	}
	clk.StepWall(301 * time.Millisecond)
	if _, err := g0.NextID(); err != nil {
		t.Fatal(err)
	}
	// Then a step of 2 s, past MaxBackwardStep (1 s): three calls refused.
	clk.StepWall(-2 * time.Second)
	for range 3 {
		if _, err := g0.NextID(); !errors.Is(err, snowflake.ErrClockBackwards) {
			t.Fatalf("2 s back: %v", err)
		}
	}

	hs := histograms(t, reg)
	rollbackBounds := []float64{.001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 5, 60}
	for _, c := range []struct {
		name   string
		counts []uint64
		sum    float64
	}{
		{"idkeeper_client_clock_rollback_seconds{node=" + n0 + "}", []uint64{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 2}, 2.3},
		{"idkeeper_client_clock_rollback_seconds{node=" + n1 + "}", make([]uint64, 12), 0},
		// The fake wall clock moved while real time hardly did: the episode lasted
		// no real time. The second episode has not ended.
		{"idkeeper_client_clock_rollback_duration_seconds{node=" + n0 + "}", slices.Repeat([]uint64{1}, 12), 0},
		{"idkeeper_client_clock_rollback_duration_seconds{node=" + n1 + "}", make([]uint64, 12), 0},
	} {
		h := hs[c.name]
		if h == nil {
			t.Fatalf("no histogram %s in %v", c.name, hs)
		}
		bounds, counts := cumulative(h)
		if !slices.Equal(bounds, rollbackBounds) || !slices.Equal(counts, c.counts) || h.GetSampleSum() != c.sum ||
			h.GetSampleCount() != c.counts[len(c.counts)-1] {
			t.Errorf("%s: bounds %v, buckets %v, sum %v, count %d; want buckets %v, sum %v", c.name, bounds, counts,
				h.GetSampleSum(), h.GetSampleCount(), c.counts, c.sum)
		}
	}
	w := hs["idkeeper_client_sequence_wait_seconds{node="+n1+"}"]
	if w.GetSampleCount() != 1 || w.GetSampleSum() < 0.015 || w.GetSampleSum() > waited.Seconds() {
		t.Errorf("node %s waits: count %d, sum %v s; want 1 wait of about 20 ms (the call took %v)", n1,
			w.GetSampleCount(), w.GetSampleSum(), waited)
	}
	for _, b := range w.GetBucket() {
		want := uint64(0)
		if b.GetUpperBound() >= w.GetSampleSum() {
			want = 1
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("node %s waits: bucket le=%v holds %d, want %d", n1, b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	if w0 := hs["idkeeper_client_sequence_wait_seconds{node="+n0+"}"]; w0.GetSampleCount() != 0 {
		t.Errorf("node %s: %d waits", n0, w0.GetSampleCount())
	}
	if got := gather(t, reg)["idkeeper_client_clock_backwards_total{node="+n0+"}"]; got != 3 {
		t.Errorf("refusals: %v, want 3", got)
	}

	// The log: the first step's start and end, the second's start; nothing per call.
	lines := logs.clockLines()
	if len(lines) != 3 {
		for _, r := range lines {
			t.Log(r.Message)
		}
		t.Fatalf("%d log lines about the clock, want 3", len(lines))
	}
	for i, want := range []struct {
		text     string
		width    time.Duration
		duration bool
	}{
		{"stepped back by 300ms: minting at the last timestamp", 300 * time.Millisecond, false},
		{"caught up after 0s behind (stepped back by up to 300ms; 0 calls refused)", 300 * time.Millisecond, true},
		{"stepped back by 2s, more than MaxBackwardStep (1s)", 2 * time.Second, false},
	} {
		r := lines[i]
		if r.Level != slog.LevelWarn || !strings.Contains(r.Message, want.text) || !strings.Contains(r.Message, "node ID "+n0) ||
			attr(r, "width").Duration() != want.width || attr(r, "nodeId").Int64() != g0.NodeID() ||
			(attr(r, "duration").Kind() == slog.KindDuration) != want.duration {
			t.Errorf("log line %d: %v %q %v, want a warning with %q, width %v", i, r.Level, r.Message, attrs(r), want.text, want.width)
		}
	}
}

func attrs(r slog.Record) []slog.Attr {
	var out []slog.Attr
	r.Attrs(func(a slog.Attr) bool {
		out = append(out, a)
		return true
	})
	return out
}
