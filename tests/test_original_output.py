"""``trace.output``: the original trace player's results file, written from real replays' requests.csv."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from drtp.config import config_from_dict
from drtp.errors import RunError
from drtp.master.outputs.original_output import original_record, write_original_results
from drtp.master.run.warmup import run_warmup
from drtp.registry.local import LocalRegistry
from drtp.replay.result_row import ResultRow
from tests.replay_support import make_trace, write_config

pytestmark = pytest.mark.registry


def rows(run_dir) -> pd.DataFrame:
    return pd.read_csv(run_dir / "requests.csv", keep_default_na=False, na_values=[""])


def config_with_output(output: str, on_time_ms: float = 10.0):
    data = {"trace": {"location": ".", "traces": ["t.json"], "output": output}}
    return config_from_dict(data | {"client_info": {"on_time_ms": on_time_ms}}, source="c.yaml")


def test_drtp_run_with_trace_output_writes_the_original_results_file(tmp_path, nodes):
    """A real `drtp run` given trace.output by --set: one record per trace request, timed from the run's start."""
    trace = make_trace(tmp_path / "trace.json", requests=200)
    with LocalRegistry(tmp_path / "registry") as reg:
        write_config(tmp_path, trace, [reg.host], [n.address for n in nodes])
        from drtp.config import load_config

        run_warmup(load_config(tmp_path / "config.yaml"), quiet=True)
        out = subprocess.run(
            [sys.executable, "-m", "drtp.cli", "run", "-c", str(tmp_path / "config.yaml"), "--out",
             str(tmp_path / "run"), "--set", "trace.output=results.json", "-v"],
            capture_output=True, text=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert out.returncode == 0, out.stderr
    path = tmp_path / "run" / "results.json"  # relative: inside the run directory
    assert f"in the original trace player's format in {path}" in out.stdout
    assert "drtp.master.outputs.original_output INFO wrote 200 requests" in out.stderr  # -v logs it

    records = json.loads(path.read_text())
    main = rows(tmp_path / "run").query("not auxiliary")
    assert len(records) == len(main) == 200
    assert all(set(r) == {"time", "duration", "onTime", "size"} for r in records)
    start_epoch = json.loads((tmp_path / "run" / "summary.json").read_text())["start_epoch"]
    assert [r["time"] - start_epoch for r in records] == pytest.approx(main.start_s.tolist(), abs=1e-5)
    assert [r["duration"] for r in records] == main.latency_s.tolist()
    assert [r["size"] for r in records] == main.bytes.tolist()
    assert {r["onTime"] for r in records} == {"no"}  # as fast as possible, every request ok


def test_original_results_of_real_runs_mark_failures_and_lateness(real_runs, tmp_path):
    for run_dir in (real_runs.stress, real_runs.as_is):
        path = write_original_results(config_with_output(str(tmp_path / "o.json")), run_dir, 1e9, quiet=True)
        records = json.loads(path.read_text())
        main = rows(run_dir).query("not auxiliary")
        assert len(records) == len(main) and len(rows(run_dir)) > len(main)  # helper requests left out
        assert sum(r["onTime"] == "failed" for r in records) == (~main.ok).sum() == real_runs.missing_tags
    late = (main.start_s - main.intended_s) > 0.010
    expected = ["failed" if not ok else ("no" if is_late else "yes") for ok, is_late in zip(main.ok, late, strict=True)]
    assert [r["onTime"] for r in records] == expected
    assert "yes" in expected


def test_a_lost_request_is_failed_at_its_intended_time():
    row = ResultRow(
        client="c", node="n", trace_id="t", method="GET", kind="blob", repository="r", reference="x", digest="",
        size=5, bytes=0, intended_s=2.5, start_s=None, latency_s=None, response_s=None, status=0,
        expected_status=200, ok=False, outcome="lost", attempts=0, error="lost: node died", auxiliary=False,
    )  # fmt: skip
    assert original_record(row, 100.0, 0.01) == {"time": 102.5, "duration": 0.0, "onTime": "failed", "size": 0}


def test_an_unwritable_output_is_one_line_naming_the_key(real_runs, tmp_path):
    cfg = config_with_output(str(tmp_path / "missing-dir" / "o.json"))
    with pytest.raises(RunError, match=r"^c\.yaml: key 'trace\.output': cannot write .*o\.json"):
        write_original_results(cfg, real_runs.stress, 0.0, quiet=True)
    assert write_original_results(config_from_dict({}), real_runs.stress, 0.0) is None  # not set: nothing
