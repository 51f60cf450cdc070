"""Event windows of a real replay: summary.json's events[], stats_history.csv's event column, the bands of the
report and of ``drtp analyze results``, and ``drtp analyze compare --event``.

The run is a short real replay against the real registry (tests/conftest.py's pieces) with two real events of
its config: ``gc`` (a command that takes 0.3 s) and ``ro`` (a command that fails at once, its window held open
0.2 s by ``until``).  The windows expected are worked from the events.csv the run wrote."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
import yaml

from drtp.analysis.results import load_requests, rows
from drtp.config import load_config
from drtp.master.run.replay import run_replay
from drtp.master.run.warmup import run_warmup
from drtp.registry.local import LocalRegistry
from drtp.replay.event_log import EVENTS_CSV, read_events
from drtp.replay.stats_file import STATS_FILE
from drtp.replay.summary import ResultsModel
from tests.replay_support import Node, make_trace, write_config

EVENTS = [
    {"name": "gc", "at": "0.4s", "run": [sys.executable, "-c", "import time; time.sleep(0.3)"]},
    {"name": "ro", "at": "1.1s", "run": [sys.executable, "-c", "import sys; sys.exit(1)"], "until": "0.2s"},
]


def windows_of(run_dir: Path) -> dict[str, dict[str, tuple[float, float]]]:
    """Each event's windows worked from events.csv: its length before its start, during it, the same after."""
    out = {}
    for e in read_events(run_dir / EVENTS_CSV):
        length = e.ended_s - e.started_s
        out[e.name] = {
            "before": (round(e.started_s - length, 6), e.started_s),
            "during": (e.started_s, e.ended_s),
            "after": (e.ended_s, round(e.ended_s + length, 6)),
        }
    return out


@pytest.fixture(scope="module")
def event_run(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("event-run")
    trace = make_trace(workdir / "trace.json", requests=200, span=20.0)
    node = Node(workdir)
    try:
        with LocalRegistry(workdir / "registry") as reg:
            run_warmup(write_config(workdir, trace, [reg.host], [node.address]), quiet=True)
            write_config(workdir, trace, [reg.host], [node.address], wait=True, speedup=8.0)
            path = workdir / "config.yaml"
            path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "events": EVENTS}))
            run_dir = workdir / "results" / "run"
            run_replay(load_config(path), run_dir, quiet=True)
    finally:
        node.stop()
    return run_dir


def test_summary_events_are_the_windows_of_requests_csv(event_run: Path) -> None:
    summary = json.loads((event_run / "summary.json").read_text())
    entries = {e["name"]: e for e in summary["events"]}
    assert list(entries) == ["gc", "ro"]
    every = list(rows(load_requests(event_run / "requests.csv")))
    assert max(r.start_s or 0 for r in every) > 1.5, "the run is shorter than the events' windows"
    assert [e.exit_code for e in read_events(event_run / EVENTS_CSV)] == [0, 1]
    for name, windows in windows_of(event_run).items():
        entry = entries[name]
        assert (entry["started_s"], entry["ended_s"]) == (windows["during"][0], windows["during"][1])
        for window, (low, high) in windows.items():
            model = ResultsModel(timed=True, on_time_s=summary["on_time_s"])
            for row in every:
                if row.start_s is not None and low <= row.start_s < high:
                    model.add(row)
            want = model.summary()
            got = entry["windows"][window]
            assert got["from_s"] == pytest.approx(low) and got["to_s"] == pytest.approx(high)
            assert got["requests"] == want["requests"] > 0, (name, window)
            for key in ("succeeded", "failed", "failures", "failed_statuses", "throughput_rps"):
                assert got[key] == want[key], (name, window, key)
            assert got["throttled"] == want["failed_statuses"].get("429", 0)
            assert got["latency_s"] == {k: want["latency_s"].get(k) for k in ("p50", "p99", "max")}
            assert got["auxiliary"]["requests"] == want["auxiliary"]["requests"]
        recovery = entry["recovery_s"]
        assert recovery is None or recovery >= 0
    # stats_history.csv: the 1 s intervals the events ran in are named, the others empty
    with (event_run / STATS_FILE).open() as f:
        history = list(csv.DictReader(f))
    events = read_events(event_run / EVENTS_CSV)
    begin = 0.0
    for r in history:  # each row's interval: from the row before's end to its own (elapsed_s)
        end = float(r["elapsed_s"])
        ran = [e.name for e in events if e.started_s < end and e.ended_s > begin]
        assert r["event"] == ";".join(ran), r
        begin = end
    assert {r["event"] for r in history} >= {"gc", "ro"}


