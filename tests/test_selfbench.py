"""`drtp selfbench --size tiny`: the whole suite runs and its table, CSV and JSON agree (no timing assertions)."""

from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed (replay rows need it)")

GROUPS = {"1 ingest", "2 stress", "3 as-is", "4 simulate", "5 scale", "6 analyze", "7 faults", "8 fidelity"}
GROUPS |= {"9 registries", "10 master"}
COLUMNS = ["row", "metric", "drtp", "baseline", "unit", "ratio", "better", "target", "met", "baseline_is", "note"]


def test_tiny_suite_writes_one_consistent_table(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "drtp.cli", "selfbench", "--size", "tiny", "--out", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]

    doc = json.loads((out / "selfbench-tiny.json").read_text())
    assert doc["size"] == "tiny" and doc["columns"] == COLUMNS
    rows = doc["rows"]
    assert {r["row"] for r in rows} == GROUPS
    with open(out / "selfbench-tiny.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS
        csv_rows = list(reader)
    assert [r["metric"] for r in csv_rows] == [r["metric"] for r in rows]

    for r in rows:
        assert r["drtp"] > 0 and math.isfinite(r["drtp"]), r
        assert r["baseline"] > 0 and math.isfinite(r["baseline"]), r
        assert r["ratio"] == pytest.approx(r["drtp"] / r["baseline"]), r
        assert r["better"] in {"higher", "lower"} and r["met"] in {"yes", "no", "—"}, r
        assert r["baseline_is"], r
        assert r["metric"] in proc.stdout  # every row is in the printed table
    # the rows drtp has targets for (bench/README.md)
    metrics = " | ".join(r["metric"] for r in rows)
    for rate in (50, 200, 500):
        assert f"p99 at {rate} req/s" in metrics
    for case in ("GET manifest", "GET blob (300 KB)", "mixed trace"):
        assert f"stress rate, {case}" in metrics and f"client node CPU per request, {case}" in metrics
    assert "drtp lru" in metrics and "drtp two-level" in metrics
    assert "peak RSS master replay" in metrics and "peak RSS simulate" in metrics
    assert "drtp analyze trace end to end" in metrics
    assert "replay duration with ~10% faults ÷ clean" in metrics and "failed rows recorded as" in metrics
    assert "manifest bytes replayed ÷ trace" in metrics and "status match" in metrics
    for kind in ("plain http", "https + basic auth", "https + bearer token"):
        for case in ("GET manifest", "GET blob (300 KB)", "mixed trace"):
            assert f"stress rate, {kind}, {case}" in metrics
            assert f"client node CPU per request mid-run, {kind}, {case}" in metrics
    assert "master CPU per request, 1 stand-in node, full rate" in metrics
    for how in ("2 stand-in nodes, full rate", "4 stand-in nodes, full rate", "2 stand-in nodes, paced to 2,000 req/s"):
        assert f"master CPU per request, {how}" in metrics
    # tiny sizes judge no size-dependent target
    assert next(r for r in rows if "analyze trace end to end" in r["metric"])["met"] == "—"
    assert "targets met" in proc.stdout
