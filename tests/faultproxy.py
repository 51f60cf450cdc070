"""A fault-injecting HTTP/1.1 proxy between client nodes and a real registry, for the test suite.

Why the fault goes on the answer: a replayer under test must report what the
registry did and what the network did to the answer, and must never send a
request twice.  So every request is forwarded to the registry exactly once and
its real answer is read in full — the registry's JSON access log (the ground
truth) shows each request once — and only then is the answer replaced, cut or
withheld.  Each injected fault is recorded with the outcome class
(``drtp.replay.outcome``) a correct replayer must report for it.

Fault kinds (:data:`KINDS`):

* ``503``, ``429``, ``500`` — the registry's answer is discarded and that status
  is sent instead, with a small JSON body and Content-Length (outcome ``http``);
  a 429 or 503 says when to come back (``Retry-After``: the proxy's ``retry_after``,
  delta-seconds or an HTTP-date; None leaves the header out);
* ``close`` — the client connection is closed without a byte of the answer
  (outcome ``reset``);
* ``reset`` — the header block and half of the body are sent, then the connection
  is reset (RST: ``SO_LINGER`` 0), outcome ``truncated``; an answer with fewer
  than 2 body bytes is reset after part of its header block, outcome ``reset``;
* ``delay`` — the answer is held for ``delay_s`` (longer than the client's
  timeout), then the connection is closed (outcome ``timeout``).

Two plans model a registry under load rather than a broken one: :class:`TokenBucket`
answers 429 beyond a rate (a hosted registry's throttle), and :class:`Stall` holds
every answer for a while (kind ``stall``: the real answer, late; not a fault, so not
in :attr:`FaultProxy.injected`).

Loopback only, one thread per client connection with its own keep-alive
connection to the registry, every loop bounded by the stop flag or a timeout.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
import select
import socket
import struct
import termios
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httptools

from drtp.replay.outcome import HTTP, RESET, TIMEOUT, TRUNCATED

KINDS = ("503", "429", "500", "close", "reset", "delay")
STATUS_KINDS = {"503": 503, "429": 429, "500": 500}
STALL = "stall"  # the answer is held until the Stall plan's stall ends, then delivered as it is
REASONS = {503: "Service Unavailable", 429: "Too Many Requests", 500: "Internal Server Error"}
BODY_METHODS = frozenset(("POST", "PUT", "PATCH"))
LOOPBACK = frozenset(("127.0.0.1", "localhost", "::1"))
RECV_SIZE = 1 << 16
POLL_S = 0.2  # how often idle loops look at the stop flag
DRAIN_S = 2.0  # longest wait for the client to take the bytes sent before a reset

FaultPlan = Callable[[int, str, str], "str | None"]
Latency = Callable[[str, str], float]
"""Added latency per request: ``(method, path) -> seconds`` the answer is held before it is sent (0: none)."""
"""Decides per request: ``(index, method, path) -> kind or None``; ``index`` counts requests in arrival order."""


@dataclass(frozen=True)
class Injected:
    """One injected fault, and what a correct replayer must report for that request."""

    index: int  # the request's position in arrival order at the proxy (0-based)
    method: str
    path: str  # the request target without the query string
    kind: str
    outcome: str  # drtp.replay.outcome class the replayer must report
    status: int  # the status it must report: the injected one for ``http``, else 0
    upstream_status: int  # what the registry really answered (the request did reach it)


@dataclass(frozen=True)
class Forwarded:
    """One request the registry received through the proxy, and the fault (if any) put on its answer."""

    index: int
    method: str
    path: str
    upstream_status: int
    fault: str | None
    received: float = 0.0  # time.monotonic() when the request had arrived ...
    answered: float = 0.0  # ... and when its answer was sent (after any added latency)


def expected_outcome(kind: str, body_bytes: int) -> tuple[str, int]:
    """The (outcome class, status) a replayer must report for ``kind`` on an answer with ``body_bytes`` of body."""
    if kind in STATUS_KINDS:
        return HTTP, STATUS_KINDS[kind]
    if kind == "close":
        return RESET, 0
    if kind == "reset":
        return (TRUNCATED, 0) if body_bytes >= 2 else (RESET, 0)
    if kind == "delay":
        return TIMEOUT, 0
    raise ValueError(f"unknown fault kind {kind!r}; one of {', '.join(KINDS)}")


def can_cause(outcome: str, status: int) -> bool:
    """True for a failed row the proxy could have caused; other failures follow from them (a read of a layer
    whose push failed is a 404, a PATCH after a failed POST is never sent)."""
    return outcome in (RESET, TRUNCATED, TIMEOUT) or (outcome == HTTP and int(status) in STATUS_KINDS.values())


def fault_class(outcome: str, status: int) -> str:
    """A failure's class as a report shows it: the outcome, with the status for an HTTP failure (``http 503``)."""
    return f"{outcome} {int(status)}" if outcome == HTTP else outcome


