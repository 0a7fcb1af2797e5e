"""Session: the lease lifecycle of DESIGN §4 and the issuing gate over one
generator per node ID."""

from __future__ import annotations

import itertools
import logging
import os
import random
import socket
import threading
from typing import Any, Callable, Optional, Sequence

from ._generator import NodeGenerator
from ._issuing import NOT_HELD, Issuing
from ._requester import Requester, new_instance, process_requester
from ._wire import API, Grant, Layout, Lease, check_servers, decode_grant, format_ms, format_ns, http_transport, parse_layout, Transport
from .clock import Clock, SystemClock, Timer
from .errors import (ClosedError, IdKeeperError, InvalidGrantError, LayoutRefusedError, LeaseLostError, MalformedError,
                     NotIssuingError, ServerError, TransportError)

NS = 1_000_000_000

# The negative controls of the conformance suite (its driver sets Session._break; a library user never does).
# The last seven are optional ones of the suite; first-replica-only, renew-retry-fast and single-node are
# the driver's own (its servers, its settings, its calls).
BREAKS = frozenset({"", "ignore-empty-renew", "ignore-count-mismatch", "ignore-expiry", "deadline-from-receive",
                    "no-backoff", "remove-without-minted", "remove-when-invalid",
                    "reuse-instance", "renew-late", "renew-retry-fast", "no-receipts", "accept-bad-layout",
                    "single-node", "first-replica-only"})

EventHandler = Callable[[str, dict[str, Any]], None]


def _default_fatal(log: logging.Logger) -> Callable[[IdKeeperError], None]:
    def fatal(err: IdKeeperError) -> None:
        log.critical("idkeeper: the lease is lost; exiting the process: %s", err)
        for h in logging.getLogger().handlers + log.handlers:
            h.flush()
        os._exit(1)
    return fatal


