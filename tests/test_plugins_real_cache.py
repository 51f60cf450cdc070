"""What real pull-through caches do, in the simulator: keys by repository, unlimited capacity, HEADs that fetch,
manifests as objects.  Every expected hit below is worked by hand from the trace above it."""

from __future__ import annotations

import pytest

from drtp.errors import ConfigError
from drtp.plugins.base import find_plugin, parse_plugin_args
from drtp.plugins.cache import cache_keys, cache_requests
from tests.sim_helpers import hand_trace, layer_get, rec


def run(trace, name="lru", **args):
    cls = find_plugin(name)
    return cls(parse_plugin_args(cls, args)).run(trace)


# layer L through lib/a, then lib/b, then lib/a again; layer M through lib/b twice
SHARED = [
    layer_get(0, "L", 100, repo="lib/a"),
    layer_get(1, "L", 100, repo="lib/b"),
    layer_get(2, "L", 100, repo="lib/a"),
    layer_get(3, "M", 50, repo="lib/b"),
    layer_get(4, "M", 50, repo="lib/b"),
]


def test_digest_key_shares_a_layer_across_repositories() -> None:
    s = run(hand_trace(SHARED), capacity="unlimited").summary
    # L: miss, hit, hit; M: miss, hit
    assert (s["requests"], s["hits"], s["objects"]) == (5, 3, 2)
    assert s["bytes_hit"] == 100 + 100 + 50


def test_repository_digest_key_fetches_a_layer_again_for_another_repository() -> None:
    s = run(hand_trace(SHARED), capacity="unlimited", key="repository+digest").summary
    # lib/a L: miss; lib/b L: miss (another key); lib/a L: hit; lib/b M: miss, hit
    assert (s["requests"], s["hits"], s["objects"]) == (5, 2, 3)
    assert s["evictions"] == 0 and s["first_eviction_time"] is None


def test_repository_digest_key_under_a_small_lru() -> None:
    # capacity 150: lib/a L (100) miss; lib/b L (100) miss, evicts lib/a L; lib/a L miss, evicts lib/b L;
    # lib/b M (50) miss, fits beside lib/a L; lib/b M hit
    s = run(hand_trace(SHARED), capacity=150, key="repository+digest").summary
    assert (s["hits"], s["evictions"]) == (1, 2)


def test_head_fetch_makes_a_head_a_request_for_the_object() -> None:
    trace = hand_trace(
        [
            rec(0, "HEAD", "v2/lib/a/blobs/L"),  # absent: with head=fetch a miss that brings L in
            layer_get(1, "L", 100, repo="lib/a"),  # then a hit
            rec(2, "HEAD", "v2/lib/a/blobs/L"),  # a hit
            rec(3, "HEAD", "v2/lib/a/blobs/Q", status=404),  # a failed HEAD is not a request the cache serves
        ]
    )
    ignored = run(trace, capacity="unlimited").summary
    assert (ignored["requests"], ignored["hits"]) == (1, 0)
    fetched = run(trace, capacity="unlimited", head="fetch").summary
    assert (fetched["requests"], fetched["hits"]) == (3, 2)
    assert fetched["bytes_requested"] == 300  # a HEAD counts the object's size: the cache moved it


def test_manifests_are_objects_keyed_by_repository_and_reference() -> None:
    trace = hand_trace(
        [
            rec(0, "GET", "v2/lib/a/manifests/v1", 900),
            layer_get(1, "L", 100, repo="lib/a"),
            rec(2, "GET", "v2/lib/b/manifests/v1", 900),  # another repository's v1: another object
            rec(3, "GET", "v2/lib/a/manifests/v1", 900),  # hit
        ]
    )
    s = run(trace, capacity="unlimited", manifests=True).summary
    assert (s["requests"], s["hits"], s["objects"]) == (4, 1, 3)
    assert run(trace, capacity="unlimited").summary["requests"] == 1  # layers only by default


def test_every_policy_takes_the_same_keys() -> None:
    for name, extra in (("two-level", {}), ("cache", {"policy": "libcachesim:LRU"})):
        s = run(hand_trace(SHARED), name, capacity="unlimited", key="repository+digest", **extra).summary
        assert s["hits"] == 2, name


def test_cache_requests_and_keys_are_what_the_simulation_counts() -> None:
    trace = hand_trace(SHARED)
    cls = find_plugin("lru")
    args = parse_plugin_args(cls, {"capacity": "unlimited", "key": "repository+digest"})
    rows = cache_requests(trace, args)
    dense, objects = cache_keys(trace, rows, "repository+digest")
    # lib/a L, lib/b L, lib/a L, lib/b M, lib/b M: three keys, the first and third the same
    assert len(set(dense.tolist())) == 3
    assert dense[0] == dense[2] and dense[0] != dense[1] and dense[3] == dense[4]
    # each key's trace object is the layer its requests named
    assert [trace.objects[objects[d]] for d in dense] == [trace.objects[o] for o in trace.obj[rows]]


@pytest.mark.parametrize(
    "args, key",
    [
        ({"capacity": "unlimted"}, "capacity"),
        ({"capacity": "1MB", "key": "repo"}, "key"),
        ({"capacity": "1MB", "head": "yes"}, "head"),
        ({"capacity": "1MB", "compat": "original", "key": "repository+digest"}, "key"),
    ],
)
def test_bad_arguments_name_the_key(args, key) -> None:
    cls = find_plugin("two-level")
    with pytest.raises(ConfigError, match=key):
        parse_plugin_args(cls, args)
