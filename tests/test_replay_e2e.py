"""End to end: warm up and replay a generated trace through two client nodes against a real registry.

The registry's own JSON log is the judge of what was sent.
"""

from __future__ import annotations

import csv
import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from drtp.master.run.replay import run_replay
from drtp.master.run.warmup import run_warmup
from drtp.registry.local import LocalRegistry
from drtp.replay.result_row import parse_cells
from drtp.replay.summary import ResultsModel
from drtp.trace.reader import TraceReader
from tests.replay_support import log_tail, make_trace, method_kind_counts, write_config

pytestmark = pytest.mark.registry


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return make_trace(tmp_path_factory.mktemp("trace") / "trace.json")


@pytest.mark.parametrize("route", [False, True], ids=["round-robin", "hash"])
@pytest.mark.parametrize(
    "wait, engine", [(False, "auto"), (False, "threads"), (True, "auto")], ids=["stress", "stress-threads", "as-is"]
)
def test_replay_matches_trace_and_registry_log(tmp_path, nodes, trace, route, wait, engine):
    """Stress mode runs on the nodes' event loop (auto) or their thread pool; as-is on the thread pool."""
    records = list(TraceReader([trace]))
    with LocalRegistry(tmp_path / "registry") as reg:
        cfg = write_config(
            tmp_path, trace, [reg.host], [n.address for n in nodes], route=route, wait=wait, speedup=10.0, engine=engine
        )
        run_warmup(cfg, quiet=True)
        offset = reg.log_path.stat().st_size
        summary = run_replay(cfg, tmp_path / "run", quiet=True)
        sent = log_tail(reg.log_path, offset, tmp_path / "run.log")

    df = pd.read_csv(tmp_path / "run" / "requests.csv", keep_default_na=False, na_values=[""])
    main = df[~df.auxiliary]
    aux = df[df.auxiliary]

    # one row per trace record, in the trace's methods, every one as the trace had it
    assert len(main) == len(records)
    assert Counter(zip(main.method, main.kind, strict=False)) == method_kind_counts(records)
    assert set(main.trace_id) == {r.id for r in records}
    bad = main[~main.ok]
    assert bad.empty, bad[["method", "kind", "reference", "status", "error"]].to_string()
    assert (main.status == main.expected_status).all()

    # the registry saw exactly the trace's requests plus the helper requests reported as auxiliary
    expected = method_kind_counts(records) + Counter(zip(aux.method, aux.kind, strict=False))
    assert method_kind_counts(sent) == expected
    # PUT manifests stayed PUTs and were accepted as real manifests
    assert sum(1 for r in sent if r.method == "PUT" and r.kind == "manifest" and r.status == 201) == sum(
        1 for r in records if r.method == "PUT" and r.kind == "manifest"
    )
    # reads after a push hit the new digest: the only 404s are the trace's own (tags never pushed, new layers)
    assert Counter((r.method, r.kind) for r in sent if r.status == 404) == Counter(
        (r.method, r.kind) for r in records if r.status == 404
    )
    pushed = set(main[(main.method == "PUT") & (main.kind == "blob")].digest)
    read = set(main[(main.method == "GET") & (main.kind == "blob")].digest)
    assert pushed & read, "no layer pushed during the run was read afterwards: the trace does not test remapping"

    if route:  # hash routing keeps each trace client on one node
        assert (main.groupby("client").node.nunique() == 1).all()
    else:
        assert main.node.nunique() == 2

    # summary.json agrees with requests.csv
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    assert summary["requests"] == len(main)
    assert summary["succeeded"] == int(main.ok.sum())
    assert summary["failed"] == int((~main.ok).sum())
    assert summary["auxiliary"]["requests"] == len(aux)
    assert summary["failures"] == {} and summary["auxiliary"]["failed"] == int((~aux.ok).sum())
    assert summary["bytes"] == int(main.bytes.sum())
    ok = main[main.ok]
    for p in (50, 90, 99):
        exact = np.percentile(ok.latency_s, p, method="inverted_cdf")
        assert summary["latency_s"][f"p{p}"] == pytest.approx(exact, rel=2e-3, abs=2e-6)
    assert summary["latency_s"]["max"] == pytest.approx(ok.latency_s.max(), abs=2e-6)
    # the summary is merged from the nodes' own models: every count and percentile equals the one the same
    # model computes from all the rows of requests.csv (as drtp analyze results does); a mean may differ in
    # its last digit (a float sum added in another order)
    from_file = ResultsModel(wait, on_disk["on_time_s"] if wait else 0.0)
    with open(tmp_path / "run" / "requests.csv", newline="") as f:
        lines = csv.reader(f)
        next(lines)
        for values in lines:
            from_file.add(parse_cells(values))
    assert _without_means(from_file.summary()) == _without_means({k: v for k, v in summary.items() if k in
                                                                  from_file.summary()})  # fmt: skip
    end = (main.start_s + main.latency_s).max()
    assert summary["duration_s"] == pytest.approx(end - main.start_s.min(), abs=1e-5)
    for key, group in main.groupby(main.method + " " + main.kind):
        assert summary["per_method"][key]["requests"] == len(group)
    for node, group in main.groupby("node"):
        assert summary["per_node"][node]["requests"] == len(group)
    assert summary["status_matched"] == pytest.approx((main.status == main.expected_status).mean())
    if wait:
        late = (main.start_s - main.intended_s).clip(lower=0)
        assert summary["lateness_s"]["p99"] == pytest.approx(
            np.percentile(late, 99, method="inverted_cdf"), rel=2e-3, abs=2e-6
        )
        assert (main.start_s >= main.intended_s - 1e-3).all()  # never started before its time
        t0 = records[0].time  # intended start = the trace's offset, sped up 10×
        intended = {r.id: (r.time - t0) / 10.0 for r in records}
        assert np.allclose(main.intended_s, main.trace_id.map(intended), atol=2e-6)
        resp = ok.response_s
        assert np.allclose(resp, ok.latency_s + (ok.start_s - ok.intended_s), atol=2e-6)
    else:
        assert main.intended_s.isna().all()


def test_replay_spreads_repositories_over_several_registries(tmp_path, nodes, trace):
    records = list(TraceReader([trace]))
    with LocalRegistry(tmp_path / "r1") as r1, LocalRegistry(tmp_path / "r2") as r2:
        cfg = write_config(tmp_path, trace, [r1.host, r2.host], [n.address for n in nodes])
        run_warmup(cfg, quiet=True)
        offsets = [r.log_path.stat().st_size for r in (r1, r2)]
        summary = run_replay(cfg, tmp_path / "run", quiet=True)
        sent = [
            log_tail(r.log_path, o, tmp_path / f"{i}.log")
            for i, (r, o) in enumerate(zip((r1, r2), offsets, strict=False))
        ]
    assert summary["requests"] == len(records) and summary["failed"] == 0
    assert all(sent), "each registry got part of the run"
    repos = [{r.repository for r in s} for s in sent]
    assert not repos[0] & repos[1], "a repository lives on one registry"
    assert sum(len(s) for s in sent) == len(records) + summary["auxiliary"]["requests"]


def _without_means(d):
    """A summary with its means dropped and other floats as they are (compared exactly)."""
    if isinstance(d, dict):
        return {k: _without_means(v) for k, v in d.items() if k != "mean"}
    return d
