"""The prefetch plugin (a pushed layer is prefetched when another client GETs its repository's manifest).

A hand-computed trace and a naive reference.
"""

from __future__ import annotations

import pytest

from drtp.errors import DrtpError
from drtp.plugins.prefetch import simulate_prefetch
from drtp.trace.columns import BLOB, GET, MANIFEST, PATCH, PUT, UPLOAD
from tests.sim_helpers import gen_trace_file, hand_trace, load, rec
from tests.test_plugins_lru import run_plugin

R = "v2/u/r"


def hand_records():
    return [
        rec(0, "PUT", f"{R}/blobs/L1", 1000, "c1"),  # monolithic push of L1
        rec(1, "POST", f"{R}/blobs/uploads/", 0, "c1"),
        rec(2, "PATCH", f"{R}/blobs/uploads/x", 500, "c1"),  # chunked push of L2: bytes in the PATCH
        rec(3, "PUT", f"{R}/blobs/L2", 0, "c1"),
        rec(5, "GET", f"{R}/manifests/v1", 900, "c1"),  # the pusher: no prefetch
        rec(10, "GET", f"{R}/manifests/v1", 900, "c2"),  # prefetch L1 and L2 (1500 B held), until 60
        rec(11, "GET", "v2/u/other/manifests/v1", 900, "c6"),  # another repository: nothing
        rec(12, "GET", f"{R}/blobs/L1", 1000, "c2"),  # prefetch hit 1
        rec(15, "GET", f"{R}/manifests/v1", 900, "c2"),  # repeat client: nothing
        rec(20, "GET", f"{R}/manifests/v1", 900, "c3"),  # new client: L1, L2 still held -> 2 renewals, until 70
        rec(30, "GET", f"{R}/blobs/L2", 500, "c3"),  # prefetch hit 2
        rec(65, "GET", f"{R}/blobs/L1", 1000, "c4"),  # hit 3 (only because of the renewal)
        rec(71, "GET", f"{R}/blobs/L2", 500, "c4"),  # expired at 70: miss
        rec(105, "GET", f"{R}/manifests/v1", 900, "c5"),  # entries pushed at 0 and 3 expired (LM 100): nothing
        rec(106, "GET", f"{R}/blobs/L1", 1000, "c5"),  # miss
        rec(110, "PUT", f"{R}/blobs/L1", 1000, "c1"),  # L1 pushed again: a fresh entry
        rec(111, "PUT", f"{R}/blobs/L3", 300, "c1"),
        rec(120, "GET", f"{R}/manifests/v2", 900, "c2"),  # c2 has not seen the new entries: prefetch L1, L3
        rec(121, "GET", f"{R}/blobs/L1", 1000, "c2"),  # hit 4; L3 is never used
    ]


def test_prefetch_hand_trace():
    result = run_plugin("prefetch", hand_trace(hand_records()), lm_thresh=100, ml_thresh=50)
    s = result.summary
    assert (s["put_layers"], s["get_manifests"], s["get_layers"]) == (4, 7, 6)
    assert (s["prefetches"], s["renewals"], s["prefetch_hits"]) == (4, 2, 4)
    assert s["hits_per_prefetch"] == pytest.approx(1.0)
    assert (s["used_prefetches"], s["unused_prefetches"]) == (3, 1)
    assert s["peak_memory_bytes"] == 1500
    assert s["peak_memory_time"] == "2017-08-01T00:00:10Z"
    assert s["prefetched_bytes"] == 1000 + 500 + 1000 + 300
    table = result.tables["prefetches"]
    assert list(table["layer"]) == ["L1", "L2", "L1", "L3"]
    assert list(table["hits"]) == [2, 1, 1, 0]
    assert list(table["renewals"]) == [1, 1, 0, 0]
    assert list(table["size"]) == [1000, 500, 1000, 300]
    assert table["expired"].iloc[0] == "2017-08-01T00:01:10Z"  # renewed at 20 + 50 s
    assert table["client"].iloc[0] == "c2"


def test_prefetch_thresholds_change_the_answer():
    trace = hand_trace(hand_records())
    short_ml = run_plugin("prefetch", trace, lm_thresh=100, ml_thresh=1).summary
    # only the GET at 121, exactly 1 s after its prefetch, is served: a layer is kept while age <= ML_thresh
    assert short_ml["prefetch_hits"] == 1
    long_lm = run_plugin("prefetch", trace, lm_thresh="1h", ml_thresh=50).summary
    # with LM 1 h the old entries are alive at 105: c5 prefetches L1 and L2 again (they expired at 70);
    # at 120 the new L1 entry only renews L1 (held until 155) and L3 is prefetched
    assert (long_lm["prefetches"], long_lm["renewals"]) == (5, 3)
    assert long_lm["prefetch_hits"] == 5  # 106 and 121 now hit too


