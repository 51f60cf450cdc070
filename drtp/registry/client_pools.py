"""Keep-alive connections per trace client, kept and dropped as a real client's HTTP transport does.

A real registry client (Docker, containerd, skopeo, crane: all Go's ``net/http`` ``Transport``) opens a
connection for each request that finds no idle one of its own, so three layer downloads at once are
three connections; when a request ends its connection goes back to the idle list of its host unless
that list already holds ``MaxIdleConnsPerHost`` (2 unless the client sets more), else it is closed;
an idle connection unused for ``IdleConnTimeout`` is closed, so the next request pays a new TCP (and
TLS) handshake.  :class:`ClientPools` does the same for every trace client of a run, so the registry
sees as many connections, as often, as the clients of the trace would open: ``keep`` idle connections
per (client, server), closed after ``idle_timeout`` seconds unused.

The number of trace clients is not bounded (a trace may hold millions of addresses), so the pools are:
at most ``max_clients`` clients keep idle connections, the least recently active one loses its
connections first (a client that comes back opens new ones, as a real client would after a long
pause).  One instance serves either the thread engine's blocking connections
(:class:`~drtp.registry.transport.Connection`) or the event loop's
(:class:`~drtp.registry.async_transport.AsyncConnection`): both have ``open`` and ``close()``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

Server = tuple[str, str]  # (scheme, netloc)

# Trace clients whose idle connections are kept at once: beyond, the least recently active client's are
# closed.  With containerd's 2 per registry host, 512 clients hold at most 1024 idle sockets per registry.
MAX_CLIENTS = 512


class Closable(Protocol):
    @property
    def open(self) -> bool: ...

    def close(self) -> None: ...


C = TypeVar("C", bound=Closable)


class ClientPools(Generic[C]):
    """Idle keep-alive connections per trace client and server; safe to share between threads.

    ``take`` gives the client's most recently used idle connection to the server that has not idled past
    ``idle_timeout`` (0: never too old), or a new one from ``make``; ``give`` returns it after the request.
    ``opened`` counts the connections made, ``closed`` those the pools closed (idle too long, beyond ``keep``,
    or of an evicted client).
    """

    def __init__(
        self,
        keep: int,
        idle_timeout: float,
        make: Callable[[Server], C],
        max_clients: int = MAX_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if keep < 1:
            raise ValueError("a client pool keeps at least one idle connection per server")
        self.keep = keep
        self.idle_timeout = idle_timeout
        self.make = make
        self.max_clients = max(1, max_clients)
        self.clock = clock
        # client -> server -> idle connections with the time each went idle, the most recent last
        self.pools: OrderedDict[str, dict[Server, list[tuple[float, C]]]] = OrderedDict()
        self.lock = threading.Lock()
        self.opened = 0
        self.closed = 0
        # every so often, idle connections of clients that send nothing more are closed too
        self.next_sweep = clock() + idle_timeout if idle_timeout > 0 else float("inf")

    def take(self, client: str, server: Server) -> C:
        """A connection for one request of ``client`` to ``server``: an idle one of the client's, or a new one."""
        now = self.clock()
        stale: list[C] = []
        conn: C | None = None
        with self.lock:
            if now >= self.next_sweep:
                self._sweep(now, stale)
            pool = self.pools.get(client)
            if pool is not None:
                self.pools.move_to_end(client)
                idle = pool.get(server)
                while idle:
                    since, candidate = idle.pop()
                    if self._too_old(since, now) or not candidate.open:
                        stale.append(candidate)
                        continue
                    conn = candidate
                    break
            if conn is None:
                self.opened += 1
        self._close(stale)
        return conn if conn is not None else self.make(server)

    def give(self, client: str, server: Server, conn: C) -> None:
        """Return a connection after its request: kept idle if the client keeps fewer than ``keep``, else closed."""
        if not conn.open:  # the answer closed it, or it failed
            return
        now = self.clock()
        drop: list[C] = []
        with self.lock:
            pool = self.pools.get(client)
            if pool is None:
                pool = self.pools[client] = {}
                while len(self.pools) > self.max_clients:  # the least recently active client loses its connections
                    _, evicted = self.pools.popitem(last=False)
                    drop.extend(c for idle in evicted.values() for _, c in idle)
            else:
                self.pools.move_to_end(client)
            idle = pool.setdefault(server, [])
            if len(idle) < self.keep:
                idle.append((now, conn))
            else:
                drop.append(conn)
        self._close(drop)

    def idle_count(self) -> int:
        """Idle connections kept now, over every client and server."""
        with self.lock:
            return sum(len(idle) for pool in self.pools.values() for idle in pool.values())

    def close(self) -> None:
        """Close every idle connection (the run's end)."""
        with self.lock:
            drop = [c for pool in self.pools.values() for idle in pool.values() for _, c in idle]
            self.pools.clear()
        self._close(drop)

    def _too_old(self, since: float, now: float) -> bool:
        return self.idle_timeout > 0 and now - since >= self.idle_timeout

    def _sweep(self, now: float, stale: list[C]) -> None:
        """Take out the connections idle past the timeout, of every client (called with the lock held)."""
        self.next_sweep = now + self.idle_timeout / 2
        for client in list(self.pools):
            pool = self.pools[client]
            for server, idle in list(pool.items()):
                fresh = [(since, c) for since, c in idle if not self._too_old(since, now)]
                if len(fresh) < len(idle):
                    stale.extend(c for since, c in idle if self._too_old(since, now))
                    pool[server] = fresh
            if not any(pool.values()):
                del self.pools[client]

    def _close(self, conns: list[C]) -> None:
        for conn in conns:
            if conn.open:
                self.closed += 1
            conn.close()
