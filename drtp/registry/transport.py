"""A lean keep-alive HTTP/1.1 connection for the client node's registry requests.

Why not http.client: on a 2-core machine every microsecond the replayer spends
is taken from the registry under test, and http.client parses each response's
headers through the email package (~290 µs CPU per small GET here).  This
connection writes the request in one ``sendall`` and hands the answer to
httptools (llhttp, the C parser uvicorn uses): ~75 µs.  It speaks just what a
registry client needs: a bytes body or a stream of chunks with a known length,
Content-Length or chunked answers, HEAD, keep-alive, TLS through an
``ssl.SSLContext``, a timeout per socket operation.

Every HTTP request drtp sends goes through it or its event-loop twin
(:class:`drtp.registry.async_transport.AsyncConnection`): the nodes' registry
requests, :class:`drtp.registry.calls.RegistryCalls` (warmup, capture, the
demo, the local registry's probe) through :class:`drtp.registry.session.Session`,
bearer-token fetches, and the master's control calls to its nodes.
"""

from __future__ import annotations

import datetime
import email.utils
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
# what drtp sends straight to a cache's upstream (warmup, probes, pushes past the cache): the upstream's access log
# tells these apart from what the cache fetched, which carries the cache's or the replayed client's agent
DIRECT_USER_AGENT = "drtp-direct"


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


def send_again(e: RequestError, attempts: int, retries: int) -> bool:
    """Whether a request that failed with ``e`` after ``attempts`` sends may go once more: only when no byte
    of an answer came and the run allows ``retries`` (the one rule of every engine: nothing re-sent silently)."""
    return not e.answered and attempts <= retries


class Response:
    """Status, headers (names lower-case), how many body bytes arrived, and the body when asked for.

    ``outcome`` is empty for an answer read completely, else the drtp.replay.outcome
    class of the failure with ``error`` saying what happened (``status`` 0 then);
    ``attempts`` counts the sends (more than one only with opt-in retries); ``challenges`` the 401 answers
    to this request that an auth challenge turned into one more send (each a round trip the registry served
    and counted, though the request's answer is the send after it).
    """

    __slots__ = ("status", "headers", "bytes", "error", "outcome", "attempts", "challenges", "body")

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
        self.challenges = 0
        self.body = b""  # kept only for ``request(keep_body=True)``: a registry's bodies are counted, not kept

    @classmethod
    def failed(cls, e: RequestError, attempts: int = 1) -> Response:
        return cls(0, {}, 0, e.message, e.outcome, attempts)

    def header(self, name: str) -> str | None:
        """A header's value by its lower-case name."""
        return self.headers.get(name)

    def retry_after(self) -> float | None:
        """The answer's ``Retry-After`` in seconds (a throttling registry's 429 or 503 says when to come back);
        None when the answer has none or it is neither of the header's two forms."""
        value = self.headers.get("retry-after")
        return None if value is None else retry_after_s(value, time.time())


MAX_DELTA_DIGITS = 15  # a Retry-After of more digits (over 30 million years) is no answer a client can keep


def retry_after_s(value: str, now: float) -> float | None:
    """A ``Retry-After`` value in seconds (RFC 9110 §10.2.3): delta-seconds as they are, an HTTP-date as the
    seconds from ``now`` (a Unix time) until it, 0 when it has passed; None when it is neither."""
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value) if len(value) <= MAX_DELTA_DIGITS else None
    try:
        when = email.utils.parsedate_to_datetime(value)
        if when.tzinfo is None:  # a "-0000" zone: the time is UTC all the same (HTTP-dates always are)
            when = when.replace(tzinfo=datetime.timezone.utc)
        return max(0.0, when.timestamp() - now)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


class AnswerState:
    """httptools callbacks both transports share: where one answer stands (headers, end, keep-alive)."""

    __slots__ = ("headers", "complete", "head", "keep_alive", "parser", "headers_done")

    def __init__(self, head: bool) -> None:
        self.headers: dict[str, str] = {}
        self.complete = False
        self.head = head
        self.keep_alive = False
        self.headers_done = False
        self.parser: httptools.HttpResponseParser | None = None

    def on_headers_complete(self) -> None:
        self.headers_done = True
        if self.head:  # an answer to HEAD has no body, whatever its Content-Length says
            self.on_message_complete()

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()  # only right inside the callbacks: llhttp resets after


class _Answer(AnswerState):
    """Every header of the answer, and its body counted."""

    __slots__ = ("nbytes",)

    def __init__(self, head: bool) -> None:
        super().__init__(head)
        self.nbytes = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.nbytes += len(body)


