package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/leasetx"
	"github.com/idkeeper/idkeeper/protocol"
)

// DefaultPrefix is the prefix of every key when Options.Prefix is empty.
const DefaultPrefix = "idkeeper/"

// Defaults of zero Options fields.
const (
	DefaultTimeout      = 30 * time.Second
	DefaultReclaimBatch = 512
)

// maxConflicts bounds the attempts of one call whose transaction lost to other
// writers every time; maxPartials bounds the preparatory commits (moving nodes
// whose quarantine or cooling ended) one call may make before its own.
const (
	maxConflicts = 100
	maxPartials  = 1 << 16
)

// readChunk is the most keys one conditioned read asks for: under etcd's default
// --max-txn-ops (128), so reads work whatever the server allows. fetchParallel
// of them run at once.
const (
	readChunk     = 127
	fetchParallel = 8
)

// promoteBatch is the most index entries that time has moved on (ended
// quarantines, passed cooling watermarks) one transaction moves.
const promoteBatch = 256

// Options configure a Store. The zero value is usable.
type Options struct {
	// Clock is the time authority: every lease time is this clock's, read in each
	// attempt of each call. Nil means time.Now. etcd has no clock to ask; the
	// registry replicas' own clocks, held together by the TCKCLK 2 verifier (DESIGN
	// §8), are the deployment's clock, as for the bolt store.
	Clock idkeeper.Clock
	// Prefix starts every key of the store; it must end with "/", and no other
	// store's prefix may start with it. Default DefaultPrefix.
	Prefix string
	// Logger receives store events (a new pool, a reset). Nil means slog.Default().
	Logger *slog.Logger
	// Timeout bounds each call, retries included, on top of the caller's context.
	// Zero means DefaultTimeout; negative means no bound of the store's own.
	Timeout time.Duration
	// ReclaimBatch is the most leases one Reclaim transaction deletes before
	// Reclaim starts the next one. Zero means DefaultReclaimBatch; negative fails
	// New.
	ReclaimBatch int
	// CloseClient makes Close close the client too; by default the client stays
	// the caller's.
	CloseClient bool
}

// Store is the idkeeper.Store on etcd. It is safe for concurrent use, and any
// number of Stores, in any number of processes, may share one etcd cluster and
// prefix.
type Store struct {
	c            *clientv3.Client
	k            keys
	clock        idkeeper.Clock
	log          *slog.Logger
	timeout      time.Duration
	reclaimBatch int
	closeClient  bool
	// writes lets one lease transaction of this Store run at a time: they would
	// only conflict with one another on the meta key. Transactions of other
	// Stores are serialised by that key's revision.
	writes chan struct{}
	// conflicts counts the attempts that lost to another writer, for tests.
	conflicts atomic.Int64
	// beforeCommit, when set (by tests), runs before each lease commit.
	beforeCommit func()
	// readyFrom is the meta record's ReadyFrom as this Store last read or wrote
	// it: where Alloc's first read starts in the ready index.
	readyFrom atomic.Uint64
	// loads lets one LoadSnapshot of this Store run at a time; loadBatch, when
	// set (by tests), is the most keys one staging transaction writes.
	loads     sync.Mutex
	loadBatch int
}

var _ idkeeper.IdentifiedStore = (*Store)(nil)

// Identity names the cluster and the key prefix (idkeeper.IdentifiedStore),
// without credentials or TLS settings: "etcd://HOST:PORT,…/PREFIX", the endpoints
// of the client sorted, without their scheme.
func (s *Store) Identity() string {
	eps := make([]string, 0, len(s.c.Endpoints()))
	for _, e := range s.c.Endpoints() {
		if _, rest, ok := strings.Cut(e, "://"); ok {
			e = rest
		}
		eps = append(eps, e)
	}
	slices.Sort(eps)
	return "etcd://" + strings.Join(slices.Compact(eps), ",") + "/" + s.k.prefix
}

