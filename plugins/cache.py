"""Layer cache simulations: ``lru``, ``two-level``, ``cache`` and ``libcachesim:<policy>``.

The cache sees the trace's successful GET layer requests (object = layer
digest, size = the largest bytes written for it).  A cache is either shared by
all registry servers or, with ``per_server``, one per trace ``host`` (as the
IBM Cloud registry workload study, Anwar et al., FAST '18, simulated its
caches: one per server), each with the full capacity.  Hit ratios are reported
over all requests and after the warm-up, which ends with the request whose
admission causes the cache's first eviction (that study counts hits from the
first eviction on: until then nothing has been evicted, so every cache size
scores alike); for a two-level cache any eviction counts, including a
memory layer demoted to SSD.
"""

from __future__ import annotations

import time
from typing import Annotated, Literal, NamedTuple

import msgspec
import numpy as np
import pandas as pd

from drtp.errors import DrtpError
from drtp.plugins.base import (
    COMPAT_HELP,
    Compat,
    PluginArgs,
    SimPlugin,
    SimResult,
    check_size,
    iso_time,
    resolve_size,
)
from drtp.plugins.original import original_cache_requests
from drtp.plugins.policies import LRU, LibCacheSim, Outcome, TwoLevel, TwoLevelOriginal
from drtp.trace.columns import BLOB, GET, HEAD, MANIFEST, TraceColumns

ARG_HELP = {
    "capacity": "cache size: bytes (1073741824), a size (64MB, 2GiB), a percentage of percent_of (5%), "
    "or 'unlimited' (nothing is ever evicted)",
    "per_server": "one cache per trace host, each of the full capacity (default: one shared cache)",
    "percent_of": "what a percentage is of: 'ingress' (bytes of PUT/PATCH layer uploads) or "
    "'footprint' (bytes of distinct layers GET)",
    "ssd_multiplier": "SSD level size as a multiple of the memory size (the published study tried 10, 15, 20)",
    "threshold": "layers smaller than this go to memory, larger ones to SSD (default 100MiB)",
    "policy": "lru, two-level, or libcachesim:<policy> (e.g. libcachesim:S3-FIFO)",
    "params": "libcachesim policy parameters, e.g. {small_size_ratio: 0.1} for S3-FIFO",
    "timeline_buckets": "number of time buckets in timeline.csv",
    "compat": "two-level only: " + COMPAT_HELP,
    "key": "what one cached object is: 'digest' (a layer shared by every repository) or 'repository+digest' "
    "(Distribution's pull-through cache: a layer cached through one repository is fetched again for another)",
    "head": "'ignore' (only GETs reach the cache) or 'fetch' (a HEAD is a request for the object: a HEAD of an "
    "absent blob makes a pull-through cache fetch it whole)",
    "manifests": "manifests are cached objects too (key: repository and tag or digest), as a pull-through cache "
    "stores them; default: layers only",
}

UNLIMITED = "unlimited"  # capacity: a cache that never evicts (Distribution's proxy without a TTL)
Key = Literal["digest", "repository+digest"]


class LRUArgs(PluginArgs):
    capacity: int | float | str
    per_server: bool = False
    percent_of: Literal["ingress", "footprint"] = "ingress"
    timeline_buckets: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 100
    key: Key = "digest"
    head: Literal["ignore", "fetch"] = "ignore"
    manifests: bool = False


class TwoLevelArgs(LRUArgs):
    ssd_multiplier: Annotated[float, msgspec.Meta(gt=0, le=1e6)] = 10.0  # the bounds refuse NaN and infinity
    threshold: int | str = "100MiB"
    compat: Compat = "none"


class LibCacheSimArgs(LRUArgs):
    params: dict = {}


class CacheArgs(TwoLevelArgs):
    policy: str = "lru"
    params: dict = {}


def _policy_factory(policy: str, args: LRUArgs):
    """A function capacity -> CachePolicy, for one of lru / two-level / libcachesim:<name>."""
    key = policy.lower()
    if key == "lru":
        return lambda cap: LRU(cap), ("cache",)
    if key == "two-level":
        threshold = resolve_size(getattr(args, "threshold", "100MiB"), "threshold")
        mult = float(getattr(args, "ssd_multiplier", 10.0))
        return lambda cap: TwoLevel(cap, int(cap * mult), threshold), TwoLevel.levels
    if key.startswith("libcachesim:"):
        name = policy.split(":", 1)[1]
        params = getattr(args, "params", {}) or {}
        LibCacheSim(name, 1, params)  # validates the name and parameters now
        return lambda cap: LibCacheSim(name, cap, params), ("cache",)
    raise DrtpError(f"simulate.args.policy: unknown policy {policy!r} (lru, two-level or libcachesim:<policy>)")


