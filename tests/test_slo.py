"""Objectives (``--slo``), arrival processes, offered/achieved rates and failed statuses, on real runs' results.

The summaries judged here are real ones (tests/real_runs.py: a generated trace replayed against a real
registry, with 404s the trace did not have); the command-line cases check that a bad objective or rate is one
line and exit 2 before anything is sent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from drtp.analysis.run_data import load_run
from drtp.exit_codes import ExitCode
from drtp.master.run.arrivals import intended_starts
from drtp.master.run.verdict import judge
from drtp.replay.failure_budget import FailureBudget
from drtp.replay.slo import broken, judge_slo, parse_slo, throttled_share
from drtp.replay.summary import Group
from drtp.trace.reader import TraceReader
from tests.replay_support import make_trace, write_config


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("p99<200ms", [("p99", 0.2, None)]),
        (" p50 < 0.05s , failed<1% ", [("p50", 0.05, None), ("failed", 0.01, None)]),
        ("GET blob:p99<100ms,throttled<0.5%", [("p99", 0.1, "GET blob"), ("throttled", 0.005, None)]),
        ("put manifest: mean<2s", [("mean", 2.0, "PUT manifest")]),
    ],
)
def test_parse_slo(text, parsed):
    assert [(o.stat, o.limit, o.scope) for o in parse_slo(text)] == [
        (stat, pytest.approx(limit), scope) for stat, limit, scope in parsed
    ]


@pytest.mark.parametrize(
    "text, says",
    [
        ("p99<200", "needs a time in ms or s"),
        ("failed<1ms", "needs a percentage"),
        ("p98<1ms", "unknown statistic 'p98'"),
        ("GET blobs:p99<1ms", "scope 'GET blobs'"),
        ("p99>1ms", "is not an objective"),
        ("p99<200ms,", "is not an objective"),
        ("throttled<120%", "more than 100%"),
        ("", "empty"),
        ("failed<0%", "a limit of 0 never holds"),
        ("p99<0ms", "a limit of 0 never holds"),
        ("p99<\uff11\uff10\uff10ms", "is not an objective"),  # fullwidth digits are not a number here
        ("p99<" + "9" * 400 + "ms", "is not an objective"),
    ],
)
def test_parse_slo_refuses(text, says):
    with pytest.raises(ValueError, match=says):
        parse_slo(text)


def summary_of(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def test_objectives_on_a_real_run(real_runs):
    summary = summary_of(real_runs.as_is)
    failed_share = summary["failed"] / summary["requests"]  # the 404s of never-pushed tags
    assert "failed_statuses" in summary
    p99 = summary["latency_s"]["p99"]
    objectives = parse_slo(
        f"p99<{p99 * 1000 * 2:.3f}ms,p99<{p99 * 1000 / 2:.3f}ms,failed<{failed_share * 100 + 0.1:.2f}%,"
        f"failed<{failed_share * 100 - 0.1:.2f}%,throttled<0.1%,GET manifest:failed<100%,DELETE blob:p50<1s"
    )
    judged = judge_slo(summary, objectives)
    assert [j.held for j in judged] == [True, False, True, False, True, True, False]
    assert judged[0].value == p99 and judged[2].value == pytest.approx(failed_share)
    assert judged[4].value == 0.0  # no 429 in the run: its failures are 404s
    scoped = summary["per_method"]["GET manifest"]
    assert judged[5].value == scoped["failed"] / scoped["requests"] > 0
    assert "no DELETE blob requests" in judged[6].why and judged[6].value is None
    line = broken(judged)
    assert "\n" not in line and line.count("broken") == 3 and "not <" in line
    # as-is: the latency judged is the latency from the actual start; in rate mode, from the intended start
    assert judge_slo(summary, parse_slo("p99<1000s"))[0].value == summary["latency_s"]["p99"]
    rate = dict(summary, mode="rate")
    assert judge_slo(rate, parse_slo("p99<1000s"))[0].value == summary["response_s"]["p99"]


def test_one_verdict_for_max_failed_and_objectives(real_runs):
    summary = summary_of(real_runs.stress)
    n = summary["failed"]
    assert n > 0
    assert judge(summary, FailureBudget(count=n)).code == ExitCode.OK
    held = judge(summary, FailureBudget(count=n), parse_slo("p99<1000s"))
    assert held.code == ExitCode.OK and held.message == "" and held.objectives[0].held
    slo = judge(summary, FailureBudget(count=n), parse_slo("p50<0.001ms"))
    assert slo.code == ExitCode.TOO_MANY_FAILED
    assert slo.message.startswith("objective p50<0.001ms broken: p50 ") and "\n" not in slo.message
    both = judge(summary, FailureBudget(count=0), parse_slo("p50<0.001ms"))
    assert both.code == ExitCode.TOO_MANY_FAILED
    assert both.message.startswith(f"{n:,} of ") and "; objective p50<0.001ms broken" in both.message


def test_the_summarys_failed_statuses_are_the_rows_failed_statuses(real_runs):
    """What throttled objectives and the ramp count: summary.json's failed_statuses, as requests.csv has them."""
    run = real_runs.stress
    got = summary_of(run)
    rows = pd.read_csv(run / "requests.csv", keep_default_na=False, na_values=[""])
    failed = rows[~rows.auxiliary & ~rows.ok]
    assert got["failed_statuses"] == {"404": real_runs.missing_tags} == {"404": len(failed)}
    assert got["per_method"]["GET manifest"]["failed_statuses"] == {"404": real_runs.missing_tags}
    assert sum(sum(g["failed_statuses"].values()) for g in got["per_node"].values()) == real_runs.missing_tags
    assert all(g["failed_statuses"] == {} for k, g in got["per_method"].items() if k != "GET manifest")


