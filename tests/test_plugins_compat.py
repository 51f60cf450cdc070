"""``compat: original``: the two-level cache and the prefetcher as the original trace player's plugins ran them.

Each hand-made trace below isolates one way the original differs from the
default (the published study's design); the expected numbers are worked out
in the comments.
"""

from __future__ import annotations

import pytest

from drtp.errors import ConfigError
from drtp.plugins.base import find_plugin, parse_plugin_args
from drtp.plugins.legacy import legacy_requests
from drtp.plugins.original import original_cache_requests, original_requests
from drtp.plugins.policies import TwoLevel, TwoLevelOriginal
from drtp.trace.reader import TraceReader
from tests.sim_helpers import gen_trace_file, hand_trace, layer_get, load, rec
from tests.test_plugins_lru import run_plugin

R = "v2/u/r"
# memory 100 B, SSD 2x = 200 B, layers below 80 B go to memory
CACHE = {"capacity": 100, "ssd_multiplier": 2, "threshold": 80}


def gets(names: str, size: int = 60) -> list:
    return [layer_get(i, x, size) for i, x in enumerate(names.split())]


# -- two-level ----------------------------------------------------------------------------


def test_stale_ssd_mark_evicts_a_demoted_layer_early():
    # All layers 60 B, so memory holds one and the SSD three.
    # 0 A miss -> mem A                    1 B miss, demote A -> SSD marks [A]         (memory's first eviction)
    # 2 A SSD hit: promoted, its mark stays [A]; demote B -> marks [A B]
    # 3 C miss, demote A -> marks [A B A], A's live marks: 1      4 D miss, demote C -> SSD {B A C} 180 B
    # 5 E miss, demote D: 240 > 200, the SSD's first eviction pops the oldest mark, A's stale one: A leaves
    #   (an LRU list would evict B, demoted before A was)
    # 6 A: the original misses it; the default (LRU) SSD hits it
    ids = [0, 1, 0, 2, 3, 4, 0]
    sizes = [60] * len(ids)
    out = TwoLevelOriginal(memory=100, ssd=200, threshold=80).run(ids, sizes)
    assert out.level.tolist() == [0, 0, 2, 0, 0, 0, 0]
    assert out.first_eviction_by_level == (1, 5)
    default = TwoLevel(memory=100, ssd=200, threshold=80).run(ids, [60] * 5)
    assert default.level.tolist() == [0, 0, 2, 0, 0, 0, 2]

    trace = hand_trace(gets("A B A C D E A"))
    assert run_plugin("two-level", trace, compat="original", **CACHE).summary["hits"] == 1
    assert run_plugin("two-level", trace, **CACHE).summary["hits"] == 2


def test_put_blobs_and_failed_gets_are_cache_requests():
    trace = hand_trace(
        [
            rec(0, "PUT", f"{R}/blobs/L", 50, status=201),  # the original: a miss, L admitted to memory
            rec(1, "GET", f"{R}/blobs/L", 50),  # the original: memory hit; the default: a miss
            rec(2, "GET", f"{R}/blobs/M", 30, status=404),  # error body: the original counts a miss
            rec(3, "GET", f"{R}/blobs/N", 0),  # no bytes written: the original leaves it out, the default a miss
            rec(4, "GET", f"{R}/manifests/v1", 40),  # manifests: left out by both
        ]
    )
    original = run_plugin("two-level", trace, compat="original", **CACHE).summary
    assert (original["requests"], original["hits"], original["hits_memory"]) == (3, 1, 1)
    default = run_plugin("two-level", trace, **CACHE).summary
    assert (default["requests"], default["hits"]) == (2, 0)


def test_memory_and_ssd_warm_up_apart():
    # 0 A miss   1 B miss, demote A (the first eviction: memory's; the SSD never evicts)
    # 2 A SSD hit (promoted; B demoted)   3 A memory hit
    trace = hand_trace(gets("A B A A"))
    original = run_plugin("two-level", trace, compat="original", **CACHE).summary
    # the memory's ratio counts after the memory's first eviction: 2 A is a memory miss, 3 A a hit
    assert (original["lmu_hits"], original["lmu_misses"]) == (1, 1)
    assert original["hit_ratio_memory_warm"] == pytest.approx(1 / 2)
    # the combined ratio counts after the SSD's first eviction, which never comes: nothing counted
    assert (original["h_hits"], original["h_misses"], original["warm_requests"]) == (0, 0, 0)
    assert original["hit_ratio_warm"] is None
    # the default: warm after the first eviction of either level (the demotion at 1): 2 hits of 2
    default = run_plugin("two-level", trace, **CACHE).summary
    assert (default["warm_requests"], default["warm_hits"]) == (2, 2)
    assert original["hits"] == default["hits"] == 2


