"""GETs and HEADs of manifests and blobs on the event loop, for every kind of registry.

What the thread Executor does for a read, done without leaving the loop: TLS with the
registry entry's trust (its CA bundle, or ``insecure``), the Authorization header of the
registry's :class:`~drtp.registry.auth.Authenticator` and, after a 401 with a challenge, the
one request sent again when the challenge gave new credentials; and redirects (a blob read
that the registry sends to its storage server) followed to their target.  Only the
challenge itself — it may fetch a bearer token over the network, a blocking call — runs
on the run's thread pool.  Credentials go only to the server they belong to: a redirect
target that is another server gets the request without any Authorization header.

A run whose client profile keeps connections per trace client (``ClientModel.connections``) sends
each read on connections of its trace client's (drtp/registry/client_pools.py), borrowed for the
request and given back after it, instead of the loop worker's own; every read carries the
profile's User-Agent, or the trace's own when the request has one.

A request is sent once; a GET/HEAD that got no byte of an answer is sent again only when
the run allows retries.  ``attempts`` and ``challenges`` together count every time the trace
request went out, over every hop of a redirect, as the thread engine's Session counts them:
``challenges`` the sends answered by a 401 whose challenge was answered, ``attempts`` all others.
"""

from __future__ import annotations

import asyncio
import ssl
from concurrent.futures import Executor
from urllib.parse import urljoin, urlsplit

from drtp.client.executor import object_digest, object_headers, object_path, result_of
from drtp.registry.async_transport import AsyncConnection
from drtp.registry.auth import Authenticator, AuthError
from drtp.registry.client_pools import ClientPools
from drtp.registry.session import IDEMPOTENT, MAX_REDIRECTS, REDIRECTS, Server
from drtp.registry.transport import USER_AGENT, RequestError, Response, send_again
from drtp.replay.messages import ReplayRequest, ReplayResult, RunSpec, registry_base

Connections = dict[Server, AsyncConnection]  # one loop worker's keep-alive connections


class Borrowed(dict):
    """The connections one request took from its trace client's pool, by server (given back after it)."""

    __slots__ = ("client",)

    def __init__(self, client: str) -> None:
        super().__init__()
        self.client = client


