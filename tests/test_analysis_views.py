"""The studies' views of ``drtp analyze results``: latency by object size, image pulls and pushes, bars across runs.

A small requests.csv with the writer's own columns (drtp.replay.result_row.COLUMNS) and values chosen so
every number can be worked out by hand (the expected values below are that arithmetic), then the same on a
REAL replay, where an image pull found by a plain loop over the rows must be the one the view found.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from drtp.analysis import views as vw
from drtp.analysis.results import load_requests
from drtp.cli import main
from drtp.replay.result_row import COLUMNS

# client, method, kind, repository, start_s, latency_s, bytes, status (expected 200/201/202 as sent)
ROWS = [
    # pull 1 (c1, team/app): manifest at 0 s, three layers downloading at once; ends at 0.011 + 0.100
    ("c1", "GET", "manifest", "team/app", 0.000, 0.010, 1_500, 200),
    ("c1", "GET", "blob", "team/app", 0.011, 0.100, 5_000_000, 200),
    ("c1", "GET", "blob", "team/app", 0.012, 0.050, 2_000_000, 200),
    ("c1", "GET", "blob", "team/app", 0.013, 0.020, 50_000, 200),
    # a manifest GET no layer follows (the client had them)
    ("c2", "GET", "manifest", "team/app", 1.000, 0.005, 1_500, 200),
    # pull 2 (c1, team/app): one layer; the layer GET at 100 s is over 60 s after it: in no pull
    ("c1", "GET", "manifest", "team/app", 2.000, 0.008, 1_500, 200),
    ("c1", "GET", "blob", "team/app", 2.010, 0.030, 5_000, 200),
    ("c1", "GET", "blob", "team/app", 100.000, 0.010, 5_000, 200),
    # a layer GET without a manifest GET of its client and repository before it
    ("c3", "GET", "blob", "other/repo", 3.000, 0.040, 500_000, 200),
    # a push (c4, team/base): POST, PATCH, closing PUT, manifest PUT: from 5.000 to 5.070 + 0.020
    ("c4", "POST", "blob", "team/base", 5.000, 0.004, 0, 202),
    ("c4", "PATCH", "blob", "team/base", 5.005, 0.050, 3_000_000, 202),
    ("c4", "PUT", "blob", "team/base", 5.056, 0.010, 0, 201),
    ("c4", "PUT", "manifest", "team/base", 5.070, 0.020, 900, 201),
    # a push (c6, team/base) of one layer: the lone PUT at 20 s is over 60 s before it, so in no push;
    # the push runs from 150.000 to 150.030 + 0.010
    ("c6", "PUT", "blob", "team/base", 20.000, 0.010, 0, 201),
    ("c6", "POST", "blob", "team/base", 150.000, 0.004, 0, 202),
    ("c6", "PUT", "blob", "team/base", 150.005, 0.020, 1_000, 201),
    ("c6", "PUT", "manifest", "team/base", 150.030, 0.010, 900, 201),
    # a failed pull (c5): its layer GET got a 500 after 2.5 s
    ("c5", "GET", "manifest", "team/app", 10.000, 0.005, 1_500, 200),
    ("c5", "GET", "blob", "team/app", 10.010, 2.500, 0, 500),
    # a layer PUT after c4's last manifest PUT: it closes no image
    ("c4", "PUT", "blob", "team/base", 200.000, 0.500, 0, 201),
]
HELPER = ("c4", "POST", "blob", "team/base", 5.001, 9.0, 0, 202)  # a helper request: in no view

# by hand, all rows:
#   all GET ok: 10 100 50 20 5 8 30 10 40 5 ms → n 10, mean 27.8; 1 failed (c5's layer)
#   total push (every PUT): 10 20 500 10 20 10 ms → n 6, mean 95
#   image pull: pulls with layers 111 (pull 1) and 40 ms (pull 2), c5's failed; c2's without layers
#   image push: 90 ms (sum of its latencies 84 ms) and 40 ms (sum 34 ms)
#   GET layer by size: 1–10 MB: 100, 50 → mean 75; 100 kB–1 MB: 40; 10–100 kB: 20; 1–10 kB: 30, 10 → mean 20
PULL_SPANS_MS = [111.0, 40.0]


def write_run(run_dir: Path, scale: float = 1.0) -> Path:
    """A run directory whose requests.csv holds ROWS (latencies times ``scale``) with the writer's columns."""
    run_dir.mkdir(parents=True)
    with open(run_dir / "requests.csv", "w", newline="") as f:
        out = csv.DictWriter(f, COLUMNS)
        out.writeheader()
        for i, (client, method, kind, repo, start, latency, size, status) in enumerate([*ROWS, HELPER]):
            ok = status < 400
            out.writerow(
                {
                    "client": client,
                    "node": "127.0.0.1:9000",
                    "trace_id": f"t{i}",
                    "method": method,
                    "kind": kind,
                    "repository": repo,
                    "reference": "ref",
                    "digest": "",
                    "size": size,
                    "bytes": size,
                    "intended_s": "",
                    "start_s": f"{start:.6f}",
                    "latency_s": f"{latency * scale:.6f}",
                    "response_s": "",
                    "status": status,
                    "expected_status": status if ok else 200,
                    "ok": ok,
                    "outcome": "ok" if ok else "http",
                    "attempts": 1,
                    "error": "" if ok else f"HTTP {status}",
                    "auxiliary": (client, method, kind, repo, start, latency, size, status) == HELPER,
                    "retry_after_s": "",
                }
            )
    return run_dir


