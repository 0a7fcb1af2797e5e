package backup

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/redis"
	"github.com/idkeeper/idkeeper/snapshot"
)

// The big backup benchmark of issue #12: export and import of a store with 4,096
// leases and 1,000,000 audit entries, on bolt and on Redis — wall time, file size
// and peak memory (docs/benchmarks.md). It takes minutes and a few GB of disk, so
// it runs only when asked:
//
//	IDKEEPER_BACKUP_BIG=1 go test -run '^$' -bench ExportImport -benchtime 1x -timeout 60m -v ./backup/
//
// (or -args -backup.big). -backup.audit changes the audit log's size.
var (
	bigBench = flag.Bool("backup.big", os.Getenv("IDKEEPER_BACKUP_BIG") == "1",
		"run BenchmarkExportImport (also IDKEEPER_BACKUP_BIG=1)")
	bigAudit = flag.Int("backup.audit", 1_000_000, "BenchmarkExportImport: audit entries in the store")
)

const bigNodes = 4096

var errStop = errors.New("stop")

// bigSource generates a snapshot: every node ID of a pool of 4,096 leased (one
// requester each, one API key), the key, and n audit entries with a valid hash
// chain — a store as it looks after years of use, without a million AppendAudit
// calls.
type bigSource struct {
	now   time.Time
	n     int
	i     int // records returned
	prev  string
	last  audit.Entry
	keyID string
}

func newBigSource(now time.Time, audits int) *bigSource {
	return &bigSource{now: protocol.Millis(now).UTC(), n: audits, keyID: "k0123456789abcdef"}
}

func (g *bigSource) meta() snapshot.Meta {
	// The audit head is the last entry's: generate the chain once to know it.
	var seq uint64
	var hash string
	for i := range g.n {
		e := g.audit(i).Seal(seq, hash)
		seq, hash = e.Seq, e.Hash
	}
	return snapshot.Meta{
		Generation: idkeeper.Generation{ID: idkeeper.NewGenerationID(), Number: 1, Origin: idkeeper.OriginFresh, At: g.now.Add(-365 * 24 * time.Hour)},
		Fence:      bigNodes * 10, Nodes: bigNodes, AuditSeq: seq, AuditHash: hash,
	}
}

// audit is the i-th entry, before it is sealed: a lease grant, one every 10 s back
// from now, with the fields a registry writes.
func (g *bigSource) audit(i int) audit.Entry {
	node := i % bigNodes
	return audit.Entry{
		At:       g.now.Add(-time.Duration(g.n-i) * 10 * time.Second),
		Actor:    "key:" + g.keyID,
		Action:   "lease.grant",
		Target:   "node:" + strconv.Itoa(node),
		RemoteIP: "10.1." + strconv.Itoa(node/256) + "." + strconv.Itoa(node%256),
		Detail:   "requester host-" + strconv.Itoa(node) + ".prod.example.com:4242 (instance 6f1c2a), token " + strconv.Itoa(i+1),
	}
}

func (g *bigSource) Next() (snapshot.Record, error) {
	i := g.i
	g.i++
	switch {
	case i < bigNodes:
		exp := g.now.Add(48 * time.Hour)
		l := &idkeeper.Lease{NodeID: idkeeper.NodeID(i),
			Requester: idkeeper.Requester{MachineID: "host-" + strconv.Itoa(i) + ".prod.example.com", PID: 4242,
				StartedAt: g.now.Add(-time.Hour), Instance: "6f1c2a" + strconv.Itoa(i)},
			NotBefore: g.now.Add(-time.Hour), ExpiresAt: exp, FencingToken: uint64(bigNodes*9 + i + 1),
			GrantedAt: g.now.Add(-time.Hour), RenewedAt: g.now, KeyID: g.keyID}
		return snapshot.Record{Node: &idkeeper.NodeState{NodeID: idkeeper.NodeID(i), Lease: l, Watermark: exp,
			LastToken: l.FencingToken}}, nil
	case i == bigNodes:
		h := sha256.Sum256([]byte("secret"))
		return snapshot.Record{Key: &idkeeper.APIKey{ID: g.keyID, Hash: h[:], Description: "services",
			CreatedAt: g.now.Add(-365 * 24 * time.Hour), CreatedBy: idkeeper.CreatedByCLI}}, nil
	case i <= bigNodes+g.n:
		e := g.audit(i-bigNodes-1).Seal(g.last.Seq, g.last.Hash)
		g.last = e
		return snapshot.Record{Audit: &e}, nil
	}
	return snapshot.Record{}, io.EOF
}

