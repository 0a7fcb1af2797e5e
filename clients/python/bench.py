#!/usr/bin/env python3
"""IDs per second of the Python generator beside a bare itertools.count() under a
lock, in one run (issue #33). The session runs on the system clock with an
in-process registry answer (no network: minting never touches it), so the figures
are the issuing path's own: the lease-deadline check, the window, the clock read,
the lock.

    python3.11 clients/python/bench.py [--seconds 1] [--rounds 5]
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import platform
import statistics
import sys
import threading
import time
from typing import Callable

sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))

from idkeeper import Requester, Session  # noqa: E402
from idkeeper._wire import format_ns  # noqa: E402


def registry(count: int) -> Callable[[str, bytes, dict[str, str], float], tuple[int, dict[str, str], bytes]]:
    """Grants count node IDs for an hour to Alloc and Renew alike."""
    def answer(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, dict[str, str], bytes]:
        now = time.time_ns()
        leases = [{"nodeId": n, "notBefore": "2026-01-01T00:00:00.000Z", "expiresAt": format_ns(now + 3600 * 10**9),
                   "fencingToken": n + 1} for n in range(count)]
        ans = {"layout": {"epoch": "2026-01-01T00:00:00.000Z", "timestampBits": 41, "nodeBits": 12, "sequenceBits": 10},
               "leases": leases, "serverUtcNow": format_ns(now), "removed": count}
        return 200, {"content-type": "application/json"}, json.dumps(ans).encode()
    return answer


def rate(fn: Callable[[], object], seconds: float) -> float:
    n, end = 0, time.perf_counter() + seconds
    t0 = time.perf_counter()
    while time.perf_counter() < end:
        for _ in range(1000):
            fn()
        n += 1000
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.0, help="per row and round")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    secs, rounds = args.seconds, args.rounds
    logging.getLogger("idkeeper").setLevel(logging.WARNING)
    lock, counter = threading.Lock(), itertools.count()

    def bare() -> int:
        with lock:
            return next(counter)

    print(f"CPython {platform.python_version()} on {platform.machine()}, {rounds} rounds of {secs:g} s per row, "
          f"medians; ceiling 1,024,000 IDs/s per node ID")
    rows = [("itertools.count() under a threading.Lock", bare, 1, 1)]
    sessions = []
    for count in (1, 4):
        s = Session(["http://bench.invalid"], "key", count, requester=Requester("bench", 1, 1_795_000_000_000),
                    host="-", transport=registry(count), on_fatal=lambda e: None)
        s.open()
        sessions.append(s)
        rows.append((f"Session.next_id(), {count} node ID{'s' if count > 1 else ''}", s.next_id, 1, count))
    rows.append(("Session.next_ids(1000), 1 node ID", lambda: sessions[0].next_ids(1000), 1000, 1))
    rows.append(("Session.next_ids(1000), 4 node IDs", lambda: sessions[1].next_ids(1000), 1000, 4))
    # Rows take turns, round after round, and each reports its median: on a shared machine the load moves,
    # and a row measured only while it was high would be compared unfairly.
    results: list[list[float]] = [[] for _ in rows]
    for _ in range(rounds):
        for i, (_, fn, per, _) in enumerate(rows):
            results[i].append(rate(fn, secs) if per == 1 else _batched(fn, secs, per))
    bare_rate = statistics.median(results[0])
    for (name, fn, per, nodes), rs in zip(rows, results):
        r = statistics.median(rs)
        spread = f"(min {min(rs):,.0f}, max {max(rs):,.0f})"
        if fn is bare:
            print(f"{name:40s} {r:12,.0f} IDs/s  {spread}")
            continue
        print(f"{name:40s} {r:12,.0f} IDs/s  {spread}  {r / bare_rate:5.1%} of the bare counter, "
              f"{r / (nodes * 1_024_000):5.1%} of the ceiling of {nodes} node ID{'s' if nodes > 1 else ''}")
    for s in sessions:
        s.close()


def _batched(fn: Callable[[], object], seconds: float, per: int) -> float:
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
        n += per
    return n / (time.perf_counter() - t0)


if __name__ == "__main__":
    main()