def test_bad_threshold_names_the_key():
    with pytest.raises(DrtpError, match="simulate.args.ml_thresh: not a duration"):
        run_plugin("prefetch", hand_trace(hand_records()), ml_thresh="soon")


def reference_prefetch(trace, lm: float, ml: float) -> dict:
    """The prefetch rule written naively: sets of clients per (repo, layer), expiry by scanning."""
    sizes: dict[int, int] = {}
    for i in range(len(trace)):
        if trace.kind[i] == BLOB and trace.method[i] in (GET, PUT) and trace.status[i] < 400:
            o = int(trace.obj[i])
            sizes[o] = max(sizes.get(o, 0), int(trace.size[i]))
    repo_map: dict[int, dict[int, list]] = {}
    held: dict[int, float] = {}  # layer -> expiry time
    patches: dict[tuple[int, int], int] = {}
    prefetches = renewals = hits = 0
    memory = peak = 0
    for i in range(len(trace)):
        t, m, k = float(trace.time[i]), int(trace.method[i]), int(trace.kind[i])
        o, repo, client = int(trace.obj[i]), int(trace.repo[i]), int(trace.client[i])
        if trace.status[i] >= 400:
            continue
        for layer in [x for x, exp in held.items() if exp < t]:
            memory -= sizes.get(layer, 0)
            del held[layer]
        if m == PATCH and k == UPLOAD:
            patches[(client, repo)] = patches.get((client, repo), 0) + int(trace.size[i])
        elif m == PUT and k == BLOB:
            sizes[o] = max(sizes.get(o, 0), patches.pop((client, repo), 0))
            repo_map.setdefault(repo, {})[o] = [t, {client}]
        elif m == GET and k == MANIFEST:
            for layer, (put_t, clients) in repo_map.get(repo, {}).items():
                if t - put_t > lm or client in clients:
                    continue
                clients.add(client)
                if layer in held:
                    renewals += 1
                else:
                    prefetches += 1
                    memory += sizes.get(layer, 0)
                    peak = max(peak, memory)
                held[layer] = t + ml
        elif m == GET and k == BLOB and o in held:
            hits += 1
    return {"prefetches": prefetches, "renewals": renewals, "prefetch_hits": hits, "peak_memory_bytes": peak}


@pytest.mark.parametrize(("lm", "ml"), [(3600, 3600), (600, 43200), (43200, 600)])
def test_prefetch_matches_naive_reference_on_generated_trace(tmp_path, lm, ml):
    trace = load(gen_trace_file(tmp_path / "t.json", requests=5000, seed=21, span_s=2 * 86400))
    s = simulate_prefetch(trace, lm, ml, per_server=False).summary
    expected = reference_prefetch(trace, lm, ml)
    assert expected["prefetches"] > 0 and expected["prefetch_hits"] > 0
    assert {k: s[k] for k in expected} == expected


def test_per_server_prefetch_tables_are_separate():
    records = [
        rec(0, "PUT", f"{R}/blobs/L1", 1000, "c1", host="h1"),
        rec(10, "GET", f"{R}/manifests/v1", 900, "c2", host="h2"),  # another server: its table is empty
        rec(11, "GET", f"{R}/blobs/L1", 1000, "c2", host="h2"),
        rec(20, "GET", f"{R}/manifests/v1", 900, "c3", host="h1"),  # the pushing server: prefetch
        rec(21, "GET", f"{R}/blobs/L1", 1000, "c3", host="h1"),
    ]
    trace = hand_trace(records)
    shared = run_plugin("prefetch", trace, lm_thresh="1h", ml_thresh="1h").summary
    assert (shared["prefetches"], shared["renewals"], shared["prefetch_hits"]) == (1, 1, 2)
    split = run_plugin("prefetch", trace, lm_thresh="1h", ml_thresh="1h", per_server=True)
    assert (split.summary["prefetches"], split.summary["prefetch_hits"]) == (1, 1)
    assert list(split.tables["prefetches"]["server"]) == ["h1"]