def check_cache_args(args: LRUArgs, policy: str) -> None:
    if args.capacity != UNLIMITED:
        check_size(args.capacity, "capacity", minimum=1)
    if getattr(args, "compat", "none") == "original":
        what_real_caches_do = {"key": "digest", "head": "ignore", "manifests": False}
        for name, default in what_real_caches_do.items():
            if getattr(args, name) != default:
                raise DrtpError(
                    f"simulate.args.{name}: not with compat: original (the original player's cache had no {name})"
                )
    if hasattr(args, "threshold"):
        check_size(args.threshold, "threshold")
    _policy_factory(policy, args)
    if getattr(args, "compat", "none") == "original" and policy.lower() != "two-level":
        raise DrtpError(
            f"simulate.args.compat: 'original' exists for the two-level cache only "
            f"(the original trace player had no {policy} cache), not with policy {policy!r}"
        )


def _summary_head(
    plugin: str,
    policy: str,
    args: LRUArgs,
    capacity: int,
    ingress: int,
    footprint: int,
    caches: int,
    trace_requests: int,
    objects: int,
) -> dict:
    """The keys every cache summary starts with: what was simulated, at which capacity, over what."""
    return {
        "plugin": plugin,
        "policy": policy,
        "capacity": args.capacity,
        "capacity_bytes": capacity,
        "key": args.key,
        "head": args.head,
        "manifests": args.manifests,
        "percent_of": args.percent_of,
        "ingress_bytes": ingress,
        "footprint_bytes": footprint,
        "per_server": args.per_server,
        "caches": caches,
        "trace_requests": trace_requests,
        "objects": objects,
    }


def cache_requests(trace: TraceColumns, args: LRUArgs) -> np.ndarray:
    """Indices of the requests the cache sees, in trace order: successful (status < 400) GETs of layers, plus
    HEADs of them with ``head: fetch`` and the same requests of manifests with ``manifests: true``."""
    methods = trace.method == GET
    if args.head == "fetch":
        methods |= trace.method == HEAD
    kinds = trace.kind == BLOB
    if args.manifests:
        kinds |= trace.kind == MANIFEST
    return np.flatnonzero(methods & kinds & (trace.status < 400))


def cache_keys(trace: TraceColumns, rows: np.ndarray, key: Key) -> tuple[np.ndarray, np.ndarray]:
    """Dense object ids of ``rows`` under ``key`` and, per dense id, the trace object it is (for its size).

    A manifest's object already names its repository; with ``repository+digest``
    a layer is one object per repository it is requested through.
    """
    obj = trace.obj[rows].astype(np.int64)
    if key == "repository+digest":
        blob = trace.kind[rows] != MANIFEST
        combined = np.where(blob, trace.repo[rows].astype(np.int64) * len(trace.objects) + obj, obj)
        combined = np.where(blob, combined + len(trace.objects), combined)  # layers apart from manifests
    else:
        combined = obj
    uniq, dense = np.unique(combined, return_inverse=True)
    first = np.zeros(len(uniq), dtype=np.int64)
    first[dense[::-1]] = obj[::-1]  # each dense id's trace object (any request of it names the same one)
    return dense, first


def _capacity(args: LRUArgs, rows: np.ndarray, trace: TraceColumns, sizes_by_obj: np.ndarray, base: int) -> int:
    """The capacity in bytes; ``unlimited`` is larger than everything the requests ask for (nothing is evicted)."""
    if args.capacity == UNLIMITED:
        return max(1, int(sizes_by_obj[trace.obj[rows]].sum()) + 1)
    return resolve_size(args.capacity, "capacity", base, args.percent_of, minimum=1)


class Prediction(NamedTuple):
    """Per cache request (:func:`cache_requests`), in trace order: what one shared cache predicts."""

    rows: np.ndarray  # indices into the trace
    hit: np.ndarray  # bool
    key: np.ndarray  # the dense object id each request is for (under ``args.key``)
    capacity_bytes: int


