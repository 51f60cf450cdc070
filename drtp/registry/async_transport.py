"""The event-loop twin of :class:`drtp.registry.transport.Connection`, for the node's stress engine.

GETs and HEADs on uvloop (or asyncio) with httptools, over plain TCP or TLS: the socket is read
into one reused buffer, the body is counted and never copied into Python, and only the answer
headers the replay reads are decoded.  Failures are the same classified RequestErrors as the
blocking Connection's.
"""

from __future__ import annotations

import asyncio
import ssl

import httptools

from drtp.registry.transport import (
    RECV_SIZE,
    USER_AGENT,
    AnswerState,
    RequestError,
    Response,
    connect_failed,
    cut_short,
    request_head,
)
from drtp.replay.outcome import PROTOCOL, RESET, TIMEOUT, TLS

# the answer headers the event-loop engine reads (body size and delimitation, digest, redirect, auth challenge,
# a throttling registry's Retry-After, a cache's verdict): decoding only these saves a str pair per header of every
# answer
KEPT_HEADERS = {
    name.encode(): name
    for name in (
        "content-length",
        "transfer-encoding",
        "docker-content-digest",
        "location",
        "www-authenticate",
        "retry-after",
        "x-cache-status",  # a cache's verdict (drtp.registry.flow.cache_verdict)
        "x-cache",
    )
}


class _Headers(AnswerState):
    """httptools callbacks without on_body: the parser skips the body in C, nothing is copied into Python.

    Only the :data:`KEPT_HEADERS` are kept.
    """

    __slots__ = ()

    def on_header(self, name: bytes, value: bytes) -> None:
        kept = KEPT_HEADERS.get(name.lower())
        if kept is not None:
            self.headers[kept] = value.decode("latin-1")


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
        agent: str = USER_AGENT,
    ) -> None:
        self.netloc = netloc
        self.agent = agent  # the User-Agent of requests that name none of their own
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
        # the answer must be complete by ``deadline`` (loop time); one timer per connection, re-armed only when it
        # fires early, instead of a timer made and cancelled for every request
        self.deadline = 0.0
        self.timer: asyncio.TimerHandle | None = None
        # whether ``answer`` and ``parser`` may read the next answer: the last one, to a GET, ended exactly where
        # its Content-Length said and the connection stays open, so the parser stands between two answers (a
        # parser and its callbacks made for every answer were a tenth of the loop's work per manifest GET)
        self.reuse = False

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

    async def request(
        self, method: str, target: str, headers: dict[str, str] | None = None, agent: str | None = None
    ) -> Response:
        """Send one request, await its whole answer; raises RequestError like Connection.request."""
        loop = asyncio.get_running_loop()
        if self.transport is None:
            self.reuse = False
            await self._connect(loop)
            if self.transport is None:  # closed by the peer as soon as it was open
                raise RequestError(RESET, "the connection closed without an answer")
        if self.reuse and method != "HEAD":
            answer = self.answer
            answer.headers = {}
            answer.complete = answer.keep_alive = answer.headers_done = False
        else:
            self.answer = answer = _Headers(method == "HEAD")
            self.parser = answer.parser = httptools.HttpResponseParser(answer)
        self.reuse = False
        self.got, self.head_end, self.tail = 0, -1, b""
        self.waiter = waiter = loop.create_future()
        self.deadline = loop.time() + self.timeout
        if self.timer is None:
            self.timer = loop.call_at(self.deadline, self._check_deadline)
        self.transport.write(request_head(method, target, self.netloc, None, headers, agent or self.agent))
        try:
            await waiter
        except BaseException:
            self.close()
            raise
        if not answer.keep_alive:
            self.close()
        status = self.parser.get_status_code()
        nbytes = self._body_bytes(method, status)
        headers = answer.headers
        self.reuse = (
            answer.keep_alive
            and not answer.head
            and "content-length" in headers
            and "transfer-encoding" not in headers
            and self.got == self.head_end + nbytes
        )
        return Response(status, headers, nbytes)

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
        self.reuse = False
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    def _check_deadline(self) -> None:
        """The timer fired: the request in flight timed out, or (sent after the timer was armed) has time left."""
        self.timer = None
        waiter = self.waiter
        if waiter is None or waiter.done():
            return  # idle: the next request arms it again
        loop = waiter.get_loop()
        if loop.time() >= self.deadline:
            self._timed_out(waiter)
        else:
            self.timer = loop.call_at(self.deadline, self._check_deadline)

    def _timed_out(self, waiter: asyncio.Future) -> None:
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
            if self.tail:  # a header block split across reads
                seen = self.tail + bytes(data[:16384])
                i = seen.find(b"\r\n\r\n")
                if i >= 0:
                    self.head_end = self.got - len(self.tail) + i + 4
                else:
                    self.tail = seen[-3:] if nbytes <= 16384 else bytes(data[-3:])
            else:  # the common case: searched where it was read, nothing copied
                i = self.buf.find(b"\r\n\r\n", 0, min(nbytes, 16384))
                if i >= 0:
                    self.head_end = self.got + i + 4
                else:
                    self.tail = bytes(data[-3:])
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
            waiter.set_exception(cut_short(answer, self._wire_body()))
