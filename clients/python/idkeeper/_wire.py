"""Wire formats of the registry (docs/api.md): times, the layout, lease bodies, and
the HTTP calls with failover over the replicas."""

from __future__ import annotations

import calendar
import http.client
import json
import re
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from .errors import LayoutRefusedError, MalformedError, ServerError, TransportError

MAX_ANSWER = 4 << 20
MAX_LOGGED_BODY = 4 << 10
MAX_SERVERS = 16
INT64_MAX = (1 << 63) - 1

_KEY_EXPIRY = re.compile(r'299 idkeeper "API key ([^ ";]+) expires at ([^;]+);')
KEY_NOTICE_EVERY_NS = 24 * 3600 * 1_000_000_000
_TIME = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(\.\d+)?([Zz]|[+-]\d\d:\d\d)$")


def parse_time_ns(s: Any, field_name: str) -> int:
    """Parses an RFC 3339 time (any offset, any fraction) into Unix nanoseconds."""
    if not isinstance(s, str) or s == "":
        raise MalformedError(f"{field_name} is missing")
    m = _TIME.match(s)
    if m is None:
        raise MalformedError(f"{field_name}: {s!r} is not an RFC 3339 time")
    y, mo, d, h, mi, sec = (int(m.group(i)) for i in range(1, 7))
    try:
        secs = calendar.timegm((y, mo, d, h, mi, sec, 0, 0, 0))
    except (ValueError, OverflowError) as e:
        raise MalformedError(f"{field_name}: {s!r}: {e}") from None
    frac = m.group(7)
    ns = int((frac[1:] + "000000000")[:9]) if frac else 0
    off = m.group(8)
    if off not in ("Z", "z"):
        sign = 1 if off[0] == "+" else -1
        secs -= sign * (int(off[1:3]) * 3600 + int(off[4:6]) * 60)
    return secs * 1_000_000_000 + ns