def band_labels(fig) -> dict[str, tuple[float, float]]:
    """The named bands (axvspan patches) of a figure's axes: label -> (x from, x to)."""
    out = {}
    for ax in fig.axes:
        for patch in ax.patches:
            label = patch.get_label()
            if label.startswith(("gc ", "ro ")):
                out[label] = (patch.get_x(), patch.get_x() + patch.get_width())  # axvspan: a Rectangle
    return out


def test_analyze_results_draws_the_windows_as_bands(event_run: Path, tmp_path: Path) -> None:
    from drtp.analysis.results_analysis import analyze_results, analyze_runs
    from drtp.analysis.results_figures import fig_event_latency, fig_throughput

    results, frames = analyze_runs([event_run])
    origin = results["run"]["curves"]["throughput"]["origin_s"]
    throughput = band_labels(fig_throughput(results, frames))
    expected = windows_of(event_run)
    assert sorted(throughput) == sorted(f"{e} {w}" for e in expected for w in expected[e])
    for event, windows in expected.items():
        for window, (low, high) in windows.items():  # the throughput axis starts at the run's first request
            assert throughput[f"{event} {window}"] == pytest.approx((low - origin, high - origin))
    latency = band_labels(fig_event_latency(results, frames))
    assert latency["gc during"] == pytest.approx(expected["gc"]["during"])  # this axis starts at the run's start
    said: list[str] = []
    analyze_results([event_run], tmp_path / "out", log=said.append)
    gc = expected["gc"]["during"]
    assert [x for x in said if " event " in x][0].startswith(
        f"run: event gc ({gc[0]:.1f}–{gc[1]:.1f} s): p99 ms before "
    )
    report = (tmp_path / "out" / "report.html").read_text()
    assert "Maintenance events" in report and "run / gc / during" in report
    assert (tmp_path / "out" / "event_latency.png").is_file()


def test_analyze_compare_event_is_during_against_before(event_run: Path, tmp_path: Path, capsys) -> None:
    from drtp.analysis.compare import compare_runs
    from drtp.cli import main

    assert main(["analyze", "compare", "--baseline", str(event_run), "--event", "gc", "--out", str(tmp_path)]) == 0
    compared = json.loads((tmp_path / "compare.json").read_text())
    assert compared["event"] == "gc" and compared["method"] == "time blocks"
    gc = next(e for e in json.loads((event_run / "summary.json").read_text())["events"] if e["name"] == "gc")
    rows = {(r["slice"], r["stat"]): r for r in compared["rows"]}
    for stat in ("p50", "p99"):  # the sides are the windows summary.json's events[] counts
        assert rows[("all", stat)]["baseline"] == gc["windows"]["before"]["latency_s"][stat] * 1000
        assert rows[("all", stat)]["candidate"] == gc["windows"]["during"]["latency_s"][stat] * 1000
    assert rows[("all", "throughput")]["candidate"] == gc["windows"]["during"]["throughput_rps"]
    # --window: every run cut to [FROM, TO): here gc's during window, on both sides
    cut = compare_runs([str(event_run)], [str(event_run)], window=windows_of(event_run)["gc"]["during"])
    p99 = next(r for r in cut.rows if (r.slice, r.stat) == ("all", "p99"))
    assert p99.baseline == p99.candidate == gc["windows"]["during"]["latency_s"]["p99"] * 1000
    capsys.readouterr()
    # an event the run lacks is one line, exit 2
    assert main(["analyze", "compare", "--baseline", str(event_run), "--event", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--event nope" in err and "its events: gc, ro" in err