// New returns a Store on the etcd cluster c talks to. It does no I/O: call Ping
// (or Init) to check the cluster. The client should allow requests as large as
// the server's --max-request-bytes (clientv3.Config.MaxCallSendMsgSize); see the
// package doc for the server settings the store needs.
func New(c *clientv3.Client, opts Options) (*Store, error) {
	if c == nil {
		return nil, errors.New("etcd: no client")
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	switch {
	case !strings.HasSuffix(prefix, "/"):
		return nil, fmt.Errorf("etcd: the prefix %q must end with '/'", prefix)
	case opts.ReclaimBatch < 0:
		return nil, fmt.Errorf("etcd: ReclaimBatch %d is negative", opts.ReclaimBatch)
	}
	s := &Store{c: c, k: newKeys(prefix), clock: opts.Clock, log: opts.Logger, timeout: opts.Timeout,
		reclaimBatch: opts.ReclaimBatch, closeClient: opts.CloseClient, writes: make(chan struct{}, 1)}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	if s.reclaimBatch == 0 {
		s.reclaimBatch = DefaultReclaimBatch
	}
	return s, nil
}

// Close closes the client when Options.CloseClient says so; else it does nothing.
func (s *Store) Close() error {
	if s.closeClient {
		return s.c.Close()
	}
	return nil
}

// Ping checks that the cluster answers a linearizable read, which needs a quorum.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.c.Get(ctx, s.k.meta, clientv3.WithCountOnly()); err != nil {
		return wrap("ping", err)
	}
	return nil
}

// Now is Options.Clock truncated to the millisecond.
func (s *Store) Now(context.Context) (time.Time, error) { return protocol.Millis(s.clock()), nil }

func (s *Store) nowMs() int64 { return protocol.Millis(s.clock()).UnixMilli() }

// bound applies Options.Timeout to ctx.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.timeout < 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

// wrap marks failures of etcd with the operation; contract errors pass unchanged.
// The errors of a server whose limits are below what the store needs say which
// setting to raise.
func wrap(op string, err error) error {
	var de *idkeeper.Error
	switch {
	case err == nil || errors.As(err, &de) || errors.Is(err, idkeeper.ErrStoreReset) || errors.Is(err, idkeeper.ErrStoreClockSkew):
		return err
	case errors.Is(err, rpctypes.ErrTooManyOps):
		return fmt.Errorf("etcd: %s: %w (the store needs a larger --max-txn-ops: see the etcd package doc)", op, err)
	case errors.Is(err, rpctypes.ErrRequestTooLarge) || strings.Contains(err.Error(), "trying to send message larger than max"):
		return fmt.Errorf("etcd: %s: %w (the store needs a larger --max-request-bytes on the server and "+
			"MaxCallSendMsgSize on the client: see the etcd package doc)", op, err)
	}
	return fmt.Errorf("etcd: %s: %w", op, err)
}

// errConflict: a conditioned read or the commit found the meta key changed since
// the transaction read it; the attempt starts over.
var errConflict = errors.New("etcd: the store changed under the transaction")

// errPartial: the transaction did preparatory work only (it moved index entries
// that time has moved on); commit it and start over.
var errPartial = errors.New("etcd: partial transaction")

// kv is a value read or written in a transaction; ok is false for an absent or
// deleted key.
type kv struct {
	val []byte
	ok  bool
}

// txn is one attempt of a lease transaction: it reads at the revision of the meta
// key and writes, in one etcd transaction, only if that key is unchanged. Every
// lease transaction rewrites the meta key, so an unchanged meta revision means
// that nothing it read has changed.
type txn struct {
	s    *Store
	ctx  context.Context
	now  int64 // Unix ms
	rev  int64 // the meta key's ModRevision; 0 while it does not exist
	meta meta
	// metaRead is the meta record as read, encoded ("" when absent), to tell
	// whether the transaction changed it.
	metaRead string
	read     map[string]kv
	write    map[string]kv
	// scans are the results of the range reads begin made, in their order.
	scans [][]string
	// scanVals are the values of those ranges, for the ranges asked with values.
	scanVals [][][]byte
	// readyStart is where an Alloc's first read of the ready index started.
	readyStart uint64
}

func (s *Store) newTxn(ctx context.Context) *txn {
	return &txn{s: s, ctx: ctx, now: s.nowMs(), read: map[string]kv{}, write: map[string]kv{}}
}