def format_ms(unix_ms: int) -> str:
    """Renders Unix milliseconds as RFC 3339 UTC with milliseconds."""
    t = time.gmtime(unix_ms // 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{unix_ms % 1000:03d}Z"


def format_ns(unix_ns: int) -> str:
    return format_ms(unix_ns // 1_000_000)


@dataclass(frozen=True)
class Layout:
    """The ID layout the server prescribes: epoch (Unix ms) and the three widths."""

    epoch_ms: int
    timestamp_bits: int
    node_bits: int
    sequence_bits: int

    @property
    def max_node(self) -> int:
        return (1 << self.node_bits) - 1

    @property
    def max_sequence(self) -> int:
        return (1 << self.sequence_bits) - 1

    @property
    def max_timestamp(self) -> int:
        return (1 << self.timestamp_bits) - 1

    def ids_per_second(self) -> int:
        return (1 << self.sequence_bits) * 1000

    def check(self) -> None:
        """Raises LayoutRefusedError unless the layout is one the Go client accepts:
        positive widths adding up to 63, node and sequence at most 32 bits, an epoch
        (a whole millisecond, after 0001-01-01) whose range fits int64 Unix ms."""
        t, n, s = self.timestamp_bits, self.node_bits, self.sequence_bits
        if t <= 0 or n <= 0 or s <= 0:
            raise LayoutRefusedError(f"idkeeper: layout: every width must be positive (timestamp {t}, node {n}, sequence {s})")
        if t + n + s != 63:
            raise LayoutRefusedError(f"idkeeper: layout: widths add up to {t + n + s}, want 63")
        if n > 32 or s > 32:
            raise LayoutRefusedError(f"idkeeper: layout: node and sequence widths must be at most 32 bits (node {n}, sequence {s})")
        if self.epoch_ms <= -62135596800000:
            raise LayoutRefusedError("idkeeper: layout: epoch is not set")
        if self.epoch_ms > INT64_MAX - (1 << t):
            raise LayoutRefusedError(f"idkeeper: layout: the layout's end (epoch + 2^{t} ms) is not representable in Unix milliseconds")

    def decode(self, id_: int) -> tuple[int, int, int]:
        """Splits an ID into (Unix ms, node ID, sequence)."""
        ts = id_ >> (self.node_bits + self.sequence_bits)
        return self.epoch_ms + ts, (id_ >> self.sequence_bits) & self.max_node, id_ & self.max_sequence


def parse_layout(obj: Any) -> Layout:
    if not isinstance(obj, dict):
        raise MalformedError('alloc: no "layout" member')
    epoch_ns = parse_time_ns(obj.get("epoch"), "layout.epoch")
    if epoch_ns % 1_000_000:
        raise LayoutRefusedError("idkeeper: layout: epoch is not a whole millisecond")
    widths = []
    for k in ("timestampBits", "nodeBits", "sequenceBits"):
        v = obj.get(k)
        if not isinstance(v, int) or isinstance(v, bool):
            raise MalformedError(f"layout.{k} is not an integer")
        widths.append(v)
    return Layout(epoch_ns // 1_000_000, widths[0], widths[1], widths[2])


@dataclass
class Lease:
    """One node ID the session holds. Times are Unix ms, the server's."""

    node_id: int
    not_before_ns: int
    expires_at_ns: int
    fencing_token: int
    receipt: str = ""


@dataclass
class Grant:
    """A decoded 200 answer of Alloc (layout set) or Renew."""

    leases: list[Lease]
    server_now_ns: int
    layout: Optional[Layout] = None


def decode_grant(op: str, ans: Any) -> Grant:
    if not isinstance(ans, dict):
        raise MalformedError(f"{op}: the answer is not a JSON object")
    raw = ans.get("leases")
    if not isinstance(raw, list):
        raise MalformedError(f'{op}: no "leases" member')
    now = parse_time_ns(ans.get("serverUtcNow"), "serverUtcNow")
    leases = []
    for i, wl in enumerate(raw):
        if not isinstance(wl, dict):
            raise MalformedError(f"{op}: leases[{i}] is not an object")
        node, tok = wl.get("nodeId"), wl.get("fencingToken")
        if not isinstance(node, int) or isinstance(node, bool) or not isinstance(tok, int) or isinstance(tok, bool):
            raise MalformedError(f"{op}: leases[{i}] lacks nodeId or fencingToken")
        receipt = wl.get("receipt") or ""
        if not isinstance(receipt, str):
            raise MalformedError(f"{op}: leases[{i}].receipt is not a string")
        leases.append(Lease(node, parse_time_ns(wl.get("notBefore"), f"leases[{i}].notBefore"),
                            parse_time_ns(wl.get("expiresAt"), f"leases[{i}].expiresAt"), tok, receipt))
    return Grant(leases, now)


class Transport(Protocol):
    """Sends one POST and returns (status, headers as a lower-case dict, body). It
    raises OSError (or any exception) for a transport failure: refused, reset,
    timed out. Tests inject a fake."""

    def __call__(self, url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, dict[str, str], bytes]: ...


def http_transport(ssl_context: Optional[ssl.SSLContext] = None) -> Transport:
    """The default transport: http.client, one connection per request, no
    redirects followed (the API key would go with them)."""

    def send(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, dict[str, str], bytes]:
        u = urllib.parse.urlsplit(url)
        conn: http.client.HTTPConnection
        if u.scheme == "https":
            conn = http.client.HTTPSConnection(u.hostname or "", u.port, timeout=timeout, context=ssl_context)
        else:
            conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=timeout)
        try:
            path = u.path or "/"
            conn.request("POST", path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read(MAX_ANSWER)
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()

    return send


def check_servers(servers: list[str]) -> list[str]:
    if isinstance(servers, str):
        servers = [servers]
    if not 1 <= len(servers) <= MAX_SERVERS:
        raise ValueError(f"idkeeper: servers names {len(servers)} URLs, want 1..{MAX_SERVERS}")
    out: list[str] = []
    for raw in servers:
        u = urllib.parse.urlsplit(raw)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"idkeeper: server {raw!r} is not an http(s) URL")
        base = raw.rstrip("/")
        if base in out:
            raise ValueError(f"idkeeper: server {raw!r} is named twice")
        out.append(base)
    return out


def redact(url: str) -> str:
    u = urllib.parse.urlsplit(url)
    if u.password is None:
        return url
    netloc = f"{u.username}:xxxxx@{u.hostname}" + (f":{u.port}" if u.port else "")
    return urllib.parse.urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))