class Session(Issuing):
    """Leases ``count`` node IDs from an IdKeeper registry and mints 64-bit IDs with
    them in-process (DESIGN §4). Thread-safe.

    ``open()`` sends Alloc with a requester of this process plus a fresh random
    instance (kept across the retries, never reused), retrying transport errors,
    5xx, 408, 429, CLOCK_SKEW_TOO_LARGE, NODE_IDS_EXHAUSTED and
    API_KEY_QUOTA_EXCEEDED after 3 s doubling to 60 s, ±20 % jitter, capped after the
    jitter. It validates the grant (the layout as the Go client checks it, node IDs
    inside it, the count asked for, no lease already expired), then renews once at
    once. The session renews at half the lease; a failed Renew (transport, any
    non-200, malformed) is retried after min(renew_loop_duration, time left / 4), at
    least min_retry_interval. A 200 Renew with an empty list, another count, other
    node IDs or fencing tokens, or a lease already expired stops issuing at once and
    calls ``on_fatal``; so does the lease deadline: the monotonic send time of the
    last successful Alloc or Renew plus (expiresAt − serverUtcNow). Every issuing
    call checks the deadline after minting. Every Renew carries the leases' receipts.

    ``close()`` blocks new issuing, waits for the calls in flight (drain), then sends
    Remove with mintedUpTo (the highest timestamp minted); nothing when the lease is
    already invalid. A failed Remove is logged, not raised.

    ``on_fatal(err)`` runs once, in a timer thread, when a lease held after open()
    is lost; the default logs and ends the process with os._exit(1), because a
    service that cannot mint should be restarted by its supervisor. ``on_event(kind,
    fields)`` observes ``renewed`` (nodeIds, expiresAt), ``invalid`` (reason) and
    ``retry`` (op, delayMs)."""

    def __init__(self, servers: Sequence[str] | str, api_key: str, count: int = 1, *,
                 requester: Optional[Requester] = None, host: Optional[str] = None,
                 labels: Optional[dict[str, str]] = None, transport: Optional[Transport] = None,
                 clock: Optional[Clock] = None, logger: Optional[logging.Logger] = None,
                 on_fatal: Optional[Callable[[IdKeeperError], None]] = None,
                 on_event: Optional[EventHandler] = None, request_timeout: float = 10.0,
                 renew_loop_duration: float = 600.0, min_retry_interval: float = 5.0,
                 backoff_initial: float = 3.0, backoff_max: float = 60.0, backoff_multiplier: float = 2.0,
                 backoff_jitter: float = 0.2, max_backward_step: float = 5.0,
                 rng: Optional[random.Random] = None) -> None:
        if not api_key:
            raise ValueError("idkeeper: api_key is required")
        if not 1 <= count <= 4096:
            raise ValueError(f"idkeeper: count {count} is outside 1..4096")
        if backoff_multiplier < 1 or not 0 <= backoff_jitter < 1:
            raise ValueError("idkeeper: backoff_multiplier must be at least 1 and backoff_jitter in [0, 1)")
        self._log = logger or logging.getLogger("idkeeper")
        self._clk: Clock = clock or SystemClock()
        self._api = API(check_servers(list(servers) if not isinstance(servers, str) else [servers]), api_key,
                        transport or http_transport(), request_timeout, self._log)
        self._count = count
        self._base_requester = requester
        host = socket.gethostname() if host is None else host
        self._client: Optional[dict[str, Any]] = None
        if host != "-" and (host or labels):
            self._client = {k: v for k, v in (("host", host), ("labels", dict(labels or {}))) if v}
        self._on_fatal = on_fatal or _default_fatal(self._log)
        self._on_event = on_event
        self._renew_loop = int(renew_loop_duration * NS)
        self._min_retry = int(min_retry_interval * NS)
        self._b_init, self._b_max = int(backoff_initial * NS), int(backoff_max * NS)
        self._b_mult, self._b_jitter = backoff_multiplier, backoff_jitter
        self._max_back = int(max_backward_step * NS)
        self._rng = rng or random.Random()
        self._break = ""

        self._mu = threading.Lock()
        self._renew_mu = threading.Lock()
        self._state = "new"  # new, opening, open, ended
        self._closing = False
        self._opened = False
        self._halt: Optional[NotIssuingError] = None
        self._deadline = NOT_HELD
        self._gens: list[NodeGenerator] = []
        self._rr = itertools.count()
        self._requester: Optional[Requester] = None
        self._layout: Optional[Layout] = None
        self._leases: list[Lease] = []
        self._renew_timer: Optional[Timer] = None
        self._expiry_timer: Optional[Timer] = None
        self._wake = threading.Event()
        self._open_done = threading.Event()
        self._open_done.set()
        self._done = threading.Event()
        self._err: Optional[IdKeeperError] = None
        self.renewals = 0

    # -- lifecycle -------------------------------------------------------------

    def __enter__(self) -> "Session":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self, timeout: Optional[float] = None) -> None:
        """Obtains the leases and starts renewing them; blocks until held. Raises
        ServerError for an answer retrying cannot fix, InvalidGrantError
        (LayoutRefusedError) for a grant that fails validation, LeaseLostError when
        the first Renew proves the lease gone, ClosedError when close() came first,
        and, after ``timeout`` seconds of retries, the last error (TransportError
        when no replica answered). A session whose open() failed has ended."""
        with self._mu:
            if self._closing or self._state == "ended":
                raise ClosedError()
            if self._state != "new":
                raise IdKeeperError("idkeeper: open called twice")
            self._state = "opening"
            self._open_done.clear()
        try:
            self._open(None if timeout is None else self._clk.mono_ns() + int(timeout * NS))
        except IdKeeperError as e:
            with self._mu:
                closing = self._closing
                if not closing:
                    self._state = "ended"
            if not closing:
                self._end(e)
            raise
        finally:
            self._open_done.set()

    def _open(self, until: Optional[int]) -> None:
        base = self._base_requester or process_requester()
        self._requester = base.with_instance("conformance-reused-instance" if self._break == "reuse-instance" else new_instance())
        try:
            grant, sent = self._allocate(until)  # raises LayoutRefusedError for an unusable epoch
            gens = self._validate(grant, sent)
        except InvalidGrantError as e:
            self._emit("invalid", reason=e.reason)
            self._log.error("idkeeper: the server's grant is unusable; releasing it: %s", e)
            self._release(-1)
            raise
        with self._mu:
            if self._closing:
                release = True
            else:
                release = False
                self._layout, self._leases = grant.layout, grant.leases
                self._gens = gens
                self._state = "open"
                self._set_deadline_locked(sent, grant)
        if release:
            self._release(-1)
            raise ClosedError()
        with self._renew_mu:
            fatal = self._renew_locked()
        if fatal is not None:
            raise fatal
        with self._mu:
            if self._halt is not None:
                raise self._refusal()
            self._opened = True
        self._log.info("idkeeper: lease held: node IDs %s, requester instance %s",
                       [l.node_id for l in self._leases], self._requester.instance)

    def _allocate(self, until: Optional[int]) -> tuple[Grant, int]:
        assert self._requester is not None
        attempt = 0
        while True:
            sent = self._clk.mono_ns()
            body: dict[str, Any] = {"requester": self._requester.wire(), "count": self._count,
                                    "clientUtcNow": format_ns(self._clk.now_ns())}
            if self._client:
                body["client"] = self._client
            try:
                ans = self._api.post("alloc", "/v1/leases", body)
                if not isinstance(ans, dict):
                    raise MalformedError("idkeeper: alloc: the answer is not a JSON object")
                layout = parse_layout(ans.get("layout"))
                grant = decode_grant("alloc", ans)
                grant.layout = layout
                return grant, sent
            except LayoutRefusedError:
                raise
            except (TransportError, ServerError, MalformedError) as e:
                if isinstance(e, ServerError) and not e.transient():
                    self._log.error("idkeeper: alloc refused: %s", e)
                    raise
                d = 0 if self._break == "no-backoff" else self.backoff_ns(attempt)
                self._log.warning("idkeeper: alloc failed (attempt %d); retrying in %.1f s: %s", attempt + 1, d / NS, e)
                if until is not None and self._clk.mono_ns() + d > until:
                    raise
                self._emit("retry", op="alloc", delayMs=d // 1_000_000)
                if not self._sleep(d):
                    raise ClosedError() from e
                attempt += 1

    def backoff_ns(self, attempt: int) -> int:
        """The wait before Alloc retry attempt+1: min(max, b × (1 ± jitter)) with
        b = min(max, initial × multiplier^attempt)."""
        try:
            base = min(self._b_init * self._b_mult ** attempt, self._b_max)
        except OverflowError:
            base = self._b_max
        return int(min(base * (1 + self._b_jitter * (2 * self._rng.random() - 1)), self._b_max))

    def _sleep(self, d: int) -> bool:
        """Waits d ns on the session's clock; False when close() interrupted it."""
        fired = threading.Event()
        t = self._clk.call_later(d, lambda: (fired.set(), self._wake.set()))
        while not fired.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._closing:
                t.cancel()
                return False
        return True

    def _validate(self, g: Grant, sent: int) -> list[NodeGenerator]:
        assert g.layout is not None
        if self._break == "accept-bad-layout":
            try:
                g.layout.check()
            except LayoutRefusedError:
                g.layout = Layout(g.layout.epoch_ms, 41, 12, 10)
        g.layout.check()
        if len(g.leases) != self._count:
            raise InvalidGrantError("count-mismatch", f"idkeeper: invalid grant: asked for {self._count} node IDs, granted {len(g.leases)}")
        g.leases.sort(key=lambda l: l.node_id)
        now = self._clk.now_ns()
        for i, l in enumerate(g.leases):
            if not 0 <= l.node_id <= g.layout.max_node:
                raise InvalidGrantError("layout", f"idkeeper: invalid grant: node ID {l.node_id} is outside 0..{g.layout.max_node}")
            if i and g.leases[i - 1].node_id == l.node_id:
                raise InvalidGrantError("layout", f"idkeeper: invalid grant: node ID {l.node_id} granted twice")
            if now > l.expires_at_ns and self._break != "ignore-expiry":
                raise InvalidGrantError("expired-on-arrival", f"idkeeper: invalid grant: the lease of node ID {l.node_id} "
                                        f"expires at {format_ns(l.expires_at_ns)}, already past by the local clock")
        if self._deadline_of(sent, self._clk.mono_ns(), g) <= self._clk.mono_ns() and self._break != "ignore-expiry":
            raise InvalidGrantError("expired-on-arrival", "idkeeper: invalid grant: the lease ran out before the answer arrived")
        gens = [NodeGenerator(g.layout, l.node_id, self._clk.now_ns, self._max_back, l.not_before_ns, l.expires_at_ns, self._log)
                for l in g.leases]
        if self._break == "ignore-expiry":
            for gen in gens:
                gen.ignore_window_end = True
        return gens

    def _deadline_of(self, sent: int, received: int, g: Grant) -> int:
        start = received if self._break == "deadline-from-receive" else sent
        return start + min(l.expires_at_ns for l in g.leases) - g.server_now_ns

    def _set_deadline_locked(self, sent: int, g: Grant) -> None:
        self._deadline = self._deadline_of(sent, self._clk.mono_ns(), g)
        self._arm_expiry_locked()

    def _arm_expiry_locked(self) -> None:
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        self._expiry_timer = self._clk.call_later(self._deadline - self._clk.mono_ns(), self._on_expiry)

    def _on_expiry(self) -> None:
        with self._mu:
            if self._state != "open" or self._closing or self._break == "ignore-expiry":
                return
            if self._valid():  # renewed meanwhile, or a timer that fired a hair early
                self._arm_expiry_locked()
                return
        self._report(self._fail(LeaseLostError("expired", "idkeeper: lease lost: the lease expired on the local monotonic clock")))

    def _valid(self) -> bool:
        return self._clk.mono_ns() < self._deadline

    # -- renewing --------------------------------------------------------------

    def _renew_tick(self) -> None:
        with self._renew_mu:
            fatal = self._renew_locked()
        self._report(fatal)

    def _renew_locked(self) -> Optional[IdKeeperError]:
        """Sends one Renew, classifies the answer and schedules the next one; returns
        the error to hand to on_fatal, if any. Callers hold _renew_mu."""
        with self._mu:
            if self._state != "open" or self._closing:
                return None
            held = list(self._leases)
        if not self._valid() and self._break != "ignore-expiry":
            return self._fail(LeaseLostError("expired", "idkeeper: lease lost: the lease expired on the local monotonic clock"))
        assert self._requester is not None
        body = {"requester": self._requester.wire(), "clientUtcNow": format_ns(self._clk.now_ns()),
                "fencingTokens": [l.fencing_token for l in held]}
        receipts = [l.receipt for l in held if l.receipt]
        if receipts and self._break != "no-receipts":
            body["receipts"] = receipts
        sent = self._clk.mono_ns()
        try:
            g = decode_grant("renew", self._api.post("renew", "/v1/leases/renew", body))
        except (TransportError, ServerError, MalformedError) as e:
            self._retry_renew(e)
            return None
        received = self._clk.mono_ns()
        if not self._valid() and self._break != "ignore-expiry":
            return self._fail(LeaseLostError("expired", "idkeeper: lease lost: the lease expired on the local monotonic clock"))
        lost = self._check_renewed(held, g, sent, received)
        if lost is not None:
            if (lost.reason, self._break) in (("empty-renew", "ignore-empty-renew"), ("count-mismatch", "ignore-count-mismatch")):
                self._retry_renew(lost)
                return None
            return self._fail(lost)
        with self._mu:
            if self._state != "open" or self._closing or self._halt is not None:
                return None
            for i, l in enumerate(g.leases):
                # A renew never moves the window's start back; a later one (a lease
                # restored after a store reset) is the safer one to keep.
                l.not_before_ns = max(l.not_before_ns, held[i].not_before_ns)
                l.receipt = l.receipt or held[i].receipt
                self._gens[i].set_window(l.not_before_ns, l.expires_at_ns)
            self._leases = g.leases
            self._deadline = self._deadline_of(sent, received, g)
            self._arm_expiry_locked()
            lease = min(l.expires_at_ns for l in g.leases) - g.server_now_ns
            half = lease * 3 // 4 if self._break == "renew-late" else lease // 2
            self._schedule_locked(max(sent + half - self._clk.mono_ns(), 0))
            self.renewals += 1
            expires = format_ns(min(l.expires_at_ns for l in g.leases))
        self._emit("renewed", nodeIds=[l.node_id for l in g.leases], expiresAt=expires)
        return None

    def _retry_renew(self, err: Exception) -> None:
        with self._mu:
            if self._state != "open" or self._closing:
                return
            left = self._deadline - self._clk.mono_ns()
            d = max(min(self._renew_loop, left // 4), self._min_retry)
            self._schedule_locked(d)
        # A refusal (4xx) does not prove the lease gone: retried until the deadline, logged louder.
        level = logging.ERROR if isinstance(err, ServerError) and err.status < 500 else logging.WARNING
        self._log.log(level, "idkeeper: renew failed; retrying in %.1f s (lease left %.1f s): %s", d / NS, max(left, 0) / NS, err)
        self._emit("retry", op="renew", delayMs=d // 1_000_000)

    def _check_renewed(self, held: list[Lease], g: Grant, sent: int, received: int) -> Optional[LeaseLostError]:
        if not g.leases:
            return LeaseLostError("empty-renew", "idkeeper: lease lost: Renew answered an empty list: the server holds no lease for this session")
        g.leases.sort(key=lambda l: l.node_id)
        if len(g.leases) != len(held):
            return LeaseLostError("count-mismatch", f"idkeeper: lease lost: Renew answered {len(g.leases)} leases, the session holds {len(held)}")
        for h, l in zip(held, g.leases):
            if h.node_id != l.node_id or h.fencing_token != l.fencing_token:
                return LeaseLostError("lease-lost", f"idkeeper: lease lost: Renew answered node ID {l.node_id} token {l.fencing_token}, "
                                      f"the session holds node ID {h.node_id} token {h.fencing_token}")
        if self._break == "ignore-expiry":
            return None
        now = self._clk.now_ns()
        for l in g.leases:
            if now > l.expires_at_ns:
                return LeaseLostError("expired-on-arrival", f"idkeeper: lease lost: the renewed lease of node ID {l.node_id} "
                                      f"expires at {format_ns(l.expires_at_ns)}, already past by the local clock")
        if self._deadline_of(sent, received, g) <= self._clk.mono_ns():
            return LeaseLostError("expired-on-arrival", "idkeeper: lease lost: the renewed lease ran out before the answer arrived")
        return None

    def _schedule_locked(self, d: int) -> None:
        if self._renew_timer is not None:
            self._renew_timer.cancel()
        self._renew_timer = self._clk.call_later(d, self._renew_tick)

    def _stop_timers_locked(self) -> None:
        for name in ("_renew_timer", "_expiry_timer"):
            t = getattr(self, name)
            if t is not None:
                t.cancel()
                setattr(self, name, None)

    def _fail(self, cause: LeaseLostError) -> Optional[IdKeeperError]:
        """Blocks issuing at once; returns cause when on_fatal must get it."""
        with self._mu:
            if self._state != "open":
                return None
            if self._halt is None or isinstance(self._halt, ClosedError):
                self._halt = cause
            self._deadline = NOT_HELD
            self._stop_timers_locked()
            closing, opened = self._closing, self._opened
            if not closing:
                self._state = "ended"
        self._emit("invalid", reason=cause.reason)
        if closing:
            self._log.warning("idkeeper: lease lost while closing: %s", cause)
            return None
        self._log.error("idkeeper: lease lost; issuing is blocked: %s", cause)
        self._end(cause)
        return cause if opened else None

    def _report(self, fatal: Optional[IdKeeperError]) -> None:
        if fatal is not None:
            self._on_fatal(fatal)

    def _end(self, err: IdKeeperError) -> None:
        with self._mu:
            if self._done.is_set():
                return
            self._err = err
            self._done.set()

    def _emit(self, kind: str, **fields: Any) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(kind, fields)
        except Exception:  # an observer's bug must not break the lease
            self._log.exception("idkeeper: on_event raised")

    # -- closing ---------------------------------------------------------------

    def close(self) -> bool:
        """Blocks new issuing, drains the calls in flight, stops renewing, then, if
        the lease is still valid, sends Remove with mintedUpTo (left out when
        nothing was minted). Returns whether a Remove was sent. Idempotent."""
        with self._mu:
            if self._closing:
                again = True
            else:
                again = False
                self._closing = True
                if self._halt is None:
                    self._halt = ClosedError()
                self._stop_timers_locked()
        if again:
            self._done.wait()
            return False
        self._wake.set()
        self._open_done.wait()
        for g in self._gens:  # every issuing call holds its generator's lock
            with g.lock:
                pass
        with self._renew_mu:
            pass
        with self._mu:
            was_open = self._state == "open"
            valid = was_open and isinstance(self._halt, ClosedError) and self._valid()
            held = bool(self._gens)  # a grant was installed, whether or not it is still valid
            self._state = "ended"
            self._deadline = NOT_HELD
        sent = False
        if valid or (held and self._break == "remove-when-invalid"):
            sent = True
            up_to = -1 if self._break == "remove-without-minted" else self._minted_up_to_ms()
            self._release(up_to)
        elif held:
            self._log.warning("idkeeper: closed without Remove: the lease was no longer valid")
        self._end(ClosedError())
        return sent

    def _minted_up_to_ms(self) -> int:
        return max((g.minted_up_to_ms() for g in self._gens), default=-1)

    def _release(self, minted_up_to_ms: int) -> None:
        assert self._requester is not None
        body: dict[str, Any] = {"requester": self._requester.wire()}
        if minted_up_to_ms >= 0:
            body["mintedUpTo"] = format_ms(minted_up_to_ms)
        try:
            self._api.post("remove", "/v1/leases/remove", body)
            self._log.info("idkeeper: leases released, mintedUpTo %s", body.get("mintedUpTo", "-"))
        except IdKeeperError as e:
            self._log.error("idkeeper: remove failed; the server reclaims the node IDs after expiry + grace: %s", e)

    # -- state -----------------------------------------------------------------

    @property
    def healthy(self) -> bool:
        return self.check() is None

    @property
    def node_ids(self) -> list[int]:
        return [g.node for g in self._gens]

    @property
    def leases(self) -> list[Lease]:
        with self._mu:
            return list(self._leases)

    @property
    def layout(self) -> Optional[Layout]:
        return self._layout

    @property
    def requester(self) -> Optional[Requester]:
        return self._requester

    def time_left(self) -> float:
        """Seconds the lease stays valid on the monotonic clock; 0 when none is held."""
        d = self._deadline
        return 0.0 if d == NOT_HELD else max(d - self._clk.mono_ns(), 0) / NS

    @property
    def done(self) -> threading.Event:
        """Set once the session has ended: closed, lease lost, or open() failed."""
        return self._done

    @property
    def error(self) -> Optional[IdKeeperError]:
        """Why the session ended; None while it runs."""
        return self._err if self._done.is_set() else None

    @property
    def failovers(self) -> int:
        return self._api.failovers
