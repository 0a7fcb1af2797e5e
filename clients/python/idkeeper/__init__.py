"""IdKeeper client for Python: lease Snowflake node IDs from an IdKeeper registry
and mint 64-bit, time-ordered IDs in this process, with no network hop per ID.

    from idkeeper import Session

    with Session(["http://idkeeper:8080"], api_key, count=1) as s:
        id_ = s.next_id()          # round robin over the node IDs
        batch = s.next_ids(1000)   # ascending, all or nothing

Standard library only; thread-safe. asyncio programs: idkeeper.aio.AsyncSession.
"""

from ._issuing import Generator
from ._requester import Requester, process_requester
from ._wire import Layout, Lease
from .clock import Clock, SystemClock
from .errors import (ClockBackwardsError, ClockStalledError, ClosedError, IdKeeperError, InvalidGrantError,
                     LayoutRefusedError, LeaseLostError, MalformedError, NotIssuingError, ServerError, TransportError,
                     WindowError)
from .session import Session

__all__ = [
    "ClockBackwardsError", "ClockStalledError", "ClosedError", "Clock", "Generator", "IdKeeperError",
    "InvalidGrantError", "Layout", "LayoutRefusedError", "Lease", "LeaseLostError", "MalformedError",
    "NotIssuingError", "Requester", "ServerError", "Session", "SystemClock", "TransportError", "WindowError",
    "process_requester",
]
