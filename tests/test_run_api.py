"""``drtp.load_run`` / ``drtp.load_runs`` on the run directories of real replays (tests/real_runs.py)."""

from __future__ import annotations

import csv
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import drtp
from drtp.analysis.results import load_requests
from drtp.analysis.run_data import RunDataError
from drtp.analysis.run_stats import read_stats_history, stats_from_requests
from drtp.errors import DrtpError
from drtp.replay.stats_file import STATS_COLUMNS, STATS_FILE

registry = pytest.mark.registry
DOCS = Path(__file__).resolve().parent.parent / "docs" / "analysis.md"


def csv_rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "requests.csv", newline="") as f:
        return list(csv.DictReader(f))


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_import_drtp_does_not_import_pandas():
    code = "import sys, drtp; assert 'pandas' not in sys.modules; drtp.load_run; assert 'pandas' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert {"load_run", "load_runs"} <= set(dir(drtp))
    with pytest.raises(AttributeError, match="no attribute 'load_rn'"):
        drtp.load_rn  # noqa: B018


@registry
def test_requests_frame_columns_types_and_ms(real_runs):
    run = drtp.load_run(real_runs.as_is)
    df = run.requests
    assert run.label == "as-is" and run.path == Path(real_runs.as_is)
    for col in ("method", "kind", "outcome", "node"):
        assert isinstance(df[col].dtype, pd.CategoricalDtype), col
    assert df["failed"].dtype == bool and df["auxiliary"].dtype == bool
    assert set(df["kind"].cat.categories) <= {"blob", "manifest"}
    # every ms column is the seconds of requests.csv × 1000, row for row, empty cells NaN
    rows = csv_rows(real_runs.as_is)
    assert len(rows) == len(df)
    for seconds, ms in (("latency_s", "latency_ms"), ("response_s", "response_ms"), ("start_s", "start_ms")):
        expected = np.array([float(r[seconds]) * 1000 if r[seconds] else np.nan for r in rows])
        np.testing.assert_array_equal(df[ms].to_numpy(), expected, err_msg=ms)
    expected = np.array([float(r["intended_s"]) * 1000 if r["intended_s"] else np.nan for r in rows])
    np.testing.assert_array_equal(df["intended_ms"].to_numpy(), expected)
    assert df["response_ms"].notna().any() and df["intended_ms"].notna().any()  # as is: intended starts
    # the real failures and helper rows, as the replay made them
    main = df[~df["auxiliary"]]
    assert int(df["auxiliary"].sum()) == real_runs.lone_pushes
    assert int(main["failed"].sum()) == real_runs.missing_tags
    assert set(main.loc[main["failed"], "outcome"]) == {"http"}
    assert main.loc[main["failed"], "reference"].str.startswith("never-pushed-").all()
    assert (df["failed"] == (df["outcome"] != "ok")).all()


@registry
def test_summary_frame_is_the_runs_summary_in_ms(real_runs):
    run = drtp.load_run(real_runs.stress)
    s = run.summary
    trace_rows = run.requests[~run.requests["auxiliary"]]
    everything = s[s["slice"] == "all"].iloc[0]
    assert everything["requests"] == len(trace_rows) == run.summary_json["requests"]
    assert everything["failed"] == real_runs.missing_tags
    assert everything["latency_p99_ms"] == pytest.approx(run.summary_json["latency_s"]["p99"] * 1000)
    methods, nodes = s[s["slice"] == "method"], s[s["slice"] == "node"]
    assert methods["requests"].sum() == nodes["requests"].sum() == len(trace_rows)
    assert set(methods["key"]) == set(trace_rows["method"].astype(str) + " " + trace_rows["kind"].astype(str))
    assert set(nodes["node"].astype(str)) == set(trace_rows["node"].astype(str))
    get_manifest = methods[(methods["method"] == "GET") & (methods["kind"] == "manifest")].iloc[0]
    assert get_manifest["failed"] == real_runs.missing_tags
    assert s[s["slice"] == "all"]["lateness_p99_ms"].isna().all()  # stress mode: no intended starts
    asis = drtp.load_run(real_runs.as_is).summary
    assert asis.loc[asis["slice"] == "all", "lateness_p99_ms"].notna().all()


@registry
def test_summary_without_summary_json_comes_from_the_rows(real_runs, tmp_path):
    run_dir = copy_run(real_runs.stress, tmp_path / "stress")
    (run_dir / "summary.json").unlink()
    (run_dir / STATS_FILE).write_text(",".join(STATS_COLUMNS) + "\n1.0,3,0,0,12,3.0,1.5,oops\n")
    assert one_line_error(run_dir) == f"{run_dir / STATS_FILE}: row 1: column p99_ms: not a number ≥ 0, got 'oops'"
    (run_dir / STATS_FILE).unlink()
    rebuilt = drtp.load_run(run_dir)
    written = drtp.load_run(real_runs.stress)
    assert rebuilt.summary_json == {}
    columns = ["slice", "key", "requests", "succeeded", "failed", "bytes", "latency_p50_ms", "latency_max_ms"]
    pd.testing.assert_frame_equal(rebuilt.summary[columns], written.summary[columns])


