"""A bug in the master's run or in one of its outputs costs a figure, never the run: summary.json is still
written from what arrived (``complete: false``, the error named), requests.csv is kept, every other output
closes, a failed output is not called again, and ``drtp run`` exits 3.

The bug is injected (a method that raises) into each output's feed and close, on real runs: two client
node processes and a real registry, shared by the module's tests.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest
import yaml

from drtp.cli import main
from drtp.master.outputs import (
    live_metrics,
    original_output,
    registry_metrics,
    replayer_health,
    results,
    stats_history,
)
from drtp.master.run.internal_errors import TRACEBACKS_FILE, InternalErrors, error_line
from drtp.master.run.nodes import NodeLink
from drtp.master.run.warmup import run_warmup
from drtp.registry.local import LocalRegistry, free_port
from drtp.replay.result_row import COLUMNS
from tests.registry_log import logged_requests
from tests.replay_support import TOKEN, Node, make_trace, write_config

pytestmark = pytest.mark.registry

REQUESTS = 240
BUG = f"injected bug near the token {TOKEN}"  # a message that quotes a secret: it must never be shown
SHOWN = "RuntimeError: injected bug near the token ***"


class Injected:
    """A stand-in for a method that raises the injected bug from its ``after``-th call on (calls the real one
    before, when given); counts its calls."""

    def __init__(self, real=None, after: int = 0, ready=None) -> None:
        self.real = real
        self.after = after
        self.ready = ready  # (self, *args) -> bool: raise only once this holds (e.g. rows have arrived)
        self.calls = 0
        self.raised = 0

    def __get__(self, obj, owner=None):
        return self if obj is None else lambda *a, **k: self(obj, *a, **k)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls > self.after and (self.ready is None or self.ready(*args)):
            self.raised += 1
            raise RuntimeError(BUG)
        return self.real(*args, **kwargs)


@pytest.fixture(scope="module")
def warmed(tmp_path_factory, nodes):
    """The registry (serving its metrics) warmed with the trace; the config's dict, which reads the registry's
    metrics and writes the original's results file too (every output on)."""
    d = tmp_path_factory.mktemp("internal-errors")
    trace = make_trace(d / "trace.json", requests=REQUESTS, span=20.0)
    with LocalRegistry(d / "registry", metrics=True) as reg:
        cfg = write_config(d, trace, [reg.host], [n.address for n in nodes], wait=True, speedup=20.0)
        run_warmup(cfg, quiet=True)
        raw = yaml.safe_load((d / "config.yaml").read_text())
        raw["registry_metrics"] = {reg.host: reg.metrics_url}
        raw["trace"]["output"] = "original.json"
        yield raw


def _run(tmp_path: Path, raw: dict, capsys, *options: str) -> tuple[int, str, Path]:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(raw))
    out = tmp_path / "run"
    capsys.readouterr()
    code = main(["run", "-c", str(tmp_path / "config.yaml"), "--out", str(out), "-q", *options])
    return code, capsys.readouterr().err, out