// memWatch measures one operation's memory: the Go heap in use, sampled every
// 10 ms, and the process's peak resident set (VmHWM, reset before through
// /proc/self/clear_refs); for Redis, the server's used_memory, sampled every 10 ms
// (its used_memory_peak is no use: CONFIG RESETSTAT does not reset it).
type memWatch struct {
	rdb               *goredis.Client
	heap0, rss0, red0 uint64
	heapPeak, redPeak uint64
	stop              chan struct{}
	wg                sync.WaitGroup
	mu                sync.Mutex
}

func watchMemory(b *testing.B, rdb *goredis.Client) *memWatch {
	runtime.GC()
	debug.FreeOSMemory()
	m := &memWatch{rdb: rdb, stop: make(chan struct{})}
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Logf("cannot reset VmHWM (%v): the peak RSS is the process's since its start", err)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.heap0, m.heapPeak = ms.HeapInuse, ms.HeapInuse
	m.rss0 = procStatus(b, "VmRSS")
	if rdb != nil {
		m.red0 = redisMem(b, rdb, "used_memory")
		m.redPeak = m.red0
	}
	m.wg.Go(func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			m.mu.Lock()
			m.heapPeak = max(m.heapPeak, ms.HeapInuse)
			m.mu.Unlock()
			if rdb != nil {
				if v := redisMem(b, rdb, "used_memory"); v > 0 {
					m.mu.Lock()
					m.redPeak = max(m.redPeak, v)
					m.mu.Unlock()
				}
			}
		}
	})
	return m
}

// done stops the sampling and returns the figures, in MiB: the heap's peak above
// its level before, the process's peak RSS and its level before, and Redis's peak
// above its level before (0 without Redis).
func (m *memWatch) done(b *testing.B) (heapUp, hwm, rss0, redisUp float64) {
	close(m.stop)
	m.wg.Wait()
	if m.rdb != nil {
		m.redPeak = max(m.redPeak, redisMem(b, m.rdb, "used_memory"))
		redisUp = mib(m.redPeak - m.red0)
	}
	return mib(m.heapPeak - m.heap0), mib(procStatus(b, "VmHWM")), mib(m.rss0), redisUp
}

func mib(v uint64) float64 { return float64(v) / (1 << 20) }

// procStatus reads a "kB" field of /proc/self/status, in bytes.
func procStatus(b *testing.B, field string) uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10
		}
	}
	return 0
}

// latency logs and resets what Redis's latency monitor recorded: per event kind,
// the longest time the server was blocked.
func latency(b *testing.B, rdb *goredis.Client, during string) {
	ctx := context.Background()
	res, err := rdb.Do(ctx, "LATENCY", "LATEST").Slice()
	if err != nil {
		b.Logf("LATENCY LATEST: %v", err)
		return
	}
	var parts []string
	for _, r := range res {
		if ev, ok := r.([]any); ok && len(ev) >= 4 {
			parts = append(parts, fmt.Sprintf("%v: max %v ms", ev[0], ev[3]))
		}
	}
	if len(parts) == 0 {
		parts = []string{"no event of 20 ms or more"}
	}
	b.Logf("Redis blocked during %s: %s", during, strings.Join(parts, ", "))
	rdb.Do(ctx, "LATENCY", "RESET")
}

// redisMem reads a byte field of INFO memory.
func redisMem(b *testing.B, rdb *goredis.Client, field string) uint64 {
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Logf("INFO memory: %v", err)
		return 0
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func BenchmarkExportImport(b *testing.B) {
	if !*bigBench {
		b.Skip("long: IDKEEPER_BACKUP_BIG=1 (or -args -backup.big) to run it")
	}
	srv := redistest.Start(b)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { rdb.Close() })
	// Redis's latency monitor records every event (a script, a command) that blocked
	// the server for 20 ms or more: how long an export or import stalls the servers.
	if err := rdb.ConfigSet(context.Background(), "latency-monitor-threshold", "20").Err(); err != nil {
		b.Fatal(err)
	}
	kinds := []struct {
		name string
		rdb  *goredis.Client
		open func(b *testing.B, name string) store
	}{
		{"bolt", nil, func(b *testing.B, name string) store {
			path := filepath.Join(b.TempDir(), name+".db")
			s, err := bolt.Open(path, bolt.Options{Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				if st, err := os.Stat(path); err == nil {
					b.Logf("bolt file %s: %.0f MiB", name, mib(uint64(st.Size())))
				}
				s.Close()
			})
			return asStore(b, s)
		}},
		{"redis", rdb, func(b *testing.B, name string) store {
			s, err := redis.Open(srv.URL(), redis.Options{Prefix: fmt.Sprintf("big-%s-%d", name, prefixSeq.Add(1)), Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return asStore(b, s)
		}},
	}
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) { benchExportImport(b, k.rdb, k.open) })
	}
}

