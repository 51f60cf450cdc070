"""The ``prefetch`` plugin: layers prefetched after a push, for the clients that pull the repository next.

* A PUT layer records (repository → layer, pusher, time); the entry lives
  ``lm_thresh`` seconds (``now - put_time <= lm_thresh``) and a new PUT of the
  same layer to the same repository starts a fresh entry.
* A GET manifest of that repository by a client not yet in a live entry's
  client set adds the client and prefetches the entry's layer; the layer stays
  ``ml_thresh`` seconds after its (last) prefetch.  Triggering a layer that is
  still held only restarts its timer (a *renewal*, not a new fetch).
* A GET layer of a held layer is a prefetch hit; every such GET counts.

Reported: prefetches, renewals, prefetch hits, hits per prefetch, layers that
were never hit, and the peak bytes held.  A layer's size is the largest bytes
written for it by a GET or PUT, or the bytes of the PATCHes of its chunked
upload (a chunked push ends with an empty PUT).
"""

from __future__ import annotations

import heapq
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from drtp.plugins.base import COMPAT_HELP, Compat, PluginArgs, SimPlugin, SimResult, iso_time, resolve_duration
from drtp.plugins.original import simulate_prefetch_original
from drtp.trace.columns import BLOB, GET, MANIFEST, PATCH, PUT, UPLOAD, TraceColumns

ARG_HELP = {
    "lm_thresh": "how long a pushed layer waits for GET manifests (LM_thresh), e.g. 1h, 12h, 1d",
    "ml_thresh": "how long a prefetched layer is kept (ML_thresh), e.g. 1h, 12h, 1d",
    "per_server": "one lookup table and prefetch memory per trace host (default: shared)",
    "compat": COMPAT_HELP + "; with original the thresholds have no effect",
}


class PrefetchArgs(PluginArgs):
    lm_thresh: float | str = "1h"
    ml_thresh: float | str = "1h"
    per_server: bool = False
    compat: Compat = "none"


# What each request the simulation looks at does (every other request is left out before the loop)
_PUT_LAYER, _PATCH, _GET_MANIFEST, _GET_LAYER = 0, 1, 2, 3


@dataclass(slots=True)
class _Entry:
    """A lookup-table entry: a layer pushed to a repository, waiting ``lm_thresh`` for GET manifests."""

    put_time: float
    layer: int
    pusher: int  # the client that pushed it: its own GET manifests prefetch nothing
    alive: bool = True  # False once a newer push of the layer to the repository replaced it


@dataclass(slots=True)
class _Prefetch:
    """One prefetch of a layer: a row of the ``prefetches`` table (ids index the trace's name tables)."""

    time: float
    server: int
    repository: int
    layer: int
    size: int
    client: int  # whose GET manifest triggered it
    renewals: int = 0
    expired: float | None = None  # when the layer was let go (None: still held at the end)
    hits: int = 0


@dataclass(slots=True)
class _Held:
    """A prefetched layer in memory."""

    expires: float
    size: int
    row: int  # its prefetch, as an index into the prefetch log


@dataclass(slots=True)
class _Counts:
    """Requests seen and what they did; the summary lists them in this order."""

    put_layers: int = 0
    get_manifests: int = 0
    get_layers: int = 0
    renewals: int = 0
    prefetch_hits: int = 0


class _Repo:
    """A repository's lookup-table entries, in PUT order.

    A client's GET manifest adds it to every live entry, so the entries a client
    has not seen are exactly those pushed after its previous GET manifest (by
    someone else): each client keeps the position it has seen up to, and a GET
    manifest visits only the newer entries.  Entries expire in PUT order, so the
    expired ones are a prefix.
    """

    __slots__ = ("entries", "start", "base", "seen", "current")

    def __init__(self) -> None:
        self.entries: list[_Entry] = []
        self.start = 0  # first entry not yet expired (index into entries)
        self.base = 0  # absolute position of entries[0]
        self.seen: dict[int, int] = {}  # client -> absolute position it has seen up to
        self.current: dict[int, int] = {}  # layer -> absolute position of its live entry

    def put(self, t: float, layer: int, client: int) -> None:
        old = self.current.get(layer)
        if old is not None and old >= self.base:
            self.entries[old - self.base].alive = False  # a new push of the layer starts a fresh entry
        self.current[layer] = self.base + len(self.entries)
        self.entries.append(_Entry(t, layer, client))

    def unseen(self, t: float, client: int, lm: float) -> list[int]:
        """Layers of live entries the client has not seen; marks them seen."""
        entries = self.entries
        start = self.start
        while start < len(entries) and t - entries[start].put_time > lm:
            start += 1
        if start > 1024 and start * 2 > len(entries):  # drop the expired prefix now and then
            del entries[:start]
            self.base += start
            start = 0
        self.start = start
        end = self.base + len(entries)
        begin = max(self.seen.get(client, 0), self.base + start) - self.base
        self.seen[client] = end
        return [e.layer for e in entries[begin:] if e.alive and e.pusher != client]


