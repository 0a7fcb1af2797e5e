"""asyncio wrapper. The Session is thread-based: open() and close() block on HTTP,
and a minting call may sleep up to a millisecond when a millisecond's sequence is
used up (longer only while the wall clock is stepped back). AsyncSession runs the
blocking calls in a worker thread (asyncio.to_thread) and keeps next_id() direct,
since it costs about a microsecond; renewals run in the session's own timer
threads, never on the event loop."""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from .session import Session


class AsyncSession:
    """``async with AsyncSession(servers, api_key, count=2) as s: s.next_id()``. Takes
    the arguments of Session. ``session`` is the wrapped Session."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.session = Session(*args, **kwargs)

    async def open(self, timeout: Optional[float] = None) -> None:
        await asyncio.to_thread(self.session.open, timeout)

    async def close(self) -> bool:
        return await asyncio.to_thread(self.session.close)

    async def __aenter__(self) -> "AsyncSession":
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def next_id(self) -> int:
        """Direct: never blocks on I/O."""
        return self.session.next_id()

    async def next_ids(self, n: int) -> list[int]:
        """In a worker thread: a large batch waits for later milliseconds."""
        return await asyncio.to_thread(self.session.next_ids, n)
