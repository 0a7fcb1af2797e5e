"""DESIGN §4's timing and fail-closed rules on a fake clock and a fake registry."""

from __future__ import annotations

import logging
import threading
import time
import unittest
from typing import Any, Optional

from fakes import FakeClock, FakeRegistry, FixedRandom, S, recorder

from idkeeper import (ClockBackwardsError, ClockStalledError, ClosedError, InvalidGrantError, LayoutRefusedError, LeaseLostError, NotIssuingError, Requester,
                      ServerError, Session, TransportError, WindowError)

REQ = Requester("test-machine", 4242, 1_795_000_000_000)
logging.getLogger("idkeeper").setLevel(logging.CRITICAL)


def session(reg: FakeRegistry, count: int = 1, **kw: Any) -> tuple[Session, list[Any], list[Exception]]:
    events, on_event = recorder()
    fatals: list[Exception] = []
    kw.setdefault("rng", FixedRandom(0.5))
    s = Session(["http://a.test:1"], "key", count, requester=REQ, host="-", transport=reg, clock=reg.clock,
                on_fatal=fatals.append, on_event=on_event, **kw)
    return s, events, fatals


def opened(count: int = 1, **kw: Any) -> tuple[FakeRegistry, Session, list[Any], list[Exception]]:
    reg = FakeRegistry(FakeClock())
    s, events, fatals = session(reg, count, **kw)
    s.open()
    return reg, s, events, fatals


def open_in_thread(s: Session) -> tuple[threading.Thread, list[Optional[BaseException]]]:
    out: list[Optional[BaseException]] = []

    def run() -> None:
        try:
            s.open()
            out.append(None)
        except BaseException as e:
            out.append(e)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def wait_for(cond: Any, what: str) -> None:
    end = time.monotonic() + 5
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.001)


class RenewSchedule(unittest.TestCase):
    def test_renews_at_once_then_at_half_the_lease(self) -> None:
        reg, s, events, _ = opened()
        self.assertEqual(reg.paths(), ["/v1/leases", "/v1/leases/renew"])
        reg.clock.advance(20 * S - 1)
        self.assertEqual(len(reg.calls), 2)
        reg.clock.advance(1)
        self.assertEqual(len(reg.calls), 3, "the renew at half the 40 s lease")
        self.assertEqual(s.renewals, 2)
        self.assertEqual([k for k, _ in events], ["renewed", "renewed"])

    def test_retry_is_a_quarter_of_the_time_left_at_least_5s(self) -> None:
        reg, s, events, fatals = opened()
        reg.script["/v1/leases/renew"] = [(503, {"code": "STORE_UNAVAILABLE"})] * 10
        reg.clock.advance(20 * S)  # renew at half: fails, 20 s left
        delays = [f["delayMs"] for k, f in events if k == "retry"]
        self.assertEqual(delays, [5000], "min(10 min, 20 s / 4) = 5 s")
        reg.clock.advance(5 * S)
        reg.clock.advance(5 * S)
        delays = [f["delayMs"] for k, f in events if k == "retry"]
        self.assertEqual(delays, [5000, 5000, 5000], "floor of 5 s once a quarter is less")
        self.assertEqual(fatals, [])

    def test_retry_is_capped_by_renew_loop_duration(self) -> None:
        reg = FakeRegistry(FakeClock(), lease=3600 * S)
        s, events, _ = session(reg)
        s.open()
        reg.script["/v1/leases/renew"] = [TransportError("reset")] * 3
        reg.clock.advance(1800 * S)
        self.assertEqual([f["delayMs"] for k, f in events if k == "retry"], [450_000], "1800 s left / 4")
        reg.clock.advance(450 * S)
        self.assertEqual([f["delayMs"] for k, f in events if k == "retry"][-1], 337_500)
        reg2 = FakeRegistry(FakeClock(), lease=4 * 3600 * S)
        s2, events2, _ = session(reg2)
        s2.open()
        reg2.script["/v1/leases/renew"] = [TransportError("reset")]
        reg2.clock.advance(2 * 3600 * S)
        self.assertEqual([f["delayMs"] for k, f in events2 if k == "retry"], [600_000], "RenewLoopDuration caps it")

    def test_receipts_and_tokens_go_with_every_renew(self) -> None:
        reg, s, _, _ = opened(count=2)
        reg.clock.advance(20 * S)
        for c in reg.calls[1:]:
            self.assertEqual(c.body["receipts"], ["r0", "r1"])
            self.assertEqual(c.body["fencingTokens"], [1, 2])
            self.assertIn("clientUtcNow", c.body)