@dataclass
class _Server:
    """What one server (or all of them, when shared) knows: its lookup table and its prefetch memory."""

    repos: dict[int, _Repo] = field(default_factory=dict)
    held: dict[int, _Held] = field(default_factory=dict)  # layer -> its prefetched copy
    expiry: list[tuple[float, int, int]] = field(default_factory=list)  # heap of (due, layer, row), lazily moved
    memory: int = 0

    def expire(self, t: float, log: list[_Prefetch]) -> int:
        """Let go of the layers whose ML timer passed before ``t``; returns the bytes freed."""
        heap, freed = self.expiry, 0
        while heap and heap[0][0] < t:
            due, layer, row = heapq.heappop(heap)
            held = self.held.get(layer)
            if held is None or held.row != row:
                continue
            if held.expires > due:  # renewed since: wait for the new deadline
                heapq.heappush(heap, (held.expires, layer, row))
                continue
            del self.held[layer]
            self.memory -= held.size
            freed += held.size
            log[row].expired = due
        return freed


class _Simulation:
    """The prefetcher over the requests in time order, one handler per kind of request."""

    def __init__(self, lm: float, ml: float, size_of: list[int]) -> None:
        self.lm, self.ml = lm, ml
        self.size_of = size_of  # layer -> bytes; a chunked upload may raise it
        self.servers: dict[int, _Server] = {}
        self.uploading: dict[tuple[int, int], int] = {}  # (client, repo) -> bytes of a chunked upload so far
        self.log: list[_Prefetch] = []
        self.counts = _Counts()
        self.memory = 0  # bytes held by all servers together
        self.peak, self.peak_time = 0, None

    def patch(self, client: int, repo: int, size: int) -> None:
        key = (client, repo)
        self.uploading[key] = self.uploading.get(key, 0) + size

    def put_layer(self, s: _Server, t: float, layer: int, repo: int, client: int) -> None:
        self.counts.put_layers += 1
        uploaded = self.uploading.pop((client, repo), 0)
        if uploaded > self.size_of[layer]:
            self.size_of[layer] = uploaded
        r = s.repos.get(repo)
        if r is None:
            r = s.repos[repo] = _Repo()
        r.put(t, layer, client)

    def get_manifest(self, s: _Server, t: float, host: int, repo: int, client: int) -> None:
        """Prefetch the layers pushed to ``repo`` that ``client`` has not seen; renew those still held."""
        self.counts.get_manifests += 1
        r = s.repos.get(repo)
        if r is None:
            return
        log = self.log
        for layer in r.unseen(t, client, self.lm):
            held = s.held.get(layer)
            expires = t + self.ml
            if held is not None:  # still held: restart its timer
                self.counts.renewals += 1
                held.expires = expires  # the heap entry is moved on when it comes due
                log[held.row].renewals += 1
                continue
            row = len(log)
            size = self.size_of[layer]
            log.append(_Prefetch(t, host, repo, layer, size, client))
            s.held[layer] = _Held(expires, size, row)
            heapq.heappush(s.expiry, (expires, layer, row))
            s.memory += size
            self.memory += size
            if self.memory > self.peak:
                self.peak, self.peak_time = self.memory, t

    def get_layer(self, s: _Server, layer: int) -> None:
        self.counts.get_layers += 1
        held = s.held.get(layer)
        if held is not None:
            self.counts.prefetch_hits += 1
            self.log[held.row].hits += 1