// begin reads the meta key and the ops at one revision, in one etcd transaction.
// Single-key Gets fill the read cache; range reads fill scans, in order.
func (t *txn) begin(ops []clientv3.Op) error {
	all := append([]clientv3.Op{clientv3.OpGet(t.s.k.meta)}, ops...)
	resp, err := t.s.c.Txn(t.ctx).Then(all...).Commit()
	if err != nil {
		return err
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		if t.meta, err = decodeMeta(kvs[0].Value); err != nil {
			return err
		}
		t.rev, t.metaRead = kvs[0].ModRevision, string(kvs[0].Value)
	} else {
		t.meta = meta{Version: schemaVersion}
	}
	for i, op := range ops {
		kvs := resp.Responses[i+1].GetResponseRange().Kvs
		if len(op.RangeBytes()) == 0 {
			v := kv{}
			if len(kvs) == 1 {
				v = kv{val: kvs[0].Value, ok: true}
			}
			t.read[string(op.KeyBytes())] = v
			continue
		}
		keys := make([]string, len(kvs))
		vals := make([][]byte, len(kvs))
		for j, e := range kvs {
			keys[j], vals[j] = string(e.Key), e.Value
			if !op.IsKeysOnly() && !op.IsCountOnly() {
				t.read[keys[j]] = kv{val: e.Value, ok: true}
			}
		}
		t.scans = append(t.scans, keys)
		t.scanVals = append(t.scanVals, vals)
	}
	return nil
}

// unchanged is the condition of every conditioned read and of the commit.
func (t *txn) unchanged() clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(t.s.k.meta), "=", t.rev)
}

// fetch reads the keys that the transaction has neither read nor written, in
// conditioned reads of readChunk keys, up to fetchParallel of them at once;
// errConflict when the meta key changed.
func (t *txn) fetch(keys ...string) error {
	var need []string
	seen := map[string]bool{}
	for _, k := range keys {
		if _, ok := t.read[k]; ok {
			continue
		}
		if _, ok := t.write[k]; ok || seen[k] {
			continue
		}
		seen[k] = true
		need = append(need, k)
	}
	var chunks [][]string
	for len(need) > 0 {
		n := min(len(need), readChunk)
		chunks, need = append(chunks, need[:n]), need[n:]
	}
	results := make([][]kv, len(chunks))
	errs := make([]error, len(chunks))
	sem := make(chan struct{}, fetchParallel)
	var wg sync.WaitGroup
	for i, chunk := range chunks {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i], errs[i] = t.fetchChunk(chunk)
		})
	}
	wg.Wait()
	conflict := false
	for _, err := range errs {
		switch {
		case errors.Is(err, errConflict):
			conflict = true
		case err != nil:
			return err
		}
	}
	if conflict {
		return errConflict
	}
	for i, chunk := range chunks {
		for j, k := range chunk {
			t.read[k] = results[i][j]
		}
	}
	return nil
}

// fetchChunk reads keys in one transaction conditioned on the meta revision.
func (t *txn) fetchChunk(keys []string) ([]kv, error) {
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpGet(k)
	}
	resp, err := t.s.c.Txn(t.ctx).If(t.unchanged()).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return nil, errConflict
	}
	out := make([]kv, len(keys))
	for i := range keys {
		if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) == 1 {
			out[i] = kv{val: kvs[0].Value, ok: true}
		}
	}
	return out, nil
}

