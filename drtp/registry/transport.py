"""A lean keep-alive HTTP/1.1 connection for the client node's registry requests.

Why not http.client: on a 2-core machine every microsecond the replayer spends
is taken from the registry under test, and http.client parses each response's
headers through the email package (~290 µs CPU per small GET here).  This
connection writes the request in one ``sendall`` and hands the answer to
httptools (llhttp, the C parser uvicorn uses): ~75 µs.  It speaks just what a
registry client needs: a bytes body or a stream of chunks with a known length,
Content-Length or chunked answers, HEAD, keep-alive, TLS through an
``ssl.SSLContext``, a timeout per socket operation.

This is the replay's path only: the nodes (``drtp.client.executor`` with
:class:`Connection`, ``drtp.client.loop_engine`` with :class:`AsyncConnection`),
and the preflight check and ``drtp bench``, which must behave as the nodes do.
Every other registry request — warmup, the demo, the local registry's
readiness probe — goes through :class:`drtp.registry.client.RegistryClient`,
which trades this speed for python-dxf's whole protocol (mounts, manifests,
token auth).
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
import time
from collections.abc import Callable, Iterator

import httptools

from drtp.replay.outcome import PROTOCOL, RESET, TIMEOUT, TLS, TRUNCATED, classify_exception

RECV_SIZE = 1 << 18
BODY_METHODS = frozenset(("POST", "PUT", "PATCH"))
USER_AGENT = "drtp"


class RequestError(Exception):
    """A request that got no complete answer.

    ``outcome`` is its drtp.replay.outcome class (timeout, refused, reset, truncated,
    tls, protocol); ``answered`` says whether any byte of an answer arrived —
    only a request without one may be sent again, and only if the user asked.
    """

    def __init__(self, outcome: str, message: str, answered: bool = False) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.message = message
        self.answered = answered


class Response:
    """Status, headers (names lower-case) and how many body bytes arrived.

    ``outcome`` is empty for an answer read completely, else the drtp.replay.outcome
    class of the failure with ``error`` saying what happened (``status`` 0 then);
    ``attempts`` counts the sends (more than one only with opt-in retries).
    """

    __slots__ = ("status", "headers", "bytes", "error", "outcome", "attempts")

    def __init__(
        self,
        status: int,
        headers: dict[str, str] | None = None,
        nbytes: int = 0,
        error: str = "",
        outcome: str = "",
        attempts: int = 1,
    ) -> None:
        self.status = status
        self.headers = headers if headers is not None else {}
        self.bytes = nbytes
        self.error = error
        self.outcome = outcome
        self.attempts = attempts

    @classmethod
    def failed(cls, e: RequestError, attempts: int = 1) -> Response:
        return cls(0, {}, 0, e.message, e.outcome, attempts)

    def header(self, name: str) -> str | None:
        """A header's value by its lower-case name."""
        return self.headers.get(name)


class _Answer:
    """httptools callbacks: collect one answer's headers and count its body."""

    __slots__ = ("headers", "nbytes", "complete", "head", "keep_alive", "parser", "headers_done")

    def __init__(self, head: bool) -> None:
        self.headers: dict[str, str] = {}
        self.nbytes = 0
        self.complete = False
        self.head = head
        self.keep_alive = False
        self.headers_done = False
        self.parser: httptools.HttpResponseParser | None = None

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.headers_done = True
        if self.head:  # an answer to HEAD has no body, whatever its Content-Length says
            self.on_message_complete()

    def on_body(self, body: bytes) -> None:
        self.nbytes += len(body)

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()  # only right inside the callbacks: llhttp resets after


def request_head(method: str, target: str, netloc: str, body, headers: dict[str, str] | None) -> bytes:
    """The request line and headers; Content-Length from a bytes body unless the caller gave one."""
    head = [f"{method} {target} HTTP/1.1\r\nHost: {netloc}\r\nUser-Agent: {USER_AGENT}\r\n"]
    has_length = False
    if headers:
        for k, v in headers.items():
            head.append(f"{k}: {v}\r\n")
            if len(k) == 14 and k.lower() == "content-length":
                has_length = True
    if isinstance(body, bytes | bytearray) and not has_length:
        head.append(f"Content-Length: {len(body)}\r\n")
    elif body is None and method in BODY_METHODS and not has_length:
        head.append("Content-Length: 0\r\n")
    head.append("\r\n")
    return "".join(head).encode("latin-1")


def _cut(answer, nbytes: int) -> RequestError:
    """The answer ended (closed, reset) before it was complete: reset in the header block, truncated in the body."""
    if not answer.headers_done:
        return RequestError(RESET, "the connection closed in the middle of the answer's header block", True)
    length = answer.headers.get("content-length", "?")
    return RequestError(TRUNCATED, f"the connection closed after {nbytes} of {length} body bytes", True)


