package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/leasetx"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snapshot"
)

// LoadSnapshot implements snapshot.Store: staging keys written in
// batches, then one swap (see the notes at the top of snapshot.go).
func (s *Store) LoadSnapshot(ctx context.Context, meta snapshot.Meta, src snapshot.Source) error {
	chk, err := snapshot.NewChecker(meta)
	if err != nil {
		return err
	}
	// Checked first, to spare staging a snapshot that cannot load; the swap checks
	// again, in its own step.
	if st, err := s.Status(ctx); err != nil {
		return err
	} else if st.Pool.Nodes > 0 && !st.Pool.SameSpace(meta.Pool()) {
		return idkeeper.PoolMismatch(st.Pool, meta.Pool())
	}
	token := idkeeper.NewGenerationID()
	lock := s.adminKey(keyLoadLock)
	ok, err := s.client.SetNX(ctx, lock, token, snapshotTTL).Result()
	if err != nil {
		return fmt.Errorf("redis: load snapshot: %w", err)
	}
	if !ok {
		return fmt.Errorf("redis: load snapshot: another load is running (it holds %s): %w", lock, idkeeper.ErrConflict)
	}
	l := &snapLoader{s: s, ctx: ctx, token: token, lock: lock, stage: s.tempKeys("restore", token), meta: meta}
	swapped := false
	defer func() {
		if !swapped {
			s.cleanup(ctx, l.stage)
			l.release()
		}
	}()
	if err := l.writeMeta(meta); err != nil {
		return err
	}
	if err := l.keep(); err != nil {
		return err
	}
	records, err := leasetx.Feed(ctx, chk, src, l.add)
	if err != nil {
		return err
	}
	if err := l.flush(); err != nil {
		return err
	}
	if err := l.swap(); err != nil {
		return err
	}
	swapped = true
	s.log.Warn("redis: loaded a snapshot: the store's whole durable state was replaced", "prefix", s.prefix,
		"generation", meta.Generation.ID, "number", meta.Generation.Number, "pool", meta.Pool().String(), "fence", meta.Fence,
		"records", records)
	return nil
}

// snapLoader writes a snapshot to the staging keys of one load.
type snapLoader struct {
	s           *Store
	ctx         context.Context
	token, lock string
	stage       []string
	batch       []snapshot.Record
	meta        snapshot.Meta // the snapshot's head
}

// add stages rec, writing the batch when it is full.
func (l *snapLoader) add(rec snapshot.Record) error {
	l.batch = append(l.batch, rec)
	if len(l.batch) < snapshotBatch {
		return nil
	}
	return l.flush()
}

// keep renews the lapse time of the load lock and of every staging key, in one
// step: while the lock is held, no staging key has lapsed. It fails when the lock
// is not the load's any more.
func (l *snapLoader) keep() error {
	keys := append([]string{l.lock}, l.stage...)
	v, err := l.s.run(l.ctx, scriptSnapLock, keys, false, l.token, snapshotTTL.Milliseconds(), "keep")
	if err != nil {
		return wrap("load snapshot", err)
	}
	if v != int64(1) {
		return fmt.Errorf("redis: load snapshot: the load lost its lock %s (it lapsed)", l.lock)
	}
	return nil
}

func (l *snapLoader) release() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), 5*time.Second)
	defer cancel()
	if _, err := l.s.run(ctx, scriptSnapLock, []string{l.lock}, false, l.token, 0, "release"); err != nil {
		l.s.log.Warn("redis: could not release the snapshot load lock; it lapses by itself", "lock", l.lock, "err", err)
	}
}

