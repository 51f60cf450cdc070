"""Results analysis of REAL replays (tests/real_runs.py): ``drtp analyze results`` says what summary.json says."""

from __future__ import annotations

import json
import re
import shutil

import pandas as pd
import pytest

from drtp.analysis import results as rs
from drtp.analysis.results_analysis import analyze_results
from drtp.errors import DrtpError
from drtp.replay.result_row import COLUMNS
from drtp.trace.reader import TraceReader

pytestmark = pytest.mark.registry

MODEL_KEYS = (
    "requests",
    "succeeded",
    "failed",
    "failures",
    "lost",
    "duration_s",
    "throughput_rps",
    "bytes",
    "latency_s",
    "status_matched",
    "achieved_rps",
    "auxiliary",
    "per_method",
    "per_node",
)
TIMED_KEYS = ("response_s", "lateness_s", "on_time_ratio", "on_time_s", "offered_rps", "behind")


def copy_run(src, dst):
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("mode", ["stress", "as_is"])
def test_analyze_equals_summary_json(real_runs, mode):
    run = getattr(real_runs, mode)
    df, summary = rs.read_run_files(run)
    r = rs.analyze_run(df, summary)
    keys = MODEL_KEYS + (TIMED_KEYS if mode == "as_is" else ())
    # every number the model makes, read back from requests.csv, is exactly the master's
    assert {k: r[k] for k in keys} == {k: summary[k] for k in keys}

    trace = list(TraceReader([real_runs.trace]))
    main, helpers = df[~df["auxiliary"]], df[df["auxiliary"]]
    # the trace's requests, and only those, are counted as requests; helpers apart
    assert summary["requests"] == r["requests"] == len(trace) == len(main)
    assert r["auxiliary"] == {"requests": real_runs.lone_pushes, "failed": 0, "failures": {}, "failed_statuses": {}}
    assert len(helpers) == real_runs.lone_pushes and set(helpers["method"]) == {"POST"}
    assert r["per_method"]["POST blob"]["requests"] == sum(t.method == "POST" for t in trace)
    # the failures are the GETs of never-pushed tags: 404 where the trace had 200
    assert r["failures"] == {"http": real_runs.missing_tags} and r["failed"] == real_runs.missing_tags
    failed = main[~main["ok"]]
    assert set(failed["status"]) == {404} and set(failed["error"]) == {"HTTP 404"}
    assert set(failed["trace_id"]) == {f"missing-{i}" for i in range(real_runs.missing_tags)}
    # bytes: measured on the wire, not the trace's sizes
    assert r["bytes"] == int(main["bytes"].sum()) != int(main["size"].sum())
    # percentiles within the histogram's 0.1 % of the exact nearest-rank ones
    ok = main.loc[main["ok"], "latency_s"].sort_values().to_numpy()
    for p in (50, 90, 99):
        exact = ok[max(0, -(-p * len(ok) // 100) - 1)]
        assert r["latency_s"][f"p{p}"] == pytest.approx(exact, rel=2e-3, abs=2e-6)


def test_rows_have_the_writers_columns_and_outcomes(real_runs):
    df = pd.read_csv(real_runs.as_is / "requests.csv", keep_default_na=False, na_values=[""])
    assert tuple(df.columns) == COLUMNS
    assert (df["ok"] == (df["outcome"] == "ok")).all()
    assert (df["attempts"] >= 1).all()
    helpers = df[df["auxiliary"]]
    assert (helpers["expected_status"] == 0).all() and helpers["start_s"].notna().all()


def test_stress_run_has_no_lateness(real_runs):
    df, summary = rs.read_run_files(real_runs.stress)
    r = rs.analyze_run(df, summary)
    assert not any(k in r for k in ("response_s", "lateness_s", "on_time_ratio")) and r["curves"]["lateness"] is None


def test_load_tolerates_extra_columns_and_files_without_outcomes(real_runs, tmp_path):
    frame = pd.read_csv(real_runs.stress / "requests.csv")
    frame["replayer_extra_column"] = "x"
    first = frame.index[~frame["auxiliary"] & frame["ok"]][0]
    frame = frame.drop(columns=["ok", "outcome", "attempts", "error", "intended_s"])
    frame.loc[first, "status"] = 503
    (tmp_path / "r").mkdir()
    frame.to_csv(tmp_path / "r" / "requests.csv", index=False)
    df, summary = rs.read_run_files(tmp_path / "r")
    assert summary == {} and "replayer_extra_column" in df.columns
    assert df.loc[first, "outcome"] == "http" and not df.loc[first, "ok"]
    assert df["intended_s"].isna().all() and (df["attempts"] == 1).all()
    r = rs.analyze_run(df)
    # ok derived from the status and the trace's status (drtp.replay.outcome): the 404s and the 503 fail
    assert r["failures"] == {"http": real_runs.missing_tags + 1}


def test_missing_column_is_a_user_error(tmp_path):
    (tmp_path / "r").mkdir()
    pd.DataFrame({"method": ["GET"], "kind": ["blob"], "status": [200]}).to_csv(tmp_path / "r/requests.csv")
    with pytest.raises(DrtpError, match="missing column.*start_s"):
        rs.read_run_files(tmp_path / "r")
    with pytest.raises(DrtpError, match="not found"):
        rs.read_run_files(tmp_path / "nope")


def test_analyze_results_with_trace_row(real_runs, tmp_path):
    out = tmp_path / "out"
    runs = [real_runs.stress, real_runs.as_is]
    results = analyze_results(runs, out, trace_files=[str(real_runs.trace)], log=lambda *_: None)
    assert set(results) == {"stress", "as-is", rs.TRACE_ROW}
    trace = list(TraceReader([real_runs.trace]))
    # the trace's recorded latencies go through the same model: every replayed record is counted
    assert results[rs.TRACE_ROW]["requests"] == len(trace)
    get_blob = [t for t in trace if t.method == "GET" and "/blobs/" in t.uri and 200 <= t.status < 400]
    assert results[rs.TRACE_ROW]["per_method"]["GET blob"]["succeeded"] == len(get_blob)
    assert results[rs.TRACE_ROW]["per_method"]["GET blob"]["latency_s"]["max"] == max(t.duration for t in get_blob)
    for name in ("results.json", "runs.csv", "latency.csv", "failures.csv", "report.html") + tuple(
        f"{f}.png" for f in ("latency_cdf", "latency_violin", "throughput", "failures", "lateness")
    ):
        assert (out / name).stat().st_size > 0, name
    saved = json.loads((out / "results.json").read_text())
    summary = json.loads((real_runs.as_is / "summary.json").read_text())
    assert saved["as-is"]["failures"] == summary["failures"] and saved["as-is"]["bytes"] == summary["bytes"]
    table = pd.read_csv(out / "runs.csv", index_col=0)
    assert list(table.index) == ["stress", "as-is"]
    assert table.loc["as-is", "requests"] == summary["requests"]
    assert table.loc["as-is", "helper_requests"] == summary["auxiliary"]["requests"]
    # people read milliseconds: the table's ms are the summary's seconds × 1000
    assert table.loc["as-is", "latency_p99_ms"] == pytest.approx(summary["latency_s"]["p99"] * 1000, rel=1e-12)
    assert table.loc["as-is", "lateness_p99_ms"] == pytest.approx(summary["lateness_s"]["p99"] * 1000, rel=1e-12)
    assert table.loc["as-is", "response_p99_ms"] == pytest.approx(summary["response_s"]["p99"] * 1000, rel=1e-12)
    assert table.loc["as-is", "offered_rps"] == pytest.approx(summary["offered_rps"], rel=1e-12)
    assert table.loc["as-is", "achieved_rps"] == pytest.approx(summary["achieved_rps"], rel=1e-12)
    assert pd.isna(table.loc["stress", "offered_rps"]) and table.loc["stress", "achieved_rps"] > 0
    failures = pd.read_csv(out / "failures.csv", index_col=0)
    assert failures.loc["http", "stress"] == failures.loc["http", "as-is"] == real_runs.missing_tags
    latency = pd.read_csv(out / "latency.csv")
    mine = latency[(latency["run"] == "as-is") & (latency["request"] == "GET manifest")].iloc[0]
    assert mine["p50_ms"] == pytest.approx(summary["per_method"]["GET manifest"]["latency_s"]["p50"] * 1000, rel=1e-12)
    assert rs.TRACE_ROW in set(latency["run"])
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 7 and "ibm-trace-data" in html  # 5 + the views' 2


def test_violin_clips_only_the_plot(real_runs, tmp_path):
    from drtp.analysis.results_figures import fig_latency_violin

    run = copy_run(real_runs.stress, tmp_path / "a")
    frame = pd.read_csv(run / "requests.csv")
    outlier = frame.index[(frame["method"] == "GET") & (frame["kind"] == "blob") & frame["ok"]][0]
    frame.loc[outlier, "latency_s"] = 1000.0
    frame.to_csv(run / "requests.csv", index=False)
    df, _ = rs.read_run_files(run)
    r = rs.analyze_run(df)
    assert r["per_method"]["GET blob"]["latency_s"]["max"] == 1000.0  # outliers stay in every number
    fig = fig_latency_violin({"a": r}, {"a": df})
    notes = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("clipped in the plot" in n for n in notes)


def test_a_known_latency_shows_in_ms_in_tables_and_report(real_runs, tmp_path):
    run = copy_run(real_runs.stress, tmp_path / "a")
    frame = pd.read_csv(run / "requests.csv")
    slowest = frame.index[(frame["method"] == "GET") & (frame["kind"] == "blob") & frame["ok"]][0]
    frame.loc[slowest, "latency_s"] = 7.5  # slower than any other request of the run
    frame.to_csv(run / "requests.csv", index=False)
    out = tmp_path / "out"
    analyze_results([run], out, log=lambda *_: None)
    latency = pd.read_csv(out / "latency.csv", index_col=["run", "request"])
    assert latency.loc[("a", "GET blob"), "max_ms"] == latency.loc[("a", "all"), "max_ms"] == 7500.0
    assert pd.read_csv(out / "runs.csv", index_col=0).loc["a", "latency_max_ms"] == 7500.0
    html = (out / "report.html").read_text()
    row = re.search(r"<tr><td>a</td><td>GET blob</td>(.*?)</tr>", html).group(1)
    assert re.findall(r"<td>([^<]*)</td>", row)[-1] == "7,500"  # max ms


@pytest.mark.parametrize("mode", ["stress", "as_is"])
def test_lateness_chart_only_for_as_is_runs(real_runs, tmp_path, mode):
    out = tmp_path / "out"
    lines: list[str] = []
    analyze_results([getattr(real_runs, mode)], out, log=lines.append)
    html = (out / "report.html").read_text()
    note = "lateness (no run in as-is mode: stress runs have no intended start times)"
    if mode == "stress":
        assert not (out / "lateness.png").exists() and html.count("data:image/png;base64,") == 6
        assert "Chart &#x27;lateness&#x27; not drawn: no run in as-is mode" in html and note in lines[-1]
    else:
        assert (out / "lateness.png").stat().st_size > 0 and html.count("data:image/png;base64,") == 7
        assert "not drawn:" not in html and "left out" not in lines[-1]


def test_lost_rows_are_failures_without_times(real_runs, tmp_path):
    run = copy_run(real_runs.stress, tmp_path / "a")
    frame = pd.read_csv(run / "requests.csv", keep_default_na=False, na_values=[""]).astype({"error": object})
    lost = frame.index[~frame["auxiliary"] & frame["ok"]][:5]
    frame.loc[lost, ["start_s", "latency_s", "status", "bytes", "attempts"]] = [None, None, 0, 0, 0]
    frame.loc[lost, ["ok", "outcome", "error"]] = [False, "lost", "lost: client node x died"]
    frame.to_csv(run / "requests.csv", index=False)
    df, summary = rs.read_run_files(run)
    r = rs.analyze_run(df)
    assert r["lost"] == 5 and r["failures"] == {"http": real_runs.missing_tags, "lost": 5}
    assert r["failed"] == summary["failed"] + 5
    bins = r["curves"]["throughput"]
    assert sum(bins["counts"]) + bins["tail_requests"] == summary["succeeded"] - 5


@pytest.mark.parametrize(
    ("summary", "message"),
    [
        ('{"on_time_s": NaN}', "summary.json: not a run summary (NaN is not a number JSON allows"),
        ('{"requests": Infinity}', "summary.json: not a run summary (Infinity is not a number JSON allows"),
        ('{"requests": ', "summary.json: invalid JSON (Expecting value at line 1)"),
        ("[1, 2]", "summary.json: not a run summary (a JSON object), got a JSON list"),
        ("[" * 100_000, "summary.json: not a run summary (nested too deep)"),
        ('{"on_time_s": "soon"}', "summary.json: key 'on_time_s': expected a number of seconds ≥ 0, got 'soon'"),
    ],
)
def test_a_bad_summary_is_one_line_naming_the_file(real_runs, tmp_path, summary, message):
    run = copy_run(real_runs.stress, tmp_path / "run")
    (run / "summary.json").write_text(summary)
    with pytest.raises(DrtpError) as err:
        rs.read_run_files(run)
    assert message in str(err.value) and str(run / "summary.json") in str(err.value)


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        ("GET,blob,abc,0.1,200", "row 2: column start_s: not a number, got 'abc'"),
        ("GET,blob,1e308,0.1,200", "row 2: column start_s: not a time from -31,622,400 to 31,622,400 s"),
        ("GET,blob,1,inf,200", "row 2: column latency_s: not a time from 0 to 31,622,400 s, got 'inf'"),
        ("GET,blob,1,-0.5,200", "row 2: column latency_s: not a time from 0"),
        ("GET,blob,1,0.1,99999999999999999999999", "row 2: column status: not a whole number ≥ 0"),
        ("GET,blob,1,0.1,2.5", "row 2: column status: not a whole number ≥ 0, got '2.5'"),
    ],
)
def test_a_bad_number_in_requests_csv_names_the_row_and_column(tmp_path, cells, message):
    run = tmp_path / "run"
    run.mkdir()
    (run / "requests.csv").write_text(f"method,kind,start_s,latency_s,status\nGET,blob,0,0.1,200\n{cells}\n")
    with pytest.raises(DrtpError) as err:
        rs.read_run_files(run)
    assert message in str(err.value) and str(run / "requests.csv") in str(err.value)


def test_analyze_results_of_a_bad_summary_through_the_cli(real_runs, tmp_path):
    import subprocess
    import sys

    run = copy_run(real_runs.stress, tmp_path / "run")
    (run / "summary.json").write_text('{"requests": NaN}')
    out = subprocess.run(
        [sys.executable, "-m", "drtp.cli", "analyze", "results", str(run), "--out", str(tmp_path / "a")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert f"{run / 'summary.json'}: not a run summary" in out.stderr