func benchExportImport(b *testing.B, rdb *goredis.Client, open func(*testing.B, string) store) {
	ctx := context.Background()
	b.StopTimer()
	src := open(b, "src")
	gen := newBigSource(time.Now(), *bigAudit)
	meta := gen.meta()
	start := time.Now()
	if err := src.LoadSnapshot(ctx, meta, gen); err != nil {
		b.Fatal(err)
	}
	b.Logf("filled the source store (LoadSnapshot of %d node IDs, all leased, and %d audit entries) in %v",
		bigNodes, *bigAudit, time.Since(start).Round(time.Millisecond))
	if rdb != nil {
		b.Logf("Redis used_memory with the source store: %.0f MiB", mib(redisMem(b, rdb, "used_memory")))
		latency(b, rdb, "the fill")
	}
	file := filepath.Join(b.TempDir(), "big.idk")
	var exportS, verifyS, importS, size float64
	var exportMem, verifyMem, importMem [4]float64
	for i := 0; i < b.N; i++ {
		// Export to a file, as the command does (buffered, synced).
		b.StartTimer()
		m := watchMemory(b, rdb)
		start := time.Now()
		f, err := os.Create(file)
		if err != nil {
			b.Fatal(err)
		}
		bw := bufio.NewWriterSize(f, 256<<10)
		sum, err := Export(ctx, src, bw, Source{Store: "bench"})
		if err == nil {
			err = bw.Flush()
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			b.Fatal(err)
		}
		exportS = time.Since(start).Seconds()
		exportMem[0], exportMem[1], exportMem[2], exportMem[3] = m.done(b)
		size = float64(sum.Bytes)
		if rdb != nil {
			latency(b, rdb, "the export")
		}

		// Verify, as the command does before it touches the target.
		m = watchMemory(b, rdb)
		start = time.Now()
		f, err = os.Open(file)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Verify(bufio.NewReaderSize(f, 256<<10)); err != nil {
			b.Fatal(err)
		}
		f.Close()
		verifyS = time.Since(start).Seconds()
		verifyMem[0], verifyMem[1], verifyMem[2], verifyMem[3] = m.done(b)

		// Import into a second, empty store.
		b.StopTimer()
		dst := open(b, fmt.Sprintf("dst%d", i))
		b.StartTimer()
		m = watchMemory(b, rdb)
		start = time.Now()
		f, err = os.Open(file)
		if err != nil {
			b.Fatal(err)
		}
		plan, err := PlanFor(ctx, dst, time.Now(), 48*time.Hour, 10*time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		isum, err := Import(ctx, dst, bufio.NewReaderSize(f, 256<<10), plan)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		importS = time.Since(start).Seconds()
		importMem[0], importMem[1], importMem[2], importMem[3] = m.done(b)
		b.StopTimer()
		if rdb != nil {
			latency(b, rdb, "the verify and the import")
		}
		if isum.Counts.Audit != *bigAudit || isum.Counts.Leases != bigNodes {
			b.Fatalf("imported %v", isum.Counts)
		}
		if rdb != nil {
			b.Logf("Redis used_memory with the source and the imported store: %.0f MiB", mib(redisMem(b, rdb, "used_memory")))
		}
		// The target holds what was exported: its audit head is the source's.
		if err := dst.ReadSnapshot(ctx, func(m snapshot.Meta) error {
			if m.AuditSeq != meta.AuditSeq || m.AuditHash != meta.AuditHash {
				return fmt.Errorf("the imported audit head is %d %s", m.AuditSeq, m.AuditHash)
			}
			return errStop
		}, func(snapshot.Record) error { return errStop }); !errors.Is(err, errStop) {
			b.Fatalf("read the imported store: %v", err)
		}
	}
	b.ReportMetric(exportS, "export-s")
	b.ReportMetric(verifyS, "verify-s")
	b.ReportMetric(importS, "import-s")
	b.ReportMetric(size/(1<<20), "file-MiB")
	b.ReportMetric(exportMem[0], "export-heap-MiB")
	b.ReportMetric(importMem[0], "import-heap-MiB")
	b.ReportMetric(exportMem[1], "export-hwm-MiB")
	b.ReportMetric(importMem[1], "import-hwm-MiB")
	if rdb != nil {
		b.ReportMetric(exportMem[3], "export-redis-MiB")
		b.ReportMetric(importMem[3], "import-redis-MiB")
	}
	for _, r := range []struct {
		op  string
		s   float64
		mem [4]float64
	}{{"export", exportS, exportMem}, {"verify", verifyS, verifyMem}, {"import", importS, importMem}} {
		b.Logf("%-6s %7.1f s  heap peak +%.0f MiB  process peak RSS %.0f MiB (from %.0f)  redis peak +%.0f MiB",
			r.op, r.s, r.mem[0], r.mem[1], r.mem[2], r.mem[3])
	}
	b.Logf("file: %.1f MiB (%d bytes)", size/(1<<20), int64(size))
}
