"""Requests to registries on drtp's own connections: the one way drtp's synchronous code talks to a registry.

A :class:`Session` holds a keep-alive :class:`~drtp.registry.transport.Connection`
per thread and server (no lock on the request path), the credentials and TLS
trust of each registry (one :class:`~drtp.registry.auth.Authenticator` per
registry, so a bearer token is fetched once and shared by every thread), and the
rules every engine keeps:

* a 401 whose challenge the registry's credentials can answer (basic, or a
  bearer token for the request's scope) is sent once more, authenticated;
* a redirect of a GET or HEAD is followed (at most 3), and the registry's
  credentials go only to the registry itself: a redirect target (object storage)
  is another server and gets none;
* a request is sent once; a GET or HEAD that got no byte of an answer is sent
  again only if ``retries`` allows (:func:`~drtp.registry.transport.send_again`),
  and every attempt is counted in ``Response.attempts``.

With ``pools`` (a run whose client profile keeps connections per trace client), a request that names its
trace ``client`` takes a connection of that client's
(:class:`~drtp.registry.client_pools.ClientPools`) for its duration instead of the thread's own.

Failures are answers, not exceptions: a request that got no complete answer
returns a :class:`~drtp.registry.transport.Response` with ``status`` 0 and its
classified ``outcome``.  The client node's thread engine (``drtp.client.executor``)
and :class:`drtp.registry.calls.RegistryCalls` (warmup, capture, the demo, the
local registry's probe) both send through it; the event-loop engine has the
asynchronous twin of the connection and shares the session's authenticators.
"""

from __future__ import annotations

import threading
from urllib.parse import urljoin, urlsplit

from drtp.registry.auth import IDEMPOTENT, Authenticator, AuthError
from drtp.registry.client_pools import ClientPools
from drtp.registry.transport import USER_AGENT, Connection, RequestError, Response, send_again
from drtp.replay.messages import RegistryAuth, registry_base

REDIRECTS = frozenset((301, 302, 303, 307, 308))
MAX_REDIRECTS = 3

Server = tuple[str, str]  # (scheme, netloc)
As = tuple[str | None, str | None] | None  # a request's (trace client, User-Agent); None: the session's own


def authenticators(auths: list[RegistryAuth], timeout: float) -> dict[Server, Authenticator]:
    """One Authenticator per registry entry, by the (scheme, netloc) its requests go to."""
    out: dict[Server, Authenticator] = {}
    for a in auths:
        u = urlsplit(registry_base(a.registry))
        out[(u.scheme, u.netloc)] = Authenticator(a, timeout)
    return out