def per_run(views: vw.Views, run: str) -> pd.DataFrame:
    return views.per_run[views.per_run["run"] == run].set_index("view")


def test_pulls_pushes_and_views_by_hand(tmp_path):
    df = load_requests(write_run(tmp_path / "a") / "requests.csv")
    pulls = vw.image_pulls(df)
    with_layers = pulls[pulls["layers"] > 0]
    assert list(with_layers["client"]) == ["c1", "c1", "c5"]
    assert list(with_layers["layers"]) == [3, 1, 1]
    assert with_layers["span_s"].tolist()[:2] == pytest.approx([0.111, 0.040])  # a span: layers overlap
    assert with_layers["sum_s"].tolist()[:2] == pytest.approx([0.180, 0.038])
    assert with_layers["ok"].tolist() == [True, True, False]
    assert set(pulls.loc[pulls["layers"] == 0, "client"]) == {"c2"}
    pushes = vw.image_pushes(df)
    assert list(pushes["client"]) == ["c4", "c6"]
    assert list(pushes["requests"]) == [4, 3] and list(pushes["layers"]) == [1, 1]
    assert pushes["span_s"].tolist() == pytest.approx([0.090, 0.040])
    assert pushes["sum_s"].tolist() == pytest.approx([0.084, 0.034])

    views = vw.seed_views({"a": df}, {"a": ["a"]}, vw.Selection())
    table = per_run(views, "a")
    assert table.loc["all GET", ["n", "failed"]].tolist() == [10, 1]
    assert table.loc["all GET", "mean_ms"] == pytest.approx(27.8)
    assert table.loc["total push", "n"] == 6 and table.loc["total push", "mean_ms"] == pytest.approx(95.0)
    pull = table.loc["image pull"]
    assert (pull["n"], pull["failed"], pull["without_layers"]) == (2, 1, 1)
    assert pull["mean_ms"] == pytest.approx(75.5) and pull["max_ms"] == pytest.approx(111.0)
    assert pull["p50_ms"] == pytest.approx(40.0)  # nearest rank 1 of 2
    assert table.loc["image push", ["n", "mean_ms"]].tolist() == pytest.approx([2, 65.0])

    size = views.latency_size
    layers = size[size["request"] == "GET blob"].set_index("size_bin")
    assert layers["n"].to_dict() == {"1 kB–10 kB": 2, "10 kB–100 kB": 1, "100 kB–1 MB": 1, "1 MB–10 MB": 2}
    assert layers["mean_ms"].to_dict() == pytest.approx(
        {"1 kB–10 kB": 20.0, "10 kB–100 kB": 20.0, "100 kB–1 MB": 40.0, "1 MB–10 MB": 75.0}
    )
    assert layers.loc["1 MB–10 MB", ["size_low_bytes", "size_high_bytes"]].tolist() == [1e6, 1e7]
    # the failed 500 and the helper are in no bin; the bodiless POST is in the first
    assert size.set_index("request").loc["POST blob", "size_bin"] == "0 B–1 kB"
    assert size.set_index("request").loc["POST blob", "n"] == 2
    # 1,000 bytes is on an edge: in the bin it starts
    put = size[size["request"] == "PUT blob"].set_index("size_bin")
    assert put["n"].to_dict() == {"0 B–1 kB": 3, "1 kB–10 kB": 1}