@registry
def test_stats_sum_to_the_trace_requests(real_runs, tmp_path):
    run = drtp.load_run(real_runs.stress)
    trace_rows = run.requests[~run.requests["auxiliary"]]
    assert list(run.stats.columns) == list(STATS_COLUMNS)
    assert run.stats["requests"].sum() == len(trace_rows)
    assert run.stats["failures"].sum() == int(trace_rows["failed"].sum())
    assert run.stats["bytes"].sum() == int(trace_rows["bytes"].sum())
    assert run.stats["elapsed_s"].is_monotonic_increasing
    # a run directory without stats_history.csv (made before the master wrote it): the same frame, rebuilt
    old = copy_run(real_runs.stress, tmp_path / "old")
    (old / STATS_FILE).unlink(missing_ok=True)
    rebuilt = drtp.load_run(old)
    assert not rebuilt.stats_from_file
    assert list(rebuilt.stats.columns) == list(STATS_COLUMNS)
    assert rebuilt.stats["requests"].sum() == len(trace_rows)
    assert rebuilt.stats["failures"].sum() == real_runs.missing_tags
    assert rebuilt.stats["elapsed_s"].iloc[-1] == pytest.approx(trace_rows["end_s"].max())
    # written as the master writes it (p50/p99 empty where no request succeeded), read back the same
    (old / STATS_FILE).write_text(rebuilt.stats.to_csv(index=False, na_rep=""))
    again = drtp.load_run(old)
    assert again.stats_from_file
    pd.testing.assert_frame_equal(again.stats, rebuilt.stats)
    ok = trace_rows[~trace_rows["failed"]]
    slowest = rebuilt.stats["p99_ms"].max()
    assert slowest <= ok["latency_ms"].max() and slowest >= ok["latency_ms"].median()


def test_stats_rebuilt_from_rows_per_interval(tmp_path):
    """Counts, rates and nearest-rank percentiles per interval, on rows read back through the checked reader."""
    header = "method,kind,start_s,latency_s,status,expected_status,bytes,auxiliary\n"
    lines = [
        "GET,blob,0.1,0.2,200,200,10,False",  # ends 0.3: interval 1
        "GET,blob,0.2,0.4,200,200,20,False",  # ends 0.6: interval 1
        "GET,blob,0.5,0.3,404,200,0,False",  # ends 0.8: interval 1, failed
        "POST,blob,0.5,0.1,202,0,0,True",  # a helper: not counted
        "GET,manifest,1.5,0.1,200,200,5,False",  # ends 1.6: interval 2
        "GET,blob,1.6,0.1,429,200,0,False",  # ends 1.7: interval 2, throttled
        "POST,blob,1.6,0.1,429,0,0,True",  # a throttled helper: not counted
        "GET,blob,2.0,0.5,200,200,7,False",  # ends 2.5: interval 3, the last, 0.5 s long
    ]
    (tmp_path / "requests.csv").write_text(header + "\n".join(lines) + "\n")
    stats = stats_from_requests(load_requests(tmp_path / "requests.csv"))
    assert list(stats.columns) == list(STATS_COLUMNS)
    assert stats["elapsed_s"].tolist() == [1.0, 2.0, 2.5]
    assert stats["requests"].tolist() == [3, 2, 1]
    assert stats["failures"].tolist() == [1, 1, 0]
    assert stats["throttled"].tolist() == [0, 1, 0]
    assert stats["bytes"].tolist() == [30, 5, 7]
    assert stats["rate_per_s"].tolist() == [3.0, 2.0, 2.0]
    assert stats["p50_ms"].tolist() == pytest.approx([200.0, 100.0, 500.0])  # rank ceil(0.5·2) = 1 of 200, 400
    assert stats["p99_ms"].tolist() == pytest.approx([400.0, 100.0, 500.0])


def test_stats_history_file_read_and_checked(tmp_path):
    path = tmp_path / STATS_FILE
    head = ",".join(STATS_COLUMNS) + "\n"
    path.write_text(head + "1.0,10,1,1,1000,10.0,5.5,9.25\n2.0,0,0,0,0,0.0,,\n3.0,4,0,4")  # last line unfinished
    stats = read_stats_history(path)
    assert stats["requests"].tolist() == [10, 0] and stats["requests"].dtype == np.int64
    assert stats["throttled"].tolist() == [1, 0] and stats["throttled"].dtype == np.int64
    assert math.isnan(stats["p50_ms"].iloc[1]) and stats["p99_ms"].iloc[0] == 9.25
    # a file from before `throttled` existed: read, the column missing (NaN), not made 0
    path.write_text("elapsed_s,requests,failures,bytes,rate_per_s,p50_ms,p99_ms\n1.0,10,1,1000,10.0,5.5,9.25\n")
    older = read_stats_history(path)
    assert list(older.columns) == list(STATS_COLUMNS) and older["failures"].tolist() == [1]
    assert older["throttled"].isna().all()
    path.write_text(head + "1.0,10,1,1,1000,10.0,5.5,9.25\n2.0,1.5,0,0,0,0.0,,\n")
    with pytest.raises(
        DrtpError, match=r"stats_history.csv: row 2: column requests: not a whole number ≥ 0, got '1.5'"
    ):
        read_stats_history(path)
    path.write_text("elapsed_s,requests\n1.0,3\n")
    with pytest.raises(DrtpError, match="missing column"):
        read_stats_history(path)


