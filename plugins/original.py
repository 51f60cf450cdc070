"""``compat: original``: the request lists and the prefetcher of the original trace player's simulators.

The original trace player (github.com/chalianwar/docker-performance) handed
its simulation plugins the trace's GET and PUT requests with a non-zero size
whose URI contains ``manifest`` or ``blobs`` (any status), in time order, and
its plugins told layers, manifests and repositories apart by looking at the
URI as a string.  The columns keep no URIs, so each distinct URI is rebuilt
from its parts in the IBM traces' form (``v2/<repository>/blobs/<digest>``,
``v2/<repository>/manifests/<reference>``) and the same string tests are
applied to it.  A PUT that completes an upload (``…/uploads/<uuid>?digest=``)
is keyed by its own row: its upload id, the only part the original's key held
that the columns lack, is unique per push.

The prefetcher here is the original's, which differs from drtp's default
(:mod:`drtp.plugins.prefetch`): no timeouts (nothing expires, so the
thresholds have no effect), every PUT — of a manifest too — is a pushed
"layer", a pushed layer is known only by its size (a repository's prefetched
layers are deduplicated by exact size), and a GET layer is a hit on every
prefetched layer of its repository within 1000 bytes of its size (one GET
may score several hits).
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from drtp.plugins.base import SimResult, iso_time
from drtp.trace.columns import GET, MANIFEST, PUT, UPLOAD, TraceColumns


@dataclass
class OriginalRequests:
    """The original master's request list as trace rows, with the URI each row is read as."""

    rows: np.ndarray  # trace rows, time-ordered
    uri: np.ndarray  # int per row: index into uris
    uris: list[str]  # rebuilt URIs
    own_key: np.ndarray  # bool per row: a push-completing PUT, whose URI's last part is its own


def original_requests(trace: TraceColumns) -> OriginalRequests:
    """The rows the original master handed plugins: GET and PUT, size > 0, URI holding 'manifest' or 'blobs'."""
    rows = np.flatnonzero(((trace.method == GET) | (trace.method == PUT)) & (trace.size > 0))
    kind, obj, repo = trace.kind[rows], trace.obj[rows], trace.repo[rows]
    completes = trace.upload[rows] & (kind != UPLOAD)  # an upload URL's PUT keyed by the digest it completes
    combo = (obj.astype(np.int64) * (len(trace.repositories) + 1) + repo) * 2 + completes
    codes, uniques = pd.factorize(combo)
    firsts = np.unique(codes, return_index=True)[1] if len(codes) else np.empty(0, dtype=np.int64)
    uris = [
        _uri(trace.repositories[r], int(k), trace.objects[o], bool(c))
        for r, k, o, c in zip(
            repo[firsts].tolist(), kind[firsts].tolist(), obj[firsts].tolist(), completes[firsts].tolist(), strict=True
        )
    ]
    keep = np.array(["manifest" in u or "blobs" in u for u in uris], dtype=bool)
    mask = keep[codes] if len(codes) else np.zeros(0, dtype=bool)
    return OriginalRequests(rows[mask], codes[mask], uris, completes[mask])


def _uri(repository: str, kind: int, key: str, completes: bool) -> str:
    if kind == MANIFEST:
        return f"v2/{repository}/manifests/{key[len(repository) + 1 :]}"
    if completes:
        return f"v2/{repository}/blobs/uploads/?digest={key}"
    return f"v2/{repository}/blobs/{key}"  # a layer digest, or uploads/<uuid>


def original_cache_requests(trace: TraceColumns) -> tuple[np.ndarray, np.ndarray]:
    """(trace rows, dense layer ids) the original cache plugin simulated: the list without 'manifest' URIs.

    A layer is the URI's last path part, so the same digest in two repositories is one layer.
    """
    req = original_requests(trace)
    blob_uri = np.array(["manifest" not in u for u in req.uris], dtype=bool)
    mask = blob_uri[req.uri] if len(req.uri) else np.zeros(0, dtype=bool)
    rows, uri, own = req.rows[mask], req.uri[mask], req.own_key[mask]
    last = [u.rsplit("/", 1)[-1] for u in req.uris]
    keys = np.array(last, dtype=object)[uri] if len(uri) else np.empty(0, dtype=object)
    if own.any():
        keys[own] = [f"\0{r}" for r in rows[own].tolist()]  # cannot equal a path part
    ids = pd.factorize(keys)[0] if len(keys) else np.empty(0, dtype=np.int64)
    return rows, ids


# -- the original prefetcher ------------------------------------------------------------