# -- fault plans ---------------------------------------------------------------------------------------

_REPLAYED = re.compile(r"^/v2/(?P<repo>.+)/(?:manifests|blobs)/")


def is_replayed(method: str, path: str) -> bool:
    """True for requests a replay sends for its trace (manifests, blobs, uploads).

    The registry check (``GET /v2/``) and the preflight's probe repository are
    left alone: a fault there would stop the run before it replays anything.
    """
    m = _REPLAYED.match(path)
    return m is not None and not m.group("repo").endswith("drtp-preflight")


def no_faults(index: int, method: str, path: str) -> str | None:
    return None


@dataclass(frozen=True)
class At:
    """Faults at given arrival indices: for a test whose one client sends in a known order."""

    kinds: dict[int, str]

    def __call__(self, index: int, method: str, path: str) -> str | None:
        return self.kinds.get(index)


class Chosen:
    """Each of ``kinds`` (``per_kind`` times) on chosen replayed requests of every method.

    For each method separately, the ``start``-th replayed request and every
    ``gap``-th after it get the next fault, until each kind was used
    ``per_kind`` times for that method; so every method the trace has enough of
    sees every kind.  A (method, path) is faulted at most once and not counted
    after that, so a read sent again (client_info.retries) gets its real answer.
    Stateful: the proxy calls a plan under its lock.
    """

    def __init__(
        self,
        kinds: Sequence[str] = KINDS,
        per_kind: int = 1,
        start: int = 2,
        gap: int = 4,
        methods: Sequence[str] = ("GET", "HEAD", "POST", "PATCH", "PUT"),
    ) -> None:
        for k in kinds:
            expected_outcome(k, 0)  # unknown kinds fail here, not in the middle of a run
        self.kinds = tuple(kinds)
        self.per_kind = per_kind
        self.start = start
        self.gap = gap
        self.methods = frozenset(methods)
        self.seen: Counter[str] = Counter()
        self.faulted: set[tuple[str, str]] = set()

    def __call__(self, index: int, method: str, path: str) -> str | None:
        if method not in self.methods or not is_replayed(method, path) or (method, path) in self.faulted:
            return None
        n = self.seen[method]
        self.seen[method] += 1
        if n < self.start or (n - self.start) % self.gap:
            return None
        slot = (n - self.start) // self.gap
        if slot >= len(self.kinds) * self.per_kind:
            return None
        self.faulted.add((method, path))
        return self.kinds[slot // self.per_kind]


@dataclass(frozen=True)
class Mixed:
    """About ``rate`` of the replayed requests get a fault, its kind drawn from ``kinds``; seeded.

    The draw depends only on (seed, index), so the same arrival order gets the
    same faults whatever threads the proxy runs.
    """

    rate: float = 0.1
    seed: int = 1
    kinds: tuple[str, ...] = KINDS

    def __call__(self, index: int, method: str, path: str) -> str | None:
        if not is_replayed(method, path):
            return None
        h = hashlib.blake2b(f"{self.seed}:{index}".encode(), digest_size=16).digest()
        draw = int.from_bytes(h[:8], "big") / 2**64
        if draw >= self.rate:
            return None
        return self.kinds[int.from_bytes(h[8:], "big") % len(self.kinds)]


class TokenBucket:
    """429 for the replayed requests beyond ``rate`` per second, ``burst`` of them at once: a throttling registry.

    A token is added every 1/rate seconds up to ``burst``; a request arriving with no token left is
    throttled.  Stateful: the proxy calls a plan under its lock, in arrival order.
    """

    def __init__(self, rate: float, burst: int = 1) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.last: float | None = None

    def __call__(self, index: int, method: str, path: str) -> str | None:
        if not is_replayed(method, path):
            return None
        now = time.monotonic()
        if self.last is not None:
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return None
        return "429"


class Stall:
    """The registry stalls for ``seconds`` from the arrival of the ``after``-th replayed request (0-based):
    the answers to the replayed requests arriving meanwhile are held until the stall ends.

    :attr:`started` and :attr:`ended` are its wall-clock times (``time.time()``), to line up with a run's
    ``start_epoch``; :attr:`stalled` counts the answers held.
    """

    def __init__(self, after: int, seconds: float) -> None:
        self.after = after
        self.seconds = seconds
        self.seen = 0
        self.started: float | None = None
        self.until = 0.0  # monotonic end of the stall
        self.stalled = 0

    @property
    def ended(self) -> float | None:
        return None if self.started is None else self.started + self.seconds

    def __call__(self, index: int, method: str, path: str) -> str | None:
        if not is_replayed(method, path):
            return None
        if self.seen == self.after:
            self.started = time.time()
            self.until = time.monotonic() + self.seconds
        self.seen += 1
        if time.monotonic() < self.until:
            self.stalled += 1
            return STALL
        return None

    def remaining(self) -> float:
        """Seconds until the stall ends (0 once it has)."""
        return max(0.0, self.until - time.monotonic())


# -- HTTP/1.1 framing ------------------------------------------------------------------------------------


@dataclass
class Request:
    """One client request, read whole (the client nodes send bodies with Content-Length)."""

    method: str = ""
    url: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    keep_alive: bool = True

    @property
    def path(self) -> str:
        return self.url.split(b"?", 1)[0].decode("latin-1")

    def wire(self) -> bytes:
        """The request as sent upstream: the client's headers, the body re-framed with Content-Length."""
        lines = [f"{self.method} ".encode() + self.url + b" HTTP/1.1\r\n"]
        for name, value in self.headers:
            if name.lower() not in (b"content-length", b"transfer-encoding"):
                lines.append(name + b": " + value + b"\r\n")
        if self.body or self.method in BODY_METHODS:
            lines.append(f"Content-Length: {len(self.body)}\r\n".encode())
        lines.append(b"\r\n")
        return b"".join(lines) + bytes(self.body)


class _RequestParser:
    """httptools callbacks collecting the client's requests (keep-alive: one after the other)."""

    def __init__(self) -> None:
        self.current = Request()
        self.done: list[Request] = []
        self.parser = httptools.HttpRequestParser(self)

    def feed(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_begin(self) -> None:
        self.current = Request()

    def on_url(self, url: bytes) -> None:
        self.current.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.current.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.current.body += body

    def on_message_complete(self) -> None:
        self.current.method = self.parser.get_method().decode("latin-1")
        self.current.keep_alive = self.parser.should_keep_alive()
        self.done.append(self.current)


@dataclass
class Answer:
    """The registry's whole answer: its bytes as received, where the body starts, the body's decoded size."""

    raw: bytearray = field(default_factory=bytearray)
    head_end: int = -1
    body_bytes: int = 0
    status: int = 0
    keep_alive: bool = False
    complete: bool = False


class _AnswerParser:
    """httptools callbacks for one upstream answer; an answer to HEAD ends with its header block."""

    def __init__(self, head: bool) -> None:
        self.answer = Answer()
        self.head = head
        self.parser = httptools.HttpResponseParser(self)

    def on_headers_complete(self) -> None:
        if self.head:
            self.on_message_complete()

    def on_body(self, body: bytes) -> None:
        self.answer.body_bytes += len(body)

    def on_message_complete(self) -> None:
        if not self.answer.complete:
            self.answer.complete = True
            self.answer.keep_alive = self.parser.should_keep_alive()  # only valid inside a callback


class Upstream:
    """A keep-alive connection to the registry; reconnects before a request when the last one was closed."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.sock: socket.socket | None = None

    def _usable(self) -> bool:
        """False when the registry closed the idle connection (checked before sending, so nothing is sent twice)."""
        if self.sock is None:
            return False
        readable, _, _ = select.select([self.sock], [], [], 0)
        return not readable  # an idle connection that is readable was closed (or sent junk): start afresh

    def exchange(self, request: Request) -> Answer:
        """Send ``request`` once and read the whole answer; raises OSError if the registry did not answer."""
        if not self._usable():
            self.close()
            self.sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock = self.sock
        self.sock = None  # put back only once the answer was read whole and may be followed by another
        sock.sendall(request.wire())
        p = _AnswerParser(request.method == "HEAD")
        answer = p.answer
        while not answer.complete:
            data = sock.recv(RECV_SIZE)
            if not data:
                sock.close()
                if answer.head_end >= 0 and not _delimited(answer):
                    answer.complete = True  # a body delimited by the end of the connection
                    break
                raise ConnectionError("the registry closed the connection before its answer was complete")
            if answer.head_end < 0:
                seen = answer.raw[-3:] + data
                i = seen.find(b"\r\n\r\n")
                if i >= 0:
                    answer.head_end = len(answer.raw) - min(3, len(answer.raw)) + i + 4
            answer.raw += data
            p.parser.feed_data(data)
        answer.status = p.parser.get_status_code()
        if answer.keep_alive:
            self.sock = sock
        else:
            sock.close()
        return answer

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def _delimited(answer: Answer) -> bool:
    head = bytes(answer.raw[: answer.head_end]).lower()
    return b"\r\ncontent-length:" in head or b"\r\ntransfer-encoding:" in head


RETRY_AFTER_STATUSES = frozenset((429, 503))  # the answers a throttling registry tells a Retry-After with


def status_answer(status: int, head_only: bool, retry_after: str | None = None) -> bytes:
    """A small, complete registry-style error answer (keep-alive); a 429 or 503 with ``retry_after``, if given."""
    body = json.dumps({"errors": [{"code": "UNAVAILABLE", "message": f"injected {status} (faultproxy)"}]}).encode()
    again = f"Retry-After: {retry_after}\r\n" if retry_after is not None and status in RETRY_AFTER_STATUSES else ""
    head = (
        f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: application/json\r\n{again}"
        f"Docker-Distribution-Api-Version: registry/2.0\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head if head_only else head + body


def unsent_bytes(sock: socket.socket) -> int:
    """Bytes in the socket's send queue the peer has not acknowledged yet (Linux TIOCOUTQ)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]


def reset(sock: socket.socket, stop: threading.Event) -> None:
    """Abort the connection with an RST once the peer has the bytes already sent.

    A close with ``SO_LINGER`` 0 throws away whatever is still queued, so the
    wait makes the cut land where the plan says (after the partial answer).
    """
    deadline = time.monotonic() + DRAIN_S
    while unsent_bytes(sock) and time.monotonic() < deadline and not stop.is_set():
        time.sleep(0.002)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


# -- the proxy ---------------------------------------------------------------------------------------------


class FaultProxy:
    """Listens on a free 127.0.0.1 port and forwards to ``upstream`` (host:port of a loopback registry).

    Use as a context manager.  ``plan`` decides each request's fault;
    ``delay_s`` is how long a ``delay`` fault holds the answer (make it longer
    than the client's timeout); ``latency`` holds each answer for ``latency(method, path)`` seconds
    before sending it (a slower registry; :attr:`forwarded` records when each request came and its
    answer left); ``retry_after`` is the ``Retry-After`` value of an injected 429 or 503 (None: no
    such header).  :attr:`injected`, :attr:`forwarded` and
    :attr:`methods` say what happened; :attr:`errors` lists what went wrong in
    the proxy itself (a test should expect it empty).
    """

    def __init__(
        self,
        upstream: str,
        plan: FaultPlan | None = None,
        delay_s: float = 2.0,
        upstream_timeout: float = 60.0,
        max_connections: int = 512,
        latency: Latency | None = None,
        retry_after: str | None = "1",
    ) -> None:
        host, _, port = upstream.rpartition(":")
        if host.strip("[]") not in LOOPBACK:
            raise ValueError(f"the fault proxy only talks to a loopback registry, not {upstream!r}")
        self.upstream = (host.strip("[]"), int(port))
        self.plan = plan or no_faults
        self.delay_s = delay_s
        self.upstream_timeout = upstream_timeout
        self.max_connections = max_connections
        self.latency = latency  # e.g. a slow network to the blob store: the answer waits, the request does not
        self.retry_after = retry_after
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._index = 0
        self._connections = 0
        self._injected: list[Injected] = []
        self._forwarded: list[Forwarded] = []
        self._errors: list[str] = []
        self._threads: set[threading.Thread] = set()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self.port = 0

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``: put this in a config's ``registry`` list instead of the registry's."""
        return f"127.0.0.1:{self.port}"

    @property
    def injected(self) -> list[Injected]:
        with self._lock:
            return list(self._injected)

    @property
    def forwarded(self) -> list[Forwarded]:
        with self._lock:
            return list(self._forwarded)

    @property
    def methods(self) -> Counter[str]:
        """Requests forwarded to the registry, per method."""
        with self._lock:
            return Counter(f.method for f in self._forwarded)

    @property
    def connections(self) -> int:
        """Client connections accepted so far (keep-alive clients reuse one)."""
        with self._lock:
            return self._connections

    @property
    def errors(self) -> list[str]:
        with self._lock:
            return list(self._errors)

    def start(self) -> FaultProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(256)
        listener.settimeout(POLL_S)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept_loop, name="faultproxy-accept", daemon=True)
        self._acceptor.start()
        return self

    def stop(self) -> None:
        """Stop accepting, end every connection (a held ``delay`` too) and wait for the threads."""
        self._stop.set()
        if self._acceptor is not None:
            self._acceptor.join(timeout=5)
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _error(self, what: str) -> None:
        with self._lock:
            self._errors.append(what)

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            with self._lock:
                self._connections += 1
                busy = len(self._threads) >= self.max_connections
            if busy:
                self._error("too many client connections: one refused")
                conn.close()
                continue
            t = threading.Thread(target=self._serve, args=(conn,), name="faultproxy-conn", daemon=True)
            with self._lock:
                self._threads.add(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        """One client connection: read a request, forward it, answer (or fault), until either side ends."""
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.settimeout(POLL_S)
        upstream = Upstream(*self.upstream, self.upstream_timeout)
        parser = _RequestParser()
        open_ = True
        try:
            while open_ and not self._stop.is_set():
                if not parser.done:
                    try:
                        data = conn.recv(RECV_SIZE)
                    except TimeoutError:
                        continue
                    except OSError:
                        break
                    if not data:
                        break
                    try:
                        parser.feed(data)
                    except httptools.HttpParserError as e:
                        self._error(f"bad request from a client: {e}")
                        break
                    continue
                request = parser.done.pop(0)
                open_ = self._handle(conn, upstream, request)
        finally:
            upstream.close()
            if open_:
                conn.close()
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _handle(self, conn: socket.socket, upstream: Upstream, request: Request) -> bool:
        """Forward ``request`` once, deliver its answer or its fault; False once ``conn`` is closed."""
        method, path = request.method, request.path
        received = time.monotonic()
        with self._lock:
            index = self._index
            self._index += 1
            kind = self.plan(index, method, path)
        try:
            answer = upstream.exchange(request)
        except OSError as e:
            self._error(f"#{index} {method} {path}: the registry did not answer: {e}")
            conn.close()
            return False
        if self.latency is not None and (wait := self.latency(method, path)) > 0:
            self._stop.wait(wait)
        with self._lock:
            self._forwarded.append(Forwarded(index, method, path, answer.status, kind, received, time.monotonic()))
            if kind is not None and kind != STALL:
                outcome, status = expected_outcome(kind, answer.body_bytes)
                self._injected.append(Injected(index, method, path, kind, outcome, status, answer.status))
        try:
            return self._deliver(conn, request, answer, kind)
        except OSError:
            conn.close()  # the client went away; nothing more to do for it
            return False

    def _deliver(self, conn: socket.socket, request: Request, answer: Answer, kind: str | None) -> bool:
        if kind == STALL:
            self._stop.wait(self.plan.remaining())
            kind = None
        if kind is None:
            conn.sendall(answer.raw)
            keep = answer.keep_alive and request.keep_alive
        elif kind in STATUS_KINDS:
            conn.sendall(status_answer(STATUS_KINDS[kind], request.method == "HEAD", self.retry_after))
            keep = request.keep_alive
        elif kind == "close":
            keep = False
        elif kind == "reset":
            body = len(answer.raw) - answer.head_end
            cut = answer.head_end + body // 2 if answer.body_bytes >= 2 else max(1, answer.head_end // 2)
            conn.sendall(answer.raw[:cut])
            reset(conn, self._stop)
            return False
        elif kind == "delay":
            self._stop.wait(self.delay_s)
            keep = False
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
        if not keep:
            conn.close()
        return keep