def test_offered_and_achieved_rates_of_real_runs(real_runs):
    asis, stress = summary_of(real_runs.as_is), summary_of(real_runs.stress)
    times = sorted(r.time for r in TraceReader([real_runs.trace]))
    # as is, the run offered the trace's rate × speedup (the runs replay 10× faster)
    trace_rate = (len(times) - 1) / (times[-1] - times[0]) * asis["speedup"]
    assert asis["offered_rps"] == pytest.approx(trace_rate, rel=1e-4)
    rows = pd.read_csv(real_runs.as_is / "requests.csv", keep_default_na=False, na_values=[""])
    starts = rows[~rows.auxiliary].start_s
    assert asis["achieved_rps"] == pytest.approx((len(starts) - 1) / (starts.max() - starts.min()), rel=1e-9)
    late = asis["lateness_s"]["p99"] > asis["on_time_s"]
    slow = asis["achieved_rps"] < 0.95 * asis["offered_rps"]
    assert (asis["behind"] is not None) == (late or slow)
    # the notebook frames have them too, on the whole run's row
    frame = load_run(real_runs.as_is).summary
    assert frame.loc[frame["slice"] == "all", ["offered_rps", "achieved_rps"]].values.tolist() == [
        [asis["offered_rps"], asis["achieved_rps"]]
    ]
    # a closed loop offers no rate of its own: only the achieved one
    assert "offered_rps" not in stress and "behind" not in stress and stress["achieved_rps"] > 0


def test_intended_starts():
    constant = intended_starts(40.0)
    assert [next(constant) for _ in range(5)] == [0.0, 0.025, 0.05, 0.075, 0.1]
    first = intended_starts(40.0, "poisson", seed=3)
    starts = [next(first) for _ in range(20_000)]
    again = intended_starts(40.0, "poisson", seed=3)
    assert [next(again) for _ in range(100)] == starts[:100]
    other = intended_starts(40.0, "poisson", seed=4)
    assert [next(other) for _ in range(100)] != starts[:100]
    assert starts[0] == 0.0 and all(b > a for a, b in zip(starts, starts[1:], strict=False))
    assert (len(starts) - 1) / starts[-1] == pytest.approx(40.0, rel=0.03)
    with pytest.raises(ValueError, match="unknown arrivals"):
        intended_starts(1.0, "bursty")


@pytest.fixture
def offline_config(tmp_path: Path) -> Path:
    """A valid config whose nodes and registry do not exist: anything that gets past the checks exits 3."""
    trace = make_trace(tmp_path / "t.json", requests=20)
    write_config(tmp_path, trace, ["127.0.0.1:9"], ["127.0.0.1:9"])
    (tmp_path / "warmup-map.jsonl").write_text("")
    return tmp_path / "config.yaml"


@pytest.mark.parametrize(
    "args, says",
    [
        (["run", "--slo", "p99<abc"], "--slo: 'p99<abc'"),
        (["run", "--set", "client_info.slo=p99<2"], "key 'client_info.slo'"),
        (["run", "--rate", "0"], "--rate"),
        (["run", "--rate", "5", "--set", "client_info.engine=loop"], "rate mode"),
        (["run", "--arrivals", "poisson", "--seed", "-1"], "--seed"),
        (["experiment", "--slo", "failed<1"], "--slo"),
        (["ramp", "--from", "1", "--step", "1", "--step-duration", "1"], "--slo: missing"),
        (["ramp", "--from", "5", "--step", "1", "--to", "2", "--step-duration", "1", "--slo", "p99<1s"], "--to 2"),
        (["ramp", "--from", "5", "--step", "1", "--step-duration", "1", "--slo", "p99<1"], "--slo"),
    ],
)
def test_bad_objectives_and_rates_are_one_line_exit_2(offline_config, args, says):
    cmd = [sys.executable, "-m", "drtp.cli", *args, "-c", str(offline_config)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in proc.stderr, proc.stderr


def test_units_are_read_in_any_case():
    (objective,) = parse_slo("P99<200MS")
    assert objective.stat == "p99" and objective.limit == pytest.approx(0.2)


def test_throttled_counts_the_helpers_429s_for_the_whole_run():
    # a registry that throttles upload opens: the helper POSTs get 429, the trace's PATCHes are not sent
    summary = {
        "requests": 10,
        "failed_statuses": {"429": 1},
        "auxiliary": {"requests": 10, "failed_statuses": {"429": 9}},
    }
    assert throttled_share(summary) == pytest.approx(10 / 20)
    assert throttled_share(summary, helpers=False) == pytest.approx(1 / 10)


def test_a_rate_of_fewer_than_two_starts_or_of_one_instant_is_no_number():
    group = Group()
    assert group.start_rates() == (None, None)
    group.sent, group.first, group.last_start = 1, 5.0, 5.0
    group.intended, group.first_intended, group.last_intended = 1, 5.0, 5.0
    assert group.start_rates() == (None, None)
    group.sent, group.intended = 10, 10  # ten requests meant for one instant, started over 10 ms
    group.last_start = 5.01
    offered, achieved = group.start_rates()
    assert offered is None and achieved == pytest.approx(900)
