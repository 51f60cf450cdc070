"""The decisions of one registry request, written once and without I/O: a generator both engines drive.

A trace request is more than one send: a 401 whose challenge the registry's credentials can answer
is sent once more, authenticated; a read whose secret the registry refused (having taken it before)
once more after the secret was renewed; a redirect of a GET or HEAD is followed (at most
:data:`MAX_REDIRECTS`), and the credentials go only to the registry itself, never to a redirect
target (object storage, another server); a send that got no byte of an answer goes again only when
the run allows ``retries`` (:func:`~drtp.registry.transport.send_again`) and only for a GET or HEAD;
a write is never sent twice.  ``attempts`` and ``challenges`` of the answer count every time the
trace request went out, over every hop: ``challenges`` the sends answered by a 401 whose challenge
was answered, ``attempts`` all others.

Two engines keep these rules: the blocking session (drtp/registry/session.py: the nodes' thread
engine and :class:`~drtp.registry.calls.RegistryCalls`) and the event loop
(client/loop_requests.py).  Written in each, a new rule (a renewal, a tally) would have to be added
twice and the two would drift; so they are written here once, without I/O, as httpx writes
``Auth.auth_flow``: :func:`request_flow` is a generator that yields what to do next and is sent
what came of it.

* It yields a :class:`Send` (one send of the request: its server, target and headers) and is sent
  the :class:`~drtp.registry.transport.Response`, or the
  :class:`~drtp.registry.transport.RequestError` of a send that got no complete answer.  A retry
  yields the *same* ``Send`` object again, so an engine that takes connections from a pool keeps
  the one it took for all the sends of one ``Send`` (a failed send reconnects it, as before).
* It yields a :class:`Call` (a call that may block: a challenge's token fetch, the wait for a
  renewed secret) and is sent what :meth:`Call.run` returns (its result, or the AuthError of a
  refusal).  The blocking session runs it in place; the event loop runs it on the run's thread
  pool, so the loop never waits for a token server.
* It returns the request's final :class:`~drtp.registry.transport.Response` (``StopIteration``).

Each engine keeps its own way of taking connections and only carries sends and calls out.  A
request to a server without credentials whose first answer is not a redirect has nothing to
decide, so the engines send it directly and the common anonymous read pays for no generator.  Only
when that answer is an error or a redirect do they start the flow: they take its first step (that
very send: without credentials nothing happens before it) and send the flow the answer they have.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from typing import Any
from urllib.parse import urljoin, urlsplit

from drtp.registry.auth import IDEMPOTENT, Authenticator, AuthError
from drtp.registry.client_pools import Server
from drtp.registry.transport import RequestError, Response, send_again

REDIRECTS = frozenset((301, 302, 303, 307, 308))
MAX_REDIRECTS = 3  # redirects followed; the answer to the last send is the request's, whatever it is

Headers = dict[str, str] | None

# A cache's own verdict on an answer: nginx ``add_header X-Cache-Status $upstream_cache_status`` (HIT, MISS,
# EXPIRED, STALE, UPDATING, REVALIDATED, BYPASS) or Varnish's ``X-Cache`` (HIT, MISS; "HIT from host" in some
# setups).  Served from the cache's store is a hit; fetched from the upstream for this answer is a miss.
CACHE_HITS = frozenset(("HIT", "STALE", "UPDATING", "REVALIDATED"))
CACHE_HEADERS = ("x-cache-status", "x-cache")  # names lower-case, as the transports keep them


def cache_verdict(headers: dict[str, str]) -> str:
    """``hit`` or ``miss`` as the cache said in its answer's header, ``""`` when the answer has none (no cache in
    the path, or one that does not say): one dict lookup on the common path, an answer without a cache header."""
    value = headers.get("x-cache-status") or headers.get("x-cache")
    if not value:
        return ""
    word = value.split(None, 1)[0].rstrip(",").upper() if value.strip() else ""
    return "hit" if word in CACHE_HITS else "miss"


class Send:
    """One send of the request to ``server`` (scheme, netloc): the engine sends it on a connection of its own
    and sends the flow its Response, or its RequestError."""

    __slots__ = ("method", "server", "target", "headers")

    def __init__(self, method: str, server: Server, target: str, headers: Headers) -> None:
        self.method = method
        self.server = server
        self.target = target  # path and query
        self.headers = headers  # the caller's headers with the registry's Authorization, if any


class Call:
    """A call that may block (the network, or a wait): the engine runs :meth:`run` where blocking is allowed
    (in place, or on a thread pool) and sends the flow what it returns.

    ``challenge``: the call answers a 401's challenge (the event loop counts those it ran on its pool).
    """

    __slots__ = ("fn", "args", "challenge")

    def __init__(self, fn: Callable[..., Any], *args: Any, challenge: bool = False) -> None:
        self.fn = fn
        self.args = args
        self.challenge = challenge

    def run(self) -> Any:
        """The call's result, or the AuthError it raised: a refusal is an answer the flow decides on, as a
        send's RequestError is (any other exception is the engine's, as it was the caller's)."""
        try:
            return self.fn(*self.args)
        except AuthError as e:
            return e


