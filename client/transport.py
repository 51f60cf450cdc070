"""A lean keep-alive HTTP/1.1 connection for the client node's registry requests.

Why not http.client: on a 2-core machine every microsecond the replayer spends
is taken from the registry under test, and http.client parses each response's
headers through the email package (~290 µs CPU per small GET here).  This
connection writes the request in one ``sendall`` and hands the answer to
httptools (llhttp, the C parser uvicorn uses): ~75 µs.  It speaks just what a
registry client needs: a bytes body or a stream of chunks with a known length,
Content-Length or chunked answers, HEAD, keep-alive, TLS through an
``ssl.SSLContext``, a timeout per socket operation.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable, Iterator

import httptools

RECV_SIZE = 1 << 18
BODY_METHODS = frozenset(("POST", "PUT", "PATCH"))
USER_AGENT = "drtp"


class ProtocolError(Exception):
    """The registry's answer was not valid HTTP/1.1."""


class ServerDisconnected(ConnectionError):
    """The connection closed before any byte of the answer arrived."""


class Response:
    """Status, headers (names lower-case) and how many body bytes arrived; ``error`` if it broke."""

    __slots__ = ("status", "headers", "bytes", "error")

    def __init__(self, status: int, headers: dict[str, str] | None = None, nbytes: int = 0, error: str = "") -> None:
        self.status = status
        self.headers = headers if headers is not None else {}
        self.bytes = nbytes
        self.error = error

    def header(self, name: str) -> str | None:
        """A header's value by its lower-case name."""
        return self.headers.get(name)


class _Answer:
    """httptools callbacks: collect one answer's headers and count its body."""

    __slots__ = ("headers", "nbytes", "complete", "head", "keep_alive", "parser")

    def __init__(self, head: bool) -> None:
        self.headers: dict[str, str] = {}
        self.nbytes = 0
        self.complete = False
        self.head = head
        self.keep_alive = False
        self.parser: httptools.HttpResponseParser | None = None

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
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


class Connection:
    """One keep-alive connection to ``netloc`` (host:port); reconnects when the last answer closed it."""

    def __init__(self, scheme: str, netloc: str, timeout: float, context: ssl.SSLContext | None = None) -> None:
        self.scheme = scheme
        self.netloc = netloc
        self.timeout = timeout
        self.context = context
        host, _, port = netloc.rpartition(":")
        if not host or not port.isdigit():  # no port given
            host, port = netloc, ("443" if scheme == "https" else "80")
        self.host = host.strip("[]")
        self.port = int(port)
        self.sock: socket.socket | None = None
        self.buf = bytearray(RECV_SIZE)
        self.view = memoryview(self.buf)

    @property
    def open(self) -> bool:
        return self.sock is not None

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.scheme == "https":
            ctx = self.context or ssl.create_default_context()
            sock = ctx.wrap_socket(sock, server_hostname=self.host)
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

        Raises OSError (refused, reset, timeout — ServerDisconnected when the
        answer never began) or ProtocolError; the connection is closed then.
        """
        if self.sock is None:
            self.connect()
        sock = self.sock
        data = request_head(method, target, self.netloc, body, headers)
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
            return self._read(method == "HEAD")
        except BaseException:
            self.close()
            raise

    def _read(self, head: bool) -> Response:
        answer = _Answer(head)
        parser = answer.parser = httptools.HttpResponseParser(answer)
        sock, buf, view = self.sock, self.buf, self.view
        got = 0
        while not answer.complete:
            n = sock.recv_into(buf)
            if n == 0:
                if got == 0:
                    raise ServerDisconnected("the registry closed the connection before answering")
                delimited = "content-length" in answer.headers or "transfer-encoding" in answer.headers
                if answer.headers and not delimited:
                    break  # a body delimited by the end of the connection
                raise ServerDisconnected("the registry closed the connection in the middle of an answer")
            got += n
            try:
                parser.feed_data(view[:n])
            except httptools.HttpParserError as e:
                raise ProtocolError(f"bad HTTP answer: {e}") from None
        status = parser.get_status_code()
        if not answer.keep_alive:
            self.close()
        return Response(status, answer.headers, answer.nbytes)


class _Headers:
    """httptools callbacks without on_body: the parser skips the body in C, nothing is copied into Python."""

    __slots__ = ("headers", "complete", "head", "keep_alive", "parser")

    def __init__(self, head: bool) -> None:
        self.headers: dict[str, str] = {}
        self.complete = False
        self.head = head
        self.keep_alive = False
        self.parser: httptools.HttpResponseParser | None = None

    on_header = _Answer.on_header
    on_headers_complete = _Answer.on_headers_complete
    on_message_complete = _Answer.on_message_complete


class AsyncConnection(asyncio.BufferedProtocol):
    """The event-loop twin of Connection for body-less requests (GET, HEAD): one answer at a time.

    The socket is read into one reused buffer and the body is not copied: its size is the answer's
    Content-Length, or (chunked, or delimited by the close) the bytes that followed the header block.
    """

    def __init__(self, netloc: str, timeout: float) -> None:
        self.netloc = netloc
        self.timeout = timeout
        host, _, port = netloc.rpartition(":")
        if not host or not port.isdigit():
            host, port = netloc, "80"
        self.host, self.port = host.strip("[]"), int(port)
        self.transport: asyncio.Transport | None = None
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

    async def request(self, method: str, target: str, headers: dict[str, str] | None = None) -> Response:
        """Send one request, await its whole answer; raises like Connection.request."""
        loop = asyncio.get_running_loop()
        if self.transport is None:
            await asyncio.wait_for(loop.create_connection(lambda: self, self.host, self.port), self.timeout)
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
        return max(0, self.got - self.head_end) if self.head_end >= 0 else 0

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    def _timed_out(self, waiter: asyncio.Future) -> None:
        if not waiter.done():
            waiter.set_exception(TimeoutError(f"no answer in {self.timeout:g} s"))

    # -- asyncio.BufferedProtocol --------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport  # asyncio and uvloop set TCP_NODELAY themselves

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.view

    def buffer_updated(self, nbytes: int) -> None:
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
            waiter.set_exception(ProtocolError(f"bad HTTP answer: {e}"))
            return
        if self.answer.complete:
            waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        answer = self.answer
        if self.got == 0:
            waiter.set_exception(ServerDisconnected("the registry closed the connection before answering"))
        elif answer.headers and "content-length" not in answer.headers and "transfer-encoding" not in answer.headers:
            answer.keep_alive = False
            waiter.set_result(None)  # a body delimited by the end of the connection
        else:
            waiter.set_exception(ServerDisconnected("the registry closed the connection in the middle of an answer"))
