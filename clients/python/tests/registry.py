"""A real registry for the tests: `idkeeper init` + `idkeeper server` on a bolt
file in a temp dir, loopback, a free port, leases of seconds. The binary is
IDKEEPER_BIN, else built once with `go build -o` from this checkout."""

from __future__ import annotations

import atexit
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_bin_lock = threading.Lock()
_bin: Optional[str] = None


def binary() -> str:
    global _bin
    with _bin_lock:
        if _bin is None:
            _bin = os.environ.get("IDKEEPER_BIN") or ""
            if not _bin:
                tmp = tempfile.mkdtemp(prefix="idkeeper-py-bin-")
                atexit.register(shutil.rmtree, tmp, True)
                out = os.path.join(tmp, "idkeeper")
                subprocess.run(["go", "build", "-o", out, "./cmd/idkeeper"], cwd=REPO, check=True)
                _bin = out
        return _bin


class Registry:
    """One registry server process; ``url`` and ``api_key`` once started."""

    def __init__(self, first_lease: str = "2s", lease_duration: str = "4s") -> None:
        self.dir = tempfile.mkdtemp(prefix="idkeeper-py-")
        self.store = "bolt:" + os.path.join(self.dir, "idkeeper.db")
        self.api_key = "idk_py_" + secrets.token_hex(16)
        self.env = dict(os.environ, IDKEEPER_BOOTSTRAP_API_KEY=self.api_key)
        self.args = ["server", "--store", self.store, "--listen", "127.0.0.1:0", "--unsafe-short-leases",
                     "--first-lease", first_lease, "--lease-duration", lease_duration, "--log-level", "warn"]
        self.proc: Optional[subprocess.Popen[str]] = None
        self.url = ""

    def start(self) -> "Registry":
        exe = binary()
        subprocess.run([exe, "init", "--store", self.store], env=self.env, check=True, capture_output=True)
        self.args[self.args.index("--log-level") + 1] = "info"
        self.proc = subprocess.Popen([exe, *self.args], env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            m = re.search(r"msg=listening addr=(\S+)", line)
            if m:
                self.url = "http://" + m.group(1)
                break
            if time.monotonic() > deadline:
                break
        if not self.url:
            self.stop()
            self.proc.stderr.close()
            raise RuntimeError("the registry did not start listening")
        threading.Thread(target=self._drain, daemon=True).start()
        return self

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for _ in self.proc.stderr:
            pass
        self.proc.stderr.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is None or self.proc.poll() is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