def predict(trace: TraceColumns, args: LRUArgs, policy: str = "lru") -> Prediction:
    """Each cache request's hit or miss under one cache shared by all hosts, for holding it against a real cache."""
    make, _ = _policy_factory(policy, args)
    rows = cache_requests(trace, args)
    sizes_by_obj = trace.object_sizes(rows)
    base = trace.ingress_bytes() if args.percent_of == "ingress" else int(sizes_by_obj.sum())
    capacity = _capacity(args, rows, trace, sizes_by_obj, base)
    dense, uniq = cache_keys(trace, rows, args.key)
    out = make(capacity).run(dense.tolist(), sizes_by_obj[uniq].tolist())
    return Prediction(rows, out.level > 0, dense, capacity)


def simulate_cache(trace: TraceColumns, args: LRUArgs, policy: str, plugin: str) -> SimResult:
    """Run a cache policy over the requests the cache sees (:func:`cache_requests`) and tabulate hits."""
    if getattr(args, "compat", "none") == "original":
        return simulate_cache_original(trace, args, plugin)  # type: ignore[arg-type]
    make, levels = _policy_factory(policy, args)
    gets = cache_requests(trace, args)
    sizes_by_obj = trace.object_sizes(gets)
    ingress = trace.ingress_bytes()
    footprint = int(sizes_by_obj.sum())
    base = ingress if args.percent_of == "ingress" else footprint
    capacity = _capacity(args, gets, trace, sizes_by_obj, base)

    # dense ids over the objects this cache sees, so tables stay small
    dense, uniq = cache_keys(trace, gets, args.key)
    sizes = sizes_by_obj[uniq].tolist()
    req_sizes = sizes_by_obj[trace.obj[gets]]
    hosts = trace.host[gets] if args.per_server else np.zeros(len(gets), dtype=np.int32)
    level = np.zeros(len(gets), dtype=np.uint8)
    warm = np.zeros(len(gets), dtype=bool)
    servers = []
    evictions: int | None = 0
    demotions = 0
    t0 = time.perf_counter()
    for h in np.unique(hosts):
        idx = np.flatnonzero(hosts == h)
        out: Outcome = make(capacity).run(dense[idx].tolist(), sizes)
        level[idx] = out.level
        if out.first_eviction >= 0:
            warm[idx[out.first_eviction + 1 :]] = True
        evictions = None if evictions is None or out.evictions < 0 else evictions + out.evictions
        demotions += out.demotions
        name = trace.hosts[h] if args.per_server else "all"
        first_t = trace.time[gets[idx[out.first_eviction]]] if out.first_eviction >= 0 else None
        servers.append(_counts(name, out.level, out.level.astype(bool), req_sizes[idx], first_t, warm[idx]))
    elapsed = time.perf_counter() - t0

    summary = _summary_head(plugin, policy, args, capacity, ingress, footprint, len(servers), len(trace), len(uniq))
    hit = level > 0
    summary.update(_ratios("", hit, warm, req_sizes))
    two_level = None
    if len(levels) > 1:
        ssd = int(capacity * float(args.ssd_multiplier))
        two_level = TwoLevelSummary(ssd, resolve_size(args.threshold, "threshold"), demotions, (warm,) * len(levels))
    return _cache_result(summary, servers, evictions, two_level, level, levels, warm, req_sizes, trace.time[gets],
                         elapsed, args.timeline_buckets)  # fmt: skip