def connect_failed(e: OSError, what: str, connect_timeout: float) -> RequestError:
    """The classified failure of opening a connection to ``what`` (host:port), both transports' one wording."""
    if isinstance(e, TimeoutError):
        return RequestError(TIMEOUT, f"connect timeout: no connection to {what} in {connect_timeout:g} s")
    return RequestError(classify_exception(e), f"cannot connect to {what}: {e}")


def _dropped(sock: socket.socket) -> bool:
    """An idle kept-alive socket that is readable was closed by the peer (or holds bytes nobody asked for)."""
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


class Connection:
    """One keep-alive connection to ``netloc`` (host:port); reconnects when the last answer closed it.

    A kept-alive connection the registry closed while it was idle is found
    before the next request is written and replaced silently; once a byte of a
    request was written, any failure is the request's failure (never re-sent here).
    ``progress`` is the monotonic time of the last byte sent or received.
    """

    def __init__(
        self,
        scheme: str,
        netloc: str,
        timeout: float,
        context: ssl.SSLContext | None = None,
        connect_timeout: float | None = None,
    ) -> None:
        self.scheme = scheme
        self.netloc = netloc
        self.timeout = timeout
        self.connect_timeout = connect_timeout if connect_timeout is not None else timeout
        self.context = context
        host, _, port = netloc.rpartition(":")
        if not host or not port.isdigit():  # no port given
            host, port = netloc, ("443" if scheme == "https" else "80")
        self.host = host.strip("[]")
        self.port = int(port)
        self.sock: socket.socket | None = None
        self.buf = bytearray(RECV_SIZE)
        self.view = memoryview(self.buf)
        self.progress = time.monotonic()

    @property
    def open(self) -> bool:
        return self.sock is not None

    def connect(self) -> None:
        """Open the connection (TCP, then TLS for https) within ``connect_timeout``; raises RequestError."""
        what = f"{self.host}:{self.port}"
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        except OSError as e:
            raise connect_failed(e, what, self.connect_timeout) from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.scheme == "https":
                ctx = self.context or ssl.create_default_context()
                sock = ctx.wrap_socket(sock, server_hostname=self.host)
            sock.settimeout(self.timeout)
        except TimeoutError:
            sock.close()
            raise RequestError(
                TIMEOUT, f"connect timeout: TLS handshake with {what} took over {self.connect_timeout:g} s"
            ) from None
        except (ssl.SSLError, ssl.CertificateError) as e:
            sock.close()
            raise RequestError(TLS, f"TLS with {what} failed: {e}") from None
        except OSError as e:
            sock.close()
            raise RequestError(classify_exception(e), f"cannot connect to {what}: {e}") from None
        self.sock = sock

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    def request(
        self,
        method: str,
        target: str,
        body: bytes | Callable[[], Iterator[bytes]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """Send one request and read its whole answer.

        Raises RequestError (classified: timeout, refused, reset, truncated, tls,
        protocol); the connection is closed then.
        """
        self.progress = time.monotonic()
        if self.sock is not None and _dropped(self.sock):
            self.close()  # closed while idle: nothing of this request was written yet
        if self.sock is None:
            self.connect()
        sock = self.sock
        data = request_head(method, target, self.netloc, body, headers)
        try:
            try:
                if body is None:
                    sock.sendall(data)
                elif isinstance(body, bytes | bytearray):
                    sock.sendall(data + body if len(body) <= 65536 else data)
                    if len(body) > 65536:
                        sock.sendall(body)
                else:
                    sock.sendall(data)
                    for chunk in body():
                        sock.sendall(chunk)
                        self.progress = time.monotonic()
            except TimeoutError:
                raise RequestError(
                    TIMEOUT, f"read timeout: the request could not be sent in {self.timeout:g} s"
                ) from None
            except (ssl.SSLError, ssl.CertificateError) as e:
                raise RequestError(TLS, f"TLS failed while sending the request: {e}") from None
            except OSError as e:
                raise RequestError(RESET, f"the connection broke while sending the request: {e}") from None
            return self._read(method == "HEAD")
        except BaseException:
            self.close()
            raise

    def _read(self, head: bool) -> Response:
        answer = _Answer(head)
        parser = answer.parser = httptools.HttpResponseParser(answer)
        sock, buf, view = self.sock, self.buf, self.view
        got = 0
        try:
            while not answer.complete:
                n = sock.recv_into(buf)
                if n == 0:
                    if got == 0:
                        raise RequestError(RESET, "the connection closed without an answer")
                    delimited = "content-length" in answer.headers or "transfer-encoding" in answer.headers
                    if answer.headers_done and not delimited:
                        break  # a body delimited by the end of the connection
                    raise _cut(answer, answer.nbytes)
                got += n
                self.progress = time.monotonic()
                parser.feed_data(view[:n])
        except TimeoutError:
            what = "no answer" if got == 0 else f"the answer stalled after {got} bytes"
            raise RequestError(TIMEOUT, f"read timeout: {what} in {self.timeout:g} s", got > 0) from None
        except httptools.HttpParserError as e:
            raise RequestError(PROTOCOL, f"bad HTTP answer: {e}", True) from None
        except (ssl.SSLError, ssl.CertificateError) as e:
            raise RequestError(TLS, f"TLS failed while reading the answer: {e}", got > 0) from None
        except OSError as e:
            if got == 0:
                raise RequestError(RESET, f"the connection broke before an answer: {e}") from None
            raise _cut(answer, answer.nbytes) from None
        status = parser.get_status_code()
        if not answer.keep_alive:
            self.close()
        return Response(status, answer.headers, answer.nbytes)


# the answer headers the event-loop engine reads (body size and delimitation, digest, redirect, auth
# challenge): decoding only these saves a str pair per header of every answer
KEPT_HEADERS = {
    name.encode(): name
    for name in ("content-length", "transfer-encoding", "docker-content-digest", "location", "www-authenticate")
}


class _Headers:
    """httptools callbacks without on_body: the parser skips the body in C, nothing is copied into Python.

    Only the :data:`KEPT_HEADERS` are kept.
    """

    __slots__ = ("headers", "complete", "head", "keep_alive", "parser", "headers_done")

    def __init__(self, head: bool) -> None:
        self.headers: dict[str, str] = {}
        self.complete = False
        self.head = head
        self.keep_alive = False
        self.headers_done = False
        self.parser: httptools.HttpResponseParser | None = None

    def on_header(self, name: bytes, value: bytes) -> None:
        kept = KEPT_HEADERS.get(name.lower())
        if kept is not None:
            self.headers[kept] = value.decode("latin-1")

    on_headers_complete = _Answer.on_headers_complete
    on_message_complete = _Answer.on_message_complete


class _Link(asyncio.BufferedProtocol):
    """The protocol of one transport of an AsyncConnection: hands its reads and its end to the connection while it
    is the connection's current one.  A transport the connection closed ends later, on the loop's next turn; its
    late ``connection_lost`` must not touch the request the connection is already sending on a new transport."""

    __slots__ = ("conn",)

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    def connection_made(self, transport) -> None:
        if self.conn.link is self:
            self.conn.transport = transport  # asyncio and uvloop set TCP_NODELAY themselves
        else:
            transport.close()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.conn.view if self.conn.link is self else memoryview(bytearray(max(sizehint, 1024)))

    def buffer_updated(self, nbytes: int) -> None:
        if self.conn.link is self:
            self.conn.received(nbytes)

    def connection_lost(self, exc: Exception | None) -> None:
        conn = self.conn
        if conn.link is self:
            conn.link = None
            conn.transport = None
            conn.lost(exc)


class AsyncConnection:
    """The event-loop twin of Connection for body-less requests (GET, HEAD): one answer at a time.

    The socket is read into one reused buffer and the body is not copied: its size is the answer's
    Content-Length, or (chunked, or delimited by the close) the bytes that followed the header block.
    A connection the registry closed while idle is already gone (``connection_lost``) when the next
    request comes, so that request opens a new one; failures raise RequestError like Connection.
    ``scheme`` https speaks TLS through ``context`` (the system's trust when none is given); the
    connection and its handshake together get ``connect_timeout``.
    """

    def __init__(
        self,
        netloc: str,
        timeout: float,
        connect_timeout: float | None = None,
        *,
        scheme: str = "http",
        context: ssl.SSLContext | None = None,
    ) -> None:
        self.netloc = netloc
        self.timeout = timeout
        self.connect_timeout = connect_timeout if connect_timeout is not None else timeout
        self.tls = scheme == "https"
        self.context = (context or ssl.create_default_context()) if self.tls else None
        host, _, port = netloc.rpartition(":")
        if not host or not port.isdigit():
            host, port = netloc, ("443" if self.tls else "80")
        self.host, self.port = host.strip("[]"), int(port)
        self.transport: asyncio.Transport | None = None
        self.link: _Link | None = None  # the protocol of the current transport
        self.waiter: asyncio.Future | None = None
        self.answer: _Headers | None = None
        self.parser: httptools.HttpResponseParser | None = None
        self.buf = bytearray(RECV_SIZE)
        self.view = memoryview(self.buf)
        self.got = 0
        self.head_end = -1  # offset of the body in the answer, once the header block is complete
        self.tail = b""  # the last bytes of the previous read, to find a header end split across reads

    @property
    def open(self) -> bool:
        return self.transport is not None

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> None:
        what = f"{self.host}:{self.port}"
        link = self.link = _Link(self)
        if self.tls:
            opening = loop.create_connection(
                lambda: link,
                self.host,
                self.port,
                ssl=self.context,
                server_hostname=self.host,
                ssl_handshake_timeout=self.connect_timeout,
            )
        else:
            opening = loop.create_connection(lambda: link, self.host, self.port)
        try:
            await asyncio.wait_for(opening, self.connect_timeout)
        except (ssl.SSLError, ssl.CertificateError) as e:
            raise RequestError(TLS, f"TLS with {what} failed: {e}") from None
        except ConnectionAbortedError as e:
            if self.tls and "handshake" in str(e):  # the loop's own handshake timer
                raise RequestError(
                    TIMEOUT, f"connect timeout: TLS handshake with {what} took over {self.connect_timeout:g} s"
                ) from None
            raise connect_failed(e, what, self.connect_timeout) from None
        except OSError as e:  # TimeoutError included
            raise connect_failed(e, what, self.connect_timeout) from None

    async def request(self, method: str, target: str, headers: dict[str, str] | None = None) -> Response:
        """Send one request, await its whole answer; raises RequestError like Connection.request."""
        loop = asyncio.get_running_loop()
        if self.transport is None:
            await self._connect(loop)
            if self.transport is None:  # closed by the peer as soon as it was open
                raise RequestError(RESET, "the connection closed without an answer")
        self.answer = answer = _Headers(method == "HEAD")
        self.parser = answer.parser = httptools.HttpResponseParser(answer)
        self.got, self.head_end, self.tail = 0, -1, b""
        self.waiter = waiter = loop.create_future()
        timer = loop.call_later(self.timeout, self._timed_out, waiter)
        self.transport.write(request_head(method, target, self.netloc, None, headers))
        try:
            await waiter
        except BaseException:
            self.close()
            raise
        finally:
            timer.cancel()
        if not answer.keep_alive:
            self.close()
        status = self.parser.get_status_code()
        return Response(status, answer.headers, self._body_bytes(method, status))

    def _body_bytes(self, method: str, status: int) -> int:
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return 0
        length = self.answer.headers.get("content-length")
        if length is not None and "transfer-encoding" not in self.answer.headers:
            return int(length)
        return self._wire_body()

    def _wire_body(self) -> int:
        return max(0, self.got - self.head_end) if self.head_end >= 0 else 0

    def close(self) -> None:
        self.link = None  # whatever its transport still reports is ignored
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    def _timed_out(self, waiter: asyncio.Future) -> None:
        if waiter.done():
            return
        what = "no answer" if self.got == 0 else f"the answer stalled after {self.got} bytes"
        waiter.set_exception(RequestError(TIMEOUT, f"read timeout: {what} in {self.timeout:g} s", self.got > 0))

    # -- what the current transport's protocol (_Link) reports ----------------------------------------------

    def received(self, nbytes: int) -> None:
        """``nbytes`` more bytes of the answer are at the start of ``view``."""
        waiter = self.waiter
        if waiter is None or waiter.done():
            return  # bytes after a finished answer (or a timed-out one): the connection is closed then
        data = self.view[:nbytes]
        if self.head_end < 0:  # where the body starts: after the first blank line
            seen = self.tail + bytes(data[:16384])
            i = seen.find(b"\r\n\r\n")
            if i >= 0:
                self.head_end = self.got - len(self.tail) + i + 4
            else:
                self.tail = seen[-3:] if nbytes <= 16384 else bytes(data[-3:])
        self.got += nbytes
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            waiter.set_exception(RequestError(PROTOCOL, f"bad HTTP answer: {e}", True))
            return
        if self.answer.complete:
            waiter.set_result(None)

    def lost(self, exc: Exception | None) -> None:
        """The transport ended (closed by the peer, or broken: ``exc``)."""
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        answer = self.answer
        if isinstance(exc, ssl.SSLError | ssl.CertificateError):
            waiter.set_exception(RequestError(TLS, f"TLS failed while reading the answer: {exc}", self.got > 0))
        elif self.got == 0:
            why = f": {exc}" if exc else ""
            waiter.set_exception(RequestError(RESET, f"the connection closed without an answer{why}"))
        elif (
            answer.headers_done and "content-length" not in answer.headers and "transfer-encoding" not in answer.headers
        ):
            answer.keep_alive = False
            waiter.set_result(None)  # a body delimited by the end of the connection
        else:
            waiter.set_exception(_cut(answer, self._wire_body()))
