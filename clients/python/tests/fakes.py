"""A fake clock that moves only when told and a fake registry behind a fake
transport, for the timing rules."""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import idkeeper._wire as wire  # noqa: E402

S = 1_000_000_000
START_NS = 1_796_000_000_000 * 1_000_000  # 2026-11-30, well inside the default layout


class FakeTimer:
    def __init__(self, due: int, seq: int, fn: Callable[[], None]) -> None:
        self.due, self.seq, self.fn, self.cancelled = due, seq, fn, False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """Wall and monotonic time move together, by advance(); jump() moves them without
    running timers (a process that did not get to run)."""

    def __init__(self) -> None:
        self.wall, self.mono = START_NS, 10 * S
        self.timers: list[FakeTimer] = []
        self.seq = 0
        self.mu = threading.RLock()

    def now_ns(self) -> int:
        return self.wall

    def mono_ns(self) -> int:
        return self.mono

    def call_later(self, delay_ns: int, fn: Callable[[], None]) -> FakeTimer:
        with self.mu:
            self.seq += 1
            t = FakeTimer(self.mono + max(delay_ns, 0), self.seq, fn)
            self.timers.append(t)
            return t

    def jump(self, d: int) -> None:
        self.wall += d
        self.mono += d

    def pending(self) -> list[FakeTimer]:
        return sorted((t for t in self.timers if not t.cancelled), key=lambda t: (t.due, t.seq))

    def advance(self, d: int) -> None:
        target = self.mono + d
        while True:
            with self.mu:
                due = [t for t in self.pending() if t.due <= target]
                if not due:
                    break
                t = due[0]
                t.cancelled = True
                self.jump(t.due - self.mono)
            t.fn()
        self.jump(target - self.mono)


@dataclass
class Call:
    mono: int
    url: str
    path: str
    body: dict[str, Any]


@dataclass
class FakeRegistry:
    """Answers Alloc, Renew and Remove like the registry, with hooks per call:
    ``script[path]`` is a list of answers to give first (status, body) or
    exceptions to raise; ``delay`` advances the clock during each call."""

    clock: FakeClock
    first_lease: int = 20 * S
    lease: int = 40 * S
    layout: dict[str, Any] = field(default_factory=lambda: {"epoch": "2026-01-01T00:00:00.000Z", "timestampBits": 41,
                                                            "nodeBits": 12, "sequenceBits": 10})
    calls: list[Call] = field(default_factory=list)
    script: dict[str, list[Any]] = field(default_factory=dict)
    delay: int = 0
    nodes: list[int] = field(default_factory=list)
    skew: int = 0  # the server's clock ahead of the client's
    answer_skew: int = 0  # added to serverUtcNow only, as a proxy that rewrites it

    def paths(self) -> list[str]:
        return [c.path for c in self.calls]

    def __call__(self, url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, dict[str, str], bytes]:
        path = "/" + url.split("/", 3)[3]
        req = json.loads(body)
        self.calls.append(Call(self.clock.mono, url, path, req))
        if self.delay:
            self.clock.jump(self.delay)
        queued = self.script.get(path)
        if queued:
            ans = queued.pop(0)
            if isinstance(ans, BaseException):
                raise ans
            if ans is not None:
                status, obj = ans
                ctype = "application/problem+json" if status != 200 else "application/json"
                return status, {"content-type": ctype}, json.dumps(obj).encode()
        now = self.clock.wall + self.skew
        said = wire.format_ns(now + self.answer_skew)
        if path == "/v1/leases":
            self.nodes = list(range(req["count"]))
            return self.ok({"layout": self.layout, "leases": self.leases(now + self.first_lease), "serverUtcNow": said})
        if path == "/v1/leases/renew":
            return self.ok({"leases": self.leases(now + self.lease), "serverUtcNow": said})
        if path == "/v1/leases/remove":
            n, self.nodes = len(self.nodes), []
            return self.ok({"removed": n})
        return 404, {}, b"{}"

    def leases(self, expires: int) -> list[dict[str, Any]]:
        return [{"nodeId": n, "notBefore": "2026-01-01T00:00:00.000Z", "expiresAt": wire.format_ns(expires),
                 "fencingToken": n + 1, "receipt": f"r{n}"} for n in self.nodes]

    @staticmethod
    def ok(obj: Any) -> tuple[int, dict[str, str], bytes]:
        return 200, {"content-type": "application/json"}, json.dumps(obj).encode()


class FixedRandom:
    """random.Random's random() returning a fixed draw."""

    def __init__(self, x: float) -> None:
        self.x = x

    def random(self) -> float:
        return self.x


def recorder() -> tuple[list[tuple[str, dict[str, Any]]], Callable[[str, dict[str, Any]], None]]:
    events: list[tuple[str, dict[str, Any]]] = []
    return events, lambda k, f: events.append((k, dict(f)))