class Deadline(unittest.TestCase):
    def test_counts_from_the_send_time(self) -> None:
        reg = FakeRegistry(FakeClock())
        s, _, _ = session(reg)
        reg.delay = 3 * S  # every answer takes 3 s
        s.open()
        self.assertAlmostEqual(s.time_left(), 40 - 3, places=6)

    def test_deadline_from_receive_break_shows(self) -> None:
        reg = FakeRegistry(FakeClock())
        s, _, _ = session(reg)
        s._break = "deadline-from-receive"
        reg.delay = 3 * S
        s.open()
        self.assertAlmostEqual(s.time_left(), 40, places=6)

    def test_issuing_stops_at_the_deadline_without_a_timer(self) -> None:
        reg, s, _, _ = opened()
        reg.clock.jump(40 * S - 1)  # no timer has run
        s.next_id()
        reg.clock.jump(1)
        with self.assertRaises(LeaseLostError) as cm:
            s.next_id()
        self.assertEqual(cm.exception.reason, "expired")
        self.assertFalse(s.healthy)

    def test_ignore_expiry_break_mints_past_the_deadline(self) -> None:
        reg = FakeRegistry(FakeClock())
        s, _, _ = session(reg)
        s._break = "ignore-expiry"
        s.open()
        reg.script["/v1/leases/renew"] = [TransportError("down")] * 100
        reg.clock.jump(41 * S)
        s.next_id()

    def test_ignore_expiry_break_takes_a_renewed_lease_already_over(self) -> None:
        reg = FakeRegistry(FakeClock(), lease=-1 * S)
        s, _, fatals = session(reg)
        s._break = "ignore-expiry"
        s.open()
        s.next_id()
        self.assertEqual(fatals, [])

    def test_expiry_timer_reports_fatal(self) -> None:
        reg, s, events, fatals = opened()
        reg.script["/v1/leases/renew"] = [TransportError("down")] * 100
        reg.clock.advance(41 * S)
        self.assertEqual(len(fatals), 1)
        self.assertIn(("invalid", {"reason": "expired"}), events)
        self.assertFalse(s.close(), "no Remove for an expired lease")
        self.assertNotIn("/v1/leases/remove", reg.paths())


class FatalAnswers(unittest.TestCase):
    def lose(self, answer: dict[str, Any], reason: str) -> None:
        reg, s, events, fatals = opened(count=2)
        s.next_id()
        reg.script["/v1/leases/renew"] = [(200, answer)]
        reg.clock.advance(20 * S)
        with self.assertRaises(LeaseLostError) as cm:
            s.next_id()
        self.assertEqual(cm.exception.reason, reason)
        self.assertEqual(len(fatals), 1)
        self.assertEqual(fatals[0].reason, reason)  # type: ignore[attr-defined]
        self.assertIn(("invalid", {"reason": reason}), events)
        self.assertFalse(s.close())
        self.assertNotIn("/v1/leases/remove", reg.paths())

    def now(self) -> str:
        import idkeeper._wire as w
        return w.format_ns(FakeClock().wall + 20 * S)

    def test_empty_renew(self) -> None:
        self.lose({"leases": [], "serverUtcNow": self.now()}, "empty-renew")

    def test_count_mismatch(self) -> None:
        lease = {"nodeId": 0, "notBefore": "2026-01-01T00:00:00.000Z", "expiresAt": "2026-12-30T00:00:00.000Z", "fencingToken": 1}
        self.lose({"leases": [lease], "serverUtcNow": self.now()}, "count-mismatch")

    def test_other_fencing_token(self) -> None:
        ls = [{"nodeId": n, "notBefore": "2026-01-01T00:00:00.000Z", "expiresAt": "2026-12-30T00:00:00.000Z",
               "fencingToken": 9 + n} for n in (0, 1)]
        self.lose({"leases": ls, "serverUtcNow": self.now()}, "lease-lost")

    def test_renewed_lease_already_expired(self) -> None:
        ls = [{"nodeId": n, "notBefore": "2026-01-01T00:00:00.000Z", "expiresAt": "2026-01-02T00:00:00.000Z",
               "fencingToken": 1 + n} for n in (0, 1)]
        self.lose({"leases": ls, "serverUtcNow": "2026-01-01T23:59:00.000Z"}, "expired-on-arrival")

    def test_remove_when_invalid_break_sends_it(self) -> None:
        reg, s, _, _ = opened()
        s._break = "remove-when-invalid"
        reg.script["/v1/leases/renew"] = [(200, {"leases": [], "serverUtcNow": self.now()})]
        reg.clock.advance(20 * S)
        self.assertTrue(s.close())
        self.assertEqual(reg.paths()[-1], "/v1/leases/remove")

    def test_ignore_empty_renew_break_keeps_issuing(self) -> None:
        reg, s, _, fatals = opened()
        s._break = "ignore-empty-renew"
        reg.script["/v1/leases/renew"] = [(200, {"leases": [], "serverUtcNow": self.now()})]
        reg.clock.advance(20 * S)
        s.next_id()
        self.assertEqual(fatals, [])

    def test_a_refusal_is_retried_not_fatal(self) -> None:
        reg, s, _, fatals = opened()
        reg.script["/v1/leases/renew"] = [(401, {"code": "API_KEY_INVALID"})]
        reg.clock.advance(20 * S)
        s.next_id()
        self.assertEqual(fatals, [])


