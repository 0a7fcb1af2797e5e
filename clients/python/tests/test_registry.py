"""The client against a real registry (a Go-built `idkeeper server` with leases of
seconds: first lease 2 s, lease 4 s)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import time
import unittest
import urllib.request
from typing import Any, Optional

from registry import Registry

from idkeeper import ClosedError, IdKeeperError, LeaseLostError, Session
from idkeeper.aio import AsyncSession

logging.getLogger("idkeeper").setLevel(logging.CRITICAL)
REG: Optional[Registry] = None


def setUpModule() -> None:
    global REG
    REG = Registry().start()


def tearDownModule() -> None:
    if REG is not None:
        REG.stop()


def reg() -> Registry:
    assert REG is not None
    return REG


def remaining(r: Registry) -> dict[str, Any]:
    req = urllib.request.Request(r.url + "/v1/leases/remaining", headers={"X-API-Key": r.api_key})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.loads(resp.read())


def new(r: Registry, count: int = 1, **kw: Any) -> tuple[Session, list[Any], list[Exception]]:
    events: list[Any] = []
    fatals: list[Exception] = []
    s = Session([r.url], r.api_key, count, on_fatal=fatals.append, on_event=lambda k, f: events.append((k, f)), **kw)
    return s, events, fatals


class Lifecycle(unittest.TestCase):
    def test_open_mint_renew_close(self) -> None:
        r = reg()
        s, events, fatals = new(r, 2)
        s.open()
        held = set(s.node_ids)
        self.assertEqual(len(held), 2)
        lay = s.layout
        assert lay is not None
        per_thread: list[list[int]] = [[] for _ in range(4)]

        def work(out: list[int]) -> None:
            for _ in range(5000):
                out.append(s.next_id())
        threads = [threading.Thread(target=work, args=(p,)) for p in per_thread]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ids = [i for p in per_thread for i in p]
        self.assertEqual(len(set(ids)), len(ids), "no duplicate across threads")
        self.assertEqual({lay.decode(i)[1] for i in ids}, held)
        for p in per_thread:
            for n in held:
                mine = [i for i in p if lay.decode(i)[1] == n]
                self.assertEqual(mine, sorted(mine), "ascending per node ID")
        now_ms = time.time_ns() // 1_000_000
        self.assertTrue(all(abs(lay.decode(i)[0] - now_ms) < 5000 for i in ids))
        time.sleep(2.3)  # past half the 4 s lease
        self.assertGreaterEqual(s.renewals, 2)
        self.assertTrue(s.healthy)
        self.assertEqual(fatals, [])
        leased = remaining(r)["leased"]
        self.assertTrue(s.close())
        self.assertEqual(remaining(r)["leased"], leased - 2, "Remove released both node IDs")
        with self.assertRaises(ClosedError):
            s.next_id()
        self.assertEqual([k for k, _ in events].count("invalid"), 0)

    def test_two_sessions_get_other_node_ids(self) -> None:
        r = reg()
        a, _, _ = new(r)
        b, _, _ = new(r)
        with a, b:
            self.assertNotEqual(a.node_ids, b.node_ids)
            ra, rb = a.requester, b.requester
            assert ra is not None and rb is not None
            self.assertEqual((ra.machine_id, ra.pid), (rb.machine_id, rb.pid))
            self.assertNotEqual(ra.instance, rb.instance)

    def test_lease_removed_behind_its_back_is_fatal_at_the_next_renew(self) -> None:
        r = reg()
        s, events, fatals = new(r)
        s.open()
        rq = s.requester
        assert rq is not None
        body = json.dumps({"requester": rq.wire()}).encode()
        req = urllib.request.Request(r.url + "/v1/leases/remove", data=body, method="POST",
                                     headers={"X-API-Key": r.api_key, "Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=5).read()
        self.assertTrue(s.done.wait(4), "the renew at half the lease answers an empty list")
        self.assertEqual(len(fatals), 1)
        self.assertIn(("invalid", {"reason": "empty-renew"}), events)
        with self.assertRaises(LeaseLostError):
            s.next_id()
        self.assertFalse(s.close(), "no Remove once invalid")

    def test_asyncio_wrapper(self) -> None:
        r = reg()

        async def run() -> list[int]:
            async with AsyncSession([r.url], r.api_key, 1, on_fatal=lambda e: None) as s:
                return [s.next_id()] + await s.next_ids(3000)
        ids = asyncio.run(run())
        self.assertEqual(len(set(ids)), 3001)
        self.assertEqual(ids[1:], sorted(ids[1:]))


class RegistryDown(unittest.TestCase):
    def test_issuing_stops_at_the_deadline_when_the_registry_dies(self) -> None:
        r = Registry().start()
        try:
            s, events, fatals = new(r)
            s.open()
            r.stop()
            t0 = time.monotonic()
            self.assertTrue(s.done.wait(8))
            self.assertLess(time.monotonic() - t0, 4.5)
            self.assertIn(("invalid", {"reason": "expired"}), events)
            self.assertIn("retry", [k for k, _ in events])
            self.assertEqual(len(fatals), 1)
            with self.assertRaises(IdKeeperError):
                s.next_id()
            self.assertFalse(s.close())
        finally:
            r.stop()

    def test_open_retries_until_its_timeout(self) -> None:
        s = Session(["http://127.0.0.1:9"], "key", on_fatal=lambda e: None, backoff_initial=0.05)
        t0 = time.monotonic()
        with self.assertRaises(IdKeeperError):
            s.open(timeout=0.5)
        self.assertLess(time.monotonic() - t0, 2)


class Driver(unittest.TestCase):
    def test_line_protocol(self) -> None:
        r = reg()
        exe = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "driver.py")
        p = subprocess.Popen([sys.executable, exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        assert p.stdin is not None and p.stdout is not None
        events: list[dict[str, Any]] = []

        def call(obj: dict[str, Any]) -> dict[str, Any]:
            assert p.stdin is not None and p.stdout is not None
            p.stdin.write(json.dumps(obj) + "\n")
            p.stdin.flush()
            while True:
                line = json.loads(p.stdout.readline())
                if "id" in line:
                    return line
                events.append(line)
        try:
            o = call({"id": 1, "op": "open", "servers": [r.url], "apiKey": r.api_key, "count": 2, "machineId": "m1",
                      "leaseHint": None, "break": ""})
            self.assertEqual(o["ev"], "opened", o)
            self.assertEqual(o["layout"]["nodeBits"], 12)
            ids = call({"id": 2, "op": "next", "n": 7})["ids"]
            self.assertEqual(len(set(ids)), 7)
            self.assertTrue(all(isinstance(i, str) and i.isdigit() for i in ids))
            st = call({"id": 3, "op": "state"})
            self.assertEqual((st["ev"], st["issuing"], st["nodeIds"]), ("state", True, o["nodeIds"]))
            self.assertEqual(call({"id": 4, "op": "close"}), {"id": 4, "ev": "closed", "removed": True})
            self.assertEqual(call({"id": 5, "op": "next", "n": 1})["code"], "NOT_ISSUING")
            bad = call({"id": 6, "op": "open", "servers": [r.url], "apiKey": "idk_wrong_key_wrong_key_wrong", "count": 1,
                        "machineId": "m1", "break": ""})
            self.assertEqual((bad["ev"], bad["code"]), ("error", "API_KEY_INVALID"))
            self.assertEqual(call({"id": 7, "op": "quit"}), {"id": 7, "ev": "bye"})
            self.assertEqual(p.wait(10), 0)
            self.assertIn("renewed", [e["ev"] for e in events])
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdin.close()
            p.stdout.close()


if __name__ == "__main__":
    unittest.main()
