"""Issuing from many threads on the system clock, and close() racing them."""

from __future__ import annotations

import json
import logging
import threading
import time
import unittest
from typing import Any

import fakes  # noqa: F401  (puts the package on sys.path)

import idkeeper._wire as wire
from idkeeper import ClosedError, Requester, Session

logging.getLogger("idkeeper").setLevel(logging.CRITICAL)


class HourLease:
    """A registry answer granting node IDs for an hour, on the real clock."""

    def __init__(self, count: int) -> None:
        self.count, self.removes = count, []  # type: ignore[var-annotated]

    def __call__(self, url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, dict[str, str], bytes]:
        req: dict[str, Any] = json.loads(body)
        if url.endswith("/remove"):
            self.removes.append(req)
        now = time.time_ns()
        leases = [{"nodeId": n, "notBefore": "2026-01-01T00:00:00.000Z", "expiresAt": wire.format_ns(now + 3600 * 10**9),
                   "fencingToken": n + 1} for n in range(self.count)]
        ans = {"layout": {"epoch": "2026-01-01T00:00:00.000Z", "timestampBits": 41, "nodeBits": 12, "sequenceBits": 10},
               "leases": leases, "serverUtcNow": wire.format_ns(now), "removed": self.count}
        return 200, {"content-type": "application/json"}, json.dumps(ans).encode()


def session(count: int) -> tuple[Session, HourLease]:
    reg = HourLease(count)
    s = Session(["http://a.test:1"], "key", count, requester=Requester("m", 1, 1_795_000_000_000), host="-",
                transport=reg, on_fatal=lambda e: None)
    s.open()
    return s, reg


class Threads(unittest.TestCase):
    def test_eight_threads_never_mint_a_duplicate(self) -> None:
        s, _ = session(2)
        lay = s.layout
        assert lay is not None
        out: list[list[int]] = [[] for _ in range(8)]

        def work(dst: list[int], k: int) -> None:
            for i in range(5000):
                if i % 100 == 0 and k % 2:
                    dst.extend(s.next_ids(300))
                else:
                    dst.append(s.next_id())
        ts = [threading.Thread(target=work, args=(o, k)) for k, o in enumerate(out)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        ids = [i for o in out for i in o]
        self.assertEqual(len(ids), len(set(ids)))
        for o in out:
            for n in (0, 1):
                mine = [i for i in o if lay.decode(i)[1] == n]
                self.assertEqual(mine, sorted(mine))
        s.close()

    def test_close_drains_then_reports_the_highest_timestamp(self) -> None:
        s, reg = session(2)
        lay = s.layout
        assert lay is not None
        out: list[list[int]] = [[] for _ in range(4)]
        started = threading.Barrier(5)

        def work(dst: list[int]) -> None:
            started.wait()
            try:
                while True:
                    dst.append(s.next_id())
            except ClosedError:
                pass
        ts = [threading.Thread(target=work, args=(o,)) for o in out]
        for t in ts:
            t.start()
        started.wait()
        time.sleep(0.05)
        self.assertTrue(s.close())
        for t in ts:
            t.join()
        top = max(lay.decode(i)[0] for o in out for i in o)
        self.assertEqual(reg.removes[-1]["mintedUpTo"], wire.format_ms(top))


if __name__ == "__main__":
    unittest.main()
