#!/usr/bin/env python3
"""Conformance driver of the Python client (docs: the driver protocol of issue #33).

One JSON object per line on stdin (commands) and stdout (replies and events);
stderr is free-form log. Exits 0 after {"op":"quit"} or EOF. Optional extension:
"open" may carry "openTimeoutMs" (default 120000), after which open fails with the
last error (code TRANSPORT when no replica answered). "leaseHint" is accepted and
ignored: the registry decides the lease. The breaks are set on the session's
test-only hook (Session._break) before open; a library user never sets it."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from idkeeper import (ClosedError, IdKeeperError, LayoutRefusedError,  # noqa: E402
                      Requester, ServerError, Session, TransportError, process_requester)
from idkeeper._wire import format_ms  # noqa: E402
from idkeeper.session import BREAKS  # noqa: E402

_out = threading.Lock()


def send(obj: dict[str, Any]) -> None:
    line = json.dumps(obj, separators=(",", ":"))
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def error_code(e: BaseException) -> str:
    if isinstance(e, ServerError) and e.code:
        return e.code
    if isinstance(e, LayoutRefusedError):
        return "LAYOUT_REFUSED"
    if isinstance(e, ClosedError):
        return "CLOSED"
    if isinstance(e, TransportError) or isinstance(e, ServerError):
        return "TRANSPORT"
    return "NOT_ISSUING"


class Driver:
    def __init__(self) -> None:
        self.s: Optional[Session] = None
        self.brk = ""

    def on_event(self, kind: str, fields: dict[str, Any]) -> None:
        send({"ev": kind, **fields})

    def open(self, cmd: dict[str, Any]) -> dict[str, Any]:
        brk = cmd.get("break") or ""
        if brk not in BREAKS:
            return {"ev": "error", "code": "INVALID_REQUEST", "message": f"unknown break {brk!r}"}
        base = process_requester()
        machine = cmd.get("machineId") or base.machine_id
        servers = list(cmd["servers"])
        settings: dict[str, Any] = {}
        if brk == "first-replica-only":
            servers = servers[:1]
        if brk == "renew-retry-fast":
            settings.update(renew_loop_duration=1.0, min_retry_interval=1.0)
        s = Session(servers, cmd["apiKey"], int(cmd.get("count") or 1),
                    requester=Requester(machine, base.pid, base.started_ms), on_event=self.on_event,
                    on_fatal=lambda e: logging.error("fatal: %s", e), request_timeout=5.0, **settings)
        s._break = brk  # the negative control's test-only hook: never set by a library user
        self.brk = brk
        self.s = s
        try:
            s.open(timeout=float(cmd.get("openTimeoutMs") or 120000) / 1000)
        except IdKeeperError as e:
            return {"ev": "error", "code": error_code(e), "message": str(e)}
        lay = s.layout
        assert lay is not None
        return {"ev": "opened", "nodeIds": s.node_ids,
                "layout": {"epoch": format_ms(lay.epoch_ms), "timestampBits": lay.timestamp_bits,
                           "nodeBits": lay.node_bits, "sequenceBits": lay.sequence_bits}}

    def next(self, cmd: dict[str, Any]) -> dict[str, Any]:
        n = int(cmd.get("n") or 0)
        if self.s is None:
            return {"ev": "error", "code": "NOT_ISSUING", "message": "no session is open"}
        if not 1 <= n <= 100000:
            return {"ev": "error", "code": "INVALID_REQUEST", "message": f"n {n} is outside 1..100000"}
        mint = self.s.generator(0).next_id if self.brk == "single-node" else self.s.next_id
        try:
            ids = [mint() for _ in range(n)]
        except IdKeeperError as e:
            return {"ev": "error", "code": "NOT_ISSUING", "message": str(e)}
        return {"ev": "ids", "ids": [str(i) for i in ids]}

    def state(self) -> dict[str, Any]:
        s = self.s
        if s is None:
            return {"ev": "state", "issuing": False, "nodeIds": [], "renewals": 0, "leaseRemainingMs": 0}
        return {"ev": "state", "issuing": s.check() is None, "nodeIds": s.node_ids, "renewals": s.renewals,
                "leaseRemainingMs": int(s.time_left() * 1000)}

    def close(self) -> dict[str, Any]:
        if self.s is None:
            return {"ev": "closed", "removed": False}
        return {"ev": "closed", "removed": self.s.close()}


def main() -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    d = Driver()
    for raw in sys.stdin:
        raw = raw.strip()
        if not raw:
            continue
        try:
            cmd = json.loads(raw)
        except ValueError as e:
            send({"ev": "error", "code": "INVALID_REQUEST", "message": f"not JSON: {e}"})
            continue
        op, cid = cmd.get("op"), cmd.get("id")
        try:
            if op == "open":
                reply = d.open(cmd)
            elif op == "next":
                reply = d.next(cmd)
            elif op == "state":
                reply = d.state()
            elif op == "close":
                reply = d.close()
            elif op == "quit":
                send({"id": cid, "ev": "bye"})
                break
            else:
                reply = {"ev": "error", "code": "INVALID_REQUEST", "message": f"unknown op {op!r}"}
        except (KeyError, TypeError, ValueError) as e:
            reply = {"ev": "error", "code": "INVALID_REQUEST", "message": f"{type(e).__name__}: {e}"}
        send({"id": cid, **reply})
    if d.s is not None and not d.s.done.is_set():
        d.s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
