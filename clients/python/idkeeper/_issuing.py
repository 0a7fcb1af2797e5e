"""The issuing half of a Session: the gate every minting call passes, round robin
over the node IDs, batches, pinned generators and the health check."""

from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING, Optional

from ._generator import NodeGenerator
from ._wire import format_ms
from .errors import ClosedError, IdKeeperError, LeaseLostError, NotIssuingError

if TYPE_CHECKING:
    from .clock import Clock

NOT_HELD = -(1 << 63)


class Generator:
    """Mints with one node ID of a session: pin a worker thread to it for strictly
    increasing IDs without the shared round-robin counter. It obeys the session's
    lease and close like the session's own calls."""

    def __init__(self, session: "Issuing", index: int) -> None:
        self._s, self._i = session, index

    @property
    def node_id(self) -> int:
        """The node ID; -1 before open() succeeded."""
        gens = self._s._gens
        return gens[self._i].node if gens else -1

    def next_id(self) -> int:
        return self._s._mint(self._s._gen_at(self._i))

    def next_ids(self, n: int) -> list[int]:
        return self._s._fill(self._s._gen_at(self._i), n)


class Issuing:
    """State the issuing path reads without the session's lock: _halt (why issuing
    is refused for good), _deadline (monotonic ns), _gens and _break. Each minting
    call holds its generator's lock, so close() drains by taking each lock once."""

    _halt: Optional[NotIssuingError]
    _deadline: int
    _gens: list[NodeGenerator]
    _rr: "itertools.count[int]"
    _count: int
    _break: str
    _clk: "Clock"
    _mu: threading.Lock

    def _refusal(self) -> NotIssuingError:
        h = self._halt
        if h is not None:
            return type(h)(h.reason, str(h)) if not isinstance(h, ClosedError) else ClosedError()
        if self._deadline == NOT_HELD:
            return NotIssuingError("not-open", "idkeeper: session is not open: no lease is held yet")
        return LeaseLostError("expired", "idkeeper: lease lost: the lease expired on the local monotonic clock")

    def _gen_at(self, i: int) -> NodeGenerator:
        gens = self._gens
        if not gens:
            raise self._refusal()
        return gens[i % len(gens)]

    def _issuable(self) -> bool:
        return self._halt is None and (self._clk.mono_ns() < self._deadline or
                                       (self._break == "ignore-expiry" and self._deadline != NOT_HELD))

    def _mint(self, g: NodeGenerator) -> int:
        with g.lock:
            if self._halt is not None or self._deadline == NOT_HELD:
                raise self._refusal()
            id_ = g.next_one()
            # Checked after minting: an ID is handed out only if the lease was valid
            # after it was minted, even when the generator waited for its clock.
            if self._clk.mono_ns() >= self._deadline and not self._issuable():
                raise self._refusal()
            return id_

    def _fill(self, g: NodeGenerator, n: int) -> list[int]:
        out: list[int] = []
        with g.lock:
            if not self._issuable():
                raise self._refusal()
            while len(out) < n:
                first, k = g.claim(n - len(out))
                out.extend(range(first, first + k))
            if not self._issuable():
                raise self._refusal()
        return out

    def next_id(self) -> int:
        """Mints one ID, round robin over the node IDs. Raises NotIssuingError
        (ClosedError, LeaseLostError) when the session refuses to issue, or a
        generator error (WindowError, ClockBackwardsError, ClockStalledError)."""
        gens = self._gens
        if not gens:
            raise self._refusal()
        return self._mint(gens[next(self._rr) % len(gens)])

    def next_ids(self, n: int) -> list[int]:
        """Mints n IDs, ascending, all or nothing: up to one millisecond's sequence
        from one generator, a larger batch split into one chunk per generator. After
        an error the IDs already minted are dropped (a gap), never handed out."""
        gens = self._gens
        if not gens:
            raise self._refusal()
        if n <= 0:
            return []
        chunk = gens[0].seq_mask + 1
        parts = min(len(gens), -(-n // chunk))
        size = -(-n // parts)
        at = next(self._rr)
        out: list[int] = []
        while len(out) < n:
            out.extend(self._fill(gens[at % len(gens)], min(size, n - len(out))))
            at += 1
        if not self._issuable():
            raise self._refusal()
        if parts > 1:
            out.sort()
        return out

    def generator(self, i: int) -> Generator:
        """The i-th generator (0 ≤ i < count), to pin a worker to one node ID."""
        if not 0 <= i < self._count:
            raise IndexError(f"idkeeper: generator {i} outside 0..{self._count - 1}")
        return Generator(self, i)

    def check(self) -> Optional[IdKeeperError]:
        """None when issuing can succeed now, else the reason: the refusal, or a
        generator's window or clock error. Serve it as the health check."""
        if not self._gens or not self._issuable():
            return self._refusal()
        now_ms = self._clk.now_ns() // 1_000_000
        for g in self._gens:
            ts = now_ms - g.epoch_ms
            if ts < g.nb:
                return NotIssuingError("cooling", f"idkeeper: node ID {g.node} is cooling until {format_ms(g.nb + g.epoch_ms)}")
            if ts > g.ex:
                return NotIssuingError("window", f"idkeeper: node ID {g.node}: the lease window has ended")
            if g.last_ts >= 0 and g.high - ts > g.max_back_ms:
                return NotIssuingError("clock", f"idkeeper: node ID {g.node}: the wall clock is behind the last ID")
        return None