def test_each_request_is_admitted_with_its_own_size():
    # A is first read partly (30 B), then whole (90 B): the original keeps the 30 B it was admitted with,
    # so B (60 B) fits beside it and both stay in memory; the default sizes A at 90 B (its largest),
    # above the 80 B threshold, so A goes to the SSD
    trace = hand_trace([layer_get(0, "A", 30), layer_get(1, "A", 90), layer_get(2, "B", 60), layer_get(3, "A", 90)])
    original = run_plugin("two-level", trace, compat="original", **CACHE).summary
    assert (original["hits_memory"], original["hits_ssd"]) == (2, 0)
    default = run_plugin("two-level", trace, **CACHE).summary
    assert (default["hits_memory"], default["hits_ssd"]) == (0, 2)


def test_compat_is_refused_where_the_original_had_no_such_cache():
    for name, args in (("cache", {"policy": "lru"}), ("cache", {"policy": "libcachesim:FIFO"})):
        with pytest.raises(ConfigError, match="simulate.args.compat: 'original' exists for the two-level"):
            parse_plugin_args(find_plugin(name), {"capacity": 100, "compat": "original", **args})
    with pytest.raises(ConfigError, match="unknown key 'simulate.args.compat'"):
        parse_plugin_args(find_plugin("lru"), {"capacity": 100, "compat": "original"})
    with pytest.raises(ConfigError, match="'simulate.args.compat': 'paper' is not one of none, original"):
        parse_plugin_args(find_plugin("prefetch"), {"compat": "paper"})
    # the cache plugin with the two-level policy is the two-level cache
    trace = hand_trace(gets("A B A C D E A"))
    assert run_plugin("cache", trace, policy="two-level", compat="original", **CACHE).summary["hits"] == 1


# -- prefetch -----------------------------------------------------------------------------


def prefetch(trace, **args):
    return run_plugin("prefetch", trace, **args).summary


def test_prefetch_without_timeouts():
    trace = hand_trace(
        [
            rec(0, "PUT", f"{R}/blobs/L", 5000, "c1", status=201),
            rec(36_000, "GET", f"{R}/manifests/v1", 900, "c2"),  # 10 h later: the default's 1 h entry is gone
            rec(36_001, "GET", f"{R}/blobs/L", 5000, "c2"),
            rec(36_002, "GET", f"{R}/manifests/v1", 900, "c3"),  # renews L in the original
            rec(400_000, "GET", f"{R}/blobs/L", 5000, "c3"),  # days later: still held in the original
        ]
    )
    original = prefetch(trace, compat="original", lm_thresh="1h", ml_thresh="1h")
    assert (original["prefetches"], original["renewals"], original["prefetch_hits"]) == (1, 1, 2)
    assert original["hits_per_prefetch"] == 2.0 and original["peak_memory_bytes"] == 5000
    assert original["lm_thresh_s"] is None  # the thresholds had no effect
    default = prefetch(trace, lm_thresh="1h", ml_thresh="1h")
    assert (default["prefetches"], default["prefetch_hits"]) == (0, 0)


def test_prefetch_put_manifests_are_pushed_layers():
    trace = hand_trace(
        [
            rec(0, "PUT", f"{R}/blobs/L", 10_000, "c1", status=201),
            rec(1, "PUT", f"{R}/manifests/v1", 3000, "c1", status=201),  # a "layer" of 3000 B to the original
            rec(2, "GET", f"{R}/manifests/v1", 3000, "c2"),
            rec(3, "GET", f"{R}/blobs/L", 10_000, "c2"),
        ]
    )
    original = prefetch(trace, compat="original")
    assert (original["put_requests"], original["prefetches"], original["prefetched_bytes"]) == (2, 2, 13_000)
    assert (original["prefetch_hits"], original["used_prefetches"], original["unused_prefetches"]) == (1, 1, 1)
    default = prefetch(trace)
    assert (default["put_layers"], default["prefetches"], default["prefetched_bytes"]) == (1, 1, 10_000)
    assert (default["prefetch_hits"], default["unused_prefetches"]) == (1, 0)