// writeMeta writes the staging meta and audit head.
func (l *snapLoader) writeMeta(m snapshot.Meta) error {
	g := m.Generation
	_, err := l.s.client.Pipelined(l.ctx, func(p goredis.Pipeliner) error {
		p.HSet(l.ctx, l.stage[0], "gen", g.ID, "gen:number", strconv.FormatUint(g.Number, 10), "gen:origin", string(g.Origin),
			"gen:at", ms(g.At), "nodes", m.Nodes, "fence", strconv.FormatUint(m.Fence, 10), "freeseq", m.Nodes,
			"first", int(m.First), "layout", idkeeper.FormatLayout(m.Pool().LayoutOrDefault()))
		p.PExpire(l.ctx, l.stage[0], snapshotTTL)
		if m.AuditSeq > 0 {
			p.HSet(l.ctx, l.stage[durAuditHead], "seq", strconv.FormatUint(m.AuditSeq, 10), "hash", m.AuditHash)
			p.PExpire(l.ctx, l.stage[durAuditHead], snapshotTTL)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis: load snapshot: %w", err)
	}
	return nil
}

// flush writes the batch to the staging keys (the nodes by one script, the other
// records by one pipeline, each making what it wrote lapse after snapshotTTL,
// should the load die before its next keep), then keeps the lock and the staging
// keys.
func (l *snapLoader) flush() error {
	if len(l.batch) == 0 {
		return nil
	}
	args := []any{l.s.nowArg(), snapshotTTL.Milliseconds()}
	type hset struct {
		key          int
		field, value string
	}
	var sets []hset
	zadds := map[int][]goredis.Z{}
	for _, rec := range l.batch {
		switch {
		case rec.Node != nil:
			n := rec.Node
			args = append(args, int(n.NodeID), ms(n.Watermark), ms(n.Floor), ms(n.QuarantinedUntil),
				strconv.FormatUint(n.LastToken, 10), flag(n.Restorable))
			if x := n.Lease; x != nil {
				args = append(args, "1", ms(x.ExpiresAt), ms(x.RenewedAt), ms(x.NotBefore), strconv.FormatUint(x.FencingToken, 10),
					ms(x.GrantedAt), x.Requester.Key(), x.KeyID)
			} else {
				args = append(args, "0", "", "", "", "", "", "", "")
			}
		case rec.Key != nil:
			v, err := encodeAPIKey(*rec.Key)
			if err != nil {
				return err
			}
			sets = append(sets, hset{durAPIKeys, rec.Key.ID, v})
		case rec.User != nil:
			v, err := encodeUser(*rec.User)
			if err != nil {
				return err
			}
			sets = append(sets, hset{durUsers, rec.User.Name, v})
		case rec.Allow != nil:
			e := rec.Allow
			v, err := encodeRecord("allow entry", allowRecord{Note: e.Note, CreatedBy: e.CreatedBy, CreatedAt: ms(e.CreatedAt)})
			if err != nil {
				return err
			}
			sets = append(sets, hset{durAllow, e.Prefix.String(), v})
		case rec.Audit != nil:
			e := rec.Audit
			v, err := encodeRecord("audit entry", auditRecord{Seq: e.Seq, At: ms(e.At), Actor: e.Actor, Action: e.Action,
				Target: e.Target, RemoteIP: e.RemoteIP, Detail: e.Detail, Prev: e.Prev, Hash: e.Hash})
			if err != nil {
				return err
			}
			seq := strconv.FormatUint(e.Seq, 10)
			sets = append(sets, hset{durAudit, seq, v})
			zadds[durAuditSeq] = append(zadds[durAuditSeq], goredis.Z{Score: float64(e.Seq), Member: seq})
		case rec.History != nil:
			h := rec.History
			id := histID(h.NodeID, h.Token)
			sets = append(sets, hset{leaseHist, id, encodeHistory(*h)})
			by := "r:" + id
			if !h.FromReceipt {
				by = histStart(id, ms(h.NotBefore))
			}
			zadds[leaseHistIndex] = append(zadds[leaseHistIndex], goredis.Z{Member: "t:" + id}, goredis.Z{Member: by})
			if h.End != idkeeper.EndHeld {
				zadds[leaseHistEnded] = append(zadds[leaseHistEnded], goredis.Z{Score: float64(ms(h.EndedAt)), Member: id})
			}
		}
	}
	l.batch = l.batch[:0]
	if len(args) > 2 {
		_, err := l.s.run(l.ctx, scriptSnapStage, l.stage[:len(l.s.keys.lease)], false, args...)
		if r, ok := asReply(err, "IDKOWNER"); ok {
			return protocol.Invalidf("snapshot", "the requester of the lease of node %s holds leases of another API key: "+
				"a requester's leases belong to one key", r.arg)
		}
		if err != nil {
			return wrap("load snapshot", err)
		}
	}
	if len(sets) == 0 {
		return l.keep()
	}
	_, err := l.s.client.Pipelined(l.ctx, func(p goredis.Pipeliner) error {
		touched := map[int]bool{}
		for _, x := range sets {
			p.HSet(l.ctx, l.stage[x.key], x.field, x.value)
			touched[x.key] = true
		}
		for k, zs := range zadds {
			p.ZAdd(l.ctx, l.stage[k], zs...)
			touched[k] = true
		}
		for k := range touched {
			p.PExpire(l.ctx, l.stage[k], snapshotTTL)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis: load snapshot: %w", err)
	}
	return l.keep()
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// swap runs the swap script, reading the users of the live sessions first; it
// reads them again when a session of another user was created meanwhile.
func (l *snapLoader) swap() error {
	live := l.s.durableKeys()
	sessions := l.s.sessionKeys("")[:3]
	for range swapTries {
		users, err := l.sessionUsers()
		if err != nil {
			return err
		}
		keys := append(append(append([]string{l.lock}, live...), l.stage...), sessions...)
		args := []any{l.token, len(live), idkeeper.FormatLayout(idkeeper.DefaultLayout)}
		for _, u := range users {
			keys = append(keys, l.s.adminKey(keySessionUser+u))
			args = append(args, u)
		}
		_, err = l.s.run(l.ctx, scriptSnapSwap, keys, true, args...)
		switch {
		case err == nil:
			return nil
		case isReply(err, "IDKSESSIONUSERS"):
			continue
		case isReply(err, errPool):
			r, _ := asReply(err, errPool)
			return poolMismatch(r, l.meta.Pool())
		case isReply(err, "IDKLOADLOCK"):
			return fmt.Errorf("redis: load snapshot: the load lost its lock %s (it lapsed) before the swap", l.lock)
		}
		return wrap("load snapshot", err)
	}
	return errors.New("redis: load snapshot: admin sessions kept being created for new users; the load was not swapped in")
}

func isReply(err error, word string) bool {
	_, ok := asReply(err, word)
	return ok
}

// sessionUsers returns the users of every live session, sorted, without repeats.
func (l *snapLoader) sessionUsers() ([]string, error) {
	recs, err := l.s.client.HVals(l.ctx, l.s.adminKey(keySessions)).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: load snapshot: sessions: %w", err)
	}
	var users []string
	for _, rec := range recs {
		var r sessionRecord
		if decodeRecord("session", "", rec, &r) == nil {
			users = append(users, r.User)
		}
	}
	slices.SortFunc(users, cmp.Compare)
	return slices.Compact(users), nil
}