def simulate_cache_original(trace: TraceColumns, args: TwoLevelArgs, plugin: str) -> SimResult:
    """The two-level cache as the original trace player simulated it, over its request list.

    Its requests: every GET and PUT of a blob URI with bytes written (any
    status), each with its own size.  Its warm-ups: the memory level's ratio
    counts the requests after the memory's first eviction, the combined ratio
    those after the SSD's first eviction.  ``lmu_hits``, ``lmu_misses``,
    ``h_hits`` and ``h_misses`` are the four numbers the original printed.
    """
    rows, ids = original_cache_requests(trace)
    ingress = trace.ingress_bytes()
    gets = trace.layer_gets()
    footprint = int(trace.object_sizes(gets).sum())
    base = ingress if args.percent_of == "ingress" else footprint
    capacity = resolve_size(args.capacity, "capacity", base, args.percent_of, minimum=1)
    ssd_bytes = int(capacity * float(args.ssd_multiplier))
    threshold = resolve_size(args.threshold, "threshold")
    req_sizes = trace.size[rows]
    hosts = trace.host[rows] if args.per_server else np.zeros(len(rows), dtype=np.int32)
    level = np.zeros(len(rows), dtype=np.uint8)
    warm_memory = np.zeros(len(rows), dtype=bool)
    warm = np.zeros(len(rows), dtype=bool)  # after the SSD's first eviction
    servers = []
    evictions = demotions = 0
    t0 = time.perf_counter()
    for h in np.unique(hosts):
        idx = np.flatnonzero(hosts == h)
        out = TwoLevelOriginal(capacity, ssd_bytes, threshold).run(ids[idx].tolist(), req_sizes[idx].tolist())
        level[idx] = out.level
        memory_first, ssd_first = out.first_eviction_by_level
        if memory_first >= 0:
            warm_memory[idx[memory_first + 1 :]] = True
        if ssd_first >= 0:
            warm[idx[ssd_first + 1 :]] = True
        evictions += out.evictions
        demotions += out.demotions
        name = trace.hosts[h] if args.per_server else "all"
        first_t = trace.time[rows[idx[out.first_eviction]]] if out.first_eviction >= 0 else None
        servers.append(_counts(name, out.level, out.level.astype(bool), req_sizes[idx], first_t, warm[idx]))
    elapsed = time.perf_counter() - t0
    hit, memory_hit = level > 0, level == 1
    objects = int(ids.max()) + 1 if len(ids) else 0
    summary = _summary_head(plugin, "two-level", args, capacity, ingress, footprint, len(servers), len(trace), objects)
    summary.update(
        compat="original",
        **_ratios("", hit, warm, req_sizes),
        lmu_hits=int((memory_hit & warm_memory).sum()),
        lmu_misses=int((~memory_hit & warm_memory).sum()),
        h_hits=int((hit & warm).sum()),
        h_misses=int((~hit & warm).sum()),
    )
    two_level = TwoLevelSummary(ssd_bytes, threshold, demotions, (warm_memory, warm))
    return _cache_result(summary, servers, evictions, two_level, level, TwoLevelOriginal.levels, warm, req_sizes,
                         trace.time[rows], elapsed, args.timeline_buckets)  # fmt: skip


class TwoLevelSummary(NamedTuple):
    """What a two-level cache adds to its summary: the SSD's size, the threshold, and each level's warm-up."""

    ssd_bytes: int
    threshold_bytes: int
    demotions: int
    warm_by_level: tuple[np.ndarray, ...]  # per level (memory, SSD): the requests after that level's warm-up


def _cache_result(
    summary: dict,
    servers: list[dict],
    evictions: int | None,
    two_level: TwoLevelSummary | None,
    level: np.ndarray,
    levels: tuple[str, ...],
    warm: np.ndarray,
    req_sizes: np.ndarray,
    times: np.ndarray,
    elapsed: float,
    timeline_buckets: int,
) -> SimResult:
    """The end every cache simulation shares: eviction keys, per-level ratios and tables, timing, the tables."""
    first_times = [s["first_eviction_time"] for s in servers if s["first_eviction_time"]]
    summary["first_eviction_time"] = min(first_times) if first_times else None
    summary["evictions"] = evictions
    table_levels = [_level_row("combined", level > 0, warm, req_sizes)]
    if two_level is not None:
        summary["ssd_bytes"] = two_level.ssd_bytes
        summary["threshold_bytes"] = two_level.threshold_bytes
        summary["demotions"] = two_level.demotions
        for code, (lname, lwarm) in enumerate(zip(levels, two_level.warm_by_level, strict=True), start=1):
            lhit = level == code
            summary.update(_ratios(f"_{lname}", lhit, lwarm, req_sizes, brief=True))
            table_levels.insert(code - 1, _level_row(lname, lhit, lwarm, req_sizes))
    summary["simulate_s"] = round(elapsed, 4)
    summary["requests_per_s"] = round(len(times) / elapsed) if elapsed > 0 else None
    tables = {
        "levels": pd.DataFrame(table_levels),
        "servers": pd.DataFrame(servers),
        "timeline": _timeline(times, level, levels, timeline_buckets),
    }
    return SimResult(summary, tables, kind="cache")


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def _ratios(suffix: str, hit: np.ndarray, warm: np.ndarray, sizes: np.ndarray, brief: bool = False) -> dict:
    n, h = len(hit), int(hit.sum())
    wn, wh = int(warm.sum()), int((hit & warm).sum())
    if brief:
        return {f"hits{suffix}": h, f"hit_ratio{suffix}": _ratio(h, n), f"hit_ratio{suffix}_warm": _ratio(wh, wn)}
    total, hit_bytes = int(sizes.sum()), int(sizes[hit].sum())
    return {
        "requests": n,
        "hits": h,
        "hit_ratio": _ratio(h, n),
        "warm_requests": wn,
        "warm_hits": wh,
        "hit_ratio_warm": _ratio(wh, wn),
        "bytes_requested": total,
        "bytes_hit": hit_bytes,
        "byte_hit_ratio": _ratio(hit_bytes, total),
    }