def test_prefetch_matches_sizes_within_1000_bytes():
    trace = hand_trace(
        [
            rec(0, "PUT", f"{R}/blobs/L1", 10_000, "c1", status=201),
            rec(1, "PUT", f"{R}/blobs/L2", 10_500, "c1", status=201),
            rec(2, "PUT", f"{R}/blobs/L3", 10_500, "c1", status=201),  # same size as L2: one prefetch, a renewal
            rec(3, "GET", f"{R}/manifests/v1", 900, "c2"),  # prefetch 10000 and 10500
            rec(4, "GET", f"{R}/blobs/L1", 10_000, "c2"),  # 9000 < s < 11000: both match, 2 hits
            rec(5, "GET", f"{R}/blobs/X", 11_000, "c2"),  # 10000 < s < 12000: 10500 matches, 1 hit
            rec(6, "GET", f"{R}/blobs/Y", 11_500, "c2"),  # 10500 < s < 12500: none (not a miss either)
            rec(7, "GET", "v2/u/other/blobs/L1", 10_000, "c2"),  # a repository with no prefetch: a miss
        ]
    )
    original = prefetch(trace, compat="original")
    counts = (original["prefetches"], original["renewals"], original["prefetch_hits"], original["misses"])
    assert counts == (2, 1, 3, 1)
    assert original["hits_per_prefetch"] == 1.5 and original["get_layer_hit_ratio"] == 3 / 4
    table = run_plugin("prefetch", trace, compat="original").tables["prefetches"]
    assert table.set_index("size")["hits"].to_dict() == {10_000: 1, 10_500: 2}
    # the default knows layers by digest: L1, L2 and L3 prefetched; the two GETs of L1 hit (a layer is
    # content addressed, so L1 from the other repository is the same layer), X and Y are not held
    default = prefetch(trace)
    assert (default["prefetches"], default["prefetch_hits"]) == (3, 2)


# -- on a generated trace -------------------------------------------------------------------


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return gen_trace_file(tmp_path_factory.mktemp("compat") / "t.json", requests=6000, seed=5)


def test_compat_requests_are_the_original_contract_list(generated):
    """The rows compat simulates are exactly the list the original-contract plugin path hands a plugin."""
    trace = load(generated)
    req = original_requests(trace)
    legacy = legacy_requests(r for batch in TraceReader([generated]).batches() for r in batch)
    assert len(req.rows) == len(legacy) > 0
    rebuilt = [req.uris[u] for u in req.uri.tolist()]
    assert rebuilt == [r["uri"] for r in legacy]
    assert trace.size[req.rows].tolist() == [r["size"] for r in legacy]
    rows, ids = original_cache_requests(trace)
    blobs = [r for r in legacy if "manifest" not in r["uri"]]
    assert len(rows) == len(blobs) and len(set(ids.tolist())) == len({r["uri"].split("/")[-1] for r in blobs})


def test_compat_and_default_differ_on_a_generated_trace(generated):
    trace = load(generated)
    args = {"capacity": "2%", "ssd_multiplier": 10}
    result = run_plugin("two-level", trace, compat="original", **args)
    original = result.summary
    default = run_plugin("two-level", trace, **args).summary
    assert original["requests"] > default["requests"]  # PUT blobs and failed GETs count
    assert original["hits"] != default["hits"]
    assert original["h_hits"] + original["h_misses"] == original["warm_requests"]
    memory = result.tables["levels"].set_index("level").loc["memory"]
    assert original["lmu_hits"] + original["lmu_misses"] == memory["warm_requests"] > 0
    assert original["lmu_hits"] == memory["warm_hits"]
    p_original = prefetch(trace, compat="original")
    p_default = prefetch(trace)
    assert p_original["prefetch_hits"] != p_default["prefetch_hits"]
    assert p_original["put_requests"] > p_default["put_layers"]  # PUT manifests count
