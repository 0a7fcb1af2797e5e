#!/usr/bin/env python3
"""Runs the shared lease + timestamp-window model (fence_model.py) with the growing-lease rule of docs/design.md §12:

    a Renew extends each lease of the requester to
    ExpiresAt = max(ExpiresAt, now + min(LeaseDuration, max(FirstLease, 2 × (now − GrantedAt))))

The model file is loaded as a module and not modified. Its run() looks up Server and Proc as module globals at each
call, so subclasses installed on the module take effect: the Server subclass records each lease's grant time at
Alloc and, with --grow-lease, applies the rule in renew (model constants LEASE and FIRST; never shortening; a lease
restored from a receipt after a reset keeps the full term, as the proposal says). Without --grow-lease the server
behaves exactly as the model's (same duplicates per seed).

It also measures what the model does not: at every run of the cleanup job (every CLEAN ticks) it classifies each
node ID as held by a dead or stopped process, held by an earlier session of a live process, held by a live session
that no longer uses it, in use, or not held (free or quarantined), and reports node-ticks (samples × CLEAN); with
--grow-lease also how many renewals of held leases the rule gave a term below LEASE.

Usage (from the repo root):
    python3 docs/model/grow_lease.py [runs] [--grow-lease] [model options] [--model PATH]
Model options, passed through to its run(): --no-fence, --no-raise, --no-instance, --restore, --naive-restore.
Extra knobs the model's CLI does not expose: --first-seed S (seeds S … S+runs−1; the model uses 0 …),
--nodes N (the model's NODES, 3), --procs N (run()'s nproc, 6)."""
import argparse, importlib.util, inspect, os, sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.path.normpath(os.path.join(REPO, "..", "shared", "model", "fence_model.py"))
KINDS = ("dead/stopped", "earlier session", "live, unused", "in use", "not held")


def load(path):
    assert os.path.isfile(path), f"no model at {path} (pass --model PATH)"
    spec = importlib.util.spec_from_file_location("fence_model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)     # the model's CLI sits under `if __name__ == "__main__"`: not run
    for name in ("Server", "Proc", "run", "LEASE", "FIRST", "CLEAN", "NODES"):
        assert hasattr(mod, name), f"{path}: no {name}; the wrapper needs updating"
    params = inspect.signature(mod.run).parameters
    for name in ("seed", "fence", "raise_on_reset", "restore", "instances", "nproc"):
        assert name in params, f"{path}: run() has no parameter {name}; the wrapper needs updating"
    for name in ("alloc", "renew", "cleanup"):
        assert hasattr(mod.Server, name), f"{path}: Server has no {name}"
    return mod


def install(m, grow, tally):
    """Installs Server and Proc subclasses on module m. tally: kind -> node-ticks, plus sample counts."""
    cur = {}   # the current run: pid -> Proc (every pid a process has had)

    class Proc(m.Proc):
        def __setattr__(s, k, v):
            object.__setattr__(s, k, v)
            if k == "pid":
                cur["owner"][v] = s

    class Server(m.Server):
        def __init__(s, *a, **kw):
            super().__init__(*a, **kw)
            cur["owner"] = {}        # run() builds its Server before its processes

        def alloc(s, T, who):
            now = s.now(T)
            g = super().alloc(T, who)
            for l in s.leases.values():
                if l["holder"] == who:
                    l.setdefault("granted", now)   # a new grant; an idempotent Alloc keeps the first time
            return g

        def renew(s, T, who, receipts=()):
            if not grow:
                return super().renew(T, who, receipts)
            now = s.now(T)
            mine = {n: (l["exp"], s.W[n]) for n, l in s.leases.items() if l["holder"] == who}
            super().renew(T, who, receipts)      # the model's restore, then every lease of who to now + LEASE
            out = []
            for n, l in s.leases.items():
                if l["holder"] != who:
                    continue
                if n in mine:                    # undo the full-term extension and apply the rule instead
                    exp0, w0 = mine[n]
                    assert l["exp"] == max(exp0, now + m.LEASE) and s.W[n] == max(w0, l["exp"]), \
                        "model's renew did more than extend a held lease; the wrapper needs updating"
                    g = l["granted"]
                    term = m.LEASE if g is None else min(m.LEASE, max(m.FIRST, 2 * (now - g)))
                    l["exp"] = max(exp0, now + term)
                    tally["renewals"] += 1
                    tally["shorter"] += term < m.LEASE
                    s.W[n] = max(w0, l["exp"])
                else:
                    l.setdefault("granted", None)   # restored from a receipt: full term, as today
                out.append((n, l["nb"], l["exp"], now))
            return out

        def cleanup(s, T):
            super().cleanup(T)
            owner = cur["owner"]
            for n in range(m.NODES):
                l = s.leases.get(n)
                if l is None:
                    k = "not held"
                else:
                    p = owner[l["holder"]]
                    if not p.alive or p.stopped:
                        k = "dead/stopped"
                    elif p.pid != l["holder"]:
                        k = "earlier session"
                    else:
                        k = "in use" if n in p.leases else "live, unused"
                tally[k] += m.CLEAN
            tally["samples"] += 1
            tally["full samples"] += len(s.leases) == m.NODES

    m.Server, m.Proc = Server, Proc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="?", type=int, default=300)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--grow-lease", action="store_true")
    ap.add_argument("--no-fence", action="store_true")
    ap.add_argument("--no-raise", action="store_true")
    ap.add_argument("--no-instance", action="store_true")
    ap.add_argument("--restore", action="store_true")
    ap.add_argument("--naive-restore", action="store_true")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--procs", type=int, default=6)
    a = ap.parse_args()
    m = load(a.model)
    if a.nodes:
        m.NODES = a.nodes
    tally = dict.fromkeys(KINDS + ("samples", "full samples", "renewals", "shorter"), 0)
    install(m, a.grow_lease, tally)
    restore = "safe" if a.restore else "naive" if a.naive_restore else None
    bad = []
    for seed in range(a.first_seed, a.first_seed + a.runs):
        r = m.run(seed, fence=not a.no_fence, raise_on_reset=not a.no_raise, restore=restore,
                  instances=not a.no_instance, nproc=a.procs)
        if r:
            bad.append(r)
    onoff = lambda b: "on" if b else "off"
    print(f"{a.runs} runs (seeds {a.first_seed}..{a.first_seed + a.runs - 1}), grow-lease={onoff(a.grow_lease)}, "
          f"fence={onoff(not a.no_fence)}, raise-on-reset={onoff(not a.no_raise)}, restore={restore or 'off'}, "
          f"instance per session={onoff(not a.no_instance)}, nodes={m.NODES}, procs={a.procs}: "
          f"{len(bad)} with duplicates")
    for b in bad[:3]:
        print(" ", b)
    total = sum(tally[k] for k in KINDS)
    print(f"node-ticks (sampled at each cleanup, every {m.CLEAN} ticks; a run stops at its first duplicate): "
          f"{total}")
    for k in KINDS:
        print(f"  {k:16} {tally[k]:9}  {100 * tally[k] / max(total, 1):5.1f}%")
    if a.grow_lease:
        print(f"renewals of held leases: {tally['renewals']}, of which the rule gave a term below LEASE "
              f"({m.LEASE}): {tally['shorter']}")
    full = tally["full samples"] / max(tally["samples"], 1)
    print(f"pool fully held in {100 * full:.1f}% of samples"
          + ("; the pool is (nearly) always fully held, so fewer node IDs held cannot show here: only who holds "
             "them (time held by dead processes is time live ones wait)" if full > 0.9 else ""))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
