"""Progress off a terminal (plain lines at a fixed cadence) and the per-interval stats history of a run.

The cadence and the intervals are checked with a fake clock; the end-to-end test replays a trace against
the real registry with stderr redirected to a file, as a batch job's log is.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from drtp.cluster import slurm
from drtp.config import Slurm
from drtp.errors import DrtpError
from drtp.master.outputs.stats_history import WRITE_LAG_ENV, WRITE_LAG_S, StatsHistory
from drtp.progress import Snapshot, configure, format_line, progress
from drtp.registry.local import LocalRegistry
from drtp.replay.frames import IntervalStats
from drtp.replay.outcome import LOST, OK
from drtp.replay.result_row import ResultRow
from drtp.replay.stats_file import STATS_COLUMNS as COLUMNS
from tests.replay_support import Node, make_trace, write_config


class FakeClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def default_settings():
    configure()
    yield
    configure()


# -- the line ------------------------------------------------------------------------------------------------


def test_line_holds_done_total_rate_failures_elapsed_and_eta():
    snap = Snapshot("replay", "req", done=12_400, total=50_000, failed=3, elapsed_s=10.0)
    assert format_line(snap) == "replay: 12,400/50,000 (24.8%) 1,240 req/s, 3 failed, elapsed 0:10, ETA 0:30"
    final = Snapshot("replay", "req", done=50_000, total=50_000, failed=7, elapsed_s=3725.0)
    assert (
        format_line(final, final=True)
        == "replay: 50,000/50,000 (100.0%) 13.4 req/s, 7 failed, elapsed 1:02:05, finished"
    )


def test_line_without_total_or_failures_and_before_any_progress():
    assert (
        format_line(Snapshot("read trace", "rec", 2_500, None, None, 4.0))
        == "read trace: 2,500 625 rec/s, elapsed 0:04"
    )
    # nothing done yet: no rate, so no ETA either
    assert format_line(Snapshot("replay", "req", 0, 10, 0, 3.0)) == (
        "replay: 0/10 (0.0%) 0.00 req/s, 0 failed, elapsed 0:03, ETA ?"
    )


# -- the cadence ---------------------------------------------------------------------------------------------


def _lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_one_line_per_interval_and_a_final_line_with_a_fake_clock():
    clock, err = FakeClock(100.0), io.StringIO()
    configure(interval_s=10.0)
    with progress(total=40, desc="replay", unit="req", final_line=True, stream=err, clock=clock) as bar:
        bar.set_failed(0)
        for second in range(1, 36):
            clock.now = 100.0 + second
            if second == 12:
                bar.set_failed(2)
            bar.update(1)
        assert len(_lines(err)) == 3  # at 10, 20 and 30 s: not one per update
    lines = _lines(err)
    assert len(lines) == 4
    assert lines[0] == "replay: 10/40 (25.0%) 1.0 req/s, 0 failed, elapsed 0:10, ETA 0:30"
    assert lines[1].startswith("replay: 20/40 (50.0%) 1.0 req/s, 2 failed, elapsed 0:20")
    assert lines[2].startswith("replay: 30/40 (75.0%)")
    assert lines[3] == "replay: 35/40 (87.5%) 1.0 req/s, 2 failed, elapsed 0:35, finished"


def test_a_late_check_brings_one_line_not_a_burst_and_ticks_print_while_nothing_advances():
    clock, err = FakeClock(), io.StringIO()
    configure(interval_s=5.0)
    with progress(total=None, desc="warmup", unit="obj", stream=err, clock=clock) as bar:
        clock.now = 23.0  # four intervals passed unseen
        bar.update(4)
        assert len(_lines(err)) == 1
        clock.now = 26.0
        bar.tick()
        assert len(_lines(err)) == 1  # the next line comes an interval after the late one (28), not at 25
        clock.now = 28.0
        bar.tick()  # nothing advanced, yet the log shows the work is alive
        assert _lines(err)[-1] == "warmup: 4 0.14 obj/s, elapsed 0:28"


def test_short_work_stays_silent_unless_the_caller_wants_a_final_line():
    clock, err = FakeClock(), io.StringIO()
    with progress(total=10, desc="generate", unit="req", stream=err, clock=clock) as bar:
        for _ in bar.wrap(range(10)):
            clock.now += 0.1
    assert err.getvalue() == ""  # a command done within one interval prints nothing on stderr
    with progress(total=10, desc="replay", unit="req", final_line=True, stream=err, clock=clock) as bar:
        bar.update(10)
    assert _lines(err) == ["replay: 10/10 (100.0%) 0.00 req/s, elapsed 0:00, finished"]


def test_work_that_fails_ends_without_a_final_line():
    clock, err = FakeClock(), io.StringIO()
    with pytest.raises(ValueError), progress(10, "replay", final_line=True, stream=err, clock=clock) as bar:
        bar.update(3)
        raise ValueError("bad record")
    assert err.getvalue() == ""  # the error's own line is the only one


def test_quiet_prints_nothing():
    clock, err = FakeClock(), io.StringIO()
    configure(interval_s=1.0, quiet=True)
    with progress(10, "replay", final_line=True, stream=err, clock=clock) as bar:
        clock.now = 5.0
        bar.update(10)
    assert err.getvalue() == ""


def test_wrap_counts_every_item_in_steps():
    clock, err = FakeClock(), io.StringIO()
    with progress(total=None, desc="generate", stream=err, clock=clock) as bar:
        assert sum(1 for _ in bar.wrap(range(1000))) == 1000
        assert bar.done == 1000


# -- the stats history ---------------------------------------------------------------------------------------


def row(end_s: float, latency_s: float = 0.010, outcome: str = OK, nbytes: int = 100, aux: bool = False, status=200):
    """A row that ended at ``end_s`` (a lost one has no start nor latency)."""
    start = None if outcome == LOST else end_s - latency_s
    return ResultRow(
        client="c", node="n", trace_id="t", method="GET", kind="blob", repository="r", reference="ref", digest="",
        size=0, bytes=nbytes, intended_s=None, start_s=start, latency_s=None if start is None else latency_s,
        response_s=None, status=status, expected_status=200, ok=outcome == OK, outcome=outcome, attempts=1,
        error="" if outcome == OK else outcome, auxiliary=aux,
    )  # fmt: skip


def _history(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        reader = csv.reader(f)
        assert tuple(next(reader)) == COLUMNS
        return [dict(zip(COLUMNS, values, strict=True)) for values in reader]


def test_history_rows_are_written_once_their_interval_is_over_and_grouped_by_end(tmp_path):
    clock = FakeClock()
    path = tmp_path / "stats_history.csv"
    h = StatsHistory(path, 1.0, clock)
    latencies = [0.010, 0.020, 0.030, 0.040]
    for lat in latencies:
        h.add(row(0.5, lat))
    h.add(row(0.6, 0.5, outcome="http", nbytes=7, status=429))  # failed, throttled: counted, not in the latencies
    h.add(row(0.7, 0.001, aux=True, outcome="http", status=429))  # a helper request: not counted at all
    h.add(row(2.2))
    clock.now = 1.0 + WRITE_LAG_S - 0.01
    h.tick()
    assert _history(path) == []  # results of the first second may still be on their way
    clock.now = 1.0 + WRITE_LAG_S
    h.tick()
    first = _history(path)
    assert len(first) == 1  # flushed as soon as it is written
    percentiles = {k: float(first[0].pop(k)) for k in ("p50_ms", "p99_ms")}
    assert first[0] == {
        "elapsed_s": "1.000",
        "requests": "5",
        "failures": "1",
        "throttled": "1",
        "bytes": "407",
        "rate_per_s": "5.000",
        **dict.fromkeys(("node_cpu_max", "loop_lag_ms_max", "master_cpu"), ""),  # no gauge reported: empty
        "event": "",  # no event ran
    }
    # nearest rank (the value at rank ceil(q·n): 20 and 40 ms of the four), to the histogram's 0.1 %, as summary.json
    assert percentiles == {"p50_ms": pytest.approx(20.0, rel=1e-3), "p99_ms": pytest.approx(40.0, rel=1e-3)}
    h.add(row(0.9))  # later than the lag allows: counted in the oldest interval not yet written
    clock.now = 3.5
    h.close()
    rows = _history(path)
    assert [r["elapsed_s"] for r in rows] == ["1.000", "2.000", "3.000", "3.500"]
    assert [int(r["requests"]) for r in rows] == [5, 1, 1, 0]  # nothing lost: the late row is in [1, 2)
    assert h.late == 1
    assert rows[3]["p50_ms"] == "" and rows[3]["rate_per_s"] == "0.000"


def test_a_nodes_interval_part_that_comes_after_its_row_was_written_counts_in_the_oldest_open_interval(tmp_path):
    clock = FakeClock()
    path = tmp_path / "stats_history.csv"
    h = StatsHistory(path, 1.0, clock)
    on_time, late = IntervalStats(), IntervalStats()
    on_time.add_row(row(0.5))
    for end in (0.7, 0.8):  # ended in [0, 1), but their node's frame comes after that row was written
        late.add_row(row(end, outcome="http", nbytes=7, status=429))
    h.add_parts([on_time.part(0)])
    clock.now = 1.0 + WRITE_LAG_S
    h.tick()
    h.add_parts([late.part(0), on_time.part(1)])
    clock.now = 2.0  # the run ends with interval 1
    h.close()
    rows = _history(path)
    assert [(r["requests"], r["failures"], r["throttled"], r["bytes"]) for r in rows] == [
        ("1", "0", "0", "100"),
        ("3", "2", "2", "114"),  # its own request and the two late ones
    ]
    assert h.late == 2  # requests, as for the rows the master makes itself


def test_the_environment_sets_the_write_lag_and_a_bad_one_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv(WRITE_LAG_ENV, "0")
    clock = FakeClock()
    h = StatsHistory(tmp_path / "s.csv", 1.0, clock)
    h.add(row(0.5))
    clock.now = 1.0
    h.tick()  # written as soon as the interval is over
    assert [r["requests"] for r in _history(tmp_path / "s.csv")] == ["1"]
    for bad in ("soon", "-1", "nan", "inf"):
        monkeypatch.setenv(WRITE_LAG_ENV, bad)
        with pytest.raises(DrtpError, match=f"environment variable {WRITE_LAG_ENV}: expected a number of seconds"):
            StatsHistory(tmp_path / "t.csv", 1.0, clock)
    monkeypatch.delenv(WRITE_LAG_ENV)
    assert StatsHistory(tmp_path / "u.csv", 1.0, clock).write_lag_s == WRITE_LAG_S


def test_a_gauge_of_an_interval_after_the_runs_end_is_written_not_lost(tmp_path):
    clock = FakeClock(1.5)
    h = StatsHistory(tmp_path / "s.csv", 1.0, clock)
    h.gauge(3, "node_cpu_max", 0.5)  # a node whose clock runs ahead of the master's
    h.close()
    rows = _history(tmp_path / "s.csv")
    assert [r["node_cpu_max"] for r in rows] == ["", "", "", "0.500"]
    assert h.late_gauges == 0


def test_a_lost_request_counts_as_a_failure_when_the_master_learns_of_it(tmp_path):
    clock = FakeClock(4.2)
    h = StatsHistory(tmp_path / "s.csv", 1.0, clock)
    h.add(row(0.0, outcome=LOST))
    h.close()
    rows = _history(tmp_path / "s.csv")
    assert [(r["elapsed_s"], r["requests"], r["failures"]) for r in rows][-1] == ("4.200", "1", "1")
    assert sum(int(r["requests"]) for r in rows) == 1


def test_resume_appends_and_counts_what_the_interrupted_run_had_not_written(tmp_path):
    path = tmp_path / "stats_history.csv"
    clock = FakeClock()
    h = StatsHistory(path, 1.0, clock)
    for end in (0.5, 1.5, 4.5):
        h.add(row(end))
    clock.now = 2.0 + WRITE_LAG_S
    h.tick()  # [0, 1) and [1, 2) written, then the master is killed: no close
    h.file.close()
    assert len(_history(path)) == 2
    resumed = StatsHistory(path, 1.0, FakeClock(4.5), resume=True)
    for end in (0.5, 1.5, 4.5):  # requests.csv's rows, read back: only the last one is not in the file yet
        resumed.reloaded(row(end))
    resumed.add(row(5.2))
    resumed.clock.now = 5.6
    resumed.close()
    rows = _history(path)  # one header: appended
    assert [r["elapsed_s"] for r in rows] == ["1.000", "2.000", "3.000", "4.000", "5.000", "5.600"]
    assert [int(r["requests"]) for r in rows] == [1, 1, 0, 0, 1, 1]


def test_the_slurm_master_job_passes_the_progress_interval_to_warmup_run_and_experiment():
    script = slurm.render_master(Slurm(), "/scratch/e1", "drtp-e1", "4711")
    assert 'progress=(--progress-interval "${DRTP_PROGRESS_INTERVAL:-10}")' in script
    assert re.search(r'\$DRTP_CMD warmup -c "\$DRTP_EXP/run-config.yaml" "\$\{progress\[@\]\}"', script)
    assert re.search(r'\$DRTP_CMD run -c "\$DRTP_EXP/run-config.yaml" --out \S+ "\$\{progress\[@\]\}"', script)
    experiment = slurm.render_master(Slurm(), "/scratch/e1", "drtp-e1", "4711", "experiment", resume=True)
    assert re.search(r'\$DRTP_CMD experiment -c \S+ --out \S+ --resume "\$\{progress\[@\]\}"', experiment)
    assert "#SBATCH --output=/scratch/e1/logs/master-%j.out" in script and "#SBATCH --error" not in script


# -- end to end: a real replay with stderr in a file ------------------------------------------------------------


def _wait_for_text(path: Path, text: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while text not in path.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, path.read_text()[-2000:]
        time.sleep(0.05)


PROGRESS = re.compile(r"^replay: ([\d,]+)/([\d,]+) \([\d.]+%\) [\d.,]+ req/s, ([\d,]+) failed, elapsed [\d:]+, (.+)$")


@pytest.mark.registry
def test_a_replay_logs_progress_lines_and_a_stats_history_that_matches_its_rows(tmp_path):
    interval = 0.5
    trace = make_trace(tmp_path / "trace.json", requests=300, span=30.0)
    nodes = [Node(tmp_path), Node(tmp_path)]
    try:
        reg = LocalRegistry(tmp_path / "registry").start()
        try:
            write_config(tmp_path, trace, [reg.host], [n.address for n in nodes], wait=True, speedup=10.0)
            warm = subprocess.run(
                [sys.executable, "-m", "drtp.cli", "warmup", "-c", str(tmp_path / "config.yaml")],
                capture_output=True,
                text=True,
                env=dict(os.environ),
            )
            assert warm.returncode == 0, warm.stderr
            assert re.fullmatch(r"warmup: (\d+)/\1 \(100.0%\) .* 0 failed, elapsed .*, finished\n", warm.stderr)
            with open(tmp_path / "stderr.log", "w") as err:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "drtp.cli", "run", "-c", str(tmp_path / "config.yaml"),
                     "--out", str(tmp_path / "run"), "--max-failed", "100%",
                     "--progress-interval", "0.2", "--stats-interval", str(interval)],
                    stdout=subprocess.PIPE, stderr=err, env=dict(os.environ),
                )  # fmt: skip
                # some real failures: the registry goes away about half way through the 3 s of the trace
                _wait_for_text(tmp_path / "stderr.log", "replay: ", proc)
                time.sleep(1.8)
                reg.stop()
                proc.communicate(timeout=120)
        finally:
            reg.close()
    finally:
        for n in nodes:
            n.stop()
    log = (tmp_path / "stderr.log").read_text()
    assert proc.returncode == 0, log[-2000:]
    rows = pd.read_csv(tmp_path / "run" / "requests.csv", keep_default_na=False, na_values=[""])
    trace_rows = rows[~rows.auxiliary]
    failed = int((~trace_rows.ok).sum())
    assert len(trace_rows) == 300 and 0 < failed < 300

    # the log: progress lines whose counts grow, then a final line with the total and the failures
    # (an as-is run that started its requests late says so in one warning line, which is not progress)
    lines = [PROGRESS.match(line) for line in log.splitlines() if not line.startswith("drtp: warning: the run fell")]
    assert lines and all(lines), log[-2000:]
    done = [int(m.group(1).replace(",", "")) for m in lines]
    assert all(int(m.group(2).replace(",", "")) == 300 for m in lines)
    assert len(lines) >= 5 and done == sorted(done) and done[0] < done[-1]
    assert lines[-1].group(4) == "finished" and done[-1] == 300
    assert int(lines[-1].group(3).replace(",", "")) == failed
    assert all(m.group(4).startswith("ETA") for m in lines[:-1])

    # the stats history: every trace request once, failures as the rows say, percentiles of the same rows
    history = pd.read_csv(tmp_path / "run" / "stats_history.csv", keep_default_na=False, na_values=[""])
    assert tuple(history.columns) == COLUMNS
    assert history.requests.sum() == len(trace_rows)
    assert history.failures.sum() == failed
    assert history.bytes.sum() == trace_rows.bytes.sum()
    assert (np.diff(history.elapsed_s) > 0).all()
    assert np.allclose(history.elapsed_s[:-1], interval * np.arange(1, len(history)))
    ends = trace_rows.start_s + trace_rows.latency_s
    index = np.floor(ends / interval).astype(int)
    assert index.max() < len(history) and history.elapsed_s.iloc[-1] >= ends.max() - 0.001
    assert (history.requests.to_numpy() == np.bincount(index, minlength=len(history))).all()
    for i, stats in history.iterrows():
        latencies = trace_rows.latency_s[(index == i) & trace_rows.ok].to_numpy()
        if len(latencies) == 0:
            assert math.isnan(stats.p50_ms) and math.isnan(stats.p99_ms)
            continue
        # nearest rank, as summary.json: exact to the histogram's 0.1 % (and the file's 3 decimals)
        p50, p99 = np.percentile(latencies, [50, 99], method="inverted_cdf") * 1000
        assert stats.p50_ms == pytest.approx(p50, rel=2e-3, abs=2e-3)
        assert stats.p99_ms == pytest.approx(p99, rel=2e-3, abs=2e-3)
    # the history saw the registry go away: failures in the later intervals only
    assert history.failures.iloc[0] == 0 and history.failures.iloc[len(history) // 2 :].sum() > 0