class Alloc(unittest.TestCase):
    def test_backoff_doubles_from_3s_to_60s(self) -> None:
        s, _, _ = session(FakeRegistry(FakeClock()), rng=FixedRandom(0.5))
        self.assertEqual([s.backoff_ns(k) // 10**6 for k in range(8)], [3000, 6000, 12000, 24000, 48000, 60000, 60000, 60000])

    def test_jitter_is_20_percent_and_the_cap_comes_after_it(self) -> None:
        hi, _, _ = session(FakeRegistry(FakeClock()), rng=FixedRandom(0.999999))
        lo, _, _ = session(FakeRegistry(FakeClock()), rng=FixedRandom(0.0))
        self.assertEqual(lo.backoff_ns(0) // 10**6, 2400)
        self.assertAlmostEqual(hi.backoff_ns(0) / S, 3.6, places=3)
        self.assertAlmostEqual(hi.backoff_ns(4) / S, 57.6, places=3)
        self.assertEqual(hi.backoff_ns(5), 60 * S, "48-72 s capped to 60 s after the jitter")
        self.assertEqual(lo.backoff_ns(9), 48 * S)

    def test_retries_keep_the_instance_and_wait_the_backoff(self) -> None:
        reg = FakeRegistry(FakeClock())
        reg.script["/v1/leases"] = [TransportError("refused"), (503, {"code": "STORE_NOT_INITIALISED"}),
                                    (409, {"code": "NODE_IDS_EXHAUSTED"})]
        s, events, _ = session(reg)
        t, out = open_in_thread(s)
        for want, d in ((1, 3), (2, 6), (3, 12)):
            wait_for(lambda: len([e for e in events if e[0] == "retry"]) == want, f"retry {want}")
            self.assertEqual(events[-1], ("retry", {"op": "alloc", "delayMs": d * 1000}))
            reg.clock.advance(d * S - 1)
            self.assertEqual(len(reg.calls), want)
            reg.clock.advance(1)
        t.join(5)
        self.assertEqual(out, [None])
        allocs = [c.body["requester"]["instance"] for c in reg.calls if c.path == "/v1/leases"]
        self.assertEqual(len(allocs), 4)
        self.assertEqual(len(set(allocs)), 1)
        self.assertEqual(len(allocs[0]), 22)

    def test_refusal_ends_open(self) -> None:
        reg = FakeRegistry(FakeClock())
        reg.script["/v1/leases"] = [(401, {"code": "API_KEY_INVALID", "detail": "unknown key"})]
        s, _, _ = session(reg)
        with self.assertRaises(ServerError) as cm:
            s.open()
        self.assertEqual(cm.exception.code, "API_KEY_INVALID")

    def test_open_timeout_raises_the_last_transport_error(self) -> None:
        reg = FakeRegistry(FakeClock())
        reg.script["/v1/leases"] = [TransportError("refused")] * 10
        s, _, _ = session(reg)
        with self.assertRaises(TransportError):
            s.open(timeout=0)

    def test_sessions_never_share_an_instance(self) -> None:
        reg = FakeRegistry(FakeClock())
        a, _, _ = session(reg)
        b, _, _ = session(reg)
        a.open()
        b.open()
        ra, rb = a.requester, b.requester
        assert ra is not None and rb is not None
        self.assertNotEqual(ra.instance, rb.instance)
        self.assertEqual((ra.machine_id, ra.pid), ("test-machine", 4242))

    def grant(self, **layout: Any) -> Exception:
        reg = FakeRegistry(FakeClock())
        reg.layout.update(layout)
        s, events, _ = session(reg)
        with self.assertRaises(InvalidGrantError) as cm:
            s.open()
        self.assertIn("/v1/leases/remove", reg.paths())
        self.assertEqual(events[-1][0], "invalid")
        return cm.exception

    def test_layout_not_summing_to_63_is_refused(self) -> None:
        self.assertIsInstance(self.grant(timestampBits=40), LayoutRefusedError)

    def test_layout_with_a_zero_width_is_refused(self) -> None:
        self.assertIsInstance(self.grant(timestampBits=51, sequenceBits=0), LayoutRefusedError)

    def test_epoch_finer_than_the_millisecond_is_refused(self) -> None:
        self.assertIsInstance(self.grant(epoch="2026-01-01T00:00:00.000500Z"), LayoutRefusedError)

    def test_node_id_outside_the_layout_is_refused(self) -> None:
        reg = FakeRegistry(FakeClock())
        reg.layout.update(timestampBits=41, nodeBits=1, sequenceBits=21)
        s, _, _ = session(reg, count=3)
        with self.assertRaises(InvalidGrantError) as cm:
            s.open()
        self.assertEqual(cm.exception.reason, "layout")

    def test_lease_expired_on_arrival_is_refused(self) -> None:
        reg = FakeRegistry(FakeClock(), first_lease=2 * S)
        reg.delay = 3 * S
        s, _, _ = session(reg)
        with self.assertRaises(InvalidGrantError) as cm:
            s.open()
        self.assertEqual(cm.exception.reason, "expired-on-arrival")


class Close(unittest.TestCase):
    def test_removes_with_minted_up_to(self) -> None:
        reg, s, _, _ = opened(count=2)
        ids = [s.next_id() for _ in range(10)]
        self.assertTrue(s.close())
        rm = reg.calls[-1]
        self.assertEqual(rm.path, "/v1/leases/remove")
        lay = s.layout
        assert lay is not None
        import idkeeper._wire as w
        self.assertEqual(rm.body["mintedUpTo"], w.format_ms(max(lay.decode(i)[0] for i in ids)))
        with self.assertRaises(ClosedError):
            s.next_id()
        self.assertFalse(s.close(), "idempotent")

    def test_without_minting_sends_no_minted_up_to(self) -> None:
        reg, s, _, _ = opened()
        s.close()
        self.assertNotIn("mintedUpTo", reg.calls[-1].body)

    def test_drains_a_call_in_flight(self) -> None:
        reg, s, _, _ = opened()
        g = s._gens[0]
        g.lock.acquire()  # a call in flight
        done = threading.Event()
        threading.Thread(target=lambda: (s.close(), done.set()), daemon=True).start()
        time.sleep(0.05)
        self.assertFalse(done.is_set())
        self.assertNotIn("/v1/leases/remove", reg.paths())
        g.lock.release()
        self.assertTrue(done.wait(5))
        self.assertEqual(reg.paths()[-1], "/v1/leases/remove")

    def test_close_interrupts_alloc_retries(self) -> None:
        reg = FakeRegistry(FakeClock())
        reg.script["/v1/leases"] = [TransportError("refused")] * 10
        s, events, _ = session(reg)
        t, out = open_in_thread(s)
        wait_for(lambda: events, "a retry")
        self.assertFalse(s.close())
        t.join(5)
        self.assertIsInstance(out[0], ClosedError)


class Replicas(unittest.TestCase):
    def test_fails_over_on_transport_errors_and_5xx_not_4xx(self) -> None:
        reg = FakeRegistry(FakeClock())
        reg.script["/v1/leases"] = [TransportError("refused"), None]
        events, on_event = recorder()
        s = Session(["http://a.test:1", "http://b.test:2"], "key", requester=REQ, host="-", transport=reg,
                    clock=reg.clock, on_fatal=lambda e: None, on_event=on_event)
        s.open()
        self.assertEqual([c.url.split("/")[2] for c in reg.calls], ["a.test:1", "b.test:2", "b.test:2"])
        self.assertEqual(s.failovers, 1)
        reg.script["/v1/leases/renew"] = [(403, {"code": "LEASE_NOT_OWNED"})]
        reg.clock.advance(20 * S)
        self.assertEqual(reg.calls[-1].url.split("/")[2], "b.test:2")
        self.assertEqual(s.failovers, 1, "a 4xx is the registry's verdict")


class KeyNotice(unittest.TestCase):
    def test_logged_once_a_day(self) -> None:
        reg = FakeRegistry(FakeClock())
        warn = '299 idkeeper "API key 0123456789abcdef expires at 2026-12-10T00:00:00.000Z; create a new key and rotate to it"'
        plain = reg.__call__

        def with_warning(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, dict[str, str], bytes]:
            status, hdrs, data = plain(url, body, headers, timeout)
            return status, dict(hdrs, warning=warn), data
        s = Session(["http://a.test:1"], "key", requester=REQ, host="-", transport=with_warning, clock=reg.clock,
                    on_fatal=lambda e: None)
        with self.assertLogs("idkeeper", logging.WARNING) as logs:
            s.open()
            reg.clock.advance(20 * S)
            logging.getLogger("idkeeper").warning("end")
        notices = [r for r in logs.output if "0123456789abcdef" in r]
        self.assertEqual(len(notices), 1, logs.output)


class Issuing(unittest.TestCase):
    def test_round_robin_ascending_per_node(self) -> None:
        reg, s, _, _ = opened(count=3)
        lay = s.layout
        assert lay is not None
        ids = [s.next_id() for _ in range(300)]
        nodes = [lay.decode(i)[1] for i in ids]
        self.assertEqual(nodes[:6], [0, 1, 2, 0, 1, 2])
        for n in range(3):
            mine = [i for i in ids if lay.decode(i)[1] == n]
            self.assertEqual(mine, sorted(set(mine)))

    def test_next_ids_ascending_and_all_or_nothing(self) -> None:
        reg, s, _, _ = opened(count=2)
        b = s.next_ids(1000)
        self.assertEqual(b, sorted(set(b)))
        self.assertEqual(len(b), 1000)

    def test_sequence_exhausted_waits_for_the_next_millisecond(self) -> None:
        reg, s, _, _ = opened()
        got: list[int] = []
        t = threading.Thread(target=lambda: got.extend(s.next_id() for _ in range(1025)), daemon=True)
        t.start()
        time.sleep(0.05)
        self.assertEqual(len(got), 1024, "the 1,025th waits for the clock")
        self.assertTrue(t.is_alive())
        reg.clock.jump(1_000_000)
        t.join(5)
        lay = s.layout
        assert lay is not None
        self.assertEqual(lay.decode(got[-1])[0] - lay.decode(got[0])[0], 1)

    def test_never_past_the_lease_window(self) -> None:
        reg = FakeRegistry(FakeClock(), answer_skew=-10 * S)  # serverUtcNow 10 s behind: a deadline past expiresAt
        s, _, _ = session(reg)
        s.open()
        reg.clock.jump(40 * S + 1_000_000)
        self.assertGreater(s.time_left(), 0)
        with self.assertRaises(WindowError) as cm:
            s.next_id()
        self.assertFalse(cm.exception.before)
        self.assertFalse(s.healthy)

    def test_small_backward_step_mints_at_logical_time(self) -> None:
        reg, s, _, _ = opened(max_backward_step=0.01)
        a = s.next_id()
        reg.clock.wall -= 5_000_000
        b = s.next_id()
        self.assertGreater(b, a)
        reg.clock.wall -= 10_000_000
        with self.assertRaises(Exception):
            s.next_id()
        self.assertFalse(s.healthy)

    def test_random_clock_walk_never_repeats_or_goes_back(self) -> None:
        import random
        rnd = random.Random(33)
        reg, s, _, _ = opened(count=1, max_backward_step=0.02)
        lay = s.layout
        assert lay is not None
        last, seen, refused = -1, 0, 0
        for _ in range(3000):
            step = -25 if rnd.random() < 0.02 else rnd.choice((0, 0, 1, 1, 2, -1, -3))
            reg.clock.wall += step * 1_000_000 + rnd.randrange(1_000_000)
            try:
                got = [s.next_id()] if rnd.random() < 0.8 else s.next_ids(rnd.randrange(1, 40))
            except (ClockBackwardsError, ClockStalledError):
                refused += 1  # past the backward bound, or a wait that stalled on the frozen clock
                continue
            for i in got:
                self.assertGreater(i, last)
                ms, node, _ = lay.decode(i)
                self.assertEqual(node, 0)
                self.assertLessEqual(ms, reg.clock.wall // 1_000_000 + 20, "never ahead of the highest reading")
                last = i
            seen += len(got)
        self.assertGreater(seen, 2000)
        self.assertGreater(refused, 0, "the walk steps back past the bound at times")

    def test_not_open(self) -> None:
        s, _, _ = session(FakeRegistry(FakeClock()))
        with self.assertRaises(NotIssuingError) as cm:
            s.next_id()
        self.assertEqual(cm.exception.reason, "not-open")


if __name__ == "__main__":
    unittest.main()
