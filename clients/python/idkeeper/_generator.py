"""One node ID's generator: ascending IDs inside the lease window, never a
duplicate (DESIGN §4). The session wraps every call with its lease checks."""

from __future__ import annotations

import threading
import time
from typing import Callable

from ._wire import Layout, format_ms
from .errors import ClockBackwardsError, ClockStalledError, IdKeeperError, WindowError

STALL_SLACK_NS = 50_000_000


class NodeGenerator:
    """Mints IDs for one node ID under its own lock. ``claim`` is the only
    minting step; callers hold ``lock``. State: the highest wall-clock reading
    seen (``high``, in ms since the epoch) and the last claimed (``last_ts``,
    ``seq``). A clock that steps back by up to max_back_ms keeps minting at
    ``high`` (logical time); further back, claims fail. A used-up millisecond
    sleeps (real time, bounded) until the clock reaches the next one."""

    def __init__(self, layout: Layout, node: int, now_ns: Callable[[], int], max_back_ns: int,
                 not_before_ns: int, expires_at_ns: int, log: object) -> None:
        self.lock = threading.Lock()
        self.layout = layout
        self.node = node
        self.now_ns = now_ns
        self.epoch_ms = layout.epoch_ms
        self.shift = layout.node_bits + layout.sequence_bits
        self.node_field = node << layout.sequence_bits
        self.seq_bits = layout.sequence_bits
        self.seq_mask = layout.max_sequence
        self.max_ts = layout.max_timestamp
        self.max_back_ms = max(max_back_ns, 0) // 1_000_000
        self.max_wait_ns = max(max_back_ns, 0) + STALL_SLACK_NS
        self.high = -(1 << 62)
        self.last_ts = -1
        self.seq = self.seq_mask
        self.behind = False
        self.log = log
        self.minted = 0
        # A negative control's test-only switch (the driver's ignore-expiry break): mint past expiresAt.
        self.ignore_window_end = False
        self.set_window(not_before_ns, expires_at_ns)

    def set_window(self, not_before_ns: int, expires_at_ns: int) -> None:
        """Timestamps from notBefore (rounded up to the ms) to expiresAt (rounded
        down), both inclusive."""
        nb_ms = -(-not_before_ns // 1_000_000)
        self.nb = nb_ms - self.epoch_ms
        self.ex = expires_at_ns // 1_000_000 - self.epoch_ms
        self.not_before_ns, self.expires_at_ns = not_before_ns, expires_at_ns

    def minted_up_to_ms(self) -> int:
        """Unix ms of the highest timestamp claimed; -1 when none was."""
        return -1 if self.last_ts < 0 else self.epoch_ms + self.last_ts

    def _read(self) -> int:
        now = self.now_ns() // 1_000_000 - self.epoch_ms
        if now > self.high:
            if self.behind:
                self.behind = False
                self.log.warning("idkeeper: node ID %d: the wall clock caught up", self.node)  # type: ignore[attr-defined]
            self.high = now
        elif now < self.high:
            step = self.high - now
            if step > self.max_back_ms:
                raise ClockBackwardsError(f"idkeeper: node ID {self.node}: the wall clock is {step} ms behind "
                                          f"the last reading, more than the {self.max_back_ms} ms allowed; check NTP")
            if not self.behind:
                self.behind = True
                self.log.warning("idkeeper: node ID %d: the wall clock stepped back by %d ms: minting at the last "  # type: ignore[attr-defined]
                                 "timestamp until it catches up; check NTP", self.node, step)
        return self.high

    def claim(self, want: int) -> tuple[int, int]:
        """Claims 1..want consecutive IDs of one millisecond; returns (first ID, k)."""
        ts = self._read()
        if ts == self.last_ts and self.seq >= self.seq_mask:
            ts = self._wait_past(ts)
        first = self.seq + 1 if ts == self.last_ts else 0
        if ts < self.nb:
            raise WindowError(True, f"idkeeper: node ID {self.node} is cooling: its window opens at "
                                    f"{format_ms(self.nb + self.epoch_ms)}")
        if ts > self.ex and not self.ignore_window_end:
            raise WindowError(False, f"idkeeper: node ID {self.node}: the lease window ended at "
                                     f"{format_ms(self.ex + self.epoch_ms)}")
        if ts < 0 or ts > self.max_ts:
            raise IdKeeperError("idkeeper: the wall clock lies outside the layout's range")
        k = min(want, self.seq_mask - first + 1)
        self.last_ts, self.seq = ts, first + k - 1
        self.minted += k
        return (ts << self.shift) | self.node_field | first, k

    def next_one(self) -> int:
        """claim(1) with the common case inlined: the clock at or past the highest
        reading and the millisecond not used up. The rest goes through claim."""
        now = self.now_ns() // 1_000_000 - self.epoch_ms
        if now > self.last_ts and now >= self.high and self.nb <= now <= self.ex and now <= self.max_ts \
                and not self.behind:
            self.high = self.last_ts = now
            self.seq = 0
            self.minted += 1
            return (now << self.shift) | self.node_field
        if now == self.last_ts and now == self.high and self.seq < self.seq_mask and not self.behind:
            self.seq = seq = self.seq + 1
            self.minted += 1
            return (now << self.shift) | self.node_field | seq
        return self.claim(1)[0]

    def _wait_past(self, ts: int) -> int:
        """Sleeps until the wall clock passes millisecond ts; bounded in real time."""
        start = time.monotonic_ns()
        while True:
            now_ns = self.now_ns()
            now = now_ns // 1_000_000 - self.epoch_ms
            if now > ts:
                return self._read()
            if time.monotonic_ns() - start > self.max_wait_ns:
                raise ClockStalledError(f"idkeeper: node ID {self.node}: waited for millisecond {ts + 1}, "
                                        f"the wall clock is still at {now}")
            time.sleep(max((ts + 1 - now) * 1_000_000 - now_ns % 1_000_000, 50_000) / 1e9)
