"""The ``prefetch`` plugin: the paper's Algorithm 1 (§5.4), layers prefetched after a push.

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

import datetime as _dt
import heapq
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from drtp.plugins.base import PluginArgs, SimPlugin, SimResult, resolve_duration
from drtp.trace.columns import BLOB, GET, MANIFEST, PATCH, PUT, UPLOAD
from drtp.trace.columns import TraceColumns as CompactTrace

ARG_HELP = {
    "lm_thresh": "how long a pushed layer waits for GET manifests (LM_thresh), e.g. 1h, 12h, 1d",
    "ml_thresh": "how long a prefetched layer is kept (ML_thresh), e.g. 1h, 12h, 1d",
    "per_server": "one lookup table and prefetch memory per trace host (default: shared)",
}


class PrefetchArgs(PluginArgs):
    lm_thresh: float | str = "1h"
    ml_thresh: float | str = "1h"
    per_server: bool = False


@dataclass
class _Held:
    expires: float
    size: int
    row: int  # index into the prefetch log


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
        self.entries: list[list] = []  # [put_time, layer, pusher, alive]
        self.start = 0  # first entry not yet expired (index into entries)
        self.base = 0  # absolute position of entries[0]
        self.seen: dict[int, int] = {}  # client -> absolute position it has seen up to
        self.current: dict[int, int] = {}  # layer -> absolute position of its live entry

    def put(self, t: float, layer: int, client: int) -> None:
        old = self.current.get(layer)
        if old is not None and old >= self.base:
            self.entries[old - self.base][3] = False  # a new push of the layer starts a fresh entry
        self.current[layer] = self.base + len(self.entries)
        self.entries.append([t, layer, client, True])

    def unseen(self, t: float, client: int, lm: float) -> list[int]:
        """Layers of live entries the client has not seen; marks them seen."""
        entries = self.entries
        start = self.start
        while start < len(entries) and t - entries[start][0] > lm:
            start += 1
        if start > 1024 and start * 2 > len(entries):  # drop the expired prefix now and then
            del entries[:start]
            self.base += start
            start = 0
        self.start = start
        end = self.base + len(entries)
        begin = max(self.seen.get(client, 0), self.base + start) - self.base
        self.seen[client] = end
        return [e[1] for e in entries[begin:] if e[3] and e[2] != client]


@dataclass
class _Server:
    repos: dict[int, _Repo] = field(default_factory=dict)
    held: dict[int, _Held] = field(default_factory=dict)  # prefetched layers
    expiry: list[tuple[float, int, int]] = field(default_factory=list)  # heap of (due, layer, row), lazily moved
    memory: int = 0


def simulate_prefetch(trace: CompactTrace, lm: float, ml: float, per_server: bool) -> SimResult:
    method, kind, status = trace.method, trace.kind, trace.status
    ok = status < 400
    put_layer = (method == PUT) & (kind == BLOB) & ok
    patch = (method == PATCH) & (kind == UPLOAD) & ok
    get_manifest = (method == GET) & (kind == MANIFEST) & ok
    get_layer = (method == GET) & (kind == BLOB) & ok
    rows = np.flatnonzero(put_layer | patch | get_manifest | get_layer)
    code = np.select([put_layer[rows], patch[rows], get_manifest[rows]], [0, 1, 2], 3).tolist()
    sizes = np.zeros(len(trace.objects), dtype=np.int64)
    blob_rows = np.flatnonzero(put_layer | get_layer)
    np.maximum.at(sizes, trace.obj[blob_rows], trace.size[blob_rows])
    size_of = sizes.tolist()

    times = trace.time[rows].tolist()
    objs, repos = trace.obj[rows].tolist(), trace.repo[rows].tolist()
    clients, req_sizes = trace.client[rows].tolist(), trace.size[rows].tolist()
    hosts = trace.host[rows].tolist() if per_server else [0] * len(rows)

    servers: dict[int, _Server] = {}
    pending_patch: dict[tuple[int, int], int] = {}  # (client, repo) -> bytes of a chunked upload so far
    log: list[list] = []  # one row per prefetch
    counts = {"put_layers": 0, "get_manifests": 0, "get_layers": 0, "renewals": 0, "prefetch_hits": 0}
    peak, peak_time = 0, None
    t0 = time.perf_counter()
    for t, c, obj, repo, client, rsize, host in zip(times, code, objs, repos, clients, req_sizes, hosts, strict=True):
        s = servers.get(host)
        if s is None:
            s = servers[host] = _Server()
        # expire prefetched layers whose ML timer passed
        heap = s.expiry
        while heap and heap[0][0] < t:
            expires, layer, row = heapq.heappop(heap)
            held = s.held.get(layer)
            if held is None or held.row != row:
                continue
            if held.expires > expires:  # renewed since: wait for the new deadline
                heapq.heappush(heap, (held.expires, layer, row))
                continue
            del s.held[layer]
            s.memory -= held.size
            log[row][7] = expires
        if c == 1:  # PATCH of a chunked upload
            key = (client, repo)
            pending_patch[key] = pending_patch.get(key, 0) + rsize
        elif c == 0:  # PUT layer
            counts["put_layers"] += 1
            uploaded = pending_patch.pop((client, repo), 0)
            if uploaded > size_of[obj]:
                size_of[obj] = uploaded
            r = s.repos.get(repo)
            if r is None:
                r = s.repos[repo] = _Repo()
            r.put(t, obj, client)
        elif c == 2:  # GET manifest
            counts["get_manifests"] += 1
            r = s.repos.get(repo)
            if r is None:
                continue
            for layer in r.unseen(t, client, lm):
                held = s.held.get(layer)
                expires = t + ml
                if held is not None:  # still held: restart its timer
                    counts["renewals"] += 1
                    held.expires = expires  # the heap entry is moved on when it comes due
                    log[held.row][6] += 1
                    continue
                row = len(log)
                size = size_of[layer]
                log.append([t, host, repo, layer, size, client, 0, None, 0])
                s.held[layer] = _Held(expires, size, row)
                heapq.heappush(heap, (expires, layer, row))
                s.memory += size
                total = sum(x.memory for x in servers.values()) if per_server else s.memory
                if total > peak:
                    peak, peak_time = total, t
        else:  # GET layer
            counts["get_layers"] += 1
            held = s.held.get(obj)
            if held is not None:
                counts["prefetch_hits"] += 1
                log[held.row][8] += 1
    elapsed = time.perf_counter() - t0

    prefetches = len(log)
    used = sum(1 for r in log if r[8] > 0)
    summary = {
        "plugin": "prefetch",
        "lm_thresh_s": lm,
        "ml_thresh_s": ml,
        "per_server": per_server,
        "trace_requests": len(trace),
        **counts,
        "prefetches": prefetches,
        "hits_per_prefetch": counts["prefetch_hits"] / prefetches if prefetches else None,
        "used_prefetches": used,
        "unused_prefetches": prefetches - used,
        "get_layer_hit_ratio": counts["prefetch_hits"] / counts["get_layers"] if counts["get_layers"] else None,
        "prefetched_bytes": int(sum(r[4] for r in log)),
        "peak_memory_bytes": int(peak),
        "peak_memory_time": _iso(peak_time) if peak_time is not None else None,
        "simulate_s": round(elapsed, 4),
    }
    columns = ["time", "server", "repository", "layer", "size", "client", "renewals", "expired", "hits"]
    names = {
        "time": _iso,
        "expired": lambda x: _iso(x) if x is not None else None,
        "server": lambda h: trace.hosts[h] if per_server else "all",
        "repository": trace.repositories.__getitem__,
        "layer": trace.objects.__getitem__,
        "client": trace.clients.__getitem__,
    }
    table = pd.DataFrame(
        {col: [names[col](r[i]) if col in names else r[i] for r in log] for i, col in enumerate(columns)},
        columns=columns,
    )
    return SimResult(summary, {"prefetches": table}, kind="prefetch")


def _iso(t: float) -> str:
    return _dt.datetime.fromtimestamp(float(t), _dt.timezone.utc).isoformat().replace("+00:00", "Z")


class PrefetchPlugin(SimPlugin):
    name = "prefetch"
    description = "paper Algorithm 1: prefetch pushed layers on GET manifest; hits per prefetch, peak memory"
    Args = PrefetchArgs
    arg_help = ARG_HELP

    @classmethod
    def check(cls, args: PrefetchArgs) -> None:
        resolve_duration(args.lm_thresh, "lm_thresh")
        resolve_duration(args.ml_thresh, "ml_thresh")

    def run(self, trace: CompactTrace) -> SimResult:
        lm = resolve_duration(self.args.lm_thresh, "lm_thresh")
        ml = resolve_duration(self.args.ml_thresh, "ml_thresh")
        return simulate_prefetch(trace, lm, ml, self.args.per_server)
