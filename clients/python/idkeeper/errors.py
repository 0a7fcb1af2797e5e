"""Errors of the IdKeeper client. Every one derives from IdKeeperError."""

from __future__ import annotations

from typing import Any, Optional


class IdKeeperError(Exception):
    """Base class of every error the client raises."""


class NotIssuingError(IdKeeperError):
    """Issuing is refused: no lease yet, the lease ran out or was lost, or the
    session is closed. ``reason`` is one of ``not-open``, ``closed``, ``expired``,
    ``empty-renew``, ``count-mismatch``, ``lease-lost``, ``expired-on-arrival``; the
    health check (Session.check) adds ``cooling``, ``window`` and ``clock`` for a
    generator that cannot mint now although the lease is held."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ClosedError(NotIssuingError):
    """close() was called; issuing stays blocked."""

    def __init__(self, message: str = "idkeeper: session is closed") -> None:
        super().__init__("closed", message)


class LeaseLostError(NotIssuingError):
    """The session held a lease and lost it for good (DESIGN §4): it expired on the
    monotonic clock, or a Renew answer proved it gone or already expired."""


class InvalidGrantError(IdKeeperError):
    """The Alloc answer failed validation (node ID outside the layout, node IDs
    granted twice, not the count asked for, a lease already expired locally).
    ``reason`` names the rule: ``layout``, ``count-mismatch``, ``expired-on-arrival``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class LayoutRefusedError(InvalidGrantError):
    """The server's layout failed the client's check: widths not all positive or not
    adding up to 63, a node or sequence field over 32 bits, an unusable epoch."""

    def __init__(self, message: str) -> None:
        super().__init__("layout", message)


class TransportError(IdKeeperError):
    """No replica answered: refused, reset or timed-out connections on every one."""


class ServerError(IdKeeperError):
    """An answer other than 200: ``status``, the problem+json ``code`` (empty when
    the body was not problem+json), ``detail`` and the raw ``body`` (at most 4 KiB)."""

    def __init__(self, op: str, server: str, status: int, code: str = "", detail: str = "",
                 body: str = "", details: Optional[dict[str, Any]] = None) -> None:
        msg = f"idkeeper: {op}: server {server} answered {status}"
        if code:
            msg += " " + code
        if detail:
            msg += ": " + detail
        super().__init__(msg)
        self.op, self.server, self.status, self.code = op, server, status, code
        self.detail, self.body, self.details = detail, body, details or {}

    def transient(self) -> bool:
        """Whether an Alloc failing with this answer is worth retrying (as the Go
        client): 5xx, 408, 429, CLOCK_SKEW_TOO_LARGE, NODE_IDS_EXHAUSTED,
        API_KEY_QUOTA_EXCEEDED. Anything else is a configuration error."""
        if self.status >= 500 or self.status in (408, 429):
            return True
        return self.code in ("CLOCK_SKEW_TOO_LARGE", "NODE_IDS_EXHAUSTED", "API_KEY_QUOTA_EXCEEDED")


class MalformedError(IdKeeperError):
    """A 200 answer whose body does not follow the HTTP contract; retried like a
    transport error, since it proves nothing about the lease."""


class ClockBackwardsError(IdKeeperError):
    """The wall clock is behind the generator's highest reading by more than
    max_backward_step; issuing resumes once it has caught up."""


class ClockStalledError(IdKeeperError):
    """A call waited for the next millisecond longer than its bound (max_backward_step
    plus 50 ms of real time) and the wall clock did not get there."""


class WindowError(IdKeeperError):
    """The timestamp to mint lies outside the lease window: ``before`` is True while a
    newly granted node ID is still cooling (before notBefore), False past expiresAt."""

    def __init__(self, before: bool, message: str) -> None:
        super().__init__(message)
        self.before = before
