"""Results analysis on FABRICATED run directories (tests/analysis_fixtures.py)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from drtp.analysis import results as rs
from drtp.analysis.results_analysis import analyze_results
from drtp.errors import DrtpError
from drtp.trace import write_ibm
from tests.analysis_fixtures import fabricate_run, rec


def test_load_tolerates_extra_columns_and_derives_ok(tmp_path):
    run = fabricate_run(tmp_path / "a", requests=50)
    df, summary = rs.load_run(run)
    assert "replayer_extra_column" in df.columns and summary["fabricated"] is True
    frame = pd.read_csv(run / "requests.csv").drop(columns=["ok", "error", "intended_s"])
    frame.loc[0, "status"] = 503
    frame.to_csv(run / "requests.csv", index=False)
    df2 = rs.load_requests(run / "requests.csv")
    assert not df2["ok"].iloc[0] and df2["ok"].iloc[1:].all()
    assert df2["intended_s"].isna().all()


def test_missing_column_is_a_user_error(tmp_path):
    (tmp_path / "r").mkdir()
    pd.DataFrame({"method": ["GET"], "kind": ["blob"], "status": [200]}).to_csv(tmp_path / "r/requests.csv")
    with pytest.raises(DrtpError, match="missing column.*start_s"):
        rs.load_run(tmp_path / "r")
    with pytest.raises(DrtpError, match="not found"):
        rs.load_run(tmp_path / "nope")


def test_run_numbers_match_the_rows(tmp_path):
    run = fabricate_run(tmp_path / "a", requests=300, failures={404: 4, 429: 6}, timeouts=2)
    df, summary = rs.load_run(run)
    r = rs.analyze_run(df, summary)
    assert r["requests"] == 300 and r["failed"] == 12 and r["succeeded"] == 288
    assert r["failures"] == {"429": 6, "404": 4, "timeout": 2}
    ok = df[df["ok"]]
    assert r["latency"]["all"]["n"] == 288
    assert r["latency"]["all"]["p50"] == pytest.approx(np.quantile(ok["latency_s"], 0.5))
    get_blob = ok[(ok["method"] == "GET") & (ok["kind"] == "blob")]["latency_s"]
    assert r["latency"]["GET blob"]["max"] == pytest.approx(get_blob.max())  # outliers kept
    late = df["start_s"] - df["intended_s"]
    assert r["lateness"]["p99"] == pytest.approx(np.quantile(late, 0.99))
    duration = df["end_s"].max() - df["start_s"].min()
    assert r["throughput"]["average_rps"] == pytest.approx(288 / duration)
    assert sum(r["throughput"]["per_second"]) == 288
    assert r["auxiliary_requests"] == int((df["method"] == "PUT").sum())


def test_fast_mode_has_no_lateness(tmp_path):
    df, _ = rs.load_run(fabricate_run(tmp_path / "b", as_is=False))
    assert rs.analyze_run(df)["lateness"] is None


def test_analyze_results_with_trace_row(tmp_path):
    trace = tmp_path / "trace.json"
    records = [rec(i, "GET", "v2/u/r/blobs/L1", duration=0.5 + i, rid=f"t{i}") for i in range(4)]
    records.append(rec(9, "GET", "v2/u/r/blobs/L1", duration=99.0, rid="not-replayed"))
    write_ibm(trace, records)
    a = fabricate_run(tmp_path / "runs/one", requests=120)
    b = fabricate_run(tmp_path / "runs/two", requests=80, seed=3, as_is=False)
    out = tmp_path / "out"
    results = analyze_results([a, b], out, trace_files=[str(trace)], log=lambda *_: None)
    assert set(results) == {"one", "two", rs.TRACE_ROW}
    # only the trace records the runs replayed (trace ids t0..t3) are compared
    assert results[rs.TRACE_ROW]["latency"]["GET blob"]["n"] == 4
    assert results[rs.TRACE_ROW]["latency"]["GET blob"]["max"] == pytest.approx(3.5)
    for name in ("results.json", "runs.csv", "latency.csv", "report.html") + tuple(
        f"{f}.png" for f in ("latency_cdf", "latency_violin", "throughput", "failures", "lateness")
    ):
        assert (out / name).stat().st_size > 0, name
    saved = json.loads((out / "results.json").read_text())
    assert saved["one"]["requests"] == 120
    runs = pd.read_csv(out / "runs.csv", index_col=0)
    assert list(runs.index) == ["one", "two"]
    latency = pd.read_csv(out / "latency.csv")
    assert rs.TRACE_ROW in set(latency["run"])
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 5 and "ibm-trace-data" in html


def test_violin_clips_only_the_plot(tmp_path):
    from drtp.analysis.results_figures import fig_latency_violin

    run = fabricate_run(tmp_path / "a", requests=400)
    frame = pd.read_csv(run / "requests.csv")
    frame.loc[0, ["method", "kind", "latency_s"]] = ["GET", "blob", 1000.0]  # an outlier
    frame.to_csv(run / "requests.csv", index=False)
    df, _ = rs.load_run(run)
    r = rs.analyze_run(df)
    assert r["latency"]["GET blob"]["max"] == 1000.0
    fig = fig_latency_violin({"a": r}, {"a": df})
    notes = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("clipped in the plot" in n for n in notes)


def test_rows_without_a_start_are_failures_not_crashes(tmp_path):
    run = fabricate_run(tmp_path / "a", requests=40)
    frame = pd.read_csv(run / "requests.csv").astype({"error": object, "ok": object})
    frame.loc[:4, ["start_s", "latency_s", "status", "ok", "error"]] = [np.nan, np.nan, 0, False, "node lost"]
    frame.to_csv(run / "requests.csv", index=False)
    df, _ = rs.load_run(run)
    r = rs.analyze_run(df)
    assert r["failed"] == 5 and r["failures"] == {"node lost": 5}
    assert sum(r["throughput"]["per_second"]) == 35
