"""Cache eviction policies: the inner loops of the cache simulations.

Every policy has the same shape (the libCacheSim idea: one interface, many
policies): it is built with its capacities, then :meth:`CachePolicy.run` is fed
the request sequence as object ids (ints) with a per-object size table and
returns an :class:`Outcome` — for each request, which level served it (0 =
miss) — plus the index of the request that caused the first eviction (the end
of the warm-up) and the number of evictions.

The loops use plain Python ints and an insertion-ordered dict as the LRU list
(``move_to_end`` on a hit, ``popitem(last=False)`` to evict): no per-request
allocation, which is what keeps them above a million requests per second.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from drtp.errors import DrtpError


@dataclass
class Outcome:
    """What a policy did with a request sequence."""

    level: np.ndarray  # uint8 per request: 0 miss, 1 served by the first level, 2 by the second
    first_eviction: int  # index of the request whose admission caused the first eviction; -1: none
    evictions: int  # objects that left the cache (a demotion from memory to SSD is not one)
    demotions: int = 0  # two-level only: memory evictions moved to the SSD level
    # policies whose levels warm up apart: per level, the request that caused its first eviction (-1: none)
    first_eviction_by_level: tuple[int, ...] = ()


class CachePolicy(ABC):
    """A cache simulated over a sequence of object requests."""

    levels: ClassVar[tuple[str, ...]] = ("cache",)
    # False: ``sizes`` is indexed by object (one size each); True: by request (each request's own bytes)
    sizes_per_request: ClassVar[bool] = False

    @abstractmethod
    def run(self, ids: list[int], sizes: list[int]) -> Outcome:
        """Serve ``ids`` in order; ``sizes[obj]`` is the size of object ``obj`` in bytes."""


class LRU(CachePolicy):
    """Byte-capacity LRU; an object larger than the capacity is never admitted."""

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)

    def run(self, ids: list[int], sizes: list[int]) -> Outcome:
        cap = self.capacity
        cache: OrderedDict[int, int] = OrderedDict()
        hit = cache.move_to_end
        evict = cache.popitem
        level = bytearray(len(ids))
        used = 0
        evictions = 0
        first = -1
        for i, obj in enumerate(ids):
            if obj in cache:
                hit(obj)
                level[i] = 1
                continue
            size = sizes[obj]
            if size > cap:
                continue
            used += size
            if used > cap:
                if first < 0:
                    first = i
                while used > cap:
                    used -= evict(last=False)[1]
                    evictions += 1
            cache[obj] = size
        return Outcome(np.frombuffer(level, dtype=np.uint8), first, evictions)


class TwoLevel(CachePolicy):
    """A two-level layer cache, memory LRU over SSD LRU, as proposed for registry servers by Anwar et al. (FAST '18).

    Layers smaller than ``threshold`` (and no larger than the memory) live in
    memory; an SSD hit on such a layer moves it back to memory.  Memory
    evictions are demoted to the SSD (its MRU end) instead of being dropped.
    Larger layers go to the SSD directly.  A layer larger than the SSD is never
    admitted.  The levels are exclusive: a layer is in at most one of them.
    """

    levels = ("memory", "ssd")

    def __init__(self, memory: int, ssd: int, threshold: int) -> None:
        self.memory = int(memory)
        self.ssd = int(ssd)
        self.threshold = int(threshold)

    def run(self, ids: list[int], sizes: list[int]) -> Outcome:
        mcap, scap = self.memory, self.ssd
        small = min(self.threshold, mcap + 1)  # sizes below this go to memory
        mem: OrderedDict[int, int] = OrderedDict()
        ssd: OrderedDict[int, int] = OrderedDict()
        mem_hit, mem_pop = mem.move_to_end, mem.popitem
        ssd_hit, ssd_pop, ssd_del = ssd.move_to_end, ssd.popitem, ssd.__delitem__
        level = bytearray(len(ids))
        mused = sused = 0
        evictions = demotions = 0
        first = -1
        for i, obj in enumerate(ids):
            if obj in mem:
                mem_hit(obj)
                level[i] = 1
                continue
            size = sizes[obj]
            if size < small:
                if obj in ssd:  # promote: SSD hit, the layer moves up to memory
                    ssd_del(obj)
                    sused -= size
                    level[i] = 2
                mused += size
                mem[obj] = size
                if mused > mcap:
                    if first < 0:
                        first = i
                    while mused > mcap:
                        victim, vsize = mem_pop(last=False)
                        mused -= vsize
                        demotions += 1
                        if vsize > scap:
                            evictions += 1
                            continue
                        ssd[victim] = vsize
                        sused += vsize
                        while sused > scap:
                            sused -= ssd_pop(last=False)[1]
                            evictions += 1
            elif obj in ssd:
                ssd_hit(obj)
                level[i] = 2
            elif size <= scap:
                sused += size
                ssd[obj] = size
                if sused > scap:
                    if first < 0:
                        first = i
                    while sused > scap:
                        sused -= ssd_pop(last=False)[1]
                        evictions += 1
        return Outcome(np.frombuffer(level, dtype=np.uint8), first, evictions, demotions)


class TwoLevelOriginal(TwoLevel):
    """The two-level cache as the original trace player's cache plugin simulated it (``compat: original``).

    It differs from :class:`TwoLevel` in three ways that change hit counts:

    * the SSD keeps its recency list as a queue of marks (one per admission or
      hit, with a count of live marks per layer); a layer promoted to memory
      leaves the SSD but not its marks, so when it comes back (demoted) its old,
      stale marks count as its own and it is evicted earlier than LRU order says;
    * each request is admitted with its own size (not the layer's largest), and
      a layer of exactly the memory's size goes to the SSD (the threshold is
      capped at the memory size, and sizes at or above it go to the SSD);
    * the memory and the SSD warm up separately: ``first_eviction_by_level``
      gives the request of each level's first eviction (memory, then SSD).

    Memory itself is an exact LRU.  ``sizes`` is per request.
    """

    sizes_per_request = True

    def run(self, ids: list[int], sizes: list[int]) -> Outcome:
        mcap, scap = self.memory, self.ssd
        large = min(self.threshold, mcap)  # sizes at or above this go to the SSD
        mem: OrderedDict[int, int] = OrderedDict()
        mem_hit, mem_pop = mem.move_to_end, mem.popitem
        ssd: dict[int, int] = {}  # layer -> size admitted with
        marks: dict[int, int] = {}  # layer -> its marks in the queue that still count
        queue: deque[int] = deque()  # recency marks, oldest first; a promoted layer's marks stay (stale)
        level = bytearray(len(ids))
        mused = sused = 0
        evictions = demotions = 0
        mem_first = ssd_first = -1

        def ssd_admit(obj: int, size: int, i: int) -> bool:
            """Admit ``obj`` at the SSD's recent end, evicting by marks; False: larger than the SSD."""
            nonlocal sused, evictions, ssd_first
            if size + sused > scap:
                if size > scap:
                    return False
                if ssd_first < 0:
                    ssd_first = i
                while size + sused > scap:
                    victim = queue.popleft()
                    if victim not in ssd:
                        continue
                    marks[victim] -= 1
                    if marks[victim]:
                        continue
                    sused -= ssd.pop(victim)
                    del marks[victim]
                    evictions += 1
            ssd[obj] = size
            marks[obj] = 1
            queue.append(obj)
            sused += size
            return True

        for i, obj in enumerate(ids):
            if obj in mem:
                mem_hit(obj)
                level[i] = 1
                continue
            size = sizes[i]
            if size >= large:  # an SSD layer: a hit adds a mark, a miss is admitted
                if obj in ssd:
                    queue.append(obj)
                    marks[obj] += 1
                    level[i] = 2
                else:
                    ssd_admit(obj, size, i)
                continue
            if obj in ssd:  # promote: the layer leaves the SSD, its marks stay in the queue
                sused -= ssd.pop(obj)
                del marks[obj]
                level[i] = 2
            if size + mused > mcap:
                if mem_first < 0:
                    mem_first = i
                while size + mused > mcap:
                    victim, vsize = mem_pop(last=False)
                    mused -= vsize
                    demotions += 1
                    # a layer in memory is never in the SSD (every request for it is a memory hit),
                    # so a demotion always admits it anew; one larger than the SSD is dropped
                    if not ssd_admit(victim, vsize, i):
                        evictions += 1
            mem[obj] = size
            mused += size
        firsts = [f for f in (mem_first, ssd_first) if f >= 0]
        return Outcome(
            np.frombuffer(level, dtype=np.uint8), min(firsts, default=-1), evictions, demotions, (mem_first, ssd_first)
        )


# -- libCacheSim -------------------------------------------------------------------

_LCS_EXCLUDED = {"CacheBase", "PluginCache", "ThreeLCache", "GLCache", "LRB"}  # abstract or extra dependencies
NO_NEXT_ACCESS = 1 << 62


def normalize_policy(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "")


def libcachesim_policies() -> dict[str, type]:
    """libCacheSim's eviction policies by normalized name ('s3fifo', 'sieve', 'belady'…)."""
    import libcachesim as lcs

    out = {}
    for name in lcs.__all__:
        cls = getattr(lcs, name)
        if isinstance(cls, type) and issubclass(cls, lcs.CacheBase) and name not in _LCS_EXCLUDED:
            out[normalize_policy(name)] = cls
    return out


def policy_parameters(cls: type) -> dict[str, object]:
    """A libCacheSim policy's own parameters and their defaults (e.g. S3FIFO's small_size_ratio)."""
    common = {"self", "cache_size", "default_ttl", "hashpower", "consider_obj_metadata", "admissioner", "reader"}
    sig = inspect.signature(cls.__init__)
    return {k: p.default for k, p in sig.parameters.items() if k not in common}


def next_access(ids: np.ndarray) -> np.ndarray:
    """For each request, the index of the next request for the same object (NO_NEXT_ACCESS if none)."""
    n = len(ids)
    out = np.full(n, NO_NEXT_ACCESS, dtype=np.int64)
    if n == 0:
        return out
    order = np.lexsort((np.arange(n), ids))  # by object, then by position
    same = ids[order[:-1]] == ids[order[1:]]
    out[order[:-1][same]] = order[1:][same]
    return out


# libCacheSim aborts the whole process (no exception) on some out-of-range parameters: the limits
# known to do so, beyond the general rule of param_problem
_PARAM_LIMITS = {"n_queue": (1, 64), "n_bit_counter": (1, 16), "k": (1, 64), "n_samples": (1, 1 << 20)}


def param_problem(key: str, value: object, default: object) -> str | None:
    """What is wrong with a libCacheSim policy parameter (None: nothing), judged by its default's type.

    Numbers must be finite and ≥ 0; a ratio below 1 by default (a share of the
    cache) or a probability must lie in (0, 1].
    """
    if isinstance(default, bool) or isinstance(default, str):
        return None if type(value) is type(default) else f"expected {type(default).__name__}, got {value!r}"
    whole = isinstance(default, int)
    if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
        return f"expected {'an integer' if whole else 'a number'}, got {value!r}"
    lo, hi = _PARAM_LIMITS.get(key, (0, 1e12))
    share = ("ratio" in key and isinstance(default, float) and default < 1) or "prob" in key or key == "window_size"
    if share and not 0 < value <= 1:
        return f"expected a share in (0, 1], got {value!r}"
    if not lo <= value <= hi:  # also refuses NaN and infinity
        return f"expected a number from {lo:g} to {hi:g}, got {value!r}"
    return None


class LibCacheSim(CachePolicy):
    """Any eviction policy of libCacheSim (https://github.com/1a1a11a/libCacheSim), by name.

    Requests are fed one by one to the C cache (``cache.get``), so the per-request
    outcome and the first eviction are known exactly.  Objects larger than the
    capacity are counted as misses without being offered (libCacheSim would
    refuse them too, with a warning each).  Oracle policies (Belady…) get each
    request's next access position.
    """

    def __init__(self, policy: str, capacity: int, params: dict | None = None) -> None:
        policies = libcachesim_policies()
        cls = policies.get(normalize_policy(policy))
        if cls is None:
            raise DrtpError(f"unknown libcachesim policy {policy!r} (choose from {', '.join(sorted(policies))})")
        allowed = policy_parameters(cls)
        for key, value in (params or {}).items():
            if key not in allowed:
                choices = ", ".join(allowed) or "none"
                raise DrtpError(f"libcachesim policy {cls.__name__}: unknown parameter {key!r} (allowed: {choices})")
            problem = param_problem(key, value, allowed[key])
            if problem:
                raise DrtpError(f"libcachesim policy {cls.__name__}: parameter {key!r}: {problem}")
        self.cls = cls
        self.capacity = int(capacity)
        self.params = dict(params or {})

    def run(self, ids: list[int], sizes: list[int]) -> Outcome:
        import libcachesim as lcs

        n_objects = max(len(sizes), 2)
        hashpower = max(12, min(26, int(n_objects).bit_length() + 1))
        cache = self.cls(cache_size=max(self.capacity, 1), hashpower=hashpower, **self.params)
        raw = cache._cache  # the C cache: skips a Python-level call per request
        get, n_obj = raw.get, raw.get_n_obj
        oracle = normalize_policy(self.cls.__name__).startswith("belady")
        nxt = next_access(np.asarray(ids, dtype=np.int64)).tolist() if oracle else None
        req = lcs.Request()
        level = bytearray(len(ids))
        cap = self.capacity
        first = -1
        for i, obj in enumerate(ids):
            size = sizes[obj]
            if size > cap:
                continue
            req.obj_id = obj
            req.obj_size = size
            req.clock_time = i
            if nxt is not None:
                req.next_access_vtime = nxt[i]
            if first >= 0:
                if get(req):
                    level[i] = 1
                continue
            before = n_obj()
            if get(req):
                level[i] = 1
                if n_obj() < before:
                    first = i
            else:
                admitted = raw.find(req, False) is not None
                if n_obj() < before + admitted:
                    first = i
        return Outcome(np.frombuffer(level, dtype=np.uint8), first, -1)