def simulate_prefetch(trace: TraceColumns, lm: float, ml: float, per_server: bool) -> SimResult:
    method, kind, status = trace.method, trace.kind, trace.status
    ok = status < 400
    put_layer = (method == PUT) & (kind == BLOB) & ok
    patch = (method == PATCH) & (kind == UPLOAD) & ok
    get_manifest = (method == GET) & (kind == MANIFEST) & ok
    get_layer = (method == GET) & (kind == BLOB) & ok
    rows = np.flatnonzero(put_layer | patch | get_manifest | get_layer)
    what = np.select(
        [put_layer[rows], patch[rows], get_manifest[rows]], [_PUT_LAYER, _PATCH, _GET_MANIFEST], _GET_LAYER
    ).tolist()
    sizes = np.zeros(len(trace.objects), dtype=np.int64)
    blob_rows = np.flatnonzero(put_layer | get_layer)
    np.maximum.at(sizes, trace.obj[blob_rows], trace.size[blob_rows])

    times = trace.time[rows].tolist()
    objs, repos = trace.obj[rows].tolist(), trace.repo[rows].tolist()
    clients, req_sizes = trace.client[rows].tolist(), trace.size[rows].tolist()
    hosts = trace.host[rows].tolist() if per_server else [0] * len(rows)

    sim = _Simulation(lm, ml, sizes.tolist())
    servers, log = sim.servers, sim.log
    t0 = time.perf_counter()
    for t, w, obj, repo, client, rsize, host in zip(times, what, objs, repos, clients, req_sizes, hosts, strict=True):
        s = servers.get(host)
        if s is None:
            s = servers[host] = _Server()
        if s.expiry and s.expiry[0][0] < t:
            sim.memory -= s.expire(t, log)
        if w == _PATCH:
            sim.patch(client, repo, rsize)
        elif w == _PUT_LAYER:
            sim.put_layer(s, t, obj, repo, client)
        elif w == _GET_MANIFEST:
            sim.get_manifest(s, t, host, repo, client)
        else:
            sim.get_layer(s, obj)
    elapsed = time.perf_counter() - t0
    summary = _summary(sim, trace, lm, ml, per_server, elapsed)
    return SimResult(summary, {"prefetches": _table(log, trace, per_server)}, kind="prefetch")


def _summary(sim: _Simulation, trace: TraceColumns, lm: float, ml: float, per_server: bool, elapsed: float) -> dict:
    counts, log = sim.counts, sim.log
    prefetches = len(log)
    used = sum(1 for p in log if p.hits > 0)
    return {
        "plugin": "prefetch",
        "lm_thresh_s": lm,
        "ml_thresh_s": ml,
        "per_server": per_server,
        "trace_requests": len(trace),
        **asdict(counts),
        "prefetches": prefetches,
        "hits_per_prefetch": counts.prefetch_hits / prefetches if prefetches else None,
        "used_prefetches": used,
        "unused_prefetches": prefetches - used,
        "get_layer_hit_ratio": counts.prefetch_hits / counts.get_layers if counts.get_layers else None,
        "prefetched_bytes": int(sum(p.size for p in log)),
        "peak_memory_bytes": int(sim.peak),
        "peak_memory_time": iso_time(sim.peak_time) if sim.peak_time is not None else None,
        "simulate_s": round(elapsed, 4),
    }


def _table(log: list[_Prefetch], trace: TraceColumns, per_server: bool) -> pd.DataFrame:
    """The prefetches, one row each, with times as ISO text and ids as the trace's names."""
    return pd.DataFrame(
        {
            "time": [iso_time(p.time) for p in log],
            "server": [trace.hosts[p.server] if per_server else "all" for p in log],
            "repository": [trace.repositories[p.repository] for p in log],
            "layer": [trace.objects[p.layer] for p in log],
            "size": [p.size for p in log],
            "client": [trace.clients[p.client] for p in log],
            "renewals": [p.renewals for p in log],
            "expired": [iso_time(p.expired) if p.expired is not None else None for p in log],
            "hits": [p.hits for p in log],
        },
        columns=["time", "server", "repository", "layer", "size", "client", "renewals", "expired", "hits"],
    )


class PrefetchPlugin(SimPlugin):
    name = "prefetch"
    description = "prefetch pushed layers on GET manifest; hits per prefetch, peak memory"
    Args = PrefetchArgs
    arg_help = ARG_HELP

    @classmethod
    def check(cls, args: PrefetchArgs) -> None:
        resolve_duration(args.lm_thresh, "lm_thresh")
        resolve_duration(args.ml_thresh, "ml_thresh")

    def run(self, trace: TraceColumns) -> SimResult:
        if self.args.compat == "original":
            return simulate_prefetch_original(trace, self.args.per_server)
        lm = resolve_duration(self.args.lm_thresh, "lm_thresh")
        ml = resolve_duration(self.args.ml_thresh, "ml_thresh")
        return simulate_prefetch(trace, lm, ml, self.args.per_server)