// scan reads the first limit keys, with values, of the range [from, end), in a
// read conditioned like fetch's. It sees nothing the transaction wrote.
func (t *txn) scan(from, end string, limit int) ([]string, [][]byte, error) {
	resp, err := t.s.c.Txn(t.ctx).If(t.unchanged()).
		Then(clientv3.OpGet(from, clientv3.WithRange(end), clientv3.WithLimit(int64(limit)))).Commit()
	if err != nil {
		return nil, nil, err
	}
	if !resp.Succeeded {
		return nil, nil, errConflict
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	keys, vals := make([]string, len(kvs)), make([][]byte, len(kvs))
	for i, e := range kvs {
		keys[i], vals[i] = string(e.Key), e.Value
	}
	return keys, vals, nil
}

// get returns the value of key as the transaction sees it: its own write, else
// what it read, else a conditioned read of it.
func (t *txn) get(key string) ([]byte, bool, error) {
	if w, ok := t.write[key]; ok {
		return w.val, w.ok, nil
	}
	if r, ok := t.read[key]; ok {
		return r.val, r.ok, nil
	}
	if err := t.fetch(key); err != nil {
		return nil, false, err
	}
	r := t.read[key]
	return r.val, r.ok, nil
}

func (t *txn) put(key, val string) { t.write[key] = kv{val: []byte(val), ok: true} }
func (t *txn) del(key string)      { t.write[key] = kv{} }

// dirty reports whether the transaction has something to write.
func (t *txn) dirty() (bool, error) {
	if len(t.write) > 0 {
		return true, nil
	}
	m, err := jsonString(t.meta)
	return m != t.metaRead, err
}

// commit writes the transaction's writes and the meta record in one etcd
// transaction conditioned on the meta revision; false when that changed. The
// meta record is written even when unchanged, so that its new revision tells
// every other transaction that read before this one to start over.
func (t *txn) commit() (bool, error) {
	m, err := jsonString(t.meta)
	if err != nil {
		return false, err
	}
	ops := make([]clientv3.Op, 0, len(t.write)+1)
	ops = append(ops, clientv3.OpPut(t.s.k.meta, m))
	for k, w := range t.write {
		if k == t.s.k.meta {
			continue
		}
		if w.ok {
			ops = append(ops, clientv3.OpPut(k, string(w.val)))
		} else if t.read[k].ok || !t.readKnown(k) {
			ops = append(ops, clientv3.OpDelete(k))
		}
	}
	resp, err := t.s.c.Txn(t.ctx).If(t.unchanged()).Then(ops...).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// readKnown reports whether the transaction read key (present or absent).
func (t *txn) readKnown(k string) bool {
	_, ok := t.read[k]
	return ok
}

// guard applies g, when not nil, to the state the transaction read.
func (t *txn) guard(g *idkeeper.Guard) error {
	if g == nil {
		return nil
	}
	id := ""
	if t.meta.Generation != nil {
		id = t.meta.Generation.ID
	}
	return g.Check(id, t.meta.Fence, msTime(t.now))
}

// update runs one lease transaction: first (may be nil) lists what to read with
// the meta key, fn reads more and writes, and the writes are committed when
// nothing changed since the reads; else it all starts over, a bounded number of
// times. The guard, when not nil, is checked on the state read, before fn. When
// fn returns errPartial, its writes are committed and it all starts over. Nothing
// is written when fn fails or writes nothing.
func (s *Store) update(ctx context.Context, op string, g *idkeeper.Guard, first func(*txn) []clientv3.Op, fn func(*txn) error) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	select {
	case s.writes <- struct{}{}:
	case <-ctx.Done():
		return wrap(op, ctx.Err())
	}
	defer func() { <-s.writes }()
	conflicts, partials := 0, 0
	for {
		t := s.newTxn(ctx)
		var ops []clientv3.Op
		if first != nil {
			ops = first(t)
		}
		err := t.begin(ops)
		if err == nil {
			s.readyFrom.Store(t.meta.ReadyFrom)
			err = t.guard(g)
		}
		if err == nil {
			err = fn(t)
		}
		partial := errors.Is(err, errPartial)
		if err != nil && !partial && !errors.Is(err, errConflict) {
			return wrap(op, err)
		}
		if err == nil {
			dirty, derr := t.dirty()
			if derr != nil {
				return wrap(op, derr)
			}
			if !dirty {
				return nil
			}
		}
		if err == nil || partial {
			if s.beforeCommit != nil {
				s.beforeCommit()
			}
			ok, cerr := t.commit()
			if ok {
				s.readyFrom.Store(t.meta.ReadyFrom)
			}
			switch {
			case cerr != nil:
				return wrap(op, cerr)
			case ok && !partial:
				return nil
			case ok:
				if partials++; partials > maxPartials {
					return fmt.Errorf("etcd: %s: more than %d preparatory transactions", op, maxPartials)
				}
				continue
			}
		}
		s.conflicts.Add(1)
		if conflicts++; conflicts >= maxConflicts {
			return fmt.Errorf("etcd: %s: %d attempts in a row lost to other writers", op, conflicts)
		}
		if err := leasetx.Backoff(ctx, conflicts); err != nil {
			return wrap(op, err)
		}
	}
}

// view reads ops at one revision, in one etcd transaction.
func (s *Store) view(ctx context.Context, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	return s.c.Txn(ctx).Then(ops...).Commit()
}