def _analyze(tmp_path: Path, name: str, *argv: str) -> Path:
    out = tmp_path / name
    assert main(["analyze", "results", *argv, "--out", str(out)]) == 0
    return out


def _per_run(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "image_latency.csv").set_index(["run", "view"])


def test_cli_writes_the_views_and_the_options_change_them(tmp_path, capsys):
    run = write_run(tmp_path / "a")
    out = _analyze(tmp_path, "all", str(run))
    for name in ("latency_size", "mean_latency"):
        assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "report.html").read_text()
    assert "Latency by object size, image pulls and pushes" in html
    assert html.count("data:image/png;base64,") == 6  # 4 of every run without intended starts, and the views' 2
    table = _per_run(out)
    assert table.loc[("a", "all GET"), "mean_ms"] == pytest.approx(27.8)
    assert table.loc[("a", "image pull"), "mean_ms"] == pytest.approx(75.5)
    size = pd.read_csv(out / "latency_size.csv")
    big = size[(size["request"] == "GET blob") & (size["size_low_bytes"] == 1e6)]
    assert big["mean_ms"].tolist() == pytest.approx([75.0])
    saved = json.loads((out / "views.json").read_text())
    assert saved["size_edges_bytes"][:3] == [0.0, 1000.0, 10000.0] and saved["size_edges_bytes"][-1] is None

    # the window: only requests started in [0, 4 s) — c5's failed pull, the push and the late GETs are out
    out = _analyze(tmp_path, "window", str(run), "--window", "0:4s")
    table = _per_run(out)
    assert table.loc[("a", "all GET"), ["n", "failed"]].tolist() == [8, 0]
    assert table.loc[("a", "all GET"), "mean_ms"] == pytest.approx(263 / 8)
    assert table.loc[("a", "image pull"), ["n", "failed"]].tolist() == [2, 0]
    assert math.isnan(table.loc[("a", "total push"), "mean_ms"])
    results = json.loads((out / "results.json").read_text())
    assert results["a"]["requests"] == 8  # the model's own numbers are of the window too
    assert "a: left out 13 rows outside the window, 0 over the latency cut" in capsys.readouterr().out

    # the latency cut: the 500 after 2.5 s, the 500 ms PUT and the 9 s helper are out, and said
    out = _analyze(tmp_path, "cut", str(run), "--max-latency", "200ms")
    table = _per_run(out)
    assert table.loc[("a", "total push"), "mean_ms"] == pytest.approx(14.0)
    assert table.loc[("a", "image pull"), ["n", "failed", "without_layers"]].tolist() == [2, 0, 2]
    assert "3 over the latency cut (1 of them failed)" in capsys.readouterr().out
    saved = json.loads((out / "views.json").read_text())
    assert saved["selection"]["left_out"]["a"]["over_max_latency"] == 3


def test_groups_and_repetitions_make_bars_with_intervals(tmp_path):
    reps = tmp_path / "local"
    write_run(reps / "rep-1")
    write_run(reps / "rep-2", scale=2.0)  # every latency doubled: all GET mean 55.6 ms
    other = write_run(tmp_path / "other", scale=3.0)
    out = _analyze(tmp_path, "bars", str(reps), "--group", f"slow={other}")
    bars = pd.read_csv(out / "mean_latency.csv").set_index(["group", "view"])
    local = bars.loc[("local", "all GET")]
    assert (local["runs"], local["n"]) == (2, 20)
    assert local["mean_ms"] == pytest.approx((27.8 + 55.6) / 2)
    # t interval over 2 run means: mean ± t(0.975, 1 df) · sd / √2, t = 12.7062 (a t table's value)
    sd = abs(55.6 - 27.8) / math.sqrt(2)
    assert local["sd_ms"] == pytest.approx(sd)
    assert local["ci_low_ms"] == pytest.approx(41.7 - 12.7062 * sd / math.sqrt(2), rel=1e-4)
    assert local["ci_high_ms"] == pytest.approx(41.7 + 12.7062 * sd / math.sqrt(2), rel=1e-4)
    slow = bars.loc[("slow", "all GET")]
    assert slow["runs"] == 1 and slow["mean_ms"] == pytest.approx(3 * 27.8) and math.isnan(slow["ci_low_ms"])
    saved = json.loads((out / "views.json").read_text())
    assert saved["groups"] == {"local": ["rep-1", "rep-2"], "slow": ["other"]}

    # two named groups over the same runs: one run each, so no interval; the names are the user's
    # (run directories first: --group takes every word after it until the next option)
    out = _analyze(tmp_path, "named", str(other), "--group", f"eu={reps / 'rep-1'}", "--group", f"us={reps / 'rep-2'}")
    bars = pd.read_csv(out / "mean_latency.csv").set_index(["group", "view"])
    assert bars.loc[("us", "all GET"), "mean_ms"] == pytest.approx(55.6)
    assert set(bars.index.get_level_values("group")) == {"eu", "us", "other"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--window", "60:10"], "--window: FROM must be before TO"),
        (["--window", "soon"], "--window: expected FROM:TO"),
        (["--window", "0:abc"], "--window: not a duration"),
        (["--max-latency", "0"], "--max-latency: must be longer than 0 s"),
        (["--group", "nameless"], "--group: expected NAME=RUN"),
        (["--window", "300:400s"], "--window 300:400s: no trace request of the run a is left"),
        (["--max-latency", "1ms"], "--max-latency 0.001s: no trace request of the run a is left"),
    ],
)
def test_bad_options_are_one_line(tmp_path, capsys, argv, message):
    run = write_run(tmp_path / "a")
    try:
        code = main(["analyze", "results", str(run), *argv, "--out", str(tmp_path / "o")])
    except SystemExit as e:  # argparse's refusals exit; the others return the code
        code = e.code
    assert code == 2 and not (tmp_path / "o" / "report.html").exists()
    err = capsys.readouterr().err.strip()
    assert err.startswith("drtp analyze results: error: ") and message in err and "\n" not in err