@registry
def test_load_runs_concatenates_with_run_labels(real_runs, tmp_path):
    runs = drtp.load_runs([real_runs.stress, real_runs.as_is])
    assert runs.labels == ["stress", "as-is"] and len(runs) == 2
    assert list(runs.requests.columns[:1]) == ["run"]
    assert list(runs.requests["run"].cat.categories) == ["stress", "as-is"]
    for frame in ("requests", "summary", "stats"):
        combined = getattr(runs, frame)
        for label in runs.labels:
            part = combined[combined["run"] == label].drop(columns="run").reset_index(drop=True)
            pd.testing.assert_frame_equal(part, getattr(runs[label], frame), check_categorical=False)
    assert isinstance(runs.requests["method"].dtype, pd.CategoricalDtype)
    assert runs.config["stress"]["client_info"]["token"] == "***"  # config.json: secrets redacted
    assert runs.config["as-is"]["client_info"]["wait"] is True
    counts = runs.summary[runs.summary["slice"] == "all"].set_index("run")["requests"]
    assert counts.to_dict() == {
        "stress": runs["stress"].summary_json["requests"],
        "as-is": runs["as-is"].summary_json["requests"],
    }
    # the same folder name twice: parent/name, as `drtp analyze results` labels them
    a, b = copy_run(real_runs.stress, tmp_path / "a" / "run"), copy_run(real_runs.stress, tmp_path / "b" / "run")
    assert drtp.load_runs([a, str(b)]).labels == ["a/run", "b/run"]


def one_line_error(path) -> str:
    with pytest.raises(RunDataError) as err:
        drtp.load_run(path)
    text = str(err.value)
    assert "\n" not in text and isinstance(err.value, DrtpError)
    return text


def test_errors_name_the_path(tmp_path):
    assert one_line_error(tmp_path / "nope") == f"{tmp_path / 'nope'}: run directory not found"
    assert (
        one_line_error(tmp_path) == f"{tmp_path / 'requests.csv'}: not found (a run directory must hold requests.csv)"
    )
    with pytest.raises(RunDataError, match="no run directories given"):
        drtp.load_runs([])
    with pytest.raises(RunDataError, match="nope: run directory not found"):
        drtp.load_runs([tmp_path / "nope"])


@registry
def test_errors_name_the_file_row_and_column(real_runs, tmp_path):
    run_dir = copy_run(real_runs.stress, tmp_path / "bad")
    lines = (run_dir / "requests.csv").read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    cells = lines[7].rstrip("\n").split(",")
    cells[header.index("latency_s")] = "fast"
    lines[7] = ",".join(cells) + "\n"
    (run_dir / "requests.csv").write_text("".join(lines))
    text = one_line_error(run_dir)
    assert text == f"{run_dir / 'requests.csv'}: row 7: column latency_s: not a number, got 'fast'"
    shutil.copy(real_runs.stress / "requests.csv", run_dir / "requests.csv")
    (run_dir / "summary.json").write_text('{"requests": 3, "per_node": ["a"]}')
    assert one_line_error(run_dir).startswith(f"{run_dir / 'summary.json'}: not a run summary (key 'per_node'")
    (run_dir / "summary.json").write_text("{")
    assert one_line_error(run_dir).startswith(f"{run_dir / 'summary.json'}: invalid JSON")
    (run_dir / "summary.json").unlink()
    (run_dir / STATS_FILE).write_text(",".join(STATS_COLUMNS) + "\n1.0,3,0,0,12,3.0,1.5,oops\n")
    assert one_line_error(run_dir) == f"{run_dir / STATS_FILE}: row 1: column p99_ms: not a number ≥ 0, got 'oops'"
    (run_dir / STATS_FILE).unlink()
    (run_dir / "config.json").write_text("[1]")
    assert (
        one_line_error(run_dir) == f"{run_dir / 'config.json'}: not a saved run config (a JSON object), got a JSON list"
    )


@registry
def test_the_documented_example_runs_as_written(real_runs):
    section = DOCS.read_text(encoding="utf-8").split("## In Python / Jupyter", 1)[1]
    example = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    lines = [line for line in example.strip().splitlines() if line.strip()]  # three lines of code
    assert len(lines) == 3 and lines[0] == "import drtp"
    code = re.sub(r'load_run\("[^"]+"\)', f"load_run({str(real_runs.stress)!r})", "\n".join(lines[:-1]))
    scope: dict = {}
    exec(code, scope)
    table = eval(lines[-1], scope)
    assert set(table.index) == {"blob", "manifest"}
    assert table["count"].sum() == scope["run"].requests["latency_ms"].notna().sum()