Step = Send | Call
Answer = Response | RequestError | Any  # a Send's answer, or a Call's result
Flow = Generator[Step, Answer, Response]


def request_flow(
    method: str,
    server: Server,
    target: str,
    headers: Headers,
    auths: Mapping[Server, Authenticator],
    retries: int,
    timeout: float,
) -> Flow:
    """One trace request to ``server`` ``target``, redirects of reads followed; every hop's sends and challenges
    tallied on the answer.

    ``auths``: the credentials by server (servers not in it are anonymous); ``retries``: sends again allowed
    to a GET or HEAD that got no byte of an answer; ``timeout``: how long a read waits for a renewed secret.
    """
    attempts = challenges = 0
    for _ in range(MAX_REDIRECTS + 1):
        r = yield from _authenticated(method, server, target, headers, auths.get(server), retries, timeout)
        attempts += r.attempts
        challenges += r.challenges
        r.attempts, r.challenges = attempts, challenges
        location = r.header("location") if r.status in REDIRECTS and method in IDEMPOTENT else None
        if not location:
            return r
        u = urlsplit(urljoin(f"{server[0]}://{server[1]}{target}", location))
        server = (u.scheme, u.netloc)
        target = u.path + ("?" + u.query if u.query else "")
    return r


def _authenticated(
    method: str,
    server: Server,
    target: str,
    headers: Headers,
    auth: Authenticator | None,
    retries: int,
    timeout: float,
) -> Generator[Step, Answer, Response]:
    """One hop: with the server's credentials, if it has any, a 401 with a challenge they can answer sent once
    more, authenticated; a read whose secret the registry refused (having taken it before) once more after
    the secret was renewed (a node asks the master, the master its source)."""
    if auth is None:  # a registry without credentials, or a redirect target: nothing secret goes there
        return (yield from _sent(Send(method, server, target, headers), retries))
    r, refused, generation = yield from _challenged(method, server, target, headers, auth, retries)
    if not refused:
        if r.status == 401 and auth.reported:  # the secret was refused during this run, renewed or not
            r.error = auth.refusal(r.error)
        return r
    # the registry no longer takes a secret that worked before: renew it once
    auth.note_refused(generation)
    if method not in IDEMPOTENT:  # nothing written is sent twice
        r.error = auth.refusal("the write was not sent again")
        return r
    if not auth.auth.renewable or not (yield Call(auth.wait_renewed, generation, timeout)):
        r.error = auth.refusal(f"no renewed secret (waited up to {timeout:g} s)")
        return r
    again, _, _ = yield from _challenged(method, server, target, headers, auth, retries)
    again.attempts += r.attempts  # both sends are the trace request's
    again.challenges += r.challenges
    if again.status == 401:
        again.error = auth.refusal("sent again with the renewed secret: refused too")
    return again


def _challenged(
    method: str, server: Server, target: str, headers: Headers, auth: Authenticator, retries: int
) -> Generator[Step, Answer, tuple[Response, bool, int]]:
    """The request with the registry's credentials, once more after a 401 whose challenge gave new ones;
    whether its last 401 refused the secret itself, and the secret's generation it was sent with."""
    path = target.partition("?")[0]
    sent = auth.header(path)
    generation = auth.generation
    r = yield from _sent(Send(method, server, target, {**headers, **sent} if headers else sent), retries)
    if r.status != 401:
        auth.answered(sent, r.status)
        return r, False, generation
    # a bearer token fetch: the network
    again = yield Call(auth.challenge, path, r.header("www-authenticate"), sent, challenge=True)
    if isinstance(again, AuthError):
        r.error = str(again)
        return r, auth.secret_refused(sent, r.status, again, generation), generation
    if again and not auth.replaced_under(method, sent, generation):
        sent = auth.header(path)
        challenged = r
        r = yield from _sent(Send(method, server, target, {**headers, **sent} if headers else sent), retries)
        r.challenges = challenged.challenges + 1  # the 401's round trip: the registry served it too
        # the sends before it that got no answer (retries) are attempts: only the one answered 401 is a challenge
        r.attempts += challenged.attempts - 1
        auth.answered(sent, r.status)
    return r, auth.secret_refused(sent, r.status, None, generation), generation


def _sent(send: Send, retries: int) -> Generator[Send, Response | RequestError, Response]:
    """``send``'s answer: sent once, again (the same Send) while no byte of an answer came and ``retries``
    allows, for a GET or HEAD only; a send that got no answer becomes a Response with status 0."""
    retries = retries if send.method in IDEMPOTENT else 0
    attempts = 0
    while True:
        attempts += 1
        answer = yield send
        if not isinstance(answer, RequestError):
            answer.attempts = attempts
            return answer
        if not send_again(answer, attempts, retries):
            return Response.failed(answer, attempts)