@dataclass
class _Pushed:
    """A repository's pushes (of layers and manifests), known by size, and who has seen them."""

    sizes: list[int] = field(default_factory=list)
    pushers: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    seen: dict[int, int] = field(default_factory=dict)  # client -> pushes it has seen up to (a position)
    fetched: dict[int, int] = field(default_factory=dict)  # prefetched size -> its index in the log
    fetched_sizes: list[int] = field(default_factory=list)  # the same sizes, sorted (for the ±1000 B match)


@dataclass
class _Fetch:
    """One prefetched size: a row of the ``prefetches`` table."""

    time: float
    server: int
    repository: str
    size: int
    client: int
    renewals: int = 0
    hits: int = 0


MATCH_BYTES = 1000  # a GET layer hits a prefetched size strictly within this many bytes


def simulate_prefetch_original(trace: TraceColumns, per_server: bool) -> SimResult:
    """The original prefetch plugin's counts (hits, misses, good and bad prefetches, max size) over the trace."""
    req = original_requests(trace)
    is_layer = [("blobs" in u) for u in req.uris]  # the original tested 'blobs' first, then 'manifests'
    repo_key = [u.split("/")[1] + "/" + u.split("/")[2] for u in req.uris]
    rows = req.rows
    puts = (trace.method[rows] == PUT).tolist()
    times, sizes = trace.time[rows].tolist(), trace.size[rows].tolist()
    clients, uri = trace.client[rows].tolist(), req.uri.tolist()
    hosts = trace.host[rows].tolist() if per_server else [0] * len(rows)
    state: dict[tuple[int, str], _Pushed] = {}
    log: list[_Fetch] = []
    put_requests = get_manifests = get_layers = renewals = hits = misses = 0
    memory, peak_time = 0, None
    t0 = time.perf_counter()
    for row, put, t, size, client, u, host in zip(rows.tolist(), puts, times, sizes, clients, uri, hosts, strict=True):
        key = (host, repo_key[u])
        if put:
            put_requests += 1
            p = state.get(key)
            if p is None:
                p = state[key] = _Pushed()
            p.sizes.append(size)
            p.pushers.append(client)
            p.rows.append(row)
        elif not is_layer[u]:
            get_manifests += 1
            p = state.get(key)
            if p is None:
                continue
            start, end = p.seen.get(client, 0), len(p.sizes)
            p.seen[client] = end
            for pushed, pusher in zip(p.sizes[start:end], p.pushers[start:end], strict=True):
                if pusher == client:
                    continue
                at = p.fetched.get(pushed)
                if at is not None:  # that size is held already: a renewal
                    renewals += 1
                    log[at].renewals += 1
                    continue
                p.fetched[pushed] = len(log)
                bisect.insort(p.fetched_sizes, pushed)
                log.append(_Fetch(t, host, repo_key[u], pushed, client))
                memory += pushed
                peak_time = t
        else:
            get_layers += 1
            p = state.get(key)
            if p is None or not p.fetched:
                misses += 1
                continue
            lo = bisect.bisect_right(p.fetched_sizes, size - MATCH_BYTES)
            hi = bisect.bisect_left(p.fetched_sizes, size + MATCH_BYTES)
            for matched in p.fetched_sizes[lo:hi]:
                log[p.fetched[matched]].hits += 1
            hits += hi - lo
    elapsed = time.perf_counter() - t0
    used = sum(1 for f in log if f.hits)
    summary = {
        "plugin": "prefetch",
        "compat": "original",
        "lm_thresh_s": None,  # no timeouts: the thresholds have no effect
        "ml_thresh_s": None,
        "per_server": per_server,
        "trace_requests": len(trace),
        "put_requests": put_requests,
        "get_manifests": get_manifests,
        "get_layers": get_layers,
        "renewals": renewals,
        "prefetch_hits": hits,
        "misses": misses,
        "prefetches": len(log),
        "hits_per_prefetch": hits / len(log) if log else None,
        "used_prefetches": used,
        "unused_prefetches": len(log) - used,
        "get_layer_hit_ratio": hits / get_layers if get_layers else None,
        "prefetched_bytes": memory,
        "peak_memory_bytes": memory,  # nothing expires: the peak is everything prefetched
        "peak_memory_time": iso_time(peak_time) if peak_time is not None else None,
        "simulate_s": round(elapsed, 4),
    }
    table = pd.DataFrame(
        {
            "time": [iso_time(f.time) for f in log],
            "server": [trace.hosts[f.server] if per_server else "all" for f in log],
            "repository": [f.repository for f in log],
            "size": [f.size for f in log],
            "client": [trace.clients[f.client] for f in log],
            "renewals": [f.renewals for f in log],
            "hits": [f.hits for f in log],
        },
        columns=["time", "server", "repository", "size", "client", "renewals", "hits"],
    )
    return SimResult(summary, {"prefetches": table}, kind="prefetch")