class LoopRequests:
    """The reads of one run on its event loop; shared by the run's loop workers, each with its own connections.

    ``challenges`` counts the 401 challenges answered on the thread pool (a bearer token fetch, or
    switching to basic credentials).
    """

    def __init__(self, spec: RunSpec, clock, pool: Executor, auth: dict[Server, Authenticator]) -> None:
        self.spec = spec
        self.clock = clock
        self.pool = pool
        self.retries = spec.retries
        # registry (scheme, netloc) -> its credentials and TLS trust (spec.auth); other servers are anonymous.
        # The run's thread engine shares them (drtp.registry.session): a bearer token is fetched once per node
        self.auth = auth
        self.servers: dict[str, Server] = {}  # a request's registry entry -> its server
        self.system_trust: ssl.SSLContext | None = None  # https without a registries: entry (made once)
        self.challenges = 0
        model = spec.client
        self.agent = model.user_agent or USER_AGENT
        # connections per trace client (a client profile), used on the loop's thread only
        self.pools: ClientPools[AsyncConnection] | None = (
            ClientPools(model.connections, model.idle_timeout_s, self.new_connection) if model.connections > 0 else None
        )
        # get(req, conns): a trace GET/HEAD of a manifest or blob, redirects followed, latency over every hop; on
        # the loop worker's connections ``conns``, or with connections per trace client on the client's (chosen
        # once here: the per-slot path has no per-request check)
        self.get = self._get if self.pools is None else self._pooled_get

    def server_of(self, registry: str) -> Server:
        server = self.servers.get(registry)
        if server is None:
            u = urlsplit(registry_base(registry))
            server = self.servers[registry] = (u.scheme, u.netloc)
        return server

    def connection(self, conns: Connections, server: Server) -> AsyncConnection:
        conn = conns.get(server)
        if conn is None:
            if isinstance(conns, Borrowed):
                conn = conns[server] = self.pools.take(conns.client, server)
            else:
                conn = conns[server] = self.new_connection(server)
        return conn

    def new_connection(self, server: Server) -> AsyncConnection:
        """A connection to a server (not yet open), with the registry's TLS trust or the system's."""
        scheme, netloc = server
        context = None
        if scheme == "https":
            auth = self.auth.get(server)
            if auth is not None:
                context = auth.ssl
            else:
                if self.system_trust is None:
                    self.system_trust = ssl.create_default_context()
                context = self.system_trust
        return AsyncConnection(
            netloc, self.spec.timeout, self.spec.connect_timeout, scheme=scheme, context=context, agent=self.agent
        )

    def close(self) -> None:
        """The run's end: close the trace clients' idle connections (the workers close their own)."""
        if self.pools is not None:
            self.pools.close()

    async def _pooled_get(self, req: ReplayRequest, conns: Connections) -> ReplayResult:
        """:meth:`get` on connections of the request's trace client (taken for it, given back after it)."""
        borrowed = Borrowed(req.client)
        try:
            return await self._get(req, borrowed)
        finally:
            for server, conn in borrowed.items():
                self.pools.give(req.client, server, conn)

    async def _get(self, req: ReplayRequest, conns: Connections) -> ReplayResult:
        """A trace GET/HEAD of a manifest or blob on ``conns``, redirects followed; latency covers every hop."""
        server = self.server_of(req.registry)
        target, headers = object_path(req), object_headers(req)
        agent = req.user_agent
        start = self.clock()
        if server in self.auth:
            r = await self._authenticated(conns, server, req.method, target, headers, agent)
        else:  # the common case: no credentials, so no challenge to answer (what _authenticated does for it)
            r = await self._send(self.connection(conns, server), req.method, target, headers, agent)
        if r.status not in REDIRECTS:  # no redirect to follow (the common case): the loop below is skipped
            latency = self.clock() - start
            return result_of(req, r, start, latency, object_digest(req, r), [])
        attempts, challenges = r.attempts, r.challenges
        for _ in range(MAX_REDIRECTS):
            if r.status not in REDIRECTS:
                break
            location = r.header("location")
            if not location:
                break
            u = urlsplit(urljoin(f"{server[0]}://{server[1]}{target}", location))
            server = (u.scheme, u.netloc)
            target = u.path + ("?" + u.query if u.query else "")
            r = await self._authenticated(conns, server, req.method, target, headers, agent)
            attempts += r.attempts
            challenges += r.challenges
        r.attempts, r.challenges = attempts, challenges
        latency = self.clock() - start
        return result_of(req, r, start, latency, object_digest(req, r), [])

    async def _authenticated(
        self,
        conns: Connections,
        server: Server,
        method: str,
        target: str,
        headers: dict[str, str] | None,
        agent: str | None,
    ) -> Response:
        """One request with the server's credentials, if it has any; a 401 with a challenge they can answer
        is sent once more, authenticated; a read whose secret the registry refused (having taken it before)
        once more after the master renewed it (what the thread engine's Session does)."""
        conn = self.connection(conns, server)
        auth = self.auth.get(server)
        if auth is None:
            return await self._send(conn, method, target, headers, agent)
        r, refused, generation = await self._challenged(conn, auth, method, target, headers, agent)
        if not refused:
            if r.status == 401 and auth.reported:  # the secret was refused during this run, renewed or not
                r.error = auth.refusal(r.error)
            return r
        auth.note_refused(generation)  # the result stream reports it; the master renews once
        loop = asyncio.get_running_loop()
        timeout = self.spec.timeout
        if not auth.auth.renewable or not await loop.run_in_executor(self.pool, auth.wait_renewed, generation, timeout):
            r.error = auth.refusal(f"no renewed secret (waited up to {timeout:g} s)")
            return r
        again, _, _ = await self._challenged(self.connection(conns, server), auth, method, target, headers, agent)
        again.attempts += r.attempts  # both sends are the trace request's
        again.challenges += r.challenges
        if again.status == 401:
            again.error = auth.refusal("sent again with the renewed secret: refused too")
        return again

    async def _challenged(
        self,
        conn: AsyncConnection,
        auth: Authenticator,
        method: str,
        target: str,
        headers: dict[str, str] | None,
        agent: str | None,
    ) -> tuple[Response, bool, int]:
        """The request, once more after a 401 whose challenge gave new credentials; and whether its last
        401 refused the secret itself."""
        path = target.partition("?")[0]
        sent = auth.header(path)
        generation = auth.generation
        r = await self._send(conn, method, target, {**headers, **sent} if headers else sent, agent)
        if r.status != 401:
            auth.answered(sent, r.status)
            return r, False, generation
        self.challenges += 1
        loop = asyncio.get_running_loop()
        try:
            again = await loop.run_in_executor(self.pool, auth.challenge, path, r.header("www-authenticate"), sent)
        except AuthError as e:
            r.error = str(e)
            return r, auth.secret_refused(sent, r.status, e, generation), generation
        if again and not auth.replaced_under(method, sent, generation):
            sent = auth.header(path)
            challenged = r
            r = await self._send(conn, method, target, {**headers, **sent} if headers else sent, agent)
            r.challenges = challenged.challenges + 1  # the 401's round trip: the registry served it too
            # the sends before it that got no answer (retries) are attempts: only the one answered 401 is a challenge
            r.attempts += challenged.attempts - 1
            auth.answered(sent, r.status)
        return r, auth.secret_refused(sent, r.status, None, generation), generation

    async def _send(
        self, conn: AsyncConnection, method: str, target: str, headers: dict[str, str] | None, agent: str | None
    ) -> Response:
        """One request, sent once; again only when no byte of an answer came and the run allows retries."""
        retries = self.retries if method in IDEMPOTENT else 0
        attempts = 0
        while True:
            attempts += 1
            try:
                r = await conn.request(method, target, headers, agent)
            except RequestError as e:
                if not send_again(e, attempts, retries):
                    return Response.failed(e, attempts)
                continue
            r.attempts = attempts
            return r
