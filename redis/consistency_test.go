package redis

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/protocol"
)

// The indexes the scripts keep beside the leases agree with them after any
// sequence of operations, claims and resets included: a held node sits in no free
// set and in the expiry index at its lease's expiry; a free node sits in exactly
// one free set, under the score its state gives; the requester index lists exactly
// each requester's nodes and their key; the key counts match the leases.
func TestIndexesStayConsistent(t *testing.T) {
	srv := redistest.Start(t)
	for _, seed := range []uint64{1, 2, 3, 4} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			ctx := t.Context()
			clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			s, err := Open(srv.URL(), Options{Clock: clk.Now, Prefix: fmt.Sprint("consistency", seed),
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			const nodes = 6
			res, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: nodes})
			if err != nil {
				t.Fatal(err)
			}
			g := idkeeper.Guard{Generation: res.Generation.ID}
			rng := rand.New(rand.NewPCG(seed, 7))
			req := func(i int) idkeeper.Requester {
				return idkeeper.Requester{MachineID: "m,1/x", PID: 1, StartedAt: clk.Now(), Instance: fmt.Sprint("i", i)}
			}
			started := clk.Now()
			requesters := make([]idkeeper.Requester, 5)
			for i := range requesters {
				requesters[i] = req(i)
				requesters[i].StartedAt = started
			}
			keyOf := func(i int) string { return []string{"a", "", "b,/c"}[i%3] }
			clients := []idkeeper.ClientInfo{{}, {Host: "web-1,x"},
				{Host: "h", Labels: map[string]string{"a/b": `x,y:z"é`, "v": ""}}, {Labels: map[string]string{"k": "<&>"}}}
			minutes := func(n int) time.Duration { return time.Duration(rng.IntN(n)) * time.Minute }
			var fence uint64
			seen := map[string]int{}
			for step := range 300 {
				i := rng.IntN(len(requesters))
				r, key := requesters[i], keyOf(i)
				if rng.IntN(20) == 0 {
					key = "other" // LEASE_NOT_OWNED when r holds anything
				}
				now := protocol.Millis(clk.Now())
				var err error
				switch op := rng.IntN(22); {
				case op < 6:
					var gr idkeeper.Grant
					gr, err = s.Alloc(ctx, g, idkeeper.AllocParams{Requester: r, KeyID: key, Count: 1 + rng.IntN(2),
						First: time.Minute + minutes(20), MaxNodes: rng.IntN(5), Client: clients[rng.IntN(len(clients))]})
					fence = max(fence, gr.Fence)
				case op < 10:
					var claims []idkeeper.Claim
					for range rng.IntN(3) {
						claims = append(claims, idkeeper.Claim{NodeID: idkeeper.NodeID(rng.IntN(nodes + 1)),
							Token: 1 + uint64(rng.IntN(int(fence)+3)), NotBefore: now.Add(-minutes(30)),
							ExpiresAt: now.Add(minutes(60) - 10*time.Minute)})
					}
					var gr idkeeper.Grant
					gr, err = s.Renew(ctx, g, idkeeper.RenewParams{Requester: r, KeyID: key, Duration: time.Minute + minutes(60),
						Grace: minutes(20), Claims: claims})
					seen["restored"] += len(gr.Restored)
					seen["contested"] += len(gr.Contested)
				case op < 13:
					var minted time.Time
					if rng.IntN(2) == 0 {
						minted = now.Add(minutes(60) - 30*time.Minute)
					}
					_, err = s.Remove(ctx, g, idkeeper.RemoveParams{Requester: r, KeyID: key, MintedUpTo: minted})
				case op < 15:
					_, err = s.Reclaim(ctx, g, minutes(20))
				case op < 16:
					err = s.Quarantine(ctx, g, now.Add(minutes(90)-30*time.Minute), idkeeper.NodeID(rng.IntN(nodes)))
					if rng.IntN(2) == 0 {
						var n int
						n, err = s.PruneHistory(ctx, now.Add(-minutes(180)), 1+rng.IntN(3))
						seen["pruned"] += n
					}
				case op < 20:
					clk.Advance(minutes(30) + time.Duration(rng.IntN(1000))*time.Millisecond)
				default:
					var rr idkeeper.ResetResult
					rr, err = s.Reset(ctx, idkeeper.ResetParams{Seen: res.Generation, Pool: idkeeper.PoolSpec{Nodes: nodes},
						Until: now.Add(minutes(120)), MinFence: fence + uint64(rng.IntN(3))})
					res.Generation, g.Generation = rr.Generation, rr.Generation.ID
				}
				seen[string(protocol.ErrorCode(err))]++
				switch protocol.ErrorCode(err) {
				case "", protocol.CodeLeaseNotOwned, protocol.CodeNodeIDsExhausted, protocol.CodeRequesterCountMismatch,
					protocol.CodeAPIKeyQuotaExceeded:
				default:
					t.Fatalf("step %d: %v", step, err)
				}
				if st, err := s.Status(ctx); err == nil {
					fence = st.Fence
				}
				checkIndexes(t, s, nodes, fmt.Sprint("step ", step))
				checkHistory(t, s, nodes, fmt.Sprint("step ", step), step%20 == 0 || step == 299)
			}
			t.Logf("outcomes: %v", seen)
		})
	}
}

