"""The session's time source. It has two faces, never mixed: ``now_ns`` is the wall
clock (sent as clientUtcNow, minted into IDs; NTP may step it) and ``mono_ns`` is
monotonic (lease deadlines, renew and retry schedules). ``call_later`` runs a
function once after a delay on the monotonic clock, in a thread of the clock's
choosing. Tests inject a fake clock whose time moves only when told."""

from __future__ import annotations

import threading
import time
from typing import Callable, Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now_ns(self) -> int: ...

    def mono_ns(self) -> int: ...

    def call_later(self, delay_ns: int, fn: Callable[[], None]) -> Timer: ...


class SystemClock:
    """time.time_ns, time.monotonic_ns and daemon threading.Timer threads."""

    now_ns = staticmethod(time.time_ns)
    mono_ns = staticmethod(time.monotonic_ns)

    def call_later(self, delay_ns: int, fn: Callable[[], None]) -> Timer:
        t = threading.Timer(max(delay_ns, 0) / 1e9, fn)
        t.daemon = True
        t.start()
        return t
