"""Event windows of a real replay: summary.json's events[], stats_history.csv's event column, the bands of the
report and of ``drtp analyze results``, and ``drtp analyze compare --event``.

The run is a short real replay against the real registry (tests/conftest.py's pieces); its events.csv is
written with drtp.replay.event_log's ``write_events`` in the run directory before the run starts, for times
inside the run, as the events output leaves it by the run's finish."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from drtp.analysis.results import load_requests, rows
from drtp.master.run.replay import run_replay
from drtp.master.run.warmup import run_warmup
from drtp.registry.local import LocalRegistry
from drtp.replay.event_log import EVENTS_CSV, EventRecord, write_events
from drtp.replay.stats_file import STATS_FILE
from drtp.replay.summary import ResultsModel
from tests.replay_support import Node, make_trace, write_config

EVENTS = [EventRecord("gc", 0.4, 0.4, 0.7, 0), EventRecord("ro", 1.1, 1.1, 1.3, 1)]
# the windows worked by hand: the event's length before its start, during it, the same length after its end
WINDOWS = {
    "gc": {"before": (0.1, 0.4), "during": (0.4, 0.7), "after": (0.7, 1.0)},
    "ro": {"before": (0.9, 1.1), "during": (1.1, 1.3), "after": (1.3, 1.5)},
}


@pytest.fixture(scope="module")
def event_run(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("event-run")
    trace = make_trace(workdir / "trace.json", requests=200, span=20.0)
    node = Node(workdir)
    try:
        with LocalRegistry(workdir / "registry") as reg:
            run_warmup(write_config(workdir, trace, [reg.host], [node.address]), quiet=True)
            cfg = write_config(workdir, trace, [reg.host], [node.address], wait=True, speedup=8.0)
            run_dir = workdir / "results" / "run"
            run_dir.mkdir(parents=True)
            write_events(run_dir / EVENTS_CSV, EVENTS)
            run_replay(cfg, run_dir, quiet=True)
    finally:
        node.stop()
    return run_dir


def test_summary_events_are_the_windows_of_requests_csv(event_run: Path) -> None:
    summary = json.loads((event_run / "summary.json").read_text())
    entries = {e["name"]: e for e in summary["events"]}
    assert list(entries) == ["gc", "ro"]
    every = list(rows(load_requests(event_run / "requests.csv")))
    assert max(r.start_s or 0 for r in every) > 1.5, "the run is shorter than the events' windows"
    for name, windows in WINDOWS.items():
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
    assert [r["event"] for r in history[:2]] == ["gc", "ro"]
    assert all(r["event"] == "" for r in history[2:])


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
    assert sorted(throughput) == sorted(f"{e} {w}" for e in WINDOWS for w in WINDOWS[e])
    for event, windows in WINDOWS.items():
        for window, (low, high) in windows.items():  # the throughput axis starts at the run's first request
            assert throughput[f"{event} {window}"] == pytest.approx((low - origin, high - origin))
    latency = band_labels(fig_event_latency(results, frames))
    assert latency["gc during"] == pytest.approx(WINDOWS["gc"]["during"])  # this axis starts at the run's start
    said: list[str] = []
    analyze_results([event_run], tmp_path / "out", log=said.append)
    assert [x for x in said if " event " in x][0].startswith("run: event gc (0.4–0.7 s): p99 ms before ")
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
    cut = compare_runs([str(event_run)], [str(event_run)], window=(0.4, 0.7))
    p99 = next(r for r in cut.rows if (r.slice, r.stat) == ("all", "p99"))
    assert p99.baseline == p99.candidate == gc["windows"]["during"]["latency_s"]["p99"] * 1000
    capsys.readouterr()
    # an event the run lacks is one line, exit 2
    assert main(["analyze", "compare", "--baseline", str(event_run), "--event", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--event nope" in err and "its events: gc, ro" in err