// checkIndexes reads every key of s and checks that its indexes agree.
func checkIndexes(t *testing.T, s *Store, nodes int, what string) {
	t.Helper()
	ctx := t.Context()
	c := s.client
	hash := func(k string) map[string]string {
		m, err := c.HGetAll(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	zset := func(k string) map[string]float64 {
		zs, err := c.ZRangeWithScores(ctx, k, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]float64{}
		for _, z := range zs {
			m[z.Member.(string)] = z.Score
		}
		return m
	}
	msOf := func(m map[string]string, node string) float64 {
		if v, ok := m[node]; ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n
		}
		return float64(zeroMs)
	}
	leases, wms, floors, quar, seqs := hash(s.keys.leases), hash(s.keys.watermarks), hash(s.keys.floors),
		hash(s.keys.quarantine), hash(s.keys.freeSeq)
	ready, cooling, quarantined, expiry := zset(s.keys.ready), zset(s.keys.cooling), zset(s.keys.quarantined), zset(s.keys.expiry)
	byReq, byKey := map[string][]int{}, map[string]int{}
	reqKey := map[string]string{}
	for id := range nodes {
		node := strconv.Itoa(id)
		_, inR := ready[node]
		_, inC := cooling[node]
		_, inQ := quarantined[node]
		in := 0
		for _, b := range []bool{inR, inC, inQ} {
			if b {
				in++
			}
		}
		rec, held := leases[node]
		if held {
			l, err := parseLease(node, rec)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if in != 0 {
				t.Fatalf("%s: held node %s sits in a free set (ready %v cooling %v quarantined %v)", what, node, inR, inC, inQ)
			}
			if e, ok := expiry[node]; !ok || int64(e) != l.ExpiresAt.UnixMilli() {
				t.Fatalf("%s: node %s expiry index %v (%v), lease expires %v", what, node, e, ok, l.ExpiresAt)
			}
			if msOf(wms, node) < float64(l.ExpiresAt.UnixMilli()) {
				t.Fatalf("%s: node %s watermark below its lease's expiry", what, node)
			}
			k := l.Requester.Key()
			byReq[k] = append(byReq[k], id)
			byKey[l.KeyID]++
			if prev, ok := reqKey[k]; ok && prev != l.KeyID {
				t.Fatalf("%s: requester %s holds leases of keys %q and %q", what, k, prev, l.KeyID)
			}
			reqKey[k] = l.KeyID
			continue
		}
		if _, ok := expiry[node]; ok {
			t.Fatalf("%s: free node %s in the expiry index", what, node)
		}
		if in != 1 {
			t.Fatalf("%s: free node %s sits in %d free sets", what, node, in)
		}
		fenced := max(msOf(wms, node), msOf(floors, node))
		switch {
		case inQ && quarantined[node] != msOf(quar, node):
			t.Fatalf("%s: node %s quarantined under %v, until %v", what, node, quarantined[node], msOf(quar, node))
		case inC && cooling[node] != fenced:
			t.Fatalf("%s: node %s cooling under %v, fenced watermark %v", what, node, cooling[node], fenced)
		case inR && ready[node] != msOf(seqs, node):
			t.Fatalf("%s: node %s ready under %v, free sequence %v", what, node, ready[node], msOf(seqs, node))
		}
	}
	if len(leases) != len(expiry) {
		t.Fatalf("%s: %d leases, %d in the expiry index", what, len(leases), len(expiry))
	}
	reqs := hash(s.keys.requesters)
	if len(reqs) != len(byReq) {
		t.Fatalf("%s: requester index %v, leases held by %v", what, reqs, byReq)
	}
	for k, ids := range byReq {
		list, key, _ := strings.Cut(reqs[k], ";")
		var got []int
		for _, n := range strings.Split(list, ",") {
			id, _ := strconv.Atoi(n)
			got = append(got, id)
		}
		if !slices.Equal(got, ids) || key != reqKey[k] {
			t.Fatalf("%s: requester index of %s = %q, leases %v of key %q", what, k, reqs[k], ids, reqKey[k])
		}
	}
	held := hash(s.keys.keyHeld)
	if len(held) != len(byKey) {
		t.Fatalf("%s: key counts %v, leases %v", what, held, byKey)
	}
	for k, n := range byKey {
		if held[k] != strconv.Itoa(n) {
			t.Fatalf("%s: key counts %v, leases %v", what, held, byKey)
		}
	}
}

// zeroMs is the zero time.Time in Unix ms, as the scripts store it.
var zeroMs = time.Time{}.UnixMilli()

// checkHistory checks the history's indexes against its records: every record
// with its 't:' member, its 's:' member (a grant of the store's own) or its 'r:'
// member (FromReceipt), nothing else; in the end index under its end time once
// ended; every held lease has its open record; the windows of the store's own grants of
// a node follow each other in token order (what LeaseAt relies on). With probe,
// LeaseAt at every record's window bounds (and around them) and NodeHistory agree
// with the records.
func checkHistory(t *testing.T, s *Store, nodes int, what string, probe bool) {
	t.Helper()
	ctx := t.Context()
	c := s.client
	recs, err := c.HGetAll(ctx, s.keys.hist).Result()
	if err != nil {
		t.Fatal(err)
	}
	zset := func(k string) map[string]float64 {
		zs, err := c.ZRangeWithScores(ctx, k, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]float64{}
		for _, z := range zs {
			m[z.Member.(string)] = z.Score
		}
		return m
	}
	idx, ended := zset(s.keys.histIndex), zset(s.keys.histEnded)
	toks, starts, rcpts := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for m, score := range idx {
		kind, rest, _ := strings.Cut(m, ":")
		switch {
		case score != 0:
			t.Fatalf("%s: index member %q has score %v", what, m, score)
		case kind == "t":
			toks[rest] = true
		case kind == "r":
			rcpts[rest] = true
		case kind == "s":
			starts[m] = true
		default:
			t.Fatalf("%s: index member %q", what, m)
		}
	}
	byNode := map[idkeeper.NodeID][]idkeeper.HistoryRecord{}
	nEnded := 0
	for id, rec := range recs {
		h, err := decodeHistory(id, rec)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := h.Validate(); err != nil || id != histID(h.NodeID, h.Token) || int(h.NodeID) >= nodes {
			t.Fatalf("%s: record %s invalid: %v", what, id, err)
		}
		if !toks[id] {
			t.Fatalf("%s: record %s not in the token index", what, id)
		}
		inR, inS := rcpts[id], starts[histStart(id, ms(h.NotBefore))]
		if inR != h.FromReceipt || inS == h.FromReceipt {
			t.Fatalf("%s: record %s (fromReceipt %v): in receipts %v, in starts %v", what, id, h.FromReceipt, inR, inS)
		}
		e, inE := ended[id]
		if inE != (h.End != idkeeper.EndHeld) || inE && int64(e) != ms(h.EndedAt) {
			t.Fatalf("%s: record %s ended %q at %v: end index %v (%v)", what, id, h.End, h.EndedAt, e, inE)
		}
		if inE {
			nEnded++
		}
		byNode[h.NodeID] = append(byNode[h.NodeID], h)
	}
	if len(toks) != len(recs) || len(starts)+len(rcpts) != len(recs) || len(ended) != nEnded {
		t.Fatalf("%s: %d records, %d in the token index, %d+%d by start and receipt, %d ended of %d",
			what, len(recs), len(toks), len(starts), len(rcpts), len(ended), nEnded)
	}
	leases, err := s.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		h, err := decodeHistory(histID(l.NodeID, l.FencingToken), recs[histID(l.NodeID, l.FencingToken)])
		if err != nil || h.End != idkeeper.EndHeld || !h.WindowEnd.Equal(l.ExpiresAt) || h.KeyID != l.KeyID ||
			h.Requester.Key() != l.Requester.Key() || h.NotBefore.After(l.NotBefore) {
			t.Fatalf("%s: lease of node %d token %d: record %+v, %v", what, l.NodeID, l.FencingToken, h, err)
		}
	}
	for node, hs := range byNode {
		slices.SortFunc(hs, func(a, b idkeeper.HistoryRecord) int { return cmp.Compare(a.Token, b.Token) })
		var last *idkeeper.HistoryRecord
		for i := range hs {
			if hs[i].FromReceipt {
				continue
			}
			if last != nil && !last.WindowEnd.Before(hs[i].NotBefore) {
				t.Fatalf("%s: node %d: the window of token %d (%v..%v) reaches that of token %d (%v..)", what, node,
					last.Token, last.NotBefore, last.WindowEnd, hs[i].Token, hs[i].NotBefore)
			}
			last = &hs[i]
		}
		if !probe {
			continue
		}
		page, err := s.NodeHistory(ctx, node, 0, idkeeper.MaxHistoryPage)
		if err != nil || len(page) != len(hs) {
			t.Fatalf("%s: NodeHistory(%d) = %d records, %v; want %d", what, node, len(page), err, len(hs))
		}
		for i, h := range page {
			if h.Token != hs[len(hs)-1-i].Token {
				t.Fatalf("%s: NodeHistory(%d) out of order", what, node)
			}
		}
		for _, h := range hs {
			for _, at := range []time.Time{h.NotBefore, h.NotBefore.Add(-time.Millisecond), h.WindowEnd,
				h.WindowEnd.Add(time.Millisecond), h.NotBefore.Add(h.WindowEnd.Sub(h.NotBefore) / 2)} {
				var want []uint64
				for _, x := range hs {
					if x.Holds(at) {
						want = append(want, x.Token)
					}
				}
				got, err := s.LeaseAt(ctx, node, at)
				if err != nil {
					t.Fatal(err)
				}
				var gotT []uint64
				for _, x := range got {
					gotT = append(gotT, x.Token)
				}
				if !slices.Equal(gotT, want) {
					t.Fatalf("%s: LeaseAt(%d, %v) = %v, want %v", what, node, at, gotT, want)
				}
			}
		}
	}
}