class Session:
    """Registry requests with credentials, redirects and the retry rule; safe to share between threads."""

    def __init__(
        self,
        auths: list[RegistryAuth],
        timeout: float,
        connect_timeout: float | None = None,
        retries: int = 0,
        agent: str = USER_AGENT,
        keep: int = 0,
        idle_timeout: float = 0.0,
    ) -> None:
        """``agent``: the User-Agent of requests that name none; ``keep`` > 0: connections per trace client,
        at most ``keep`` idle per server, closed after ``idle_timeout`` seconds idle (0: never)."""
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.retries = retries
        self.agent = agent
        self.auth = authenticators(auths, timeout)  # registries not listed are anonymous
        self.local = threading.local()
        self.pools: ClientPools[Connection] | None = (
            ClientPools(keep, idle_timeout, lambda server: self.new_connection(*server)) if keep > 0 else None
        )

    def connection(self, scheme: str, netloc: str) -> Connection:
        """This thread's keep-alive connection to a server (made on first use)."""
        conns = getattr(self.local, "conns", None)
        if conns is None:
            conns = self.local.conns = {}
        key = (scheme, netloc)
        conn = conns.get(key)
        if conn is None:
            conn = conns[key] = self.new_connection(scheme, netloc)
        return conn

    def new_connection(self, scheme: str, netloc: str) -> Connection:
        """A connection to a server (not yet open), with the registry's TLS trust."""
        auth = self.auth.get((scheme, netloc)) if scheme == "https" else None
        context = auth.ssl if auth is not None else None
        return Connection(scheme, netloc, self.timeout, context, self.connect_timeout, self.agent)

    def close(self) -> None:
        """Close this thread's connections (and the trace clients' idle ones)."""
        for conn in getattr(self.local, "conns", {}).values():
            conn.close()
        self.local.conns = {}
        if self.pools is not None:
            self.pools.close()

    def request(
        self,
        method: str,
        url: str,
        body=None,
        headers: dict | None = None,
        keep_body: bool = False,
        client: str | None = None,
        agent: str | None = None,
    ) -> Response:
        """One request (an absolute URL); redirects of reads followed, latency of every hop in the caller's clock.

        ``client``: the trace client it is sent for (its connections, when the session keeps them per
        client); ``agent``: its User-Agent, if not the session's."""
        headers = headers or {}
        sent = (client, agent) if client is not None or agent is not None else None
        # every hop's sends and challenges are this request's, whichever hop answers: together they count
        # every time it went out (as the loop engine counts them)
        attempts = challenges = 0
        for _ in range(MAX_REDIRECTS + 1):
            r = self._send_authenticated(method, url, body, headers, keep_body, sent)
            attempts += r.attempts
            challenges += r.challenges
            r.attempts, r.challenges = attempts, challenges
            if r.status in REDIRECTS and method in IDEMPOTENT and r.header("location"):
                url = urljoin(url, r.header("location"))
                continue
            return r
        return r

    def _send_authenticated(self, method: str, url: str, body, headers: dict, keep_body: bool, sent: As) -> Response:
        u = urlsplit(url)
        auth = self.auth.get((u.scheme, u.netloc))
        if auth is None:  # a registry without credentials, or a redirect target: nothing secret goes there
            return self._send(method, url, body, headers, keep_body, sent)
        r, refused, generation = self._challenged(auth, method, url, body, headers, keep_body, sent)
        if not refused:
            if r.status == 401 and auth.reported:  # the secret was refused during this run, renewed or not
                r.error = auth.refusal(r.error)
            return r
        # the registry no longer takes a secret that worked before: renew it once (a node asks the master)
        auth.note_refused(generation)
        if method not in IDEMPOTENT:  # nothing written is sent twice
            r.error = auth.refusal("the write was not sent again")
            return r
        if not auth.auth.renewable or not auth.wait_renewed(generation, self.timeout):
            r.error = auth.refusal(f"no renewed secret (waited up to {self.timeout:g} s)")
            return r
        again, _, _ = self._challenged(auth, method, url, body, headers, keep_body, sent)
        again.attempts += r.attempts  # both sends are the trace request's
        again.challenges += r.challenges
        if again.status == 401:
            again.error = auth.refusal("sent again with the renewed secret: refused too")
        return again

    def _challenged(
        self, auth: Authenticator, method: str, url: str, body, headers: dict, keep_body: bool, sent_as: As
    ) -> tuple[Response, bool, int]:
        """One request with the registry's credentials, once more after a 401 whose challenge gave new ones;
        whether its last 401 refused the secret itself, and the secret's generation it was sent with."""
        path = urlsplit(url).path
        sent = auth.header(path)
        generation = auth.generation
        r = self._send(method, url, body, {**headers, **sent}, keep_body, sent_as)
        if r.status != 401:
            auth.answered(sent, r.status)
            return r, False, generation
        try:
            again = auth.challenge(path, r.header("www-authenticate"), sent)
        except AuthError as e:
            r.error = str(e)
            return r, auth.secret_refused(sent, r.status, e, generation), generation
        if again and not auth.replaced_under(method, sent, generation):
            sent = auth.header(path)
            challenged = r
            r = self._send(method, url, body, {**headers, **sent}, keep_body, sent_as)
            r.challenges = challenged.challenges + 1  # the 401's round trip: the registry served it too
            # the sends before it that got no answer (retries) are attempts: only the one answered 401 is a challenge
            r.attempts += challenged.attempts - 1
            auth.answered(sent, r.status)
        return r, auth.secret_refused(sent, r.status, None, generation), generation

    def _send(self, method: str, url: str, body, headers: dict, keep_body: bool, sent_as: As) -> Response:
        """One request, sent once; a GET/HEAD that got no byte of an answer again if ``retries`` allows."""
        u = urlsplit(url)
        target = u.path + ("?" + u.query if u.query else "")
        client, agent = sent_as if sent_as is not None else (None, None)
        pools = self.pools if client is not None else None
        server = (u.scheme, u.netloc)
        conn = self.connection(*server) if pools is None else pools.take(client, server)
        retries = self.retries if method in IDEMPOTENT else 0
        attempts = 0
        try:
            while True:
                attempts += 1
                try:
                    r = conn.request(method, target, body, headers, keep_body, agent=agent)
                except RequestError as e:
                    if not send_again(e, attempts, retries):
                        return Response.failed(e, attempts)
                    continue
                r.attempts = attempts
                return r
        finally:
            if pools is not None:
                pools.give(client, server, conn)
