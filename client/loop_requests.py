"""GETs and HEADs of manifests and blobs on the event loop, for every kind of registry.

What the thread Executor does for a read, done without leaving the loop: TLS with the
registry entry's trust (its CA bundle, or ``insecure``), the registry's credentials, and
redirects (a blob read that the registry sends to its storage server) followed to their
target.  What is sent, and how often — the 401's challenge answered, a refused secret renewed,
redirects, retries, the ``attempts`` and ``challenges`` tally — is the request flow's
(drtp/registry/flow.py), the very one the thread engine's Session drives: here its sends go
on the loop worker's connections, and only its blocking calls (a bearer token fetch, the wait
for a renewed secret) run on the run's thread pool.  A read of a server without credentials
is sent directly, and the flow starts only when its answer is an error or a redirect.

A run whose client profile keeps connections per trace client (``ClientModel.connections``) sends
each read on connections of its trace client's (drtp/registry/client_pools.py), borrowed for the
request and given back after it, instead of the loop worker's own; every read carries the
profile's User-Agent, or the trace's own when the request has one.
"""

from __future__ import annotations

import asyncio
import ssl
from concurrent.futures import Executor
from urllib.parse import urlsplit

from drtp.client.executor import object_digest, object_headers, object_path, result_of
from drtp.registry.async_transport import AsyncConnection
from drtp.registry.auth import Authenticator
from drtp.registry.client_pools import ClientPools
from drtp.registry.flow import REDIRECTS, Send, request_flow
from drtp.registry.session import Server
from drtp.registry.transport import USER_AGENT, RequestError, Response
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
        if server in self.auth:  # credentials: the flow adds them and answers their challenges
            r = await self._flow(conns, req.method, server, target, headers, agent, None)
        else:  # the common case: sent as it is, the flow only for an answer that leaves something to decide
            try:
                r = await self.connection(conns, server).request(req.method, target, headers, agent)
            except RequestError as e:
                r = await self._flow(conns, req.method, server, target, headers, agent, e)
            else:
                if r.status in REDIRECTS:
                    r = await self._flow(conns, req.method, server, target, headers, agent, r)
        latency = self.clock() - start
        return result_of(req, r, start, latency, object_digest(req, r), [])

    async def _flow(
        self,
        conns: Connections,
        method: str,
        server: Server,
        target: str,
        headers: dict[str, str] | None,
        agent: str | None,
        first: Response | RequestError | None,
    ) -> Response:
        """The request flow (drtp/registry/flow.py) carried out: its sends on ``conns``, its blocking calls (a
        token fetch, the wait for a renewed secret) on the run's thread pool; ``first``: the answer to its first
        send when that was sent already (the anonymous fast path)."""
        flow = request_flow(method, server, target, headers, self.auth, self.retries, self.spec.timeout)
        try:
            step = next(flow)
            if first is not None:  # that first send, already answered
                step = flow.send(first)
            while True:
                if step.__class__ is Send:
                    try:
                        answer = await self.connection(conns, step.server).request(
                            step.method, step.target, step.headers, agent
                        )
                    except RequestError as e:
                        answer = e
                    step = flow.send(answer)
                    continue
                if step.challenge:
                    self.challenges += 1
                step = flow.send(await asyncio.get_running_loop().run_in_executor(self.pool, step.run))
        except StopIteration as done:
            return done.value