@dataclass
class API:
    """The registry's lease calls over replicas: each call starts at the replica
    that answered last and moves on, each replica once, on a transport error or a
    5xx, never on a 4xx (the registry's verdict)."""

    servers: list[str]
    api_key: str
    transport: Transport
    timeout: float
    log: Any
    current: int = 0
    failovers: int = 0
    _mu: threading.Lock = field(default_factory=threading.Lock)
    _noticed: int = -1  # time.monotonic_ns() of the last key-expiry notice; -1: none yet

    def _observe(self, hdrs: dict[str, str]) -> None:
        """Logs the registry's notice that the API key expires soon (a Warning
        header in the key's last 14 days), at most once a day."""
        m = _KEY_EXPIRY.search(hdrs.get("warning", ""))
        if m is None:
            return
        now = time.monotonic_ns()
        with self._mu:
            if self._noticed >= 0 and now - self._noticed < KEY_NOTICE_EVERY_NS:
                return
            self._noticed = now
        self.log.warning("idkeeper: the registry says this session's API key %s expires at %s: create a new key "
                         "and give it to this program before then; once it expires, renewals fail and the session "
                         "ends with its lease", m.group(1), m.group(2))

    def post(self, op: str, path: str, body: dict[str, Any]) -> Any:
        payload = json.dumps(body, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json, application/problem+json",
                   "X-API-Key": self.api_key}
        n = len(self.servers)
        with self._mu:
            start = self.current
        last: Exception = TransportError(f"idkeeper: {op}: no replica tried")
        for i in range(n):
            at = (start + i) % n
            base = self.servers[at]
            try:
                status, hdrs, data = self.transport(base + path, payload, headers, self.timeout)
            except Exception as e:  # a transport failure of any kind proves nothing
                last = TransportError(f"idkeeper: {op}: {redact(base)}: {e}")
            else:
                self._observe(hdrs)
                if status == 200:
                    try:
                        ans = json.loads(data)
                    except ValueError as e:
                        raise MalformedError(f"idkeeper: {op}: malformed answer: {e}") from None
                    with self._mu:
                        self.current = at
                    return ans
                err = _server_error(op, redact(base), status, hdrs, data)
                if status < 500:
                    with self._mu:
                        self.current = at
                    raise err
                last = err
            if i < n - 1:
                with self._mu:
                    self.failovers += 1
                self.log.warning("idkeeper: registry replica %s failed (%s); trying the next one", redact(base), last)
        if n > 1 and isinstance(last, TransportError):
            raise TransportError(f"idkeeper: {op}: all {n} registry replicas failed; the last: {last}")
        raise last


def _server_error(op: str, server: str, status: int, hdrs: dict[str, str], data: bytes) -> ServerError:
    text = data[:MAX_LOGGED_BODY].decode("utf-8", "replace")
    if 300 <= status < 400:
        return ServerError(op, server, status, "", "redirected to " + hdrs.get("location", "") +
                           "; redirects are not followed (the API key would go with them)", text)
    code = detail = ""
    details: dict[str, Any] = {}
    if "json" in hdrs.get("content-type", ""):
        try:
            p = json.loads(data)
        except ValueError:
            p = None
        if isinstance(p, dict):
            code = str(p.get("code") or "")
            detail = str(p.get("detail") or p.get("title") or "")
            details = {k: v for k, v in p.items() if k not in ("type", "title", "status", "detail", "instance", "code", "field")}
    return ServerError(op, server, status, code, detail, text, details)
