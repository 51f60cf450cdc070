"""How a replayed request ended: one outcome class per request, and the one definition of "failed".

A benchmark's numbers are only as true as its notion of success, so it is
defined here once and every count (``summary.json``, the console table,
``drtp analyze results``, the report) uses it:

* ``ok`` — the registry's answer was read completely and its status is a
  success (< 400) or the status the trace itself recorded (a trace's 404
  replayed as 404 is a match, not a failure);
* ``http`` — an answer was read completely, with another status (the row's
  ``status`` column holds the code);
* ``timeout`` — no connection (connect timeout) or no complete answer (read
  timeout) in time; the message says which;
* ``refused`` — the connection was refused;
* ``reset`` — the connection was closed or reset before the answer's header
  block was complete (also: closed without any answer);
* ``truncated`` — the header block arrived, the body did not in full: fewer
  bytes than announced, or than the object's known size;
* ``tls`` — the TLS handshake or a TLS record failed (certificate, protocol);
* ``protocol`` — the answer was not valid HTTP/1.1, or a success answer lacked
  what the protocol requires (an upload's ``Location``);
* ``not-sent`` — a trace request the node could not send because a helper
  request it needs failed first (the helper's own row says why);
* ``lost`` — no result came back: the client node died;
* ``error`` — a bug inside the node (its log has the traceback).

A request is **failed** when its outcome is anything but ``ok``.  Helper
(auxiliary) requests are classified the same way but counted apart, never
among the trace's requests.
"""

from __future__ import annotations

import socket
import ssl

OK = "ok"
HTTP = "http"
TIMEOUT = "timeout"
REFUSED = "refused"
RESET = "reset"
TRUNCATED = "truncated"
TLS = "tls"
PROTOCOL = "protocol"
NOT_SENT = "not-sent"
LOST = "lost"
ERROR = "error"

OUTCOMES = (OK, HTTP, TIMEOUT, REFUSED, RESET, TRUNCATED, TLS, PROTOCOL, NOT_SENT, LOST, ERROR)


def is_failed(outcome: str) -> bool:
    """The one definition: anything but ``ok`` is a failure."""
    return outcome != OK


def status_outcome(status: int, expected_status: int) -> str:
    """The outcome of a completely read answer with ``status`` to a trace request that recorded ``expected_status``."""
    return OK if 0 < status and (status < 400 or status == expected_status) else HTTP


def classify_exception(e: BaseException) -> str:
    """The outcome class of a transport exception (one that is not already a classified failure)."""
    if isinstance(e, ssl.SSLError | ssl.CertificateError):
        return TLS
    if isinstance(e, TimeoutError | socket.timeout):
        return TIMEOUT
    if isinstance(e, ConnectionRefusedError):
        return REFUSED
    if isinstance(e, ConnectionError | EOFError):  # reset, aborted, broken pipe, closed
        return RESET
    if isinstance(e, OSError):
        return REFUSED if e.errno in (111, 113, 101, 99) else RESET  # refused, no route, unreachable, no address
    return PROTOCOL
