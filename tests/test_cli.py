"""The drtp command line: help, version, generate, inspect and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from drtp import __version__
from tests.conftest import ibm_record, write_json


def drtp(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "drtp.cli", *args], capture_output=True, text=True, cwd=cwd, stdin=subprocess.DEVNULL
    )


def test_help_and_version():
    out = drtp("--help")
    assert out.returncode == 0
    for command in ("generate", "inspect", "config", "demo"):
        assert command in out.stdout
    assert drtp("--version").stdout.strip() == f"drtp {__version__}"
    assert drtp("inspect", "--help").returncode == 0


def test_generate_then_inspect_json(tmp_path):
    trace = tmp_path / "t.json"
    out = drtp("generate", "-o", str(trace), "-n", "3000", "--seed", "5", "--span", "2h")
    assert out.returncode == 0, out.stderr
    out = drtp("inspect", str(trace), "--json")
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    for key in ("records", "span_s", "by_method", "by_kind", "bytes", "clients", "repositories", "objects"):
        assert key in s
    assert s["records"] == 3000
    assert sum(s["by_method"].values()) == 3000 and sum(s["by_kind"].values()) == 3000
    assert 3600 < s["span_s"] < 3 * 3600
    assert s["clients"] > 10 and s["repositories"] > 10 and s["objects"] > 100 and s["bytes"] > 0


def test_inspect_known_numbers_and_table(tmp_path):
    recs = [ibm_record(i) for i in range(10)]
    recs[0]["http.request.method"] = "HEAD"
    recs[1]["http.request.uri"] = "v2/user1/repo1/manifests/latest"
    path = write_json(tmp_path / "k.json", recs)
    s = json.loads(drtp("inspect", str(path), "--json").stdout)
    assert s["records"] == 10 and s["span_s"] == 9.009
    assert s["by_method"] == {"GET": 9, "HEAD": 1}
    assert s["by_kind"] == {"manifest": 1, "blob": 9}
    assert s["bytes"] == sum(1000 + i for i in range(10))
    assert s["clients"] == 3 and s["repositories"] == 4 and s["objects"] == 10
    table = drtp("inspect", str(path), "--requests", "4").stdout
    assert "records" in table and " 4" in table


def test_inspect_bad_record_is_one_line_error_and_skip_bad_counts(tmp_path):
    recs = [ibm_record(i) for i in range(10)]
    recs[6]["http.response.written"] = -3
    path = write_json(tmp_path / "bad.json", recs)
    out = drtp("inspect", str(path))
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and f"{path}: record 6" in out.stderr and "Traceback" not in out.stderr
    out = drtp("inspect", str(path), "--skip-bad", "--json")
    assert out.returncode == 0
    assert json.loads(out.stdout)["skipped"] == 1 and json.loads(out.stdout)["records"] == 9
    assert "record 6" in out.stderr


def test_bad_arguments_exit_non_zero(tmp_path):
    assert drtp("inspect", str(tmp_path / "missing.json")).returncode == 2
    assert drtp("generate", "-o", str(tmp_path / "x.json"), "--max-layer-size", "huge").returncode == 2
    assert drtp("nonsense").returncode == 2


# -- trace commands: one line on stderr and exit 2 for bad inputs and options ---------------


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["inspect", "{trunc}"], "not a valid gzip file"),
        (["inspect", "{dir}"], "is a directory"),
        (["convert", "{empty}", "-o", "{out}.parquet"], "no records"),
        (["cost", "{deep}"], "nested too deeply"),
        (["analyze", "trace", "{good}", "--out", "{out}", "--bin", "0"], "--bin"),
        (["analyze", "trace", "{good}", "--out", "{out}", "--bin", "-1"], "--bin"),
        (["analyze", "trace", "{good}", "--out", "{out}", "--bin", "nan"], "--bin"),
        (["analyze", "trace", "{far}", "--out", "{out}"], "outside 1970..2099"),
        (["sample", "{good}", "-o", "{out}.json", "--method", "requests", "--amount", "-1"], "--amount"),
        (["sample", "{good}", "-o", "{out}.json", "--method", "window", "--window", "0"], "--window"),
        (["cost", "{good}", "--months", "nan"], "--months"),
        (["inspect", "{good}", "--requests", "0"], "--requests"),
    ],
)
def test_trace_commands_refuse_bad_input_in_one_line(tmp_path, args, named):
    import gzip

    good = write_json(tmp_path / "good.json", [ibm_record(i) for i in range(20)])
    whole = gzip.compress(good.read_bytes())
    (tmp_path / "t.json.gz").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "empty.json").write_text("[]")
    (tmp_path / "deep.json").write_text("[" + '{"a":' * 100_000 + "1" + "}" * 100_000 + "]")
    write_json(tmp_path / "far.json", [ibm_record(0, timestamp="9999-01-01T00:00:00.000Z")])
    paths = {
        "trunc": tmp_path / "t.json.gz",
        "dir": tmp_path,
        "empty": tmp_path / "empty.json",
        "deep": tmp_path / "deep.json",
        "good": good,
        "far": tmp_path / "far.json",
        "out": tmp_path / "out",
    }
    argv = [a.format(**paths) for a in args]
    res = subprocess.run([sys.executable, "-m", "drtp.cli", *argv], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and named in res.stderr, res.stderr