def _rows(out: Path) -> list[dict]:
    with open(out / "requests.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == COLUMNS
        return list(reader)


def _lines(err: str, text: str) -> list[str]:
    return [line for line in err.splitlines() if text in line]


def _broken_run(code: int, err: str, out: Path, where: str) -> dict:
    """What every run with an injected bug shows: exit 3, the bug named once (secret masked), its traceback
    kept, summary.json incomplete with the error named; returns summary.json."""
    assert code == 3, err[-3000:]
    assert "Traceback" not in err and TOKEN not in err
    assert _lines(err, "drtp: internal error in") == [
        f"drtp: internal error in {where}: {SHOWN} (a bug in drtp; traceback in {out / TRACEBACKS_FILE})"
    ], err[-3000:]
    errors = _lines(err, "drtp run: error:")
    assert len(errors) == 1 and errors[0].startswith(
        f"drtp run: error: the run did not finish: a bug in drtp, in {where}"
    )
    assert errors[0].endswith("summary.json is marked incomplete") and SHOWN not in errors[0]
    kept = (out / TRACEBACKS_FILE).read_text()
    assert "Traceback" in kept and SHOWN in kept and TOKEN not in kept
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False
    assert summary["internal_errors"] == {where: SHOWN}
    assert f"internal error in {where} ({SHOWN})" in summary["incomplete_reason"]
    return summary


def _closed(out: Path, summary: dict, *but: str) -> None:
    """Every output but ``but`` was closed and holds the run's end: requests.csv's rows are whole and counted,
    stats_history.csv has its last interval, registry_metrics.csv its reading after the last request,
    the original's results file every trace request of requests.csv, summary.json its replayer block."""
    rows = _rows(out)
    trace_rows = [r for r in rows if r["auxiliary"] == "False"]
    assert all(len(r) == len(COLUMNS) and None not in r.values() for r in rows)
    if "results" not in but:
        assert summary["requests"] == len(trace_rows)
    if "stats history" not in but:
        with open(out / "stats_history.csv", newline="") as f:
            history = list(csv.DictReader(f))
        assert history and sum(int(h["requests"]) for h in history) == len(trace_rows)
    if "registry metrics" not in but:
        with open(out / "registry_metrics.csv", newline="") as f:
            readings = {r["elapsed_s"] for r in csv.DictReader(f)}
        assert len(readings) >= 2  # before the first request and after the last
        assert summary["registry_side"]
    if "original output" not in but:
        assert len(json.loads((out / "original.json").read_text())) == len(trace_rows)
    if "replayer health" not in but and "results" not in but:
        assert "nodes" in summary["replayer"]


def _frames_with_rows(monkeypatch) -> list[int]:
    """Count the frames whose rows reached requests.csv (RunResults.add_frame wrapped, nothing injected)."""
    wrote: list[int] = []
    real = results.RunResults.add_frame

    def add_frame(self, node, frame) -> None:
        real(self, node, frame)
        if frame.rows:
            wrote.append(1)

    monkeypatch.setattr(results.RunResults, "add_frame", add_frame)
    return wrote


def test_a_bug_in_the_stats_historys_feed_stops_the_run_keeps_the_rest_and_its_close_is_not_run_again(
    tmp_path, warmed, capsys, monkeypatch
):
    """The history's grouping (where a late part once crashed every run) raises: the run stops, and the
    history's close does not group again."""
    wrote = _frames_with_rows(monkeypatch)
    monkeypatch.setattr(stats_history, "WRITE_LAG_S", 0.0)  # intervals are grouped as soon as they end
    group = Injected(stats_history.StatsHistory._group, ready=lambda history, now: bool(wrote))
    monkeypatch.setattr(stats_history.StatsHistory, "_group", group)
    code, err, out = _run(tmp_path, warmed, capsys, "--stats-interval", "0.1")
    summary = _broken_run(code, err, out, "replay")
    # any later call would raise again (rows have arrived): the history failed once, its close did not group again
    assert group.raised == 1
    assert summary["stats_history_error"].endswith("stats_history.csv: internal error (RuntimeError)")
    assert "cancelled on the client nodes" in summary["incomplete_reason"]
    assert 0 < summary["requests"] < REQUESTS and summary["not_sent"] == REQUESTS - summary["requests"]
    _closed(out, summary, "stats history")


@pytest.mark.parametrize(
    ("where", "owner", "name", "after"),
    [
        ("stats history", stats_history.StatsHistory, "_close", 0),
        ("replayer health", replayer_health.ReplayerHealth, "summary", 0),
        ("registry metrics", registry_metrics.RegistryMetrics, "registry_side", 0),
        ("original output", original_output, "write_original_results", 0),
        ("results", results.RunResults, "summary", 0),
    ],
    ids=["stats-history", "replayer-health", "registry-metrics", "original-output", "results"],
)
def test_a_bug_in_one_outputs_close_leaves_every_other_output_closed(
    tmp_path, warmed, capsys, monkeypatch, where, owner, name, after
):
    injected = Injected(getattr(owner, name), after=after)
    monkeypatch.setattr(owner, name, injected if isinstance(owner, type) else injected.__call__)
    code, err, out = _run(tmp_path, warmed, capsys)
    summary = _broken_run(code, err, out, where)
    assert injected.raised == 1
    assert summary["interrupted"] is False
    assert "cancelled" not in summary["incomplete_reason"]  # every request ran: only a figure is missing
    if where == "results":  # the figures are what failed: summary.json has the run's own fields
        assert "requests" not in summary and summary["trace_requests"] == REQUESTS
        assert len([r for r in _rows(out) if r["auxiliary"] == "False"]) == REQUESTS
    else:
        assert summary["requests"] == REQUESTS and summary["not_sent"] == 0
    _closed(out, summary, where)


@pytest.mark.parametrize(
    ("where", "owner", "name"),
    [
        ("replay", replayer_health.ReplayerHealth, "add"),
        ("replay", results.RunResults, "add_frame"),
        ("replayer health", replayer_health.ReplayerHealth, "master"),  # on the master's CPU sampler's thread
        ("registry metrics", registry_metrics, "scrape"),  # on the metrics reader's thread
    ],
    ids=["replayer-health", "results", "master-cpu-thread", "registry-metrics-thread"],
)
def test_a_bug_in_an_outputs_feed_is_named_once_and_the_rest_is_kept(
    tmp_path, warmed, capsys, monkeypatch, where, owner, name
):
    wrote = _frames_with_rows(monkeypatch)
    injected = Injected(getattr(owner, name), ready=lambda *args: bool(wrote))  # once rows have arrived
    monkeypatch.setattr(owner, name, injected if isinstance(owner, type) else injected.__call__)
    code, err, out = _run(tmp_path, warmed, capsys)
    summary = _broken_run(code, err, out, where)
    assert injected.raised == 1  # not called again once it failed, not at its close either
    if where == "replay":  # on the master's own thread: the run stopped there, cancelled on the nodes
        assert "cancelled on the client nodes" in summary["incomplete_reason"]
        assert 0 < summary["requests"] <= REQUESTS and summary["not_sent"] == REQUESTS - summary["requests"]
        if name == "add_frame":  # its first frame after rows came: the run stopped long before its end
            assert summary["requests"] < REQUESTS
        _closed(out, summary)
    else:  # on a thread of the output's own: that output stopped, the run went on to the end
        assert summary["requests"] == REQUESTS
        assert "registry_side" not in summary if where == "registry metrics" else "replayer" not in summary
        _closed(out, summary, where)


def test_a_bug_in_live_metrics_feed_stops_the_run_and_its_end_still_stops_the_exporter(
    tmp_path, warmed, capsys, monkeypatch
):
    injected = Injected(live_metrics.LiveMetrics.add_parts)
    monkeypatch.setattr(live_metrics.LiveMetrics, "add_parts", injected)
    stops = Injected(live_metrics.LiveMetrics.stop, after=10**9)
    monkeypatch.setattr(live_metrics.LiveMetrics, "stop", stops)
    code, err, out = _run(tmp_path, warmed, capsys, "--metrics-port", str(free_port()), "--metrics-linger", "0")
    summary = _broken_run(code, err, out, "replay")
    assert injected.raised == 1 and stops.calls == 1
    _closed(out, summary)


def test_a_bug_in_live_metrics_end_still_stops_the_exporter_and_exits_3(tmp_path, warmed, capsys, monkeypatch):
    """The exporter ends after the command's runs (their summary.json is written by then): a bug in its end
    still stops the server, and the command exits 3 with the bug named."""
    finish = Injected(live_metrics.LiveMetrics.finish)
    monkeypatch.setattr(live_metrics.LiveMetrics, "finish", finish)
    stops = Injected(live_metrics.LiveMetrics.stop, after=10**9)
    monkeypatch.setattr(live_metrics.LiveMetrics, "stop", stops)
    code, err, out = _run(tmp_path, warmed, capsys, "--metrics-port", str(free_port()), "--metrics-linger", "0")
    assert code == 3 and finish.raised == 1 and stops.calls == 1
    assert "internal error" in err
    assert json.loads((out / "summary.json").read_text())["requests"] == REQUESTS


def test_an_error_line_is_one_line_without_the_secrets():
    e = KeyError(f"Basic {__import__('base64').b64encode(b'hunter2-secret').decode()}\nline two hunter2-secret")
    line = error_line(e, ["hunter2-secret", "", "hunter2"])
    assert "\n" not in line and "hunter2" not in line and line.startswith("KeyError: ")
    assert len(error_line(RuntimeError("x" * 5000))) == 300


def test_each_bug_is_named_once_and_a_failed_output_is_skipped_after(tmp_path, capsys):
    broken = InternalErrors(tmp_path, lambda: ["s3cret-value"])
    calls = []

    def fails():
        calls.append(1)
        raise ValueError("bad s3cret-value")

    assert broken.step("stats history", fails) is None
    assert broken.step("stats history", fails) is None  # skipped: not called again
    assert broken.step("results", lambda: 5) == 5
    assert calls == [1] and broken.errors == {"stats history": "ValueError: bad ***"}
    err = capsys.readouterr().err
    assert err.count("internal error in stats history") == 1 and "s3cret" not in err
    assert "s3cret" not in (tmp_path / TRACEBACKS_FILE).read_text()


def _rows_written(monkeypatch) -> list[int]:
    """The rows that reached requests.csv so far, in one count (RunResults.add_frame wrapped)."""
    count = [0]
    real = results.RunResults.add_frame

    def add_frame(self, node, frame) -> None:
        real(self, node, frame)
        count[0] += frame.rows.count(b"\n")

    monkeypatch.setattr(results.RunResults, "add_frame", add_frame)
    return count


def _idle(node: Node) -> dict:
    """The node's runs once none runs or holds a request (a run that ended is gone from its health)."""
    link = NodeLink(node.address, TOKEN, None)
    for _ in range(300):
        runs = link.check()["runs"]
        if all(r["queued"] == 0 and r["running"] == 0 for r in runs.values()):
            return runs
        time.sleep(0.1)
    raise AssertionError(f"client node {node.address} still runs: {runs}")


def test_a_bug_mid_run_cancels_the_runs_on_the_nodes_and_keeps_what_arrived(tmp_path, capsys, monkeypatch):
    """End to end: a bug in the stats history mid-run; the nodes, real processes, are told to cancel: they drop
    what they hold (the registry gets fewer than the trace's requests), the run exits 3."""
    total = 400
    trace = make_trace(tmp_path / "trace.json", requests=total, span=40.0)
    nodes = [Node(tmp_path), Node(tmp_path)]
    try:
        with LocalRegistry(tmp_path / "registry") as reg:
            cfg = write_config(
                tmp_path, trace, [reg.host], [n.address for n in nodes], wait=True, speedup=4.0, inflight=200
            )
            run_warmup(cfg, quiet=True)
            offset = reg.log_path.stat().st_size
            rows = _rows_written(monkeypatch)
            monkeypatch.setattr(stats_history, "WRITE_LAG_S", 0.0)
            group = Injected(stats_history.StatsHistory._group, ready=lambda history, now: rows[0] >= 40)
            monkeypatch.setattr(stats_history.StatsHistory, "_group", group)
            out = tmp_path / "run"
            capsys.readouterr()
            code = main(
                ["run", "-c", str(tmp_path / "config.yaml"), "--out", str(out), "-q", "--stats-interval", "0.2"]
            )
            err = capsys.readouterr().err
            for n in nodes:  # told to cancel: they said so, and run and hold nothing
                _idle(n)
                assert " cancelled; " in n.log.read_text()
            registry_saw = len(logged_requests(reg.log_path, offset))
    finally:
        for n in nodes:
            n.stop()
    assert group.raised == 1
    summary = _broken_run(code, err, out, "replay")
    assert "cancelled on the client nodes" in summary["incomplete_reason"]
    assert 40 <= summary["requests"] < total and summary["not_sent"] == total - summary["requests"]
    assert len([r for r in _rows(out) if r["auxiliary"] == "False"]) == summary["requests"]
    # the nodes are idle and the registry got fewer than the trace's requests: the rest were dropped, not sent
    assert registry_saw < total


def test_an_experiment_does_not_start_its_next_part_after_a_bug_stopped_one(tmp_path, nodes, capsys, monkeypatch):
    trace = make_trace(tmp_path / "trace.json", requests=200, span=20.0)
    with LocalRegistry(tmp_path / "registry") as reg:
        cfg = {
            "trace": {"location": str(tmp_path), "traces": [trace.name]},
            "client_info": {"client_list": [n.address for n in nodes], "token": TOKEN, "wait": True, "speedup": 10.0},
            "warmup": {"output": str(tmp_path / "warmup.jsonl")},
            "registries": [
                {"id": "first", "url": reg.url, "insecure": True, "repository": "first/"},
                {"id": "second", "url": reg.url, "insecure": True, "repository": "second/"},
            ],
        }
        (tmp_path / "exp.yaml").write_text(yaml.safe_dump(cfg))
        wrote = _frames_with_rows(monkeypatch)
        injected = Injected(results.RunResults.add_frame, ready=lambda *args: bool(wrote))
        monkeypatch.setattr(results.RunResults, "add_frame", injected)
        capsys.readouterr()
        code = main(["experiment", "-c", str(tmp_path / "exp.yaml"), "--out", str(tmp_path / "exp")])
        captured = capsys.readouterr()
    assert code == 3, captured.err[-3000:]
    assert injected.raised == 1
    status = json.loads((tmp_path / "exp" / "experiment.json").read_text())
    first, second = status["first"], status["second"]
    assert first["internal_error"] is True and first["exit_code"] == 3 and "a bug in drtp" in first["error"]
    assert second == {**second, "ok": False, "not_run": True, "exit_code": 3}
    assert "not run: a bug in drtp stopped registry first" in second["error"]
    summary = json.loads((tmp_path / "exp" / "first" / "summary.json").read_text())
    assert summary["complete"] is False and summary["internal_errors"] == {"replay": SHOWN}
    # the second part never started: no warmup of its own, no run directory
    assert not (tmp_path / "warmup-second.jsonl").exists() and not (tmp_path / "exp" / "second").exists()
    assert (tmp_path / "warmup-first.jsonl").exists()
    assert "not run: second" in captured.out


def test_a_ramp_ends_at_the_step_a_bug_stopped_and_ramp_json_says_why(tmp_path, warmed, capsys, monkeypatch):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(warmed))
    wrote = _frames_with_rows(monkeypatch)
    injected = Injected(results.RunResults.add_frame, ready=lambda *args: bool(wrote))
    monkeypatch.setattr(results.RunResults, "add_frame", injected)
    out = tmp_path / "ramp"
    args = ["--from", "100", "--step", "100", "--step-duration", "2", "--slo", "p99<60s", "-q"]
    capsys.readouterr()
    code = main(["ramp", "-c", str(tmp_path / "config.yaml"), "--out", str(out), *args])
    err = capsys.readouterr().err
    assert code == 3 and injected.raised == 1, err[-3000:]
    ramp = json.loads((out / "ramp.json").read_text())
    assert ramp["complete"] is False and ramp["steps"] == [] and ramp["knee_rps"] is None
    assert ramp["error"].startswith("the run did not finish: a bug in drtp, in replay")
    assert [p.name for p in out.iterdir() if p.is_dir()] == ["step-01-100rps"]  # no step after it
    summary = json.loads((out / "step-01-100rps" / "summary.json").read_text())
    assert summary["complete"] is False and summary["internal_errors"] == {"replay": SHOWN}