def _level_row(name: str, hit: np.ndarray, warm: np.ndarray, sizes: np.ndarray) -> dict:
    return {"level": name, **_ratios("", hit, warm, sizes)}


def _counts(name, level, hit, sizes, first_t, warm) -> dict:
    row = {"server": name, **_ratios("", hit, warm, sizes)}
    row["first_eviction_time"] = iso_time(first_t) if first_t is not None else None
    return row


def _timeline(times: np.ndarray, level: np.ndarray, levels: tuple[str, ...], buckets: int) -> pd.DataFrame:
    """Requests and hits per level in equal time buckets over the trace."""
    cols = ["start", "requests", *[f"hits_{name}" for name in levels], "hit_ratio"]
    if len(times) == 0:
        return pd.DataFrame(columns=cols)
    t0, t1 = float(times[0]), float(times[-1])
    n = max(1, int(buckets))
    width = (t1 - t0) / n or 1.0
    b = np.minimum(((times - t0) / width).astype(np.int64), n - 1)
    data = {"start": [iso_time(t0 + i * width) for i in range(n)], "requests": np.bincount(b, minlength=n)}
    for code, name in enumerate(levels, start=1):
        data[f"hits_{name}"] = np.bincount(b, weights=(level == code), minlength=n).astype(np.int64)
    df = pd.DataFrame(data)
    hits = df[[f"hits_{name}" for name in levels]].sum(axis=1)
    df["hit_ratio"] = np.where(df["requests"] > 0, hits / df["requests"].clip(lower=1), np.nan)
    return df


# -- the plugins -------------------------------------------------------------------------


class LRUPlugin(SimPlugin):
    name = "lru"
    description = "byte-capacity LRU layer cache (larger-than-capacity layers never admitted)"
    Args = LRUArgs
    arg_help = ARG_HELP

    @classmethod
    def check(cls, args: LRUArgs) -> None:
        check_cache_args(args, "lru")

    def run(self, trace: TraceColumns) -> SimResult:
        return simulate_cache(trace, self.args, "lru", self.name)


class TwoLevelPlugin(SimPlugin):
    name = "two-level"
    description = "memory LRU (layers < threshold) + SSD LRU (k× memory), memory evictions demoted"
    Args = TwoLevelArgs
    arg_help = ARG_HELP

    @classmethod
    def check(cls, args: TwoLevelArgs) -> None:
        check_cache_args(args, "two-level")

    def run(self, trace: TraceColumns) -> SimResult:
        return simulate_cache(trace, self.args, "two-level", self.name)


class CachePlugin(SimPlugin):
    name = "cache"
    description = "any cache policy chosen by the 'policy' argument (to sweep policies side by side)"
    Args = CacheArgs
    arg_help = ARG_HELP

    @classmethod
    def check(cls, args: CacheArgs) -> None:
        check_cache_args(args, args.policy)

    def run(self, trace: TraceColumns) -> SimResult:
        return simulate_cache(trace, self.args, self.args.policy, self.name)


def libcachesim_plugin(policy: str) -> type[SimPlugin]:
    """A plugin class for one libCacheSim policy (``libcachesim:S3-FIFO``…)."""
    LibCacheSim(policy, 1)  # raises a clear error for an unknown policy
    full = f"libcachesim:{policy}"

    class _LibCacheSimPlugin(SimPlugin):
        name = full
        description = f"libCacheSim's {policy} eviction policy over the same layer requests"
        Args = LibCacheSimArgs
        arg_help = ARG_HELP

        @classmethod
        def check(cls, args: LibCacheSimArgs) -> None:
            check_cache_args(args, full)

        def run(self, trace: TraceColumns) -> SimResult:
            return simulate_cache(trace, self.args, full, full)

    return _LibCacheSimPlugin
