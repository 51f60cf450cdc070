"""The two-level (memory + SSD) cache: a hand-computed trace with demotion, promotion, large and oversize layers."""

from __future__ import annotations

import pytest

from drtp.plugins.policies import TwoLevel
from tests.sim_helpers import gen_trace_file, hand_trace, layer_get, load
from tests.test_plugins_lru import reference_lru, run_plugin

# memory 100 B, SSD 2x = 200 B, layers < 80 B go to memory
SIZES = {"A": 60, "B": 50, "C": 40, "D": 70, "L": 120, "H": 250}
SEQUENCE = "A B A L H B L C A L D L C H C".split()
# 1 A miss -> mem[A]            2 B miss, demote A -> ssd[A]       3 A SSD hit, promote; demote B
# 4 L miss (large) -> ssd[B L]   5 H miss, larger than the SSD: never admitted
# 6 B SSD hit; demote A -> ssd[L A]   7 L SSD hit -> ssd[A L]       8 C miss -> mem[B C]
# 9 A SSD hit; demote B -> ssd[L B]   10 L SSD hit -> ssd[B L]
# 11 D miss: demote C (SSD evicts B), demote A (SSD evicts L) -> mem[D] ssd[C A]
# 12 L miss -> SSD evicts C   13 C miss; demote D (SSD evicts A)   14 H miss   15 C memory hit
EXPECTED = [0, 0, 2, 0, 0, 2, 2, 0, 2, 2, 0, 0, 0, 0, 1]


def test_two_level_policy_hand_trace():
    names = sorted(SIZES)
    ids = [names.index(x) for x in SEQUENCE]
    out = TwoLevel(memory=100, ssd=200, threshold=80).run(ids, [SIZES[x] for x in names])
    assert out.level.tolist() == EXPECTED
    assert out.first_eviction == 1  # B's admission demotes A: the first eviction from memory
    assert out.demotions == 7
    assert out.evictions == 4  # B, L, C, A left the SSD


def test_two_level_plugin_reports_levels():
    trace = hand_trace([layer_get(i, x, SIZES[x]) for i, x in enumerate(SEQUENCE)])
    result = run_plugin("two-level", trace, capacity=100, ssd_multiplier=2, threshold=80)
    s = result.summary
    assert (s["requests"], s["hits"], s["hits_memory"], s["hits_ssd"]) == (15, 6, 1, 5)
    assert s["hit_ratio"] == pytest.approx(6 / 15)
    assert s["hit_ratio_memory"] == pytest.approx(1 / 15)
    assert s["hit_ratio_ssd"] == pytest.approx(5 / 15)
    assert (s["warm_requests"], s["warm_hits"]) == (13, 6)
    assert s["hit_ratio_warm"] == pytest.approx(6 / 13)
    assert s["ssd_bytes"] == 200 and s["threshold_bytes"] == 80
    levels = result.tables["levels"].set_index("level")
    assert list(levels.index) == ["memory", "ssd", "combined"]
    assert levels.loc["memory", "hits"] + levels.loc["ssd", "hits"] == levels.loc["combined", "hits"]
    timeline = result.tables["timeline"]
    assert timeline["requests"].sum() == 15
    assert timeline["hits_memory"].sum() == 1 and timeline["hits_ssd"].sum() == 5


def test_memory_level_is_an_lru_of_small_layers(tmp_path):
    """Levels are exclusive and small layers always enter memory, so the memory level holds exactly
    what a plain LRU of the small layers would hold."""
    trace = load(gen_trace_file(tmp_path / "t.json", requests=6000, seed=11))
    gets = trace.layer_gets()
    sizes = trace.object_sizes(gets).tolist()
    ids = trace.obj[gets].tolist()
    memory, threshold = int(sum(sizes) * 0.02), 2_000_000
    is_small = [s < threshold and s <= memory for s in sizes]
    small = [o for o in ids if is_small[o]]
    out = TwoLevel(memory, memory * 10, threshold).run(ids, sizes)
    assert (out.level == 2).sum() > 0  # the SSD level does serve some requests here
    mem_hits = [int(lv == 1) for o, lv in zip(ids, out.level.tolist(), strict=True) if is_small[o]]
    assert mem_hits == reference_lru(small, sizes, memory)
    # with a zero-size SSD the combined hit ratio is that of the memory level alone
    assert (TwoLevel(memory, 0, threshold).run(ids, sizes).level == 2).sum() == 0