@pytest.mark.registry
def test_real_run_pulls_are_the_ones_a_plain_loop_finds(real_runs, tmp_path):
    """On a real replay: every pull the view found, found again by walking the rows one by one."""
    run = shutil.copytree(real_runs.as_is, tmp_path / "run")
    df = load_requests(run / "requests.csv")
    rows = df[~df["auxiliary"] & (df["method"] == "GET")].sort_values(
        ["start_s", "kind"], key=lambda s: s if s.name == "start_s" else s.ne("manifest")
    )
    open_pulls: dict[tuple[str, str], dict] = {}
    found = []
    for r in rows.itertuples():
        key = (r.client, r.repository)
        if r.kind == "manifest":
            pull = {"client": r.client, "start": r.start_s, "end": r.end_s, "layers": 0, "ok": r.ok, "alive": True}
            open_pulls[key] = pull
            found.append(pull)
        elif key in open_pulls and open_pulls[key]["alive"]:
            pull = open_pulls[key]
            if r.start_s > pull["end"] + vw.GAP_S:
                pull["alive"] = False
                continue
            pull.update(end=max(pull["end"], r.end_s), layers=pull["layers"] + 1, ok=pull["ok"] and r.ok)
    by_loop = sorted((p["client"], round(p["start"], 6), round(p["end"] - p["start"], 6), p["layers"]) for p in found)
    pulls = vw.image_pulls(df)
    by_view = sorted(
        zip(pulls["client"], pulls["start_s"].round(6), pulls["span_s"].round(6), pulls["layers"], strict=True)
    )
    assert by_view == by_loop
    assert sum(p["layers"] > 0 for p in found) >= 10  # the real trace has pulls with layers
    # and the CLI's table says the same of them
    out = _analyze(tmp_path, "real", str(run))
    table = _per_run(out).loc[("run", "image pull")]
    spans = [p["end"] - p["start"] for p in found if p["layers"] and p["ok"]]
    assert table["n"] == len(spans)
    assert table["mean_ms"] == pytest.approx(1000 * sum(spans) / len(spans))


@pytest.mark.registry
def test_the_cut_applies_to_the_traces_recorded_latencies(real_runs, tmp_path):
    from drtp.analysis.results import trace_latencies

    ids = set(load_requests(real_runs.stress / "requests.csv")["trace_id"]) - {""}
    recorded = trace_latencies([str(real_runs.trace)], ids)["latency_s"]  # the records the run replayed
    cut = float(recorded.median())
    over = int((recorded > cut).sum())
    assert over > 0
    out = _analyze(tmp_path, "cut", str(real_runs.stress), "--trace", str(real_runs.trace), "--max-latency", f"{cut}")
    results = json.loads((out / "results.json").read_text())
    assert results["ibm-trace-data"]["latency_s"]["max"] <= cut < float(recorded.max())
    left_out = json.loads((out / "views.json").read_text())["selection"]["left_out"]
    assert left_out["ibm-trace-data"]["over_max_latency"] == over
