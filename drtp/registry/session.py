"""Requests to registries on drtp's own connections: the one way drtp's synchronous code talks to a registry.

A :class:`Session` holds a keep-alive :class:`~drtp.registry.transport.Connection`
per thread and server (no lock on the request path) and the credentials and TLS
trust of each registry (one :class:`~drtp.registry.auth.Authenticator` per
registry, so a bearer token is fetched once and shared by every thread).  The
rules every engine keeps (a 401's challenge answered, a refused secret renewed,
redirects of reads followed with no credentials for another server, a send
again only where ``retries`` allows, every send tallied) are the request flow's,
:mod:`drtp.registry.flow`: the session carries out its sends on its connections
and its blocking calls (a token fetch, the wait for a renewed secret) in place.

With ``pools`` (a run whose client profile keeps connections per trace client), a request that names its
trace ``client`` takes a connection of that client's
(:class:`~drtp.registry.client_pools.ClientPools`) for each send, its retries included, instead of the
thread's own.

Failures are answers, not exceptions: a request that got no complete answer
returns a :class:`~drtp.registry.transport.Response` with ``status`` 0 and its
classified ``outcome``.  The client node's thread engine (``drtp.client.executor``)
and :class:`drtp.registry.calls.RegistryCalls` (warmup, capture, the demo, the
local registry's probe) both send through it; the event-loop engine drives the
same flow on the asynchronous twin of the connection and shares the session's authenticators.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from urllib.parse import urlsplit

from drtp.registry.auth import Authenticator
from drtp.registry.client_pools import ClientPools
from drtp.registry.flow import REDIRECTS, Send, request_flow
from drtp.registry.transport import USER_AGENT, Connection, RequestError, Response
from drtp.replay.messages import RegistryAuth, registry_base

Server = tuple[str, str]  # (scheme, netloc)


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
        stream: Callable[[bytes], None] | None = None,
    ) -> Response:
        """One request (an absolute URL); redirects of reads followed, latency of every hop in the caller's clock.

        ``client``: the trace client it is sent for (its connections, when the session keeps them per
        client); ``agent``: its User-Agent, if not the session's.  What is sent, and how often, is the
        request flow's (drtp/registry/flow.py); this carries its sends out on the thread's connection to
        each server, or on one the trace client's pool lends for each send (its retries included).
        ``stream``: a 200 answer's body goes to it piece by piece as it arrives, never kept whole."""
        u = urlsplit(url)
        server = (u.scheme, u.netloc)
        target = u.path + ("?" + u.query if u.query else "")
        pools = self.pools if client is not None else None
        conn: Connection | None = None
        sent: Send | None = None  # the send ``conn`` was taken for
        try:
            if server in self.auth:  # credentials: the flow adds them and answers their challenges
                flow = request_flow(method, server, target, headers, self.auth, self.retries, self.timeout)
                step = next(flow)
            else:  # anonymous: sent as it is; the flow only for an answer that leaves something to decide
                conn = self.connection(*server) if pools is None else pools.take(client, server)
                try:
                    first = conn.request(method, target, body, headers, keep_body, stream, agent=agent)
                except RequestError as e:
                    first = e
                else:
                    if first.status not in REDIRECTS:
                        return first
                flow = request_flow(method, server, target, headers, self.auth, self.retries, self.timeout)
                sent = next(flow)  # that first send, already answered: its retries go on the same connection
                step = flow.send(first)
            while True:
                if step.__class__ is Send:
                    if step is not sent:  # a new send (not a retry of the last one): a connection of its server
                        if pools is None:
                            conn = self.connection(*step.server)
                        else:
                            if conn is not None:
                                pools.give(client, sent.server, conn)
                                conn = None
                            conn = pools.take(client, step.server)
                        sent = step
                    try:
                        answer = conn.request(
                            step.method, step.target, body, step.headers, keep_body, stream, agent=agent
                        )
                    except RequestError as e:
                        answer = e
                    step = flow.send(answer)
                    continue
                if pools is not None and conn is not None:  # nothing held while a token is fetched
                    pools.give(client, sent.server, conn)
                    conn = None
                    sent = None
                step = flow.send(step.run())
        except StopIteration as done:
            return done.value
        finally:
            if pools is not None and conn is not None:
                pools.give(client, sent.server if sent is not None else server, conn)
