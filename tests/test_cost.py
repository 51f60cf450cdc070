"""The cost model: tiered prices by hand, volumes of a trace and of a run, the CLI."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from drtp.analysis.cost import Plan, load_pricing, plan_cost, run_volume, tiered, trace_volume
from drtp.errors import ConfigError
from tests.conftest import ibm_record, write_json


def test_tiers_by_hand():
    tiers = [(10.0, 1.0), (50.0, 0.5), (None, 0.1)]
    assert tiered(5, tiers) == 5
    assert tiered(30, tiers) == 10 + 20 * 0.5
    assert tiered(100, tiers) == pytest.approx(10 + 40 * 0.5 + 50 * 0.1)
    assert tiered(0, tiers) == 0


def test_plan_cost_with_fee_quota_and_operations():
    plan = Plan(
        "X",
        "x",
        monthly_fee=20,
        included_storage_gb=100,
        storage=[(None, 0.09)],
        operations_per_gb=10,
        price_per_10k_operations=0.05,
        egress=[(None, 0.1)],
        included_egress_gb=5,
    )
    c = plan_cost(plan, storage_gb=300, egress_gb=105, months=2)
    assert c["fee"] == 40 and c["storage"] == pytest.approx(200 * 0.09 * 2)
    assert c["operations"] == pytest.approx(300 * 10 / 10_000 * 0.05 * 2)
    assert c["egress"] == pytest.approx(95 * 0.1)
    assert c["total"] == pytest.approx(sum(v for k, v in c.items() if k != "total"))


def test_shipped_pricing_tables():
    plans = {p.name: p for p in load_pricing()}
    assert {
        "ecr-us-east",
        "acr-basic",
        "acr-standard",
        "acr-premium",
        "gcr-standard-bucket",
        "dockerhub-pro",
        "quay-developer",
    } <= set(plans)
    # ECR egress of 100,000 GB (1 GB free): 10,240 × 0.09 + 40,960 × 0.085 + 48,799 × 0.07
    assert plan_cost(plans["ecr-us-east"], 0, 100_000)["egress"] == pytest.approx(7819.13, abs=0.01)
    assert plan_cost(plans["dockerhub-pro"], 1e5, 1e5)["total"] == 5.0


def test_bad_pricing_file_names_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("provider: X\nplans:\n  p: {egress_gb: [[10, 0.1]]}\n")
    with pytest.raises(ConfigError, match=r"plans.p.egress_gb'.*\[null, price\]"):
        load_pricing([bad])
    bad.write_text("provider: X\nplans:\n  p: {egres_gb: 0.1}\n")
    with pytest.raises(ConfigError, match="unknown key 'plans.p.egres_gb'"):
        load_pricing([bad])


def test_trace_volume(tmp_path):
    recs = [
        ibm_record(0, **{"http.request.uri": "v2/u/r/blobs/l1", "http.response.written": 1000}),
        ibm_record(1, **{"http.request.uri": "v2/u/r/blobs/l1", "http.response.written": 1000}),
        ibm_record(2, **{"http.request.uri": "v2/u/r2/blobs/l1", "http.response.written": 1000}),  # same layer
        ibm_record(3, **{"http.request.uri": "v2/u/r/manifests/t", "http.response.written": 500}),
        ibm_record(
            4,
            **{
                "http.request.method": "PUT",
                "http.request.uri": "v2/u/r/blobs/l2",
                "http.response.written": 4000,
                "http.response.status": 201,
            },
        ),
        ibm_record(5, **{"http.request.uri": "v2/u/r/blobs/l9", "http.response.status": 404}),
    ]
    v = trace_volume([write_json(tmp_path / "t.json", recs)])
    assert v["egress_gb"] == pytest.approx(3500 / 1e9)
    assert v["storage_gb"] == pytest.approx((1000 + 500 + 4000) / 1e9)


def test_run_volume_and_cli(tmp_path, real_runs):
    """The volume of a real replay's requests.csv, recounted here with the csv module row by row."""
    run = real_runs.stress
    egress = 0
    stored: dict[str, int] = {}
    with open(run / "requests.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["ok"] != "True" or row["auxiliary"] == "True":
                continue
            size = int(row["size"] or 0)
            if row["method"] == "GET":
                egress += size
            if row["method"] in ("GET", "PUT") and size > 0:
                stored[row["digest"]] = max(stored.get(row["digest"], 0), size)
    assert egress > 0 and stored  # the run read and pushed something: the sums below mean something
    volume = run_volume([run])
    assert volume["egress_gb"] == pytest.approx(egress / 1e9)
    assert volume["storage_gb"] == pytest.approx(sum(stored.values()) / 1e9)
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-m", "drtp.cli", "cost", str(run), "--plans", "ecr-us-east,dockerhub-pro", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    data = json.loads((out / "cost.json").read_text())
    assert data["volume"]["storage_gb"] == pytest.approx(volume["storage_gb"])
    assert data["volume"]["egress_gb"] == pytest.approx(volume["egress_gb"])
    ecr = next(p for p in data["plans"] if p["plan"] == "ecr-us-east")
    # ECR: $0.10 per GB-month stored, the first GB of egress included (configs/pricing/ecr.yaml)
    assert ecr["storage"] == round(0.10 * sum(stored.values()) / 1e9, 2) and egress < 1e9  # in cents
    assert ecr["egress"] == 0
    assert (out / "cost_vs_volume.png").stat().st_size > 10_000
    res = subprocess.run([sys.executable, "-m", "drtp.cli", "cost", "--plans", "nope"], capture_output=True, text=True)
    assert res.returncode == 2 and "unknown plan 'nope'" in res.stderr
