"""``drtp analyze trace|results`` end to end: JSON, PNGs and report.html are written."""

from __future__ import annotations

import json

import pytest

from drtp.analysis.trace_analysis import default_label, group_files
from drtp.cli import main
from drtp.errors import DrtpError
from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.reader import write_ibm

FIGS = (
    "fig04_request_types",
    "fig05_manifest_layer",
    "fig06_sizes",
    "fig07_requests_per_minute",
    "fig08_response_times",
    "fig09_response_vs_size",
    "fig10_popularity",
    "fig11_top10",
    "fig12_follow_ups",
    "fig13_concurrency",
    "fig14_rhythm",
    "fig15_arrivals",
    "data_volume",
)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("traces")
    paths = []
    for seed, name in ((1, "prod-dal09-logstash-2017.08.01-0.json"), (2, "prod-lon02-logstash-2017.08.01-0.json")):
        opts = GenerateOptions(requests=1500, seed=seed, span_s=3600, clients=20, repositories=30)
        write_ibm(d / name, generate(opts))
        paths.append(d / name)
    return paths


def test_default_labels_group_files_by_zone():
    assert default_label("prod-dal09-logstash-2017.08.01-0.json") == "dal"
    assert default_label("/x/my-trace.json.gz") == "my-trace"
    groups = group_files(["a.json", "b.json", "c.json"], ["x", "x", "y"])
    assert groups == {"x": ["a.json", "b.json"], "y": ["c.json"]}
    with pytest.raises(DrtpError, match="one name per file"):
        group_files(["a.json"], ["x", "y"])


def test_analyze_trace_writes_json_figures_report(traces, tmp_path, capsys):
    out = tmp_path / "char"
    assert main(["analyze", "trace", *map(str, traces), "--out", str(out), "--session", "2m"]) == 0
    chars = json.loads((out / "characterization.json").read_text())
    assert list(chars) == ["dal", "lon"]
    for c in chars.values():
        assert c["summary"]["records"] == 1500
        assert c["follow_ups"]["session_s"] == 120.0
        assert 0 < c["request_types"]["pull_ratio"] < 1
    for f in FIGS:
        assert (out / f"{f}.png").stat().st_size > 5000, f
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(FIGS)
    assert "top-10 layers: share of GETs" in html and "<th>dal</th>" in html
    assert "key_numbers.csv" in capsys.readouterr().out


def test_analyze_trace_same_label_merges_files(traces, tmp_path):
    out = tmp_path / "merged"
    assert main(["analyze", "trace", *map(str, traces), "--label", "all", "all", "--out", str(out)]) == 0
    chars = json.loads((out / "characterization.json").read_text())
    assert list(chars) == ["all"] and chars["all"]["summary"]["records"] == 3000


def test_analyze_trace_user_errors(tmp_path, capsys):
    assert main(["analyze", "trace", str(tmp_path / "missing.json"), "--out", str(tmp_path / "o")]) == 2
    assert "trace file not found" in capsys.readouterr().err


@pytest.mark.registry
def test_analyze_results_cli(real_runs, tmp_path, capsys):
    out = tmp_path / "res"
    assert main(["analyze", "results", str(real_runs.stress), str(real_runs.as_is), "--out", str(out)]) == 0
    summary = json.loads((real_runs.stress / "summary.json").read_text())
    printed = capsys.readouterr().out
    n, failed = summary["requests"], real_runs.missing_tags
    assert f"stress: {n:,} requests, {failed} failed (http {failed}; by status: 404 {failed})" in printed
    assert f"{real_runs.lone_pushes} helper requests, 0 failed" in printed
    assert (out / "report.html").read_text().count("data:image/png;base64,") == 7  # 5 + the views' 2
    assert main(["analyze", "results", str(tmp_path / "nothing"), "--out", str(out)]) == 2
    assert "run directory not found" in capsys.readouterr().err


def test_tiny_trace_draws_what_it_has_and_names_what_it_left_out(tmp_path, capsys):
    import warnings

    from tests.trace_records import rec

    trace = tmp_path / "tiny.json"
    write_ibm(trace, [rec(0, "HEAD", "v2/u/r/blobs/L1"), rec(5, "POST", "v2/u/r/blobs/uploads/", status=202)])
    out = tmp_path / "o"
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # e.g. empty legends
        assert main(["analyze", "trace", str(trace), "--out", str(out)]) == 0
    chars = json.loads((out / "characterization.json").read_text())
    assert chars["tiny"]["request_types"]["pull_ratio"] is None
    assert chars["tiny"]["follow_ups"]["all"] == {"manifests": 0}
    # a HEAD and a POST: no body (sizes, data volume), no GET layer or manifest, no follow-up to count
    left_out = {"fig06_sizes", "fig09_response_vs_size", "fig12_follow_ups", "data_volume"}
    assert {f for f in FIGS if (out / f"{f}.png").exists()} == set(FIGS) - left_out
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(FIGS) - len(left_out)
    assert "Chart &#x27;fig12_follow_ups&#x27; not drawn: no GET manifest request." in html
    printed = capsys.readouterr().out
    assert "left out (no data): fig06_sizes (no successful GET or PUT request with a body)" in printed


def test_trace_report_shows_response_times_in_ms(traces, tmp_path):
    import pandas as pd

    out = tmp_path / "ms"
    assert main(["analyze", "trace", str(traces[0]), "--out", str(out)]) == 0
    chars = json.loads((out / "characterization.json").read_text())
    table = pd.read_csv(out / "key_numbers.csv", index_col=0)
    p50_s = chars["dal"]["response_times"]["GET blob"]["p50"]  # the JSON keeps seconds
    assert table.loc["GET layer response p50 (ms)", "dal"] == pytest.approx(p50_s * 1000, rel=1e-12)
    assert not [m for m in table.index if "response" in m and "(s)" in m]
