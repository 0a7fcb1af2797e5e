"""This process's identity (DESIGN §3): machine ID, PID, start time; every session
adds a random instance of its own."""

from __future__ import annotations

import base64
import os
import secrets
import socket
import time
from dataclasses import dataclass, replace
from typing import Optional

from ._wire import format_ms

MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
MAX_MACHINE_ID = 256
_IMPORTED_MS = time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Requester:
    """A requester: machine_id, pid, started_ms (Unix ms) and the session's instance."""

    machine_id: str
    pid: int
    started_ms: int
    instance: str = ""

    def wire(self) -> dict[str, object]:
        d: dict[str, object] = {"machineId": self.machine_id, "pid": self.pid, "startedAt": format_ms(self.started_ms)}
        if self.instance:
            d["instance"] = self.instance
        return d

    def with_instance(self, instance: str) -> "Requester":
        return replace(self, instance=instance)


def new_instance() -> str:
    """128 random bits as 22 base64url characters."""
    return base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode()


def machine_id(paths: tuple[str, ...] = MACHINE_ID_FILES) -> str:
    for p in paths:
        try:
            with open(p, encoding="utf-8") as f:
                v = f.read().strip()
        except OSError:
            continue
        if v and len(v.encode()) <= MAX_MACHINE_ID:
            return v
    h = socket.gethostname().strip()
    if not h:
        raise RuntimeError(f"idkeeper: no machine ID in {paths} and an empty host name")
    return h


def process_start_ms() -> int:
    """From /proc (field 22 of /proc/self/stat in USER_HZ ticks, plus btime), else
    the time this module was imported."""
    try:
        with open("/proc/self/stat", encoding="utf-8") as f:
            stat = f.read()
        with open("/proc/stat", encoding="utf-8") as f:
            sys_stat = f.read()
        fields = stat[stat.rindex(")") + 1:].split()
        ticks = int(fields[22 - 3])
        hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        for line in sys_stat.splitlines():
            if line.startswith("btime "):
                return int(line.split()[1]) * 1000 + ticks * 1000 // hz
    except (OSError, ValueError, IndexError):
        pass
    return _IMPORTED_MS


_process: Optional[Requester] = None


def process_requester() -> Requester:
    """This process's requester without an instance, read once."""
    global _process
    if _process is None:
        _process = Requester(machine_id(), os.getpid(), process_start_ms())
    return _process