class _KeptAnswer(_Answer):
    """An answer whose body is kept as well as counted (a small JSON reply, not a registry's blob)."""

    __slots__ = ("parts",)

    def __init__(self, head: bool) -> None:
        super().__init__(head)
        self.parts: list[bytes] = []

    def on_body(self, body: bytes) -> None:
        self.nbytes += len(body)
        self.parts.append(bytes(body))


class _StreamedAnswer(_Answer):
    """An answer whose body, when its status is 200, goes to ``sink`` as it arrives (after each read of the
    socket, whatever arrived in it), not kept: a stream that lasts as long as the run."""

    __slots__ = ("sink", "pending")

    def __init__(self, head: bool, sink: Callable[[bytes], None]) -> None:
        super().__init__(head)
        self.sink = sink
        self.pending: list[bytes] = []

    def on_body(self, body: bytes) -> None:
        self.nbytes += len(body)
        if self.parser.get_status_code() == 200:
            self.pending.append(bytes(body))

    def deliver(self) -> None:
        if self.pending:
            data = b"".join(self.pending)
            self.pending.clear()
            self.sink(data)


_BYTES = (bytes, bytearray)  # a body sent as it is (else a maker of chunks)


def request_head(
    method: str, target: str, netloc: str, body, headers: dict[str, str] | None, agent: str = USER_AGENT
) -> bytes:
    """The request line and headers; Content-Length from a bytes body unless the caller gave one.

    ``agent`` is the User-Agent: drtp's own, or the one of the client a run plays (a client profile, or
    the trace's own); it must be one line of visible text (checked where the run spec is admitted)."""
    head = f"{method} {target} HTTP/1.1\r\nHost: {netloc}\r\nUser-Agent: {agent}\r\n"
    has_length = False
    if headers:
        for k, v in headers.items():
            head += f"{k}: {v}\r\n"
            if len(k) == 14 and k.lower() == "content-length":
                has_length = True
    if body is None:
        if method in BODY_METHODS and not has_length:
            head += "Content-Length: 0\r\n"
    elif isinstance(body, _BYTES) and not has_length:
        head += f"Content-Length: {len(body)}\r\n"
    return (head + "\r\n").encode("latin-1")


def cut_short(answer: AnswerState, nbytes: int) -> RequestError:
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
    """An idle kept-alive socket that is readable was closed by the peer (or holds bytes nobody asked for).

    ``poll``, not ``select``: select refuses a socket numbered 1024 or more, and a node that keeps
    connections per trace client (client profiles) holds that many."""
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))
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
        agent: str = USER_AGENT,
    ) -> None:
        self.scheme = scheme
        self.agent = agent  # the User-Agent of requests that name none of their own
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
        keep_body: bool = False,
        stream: Callable[[bytes], None] | None = None,
        agent: str | None = None,
    ) -> Response:
        """Send one request and read its whole answer (its body in ``Response.body`` if ``keep_body``; given
        to ``stream`` piece by piece as it arrives, if the status is 200 and ``stream`` is given).

        Raises RequestError (classified: timeout, refused, reset, truncated, tls,
        protocol), or what ``stream`` raised; the connection is closed then.
        """
        self.progress = time.monotonic()
        if self.sock is not None and _dropped(self.sock):
            self.close()  # closed while idle: nothing of this request was written yet
        if self.sock is None:
            self.connect()
        sock = self.sock
        data = request_head(method, target, self.netloc, body, headers, agent or self.agent)
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
            if stream is not None:
                return self._read(_StreamedAnswer(method == "HEAD", stream))
            return self._read(_KeptAnswer(method == "HEAD") if keep_body else _Answer(method == "HEAD"))
        except BaseException:
            self.close()
            raise

    def _read(self, answer: _Answer) -> Response:
        parser = answer.parser = httptools.HttpResponseParser(answer)
        sock, buf, view = self.sock, self.buf, self.view
        streamed = isinstance(answer, _StreamedAnswer)
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
                    raise cut_short(answer, answer.nbytes)
                got += n
                self.progress = time.monotonic()
                parser.feed_data(view[:n])
                if streamed:
                    answer.deliver()
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
            raise cut_short(answer, answer.nbytes) from None
        status = parser.get_status_code()
        if not answer.keep_alive:
            self.close()
        r = Response(status, answer.headers, answer.nbytes)
        if isinstance(answer, _KeptAnswer):
            r.body = b"".join(answer.parts)
        return r
