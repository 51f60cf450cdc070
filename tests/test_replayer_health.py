"""Replayer health: the limited rule on parts made here, the node's meter on a clock of the test's, the gauges
of stats_history.csv, the verdict; and real runs: a client node starved of CPU makes a stress run
replayer-limited, naming it; a slow as-is run on idle nodes is not."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

import drtp
from drtp.analysis.results_analysis import analyze_results, replayer_banners
from drtp.cli import main
from drtp.client.health import TICK_S, HealthMeter
from drtp.master.outputs.replayer_health import CPU_LIMIT, LAG_LIMIT_MS, ReplayerHealth
from drtp.master.outputs.results import format_table
from drtp.master.outputs.stats_history import WRITE_LAG_S, StatsHistory
from drtp.master.run.verdict import judge
from drtp.master.run.warmup import run_warmup
from drtp.master.series.ramp import step_entry
from drtp.registry.local import LocalRegistry
from drtp.replay.failure_budget import FailureBudget
from drtp.replay.frames import HealthPart
from drtp.replay.stats_file import STATS_COLUMNS, STATS_FILE
from drtp.replay.summary import replayer_limited_line
from tests.replay_support import make_trace, write_config

GAUGES = ["node_cpu_max", "loop_lag_ms_max", "master_cpu"]


def idle(index: int) -> HealthPart:
    return HealthPart(index, 0.2, 1.0, 3)


def busy(index: int) -> HealthPart:
    return HealthPart(index, CPU_LIMIT, 1.0, 8)  # exactly at the CPU limit: limited


def late(index: int) -> HealthPart:
    return HealthPart(index, 0.3, LAG_LIMIT_MS, 8)  # exactly at the lag limit: limited


# -- the limited rule ------------------------------------------------------------------------------------------


def test_a_node_limited_in_exactly_ten_percent_of_the_intervals_limits_the_run():
    health = ReplayerHealth(0.5)
    health.add("a", [busy(i) if i in (4, 7) else idle(i) for i in range(10)] + [late(i) for i in range(10, 12)])
    health.add("b", [idle(i) for i in range(30)])  # the run's intervals: 30, so 3 limited ones are 10 %
    health.add("a", [late(29)])  # a later frame adds to the same node
    out = health.summary()
    assert out["replayer_limited"] is True
    limited = out["replayer"]["limited"]
    assert limited == {
        "node": "a",
        "from_s": 2.0,  # interval 4's start
        "to_s": 15.0,  # interval 29's end
        "intervals": 5,
        "share": round(5 / 30, 4),
        "why": limited["why"],
    }
    assert (
        "90% of a core in 2" in limited["why"] and "10 ms in 3" in limited["why"] and "30 intervals" in limited["why"]
    )
    # 3 of 30 is exactly 10 %: limited (a float 0.1 × 30 is above 3, and would have said no)
    exact = ReplayerHealth(1.0)
    exact.add("a", [late(i) if i < 3 else idle(i) for i in range(30)])
    assert exact.summary()["replayer_limited"] is True and exact.limited()["intervals"] == 3
    # 2 of 30 is not
    under = ReplayerHealth(1.0)
    under.add("a", [late(i) if i < 2 else idle(i) for i in range(30)])
    assert under.summary()["replayer_limited"] is False and under.limited() is None


def test_just_under_a_limit_is_not_limited_and_the_busiest_node_is_named():
    health = ReplayerHealth(1.0)
    health.add("a", [HealthPart(i, CPU_LIMIT - 0.001, LAG_LIMIT_MS - 0.001, 4) for i in range(5)])
    assert health.summary()["replayer_limited"] is False
    health.add("b", [busy(0), idle(1), idle(2), idle(3), idle(4)])
    health.add("c", [late(0), late(1), idle(2), idle(3), idle(4)])
    limited = health.limited()
    assert limited["node"] == "c" and limited["intervals"] == 2 and (limited["from_s"], limited["to_s"]) == (0.0, 2.0)


def test_no_intervals_is_not_limited_and_the_block_is_still_there():
    out = ReplayerHealth(1.0).summary()
    assert out == {
        "replayer_limited": False,
        "replayer": {
            "since_s": 0.0,
            "nodes": {},
            "master": {"cpu_p50": None, "cpu_max": None},
            "limited": None,
            "late_gauges": 0,
        },
    }


def test_the_replayer_block_per_node_and_for_the_master():
    health = ReplayerHealth(1.0)
    health.add("n1", [HealthPart(i, 0.1 * (i + 1), float(i), i) for i in range(5)])
    health.master(0, 0.05)
    health.master(1, 0.15)
    block = health.summary()["replayer"]
    assert block["nodes"]["n1"] == {
        "cpu_p50": 0.3, "cpu_max": 0.5, "lag_ms_p50": 2.0, "lag_ms_p99": 4.0, "lag_ms_max": 4.0,
        "in_flight_max": 4, "intervals": 5,
    }  # fmt: skip
    assert block["master"] == {"cpu_p50": 0.05, "cpu_max": 0.15}


def test_the_verdict_console_line_and_max_replayer_limited():
    health = ReplayerHealth(1.0)
    health.add("node-7", [late(0), idle(1)])
    summary = {"requests": 10, "failed": 0, "succeeded": 10, **health.summary()}
    assert judge(summary, FailureBudget(count=0)).code == 0  # off by default
    verdict = judge(summary, FailureBudget(count=0), max_replayer_limited=True)
    assert verdict.code == 1
    assert verdict.message.startswith("replayer-limited (--max-replayer-limited): client node node-7 from 0 s to 1 s")
    assert "\n" not in verdict.message
    line = replayer_limited_line(summary)
    assert line.startswith("replayer-limited: client node node-7 ") and "\n" not in line
    fine = {"requests": 10, "failed": 0, "succeeded": 10, **ReplayerHealth(1.0).summary()}
    assert judge(fine, FailureBudget(count=0), max_replayer_limited=True).code == 0
    assert replayer_limited_line(fine) is None


# -- the node's meter ------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.cpu = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_meter_closes_each_interval_once_with_its_cpu_lag_and_most_in_flight():
    clock = Clock()
    running = [2]
    meter = HealthMeter(1.0, clock, lambda: running[0], cpu=lambda: clock.cpu)
    meter.tick(-0.01, -0.005)  # before the run's common start (as is): nothing
    assert meter.index is None
    clock.now = 0.01
    meter.tick(0.01, 0.01)
    meter.peak = 6
    for k in range(2, 99):  # on time, 10 ms apart
        meter.tick(k * 0.01, k * 0.01)
    clock.cpu = 0.5  # half a core over the first interval
    meter.tick(0.98, 1.03)  # 50 ms late, crossing into interval 1
    parts = meter.take()
    assert len(parts) == 1 and parts[0].index == 0 and parts[0].in_flight == 6
    assert parts[0].cpu == pytest.approx(0.5 / 1.02, rel=1e-3)
    assert parts[0].lag_ms == pytest.approx(20.0, abs=0.01)  # overdue 20 ms when interval 0 ended: its worst
    assert meter.take() == []  # each once
    # the loop blocked: the tick due at 1.05 fires at 3.4 — intervals 1 and 2 both show the lag they saw
    clock.cpu = 2.5
    meter.tick(1.05, 3.4)
    one, two = meter.take()
    assert (one.index, two.index) == (1, 2) and one.in_flight == 2 and two.in_flight == 2  # still running
    assert one.lag_ms == pytest.approx(950.0, abs=0.01) and two.lag_ms == pytest.approx(1000.0, abs=0.01)
    assert one.cpu == two.cpu == pytest.approx(2.0 / 2.37, rel=1e-3)
    # the end: interval 3 (0.55 s of it) is sent; a later tick changes nothing
    clock.now, clock.cpu = 3.95, 2.6
    meter.finish()
    (last,) = meter.take()
    assert last.index == 3 and last.lag_ms == pytest.approx(2350.0, abs=0.01)  # the late tick's own sample
    assert last.cpu == pytest.approx(0.1 / 0.55, rel=1e-3)
    meter.tick(3.98, 4.5)
    meter.finish()
    assert meter.take() == []


def _one_second_of_ticks(stall_s: float) -> HealthPart:
    """Interval 0 of a meter ticking on its grid (as its timers do), the process stalled from 0.5 s for
    ``stall_s``."""
    clock = Clock()
    meter = HealthMeter(1.0, clock, lambda: 0, cpu=lambda: clock.cpu)
    due = TICK_S
    while due < 1.0 + TICK_S / 2:
        now = max(due, 0.5 + stall_s) if 0.5 <= due < 0.5 + stall_s else due
        clock.now = now
        due = meter._ticks(due, now)
    clock.now = 1.0 + TICK_S
    meter.tick(clock.now, clock.now)
    (part,) = meter.take()
    return part


def test_a_tick_still_overdue_at_the_end_shows_its_lag_in_every_interval_it_spans():
    clock = Clock()
    meter = HealthMeter(1.0, clock, lambda: 0, cpu=lambda: clock.cpu)
    due = TICK_S
    while due < 0.5:
        clock.now = due
        due = meter._ticks(due, due)
    clock.now = 2.4  # the loop was held from about 0.5 s to the end of the run
    meter.finish()
    parts = meter.take()
    assert [p.index for p in parts] == [0, 1, 2]
    assert parts[0].lag_ms >= 400 and parts[1].lag_ms >= 900 and parts[2].lag_ms >= 1800


def test_one_stray_oversleep_is_not_the_p99_but_a_stall_is():
    assert _one_second_of_ticks(0.0).lag_ms == 0.0
    # one 10 ms oversleep in an interval of 100 grid ticks: above the p99 (nearest rank 99 of 100)
    assert _one_second_of_ticks(0.010).lag_ms < LAG_LIMIT_MS
    # a 30 ms stall: the ticks it slept through were late too (30, 20, 10 ms): 3 % of the interval
    assert _one_second_of_ticks(0.030).lag_ms >= LAG_LIMIT_MS


def test_the_last_partial_interval_is_sent_over_its_own_length():
    clock = Clock()
    meter = HealthMeter(1.0, clock, lambda: 0, cpu=lambda: clock.cpu)
    meter.tick(0.0, 0.0)
    meter.tick(1.0, 1.0)
    clock.now, clock.cpu = 1.2, 0.1
    meter.finish()
    first, last = meter.take()
    assert (first.index, last.index) == (0, 1) and last.cpu == pytest.approx(0.5)
    assert first.wall_s == pytest.approx(1.0) and last.wall_s == pytest.approx(0.2)


def test_a_short_last_interval_is_shown_but_neither_judged_nor_in_the_run_figures():
    # 3 ms of end work at 0.93 of a core: a burst, not a starved node; 9 full idle intervals before it
    health = ReplayerHealth(1.0)
    tail = HealthPart(9, 0.93, 12.0, 1, 0.003)
    health.add("a", [HealthPart(i, 0.2, 1.0, 3, 1.0) for i in range(9)] + [tail])
    for i in range(9):
        health.master(i, 0.1, 1.0)
    health.master(9, 0.95, 0.003)
    out = health.summary()
    assert out["replayer_limited"] is False
    node = out["replayer"]["nodes"]["a"]
    assert node["intervals"] == 9 and node["cpu_max"] == 0.2 and node["lag_ms_max"] == 1.0
    assert out["replayer"]["master"]["cpu_max"] == 0.1
    # half an interval is long enough to count
    health.add("a", [HealthPart(9, 0.93, 12.0, 1, 0.5)])
    assert health.summary()["replayer_limited"] is True


# -- the gauges of stats_history.csv ---------------------------------------------------------------------------


def test_gauges_take_the_largest_value_per_interval_and_are_empty_without_one(tmp_path):
    now = [0.0]
    path = tmp_path / STATS_FILE
    history = StatsHistory(path, 1.0, lambda: now[0])
    health = ReplayerHealth(1.0, history.gauge, lambda: history.late_gauges)
    health.add("a", [HealthPart(0, 0.25, 3.0, 1), HealthPart(1, 0.5, 12.5, 1)])
    health.add("b", [HealthPart(0, 0.75, 1.5, 1)])
    health.master(0, 0.125)
    now[0] = 1.0 + WRITE_LAG_S
    history.tick()  # interval 0 written
    health.add("a", [HealthPart(0, 0.99, 99.0, 1)])  # after its interval was written: dropped, not moved
    now[0] = 3.2
    history.close()
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(STATS_COLUMNS)
    assert [{k: r[k] for k in GAUGES} for r in rows] == [
        {"node_cpu_max": "0.750", "loop_lag_ms_max": "3.000", "master_cpu": "0.125"},
        {"node_cpu_max": "0.500", "loop_lag_ms_max": "12.500", "master_cpu": ""},
        {"node_cpu_max": "", "loop_lag_ms_max": "", "master_cpu": ""},
        {"node_cpu_max": "", "loop_lag_ms_max": "", "master_cpu": ""},
    ]
    # the late part's two gauges were dropped from the file, counted in summary.json; its figures stay there
    assert health.block()["late_gauges"] == 2 and health.block()["nodes"]["a"]["cpu_max"] == 0.99


# -- real runs -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def warmed(tmp_path_factory, nodes):
    """(registry, trace, warmup map): a small generated trace warmed up on a real registry."""
    workdir = tmp_path_factory.mktemp("health-warm")
    trace = make_trace(workdir / "trace.json", requests=300, span=6.0)
    with LocalRegistry(workdir / "registry") as reg:
        run_warmup(write_config(workdir, trace, [reg.host], [n.address for n in nodes]), quiet=True)
        yield reg, trace, workdir / "warmup-map.jsonl"


def _setup(tmp_path: Path, warmed, nodes, **client_info) -> str:
    reg, trace, warm_map = warmed
    (tmp_path / "warmup-map.jsonl").write_bytes(warm_map.read_bytes())
    write_config(tmp_path, trace, [reg.host], [n.address for n in nodes], **client_info)
    return str(tmp_path / "config.yaml")


def _gauges_hold_numbers(run_dir: Path) -> pd.DataFrame:
    """The gauge columns hold numbers in every interval in which requests ended (the nodes ran then)."""
    stats = pd.read_csv(run_dir / STATS_FILE)
    assert list(stats.columns) == list(STATS_COLUMNS)
    ran = stats[stats.requests > 0]
    assert len(ran) >= 2
    for name in GAUGES:
        assert ran[name].notna().all(), ran
        assert (ran[name] >= 0).all()
    return stats


@contextlib.contextmanager
def starved(pid: int):
    """``pid`` pinned to one CPU beside a busy loop pinned there too, at a lower priority: starved of CPU.

    The lower priority (nice 10: about a tenth of the CPU against the loop) is what starves a node that mostly
    waits: the scheduler lets a task that slept run at once when it wakes, ahead of a busy loop of equal
    priority, so pinning alone costs such a node little.
    """
    cpu = max(os.sched_getaffinity(0))
    before = os.sched_getaffinity(pid)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(busy.pid, {cpu})
        os.sched_setaffinity(pid, {cpu})
        # every thread of the node (made before: affinity is per thread; the ones it makes later inherit it)
        for tid in os.listdir(f"/proc/{pid}/task"):
            os.sched_setaffinity(int(tid), {cpu})
            os.setpriority(os.PRIO_PROCESS, int(tid), 10)
        yield
    finally:
        busy.kill()
        busy.wait()
        for tid in map(int, os.listdir(f"/proc/{pid}/task")):  # back to normal (raising a priority needs root)
            with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                os.sched_setaffinity(tid, before)
                os.setpriority(os.PRIO_PROCESS, tid, 0)
                assert os.sched_getaffinity(tid) == before and os.getpriority(os.PRIO_PROCESS, tid) == 0


@contextlib.contextmanager
def _oversleeps(interval_s: float):
    """A control: a thread of this process sleeping 8 ms at a time meanwhile; yields a function giving (the
    intervals in which it overslept 10 ms or more, the intervals) once the block is over."""
    worst: dict[int, float] = {}
    stop = threading.Event()

    def sample() -> None:
        t0 = time.perf_counter()
        while not stop.is_set():
            due = time.perf_counter() + 0.008
            time.sleep(0.008)
            now = time.perf_counter()
            index = int((now - t0) / interval_s)
            worst[index] = max(worst.get(index, 0.0), now - due)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield lambda: (sum(v >= 0.010 for v in worst.values()), len(worst))
    finally:
        stop.set()
        thread.join()


@pytest.mark.registry
def test_a_slow_as_is_run_on_idle_nodes_is_not_replayer_limited(tmp_path, warmed, nodes):
    # the trace's first 60 requests at half their pace: about 25 a second over 2.4 s
    config = _setup(tmp_path, warmed, nodes, wait=True, speedup=0.5)
    cfg = yaml.safe_load(Path(config).read_text())
    cfg["trace"]["limit"] = {"type": "requests", "amount": 60}
    Path(config).write_text(yaml.safe_dump(cfg))
    run_dir = tmp_path / "run"
    # quarter-second intervals: the run of about 2.4 s has ten, enough for the gauge columns to show. Such an
    # interval holds ~31 lag samples, so its p99 is its largest: one 10 ms hiccup of the machine (another
    # process, a registry's garbage collection) makes it late, and one of ten is 10 %. The control below
    # measures the machine's own hiccups in this process meanwhile: the judgement is the nodes' only if the
    # machine did not hiccup that often itself
    with _oversleeps(0.25) as machine:
        code = main(
            ["run", "-c", config, "--out", str(run_dir), "-q", "--stats-interval", "0.25", "--max-replayer-limited"]
        )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["mode"] == "as-is" and summary["failed"] == 0
    # both nodes (the threads engine's sampler) and the master measured every interval they ran
    nodes_block = summary["replayer"]["nodes"]
    assert set(nodes_block) == {n.address for n in nodes}
    for figures in nodes_block.values():
        assert figures["intervals"] >= 2 and 0 < figures["cpu_max"] and figures["in_flight_max"] >= 1
    assert summary["replayer"]["master"]["cpu_max"] is not None
    _gauges_hold_numbers(run_dir)
    # the premise of what follows is idle nodes: on a machine running twice as many busy processes as it has
    # CPUs, a node waits for a CPU (and its threads for a GIL holder the kernel put aside) 10 ms and more,
    # and the run rightly says it was limited (its start lateness then says it fell behind too)
    load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    if load > 2 * cpus:
        pytest.skip(f"measured, but the machine is not idle (load average {load:.1f} on {cpus} CPUs): not judged")
    if summary.get("behind"):  # the nodes' own schedule says they could not keep up: not idle either
        pytest.skip(f"measured, but the run fell behind its schedule ({summary['behind']}): not judged")
    late, intervals = machine()
    if 10 * late >= intervals:
        pytest.skip(
            f"measured, but this process overslept 10 ms or more in {late} of {intervals} intervals: not judged"
        )
    for figures in nodes_block.values():
        assert figures["cpu_max"] < CPU_LIMIT, nodes_block
    # and none of them was short of CPU or late: not limited, exit 0, nothing said
    assert summary["replayer_limited"] is False and summary["replayer"]["limited"] is None, summary["replayer"]
    assert code == 0
    assert "replayer-limited" not in format_table(summary) and replayer_banners({"run": summary}) == []


@pytest.mark.registry
def test_a_stress_run_with_a_node_starved_of_cpu_is_replayer_limited_and_names_it(tmp_path, warmed, nodes, capsys):
    if os.geteuid() != 0:  # the node is shared with the other tests: only root can give its priority back
        pytest.skip("starving a node needs root to restore its priority afterwards")
    config = _setup(tmp_path, warmed, nodes, threads=16)
    run_dir = tmp_path / "run"
    with starved(nodes[0].proc.pid):
        code = main(["run", "-c", config, "--out", str(run_dir), "--stats-interval", "0.25", "--max-replayer-limited"])
    err = capsys.readouterr().err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["mode"] == "stress" and summary["failed"] == 0
    assert summary["replayer_limited"] is True, summary["replayer"]
    limited = summary["replayer"]["limited"]
    assert limited["node"] == nodes[0].address and limited["intervals"] >= 1 and limited["share"] >= 0.1
    assert set(summary["replayer"]["nodes"]) == {n.address for n in nodes}
    # the exit code says it, in one line naming the node
    lines = [x for x in err.splitlines() if "replayer-limited" in x]
    assert code == 1 and len(lines) == 1 and nodes[0].address in lines[0], err
    stats = _gauges_hold_numbers(run_dir)
    assert stats["loop_lag_ms_max"].max() >= LAG_LIMIT_MS or stats["node_cpu_max"].max() >= CPU_LIMIT
    # read back as written; rebuilt from requests.csv (which cannot know them), the gauges are NaN
    written = drtp.load_run(run_dir).stats
    assert written[GAUGES].equals(stats[GAUGES].astype(float))
    (run_dir / STATS_FILE).rename(tmp_path / STATS_FILE)
    rebuilt = drtp.load_run(run_dir).stats
    assert list(rebuilt.columns) == list(STATS_COLUMNS) and rebuilt[GAUGES].isna().all().all()
    (tmp_path / STATS_FILE).rename(run_dir / STATS_FILE)
    # the report says so before any number
    analyze_results([run_dir], tmp_path / "analysis", log=lambda *_: None)
    report = (tmp_path / "analysis" / "report.html").read_text()
    banner = report[report.index("</h1>") : report.index("<nav>")]
    assert 'class="banner"' in banner and "replayer-limited: client node " + nodes[0].address in banner


def test_a_ramp_step_keeps_its_rate_shortfall_and_the_replayer_limit_apart(tmp_path):
    health = ReplayerHealth(1.0)
    health.add("node-3", [late(0), idle(1)])
    summary = {
        "requests": 20, "succeeded": 20, "failed": 0, "failed_statuses": {}, "offered_rps": 10.0,
        "achieved_rps": 10.0, "response_s": {"p50": 0.01, "p99": 0.02}, "auxiliary": {"requests": 0},
        **health.summary(),
    }  # fmt: skip
    entry = step_entry(10.0, summary, tmp_path / "step-01", [])
    assert entry["held"] and entry["replayer_limited"] is True and entry["under_offered"] is False
    strict = step_entry(10.0, summary, tmp_path / "step-01", [], max_replayer_limited=True)
    assert not strict["held"] and "replayer-limited" in strict["broken"] and "node-3" in strict["broken"]
    short = step_entry(10.0, {**summary, "achieved_rps": 5.0}, tmp_path / "step-01", [])
    assert not short["held"] and short["under_offered"] is True and "offered" in short["broken"]
