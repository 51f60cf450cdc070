"""Replay under failure: wrong secret, malformed batches, a client node killed, the registry stopped."""

from __future__ import annotations

import json
import signal
import threading
import time

import msgspec
import pandas as pd
import pytest
import requests

from drtp.config import load_config
from drtp.errors import DrtpError
from drtp.master.outputs.live_metrics import LiveMetrics, LiveSettings
from drtp.master.run.nodes import NodeLink
from drtp.master.run.replay import run_replay
from drtp.master.run.warmup import run_warmup
from drtp.registry.local import LocalRegistry
from drtp.replay.messages import RunSpec
from drtp.replay.outcome import LOST
from drtp.replay.signing import sign
from tests.replay_support import TOKEN, Node, make_trace, write_config

pytestmark = pytest.mark.registry


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    yield n
    n.stop()


def test_client_refuses_requests_without_the_secret(tmp_path, node):
    base = f"http://{node.address}"
    spec = msgspec.json.encode(RunSpec("r1", time.time(), registries=["127.0.0.1:9"]))
    assert requests.get(f"{base}/health", timeout=5).status_code == 401
    assert requests.post(f"{base}/runs", data=spec, timeout=5).status_code == 401
    forged = sign("another-secret-000", "POST", "/runs", spec)
    assert requests.post(f"{base}/runs", data=spec, headers=forged, timeout=5).status_code == 401
    # a signature over another body does not carry over
    other = sign(TOKEN, "POST", "/runs", b"{}")
    assert requests.post(f"{base}/runs", data=spec, headers=other, timeout=5).status_code == 401
    # a stale signature is refused
    stale = sign(TOKEN, "POST", "/runs", spec)
    stale["X-Drtp-Time"] = f"{time.time() - 3600:.3f}"
    assert requests.post(f"{base}/runs", data=spec, headers=stale, timeout=5).status_code == 401
    good = sign(TOKEN, "POST", "/runs", spec)
    assert requests.post(f"{base}/runs", data=spec, headers=good, timeout=5).status_code == 201
    # the master with the wrong secret stops with one clear line naming the node
    with pytest.raises(DrtpError, match=f"{node.address} refused the shared secret"):
        NodeLink(node.address, "wrong-secret-000", None).check()
    node.stop()
    assert node.log.read_text().count("refused") >= 5


def test_client_rejects_malformed_batches_and_keeps_serving(tmp_path, node):
    link = NodeLink(node.address, TOKEN, None)
    assert (
        link.call(
            "POST", "/runs", msgspec.json.encode(RunSpec("r2", time.time(), registries=["127.0.0.1:9"]))
        ).status_code
        == 201
    )
    for body in (b"not json", b'{"run": "r2"}', b'{"run": "r2", "requests": [{"seq": "x"}]}', b"[1,2,3]"):
        r = link.call("POST", "/runs/r2/batch", body)
        assert r.status_code == 400, body
        assert "malformed batch" in r.json()["error"]
    assert link.call("POST", "/runs/nope/batch", b'{"run":"nope","requests":[]}').status_code == 404
    assert link.call("POST", "/runs", b"{").status_code == 400
    assert link.check()["ok"] is True
    ok = link.call("POST", "/runs/r2/batch", b'{"run": "r2", "requests": []}')
    assert ok.status_code == 202 and ok.json() == {"accepted": 0}


def _read_rows(run_dir):
    df = pd.read_csv(run_dir / "requests.csv", keep_default_na=False, na_values=[""])
    return df[~df.auxiliary]


def test_a_killed_client_node_is_reported_and_the_run_finishes(tmp_path):
    trace = make_trace(tmp_path / "trace.json", requests=400, span=40.0)
    nodes = [Node(tmp_path), Node(tmp_path)]
    try:
        with LocalRegistry(tmp_path / "registry") as reg:
            cfg = write_config(
                tmp_path, trace, [reg.host], [n.address for n in nodes], wait=True, speedup=8.0, inflight=100
            )
            run_warmup(cfg, quiet=True)
            killer = threading.Timer(1.5, nodes[1].kill)
            killer.start()
            live = LiveMetrics(LiveSettings(0, linger_s=0))  # not listening: its families are read directly
            summary = run_replay(cfg, tmp_path / "run", quiet=True, live=live)
            killer.join()
    finally:
        for n in nodes:
            n.stop()
    dead = nodes[1].address
    assert list(summary["dead_nodes"]) == [dead]
    assert summary["complete"] is True  # the survivor replayed the rest; the lost requests count as failed
    lost = summary["dead_nodes"][dead]["lost"]
    assert lost > 0
    rows = _read_rows(tmp_path / "run")
    assert len(rows) == 400 and summary["requests"] == 400 and summary["not_sent"] == 0
    lost_rows = rows[rows.error.fillna("").str.startswith("lost: client node")]
    assert len(lost_rows) == lost == summary["lost"]
    assert (lost_rows.node == dead).all()
    # the survivor carried on: it answered before and after the kill
    alive = rows[rows.node == nodes[0].address]
    assert alive.ok.sum() > 0 and alive.start_s.max() > 2.0
    assert summary["per_node"][nodes[0].address]["succeeded"] > 0
    # live metrics count the requests lost with the node too, as summary.json does
    (total,) = [f for f in live.families() if f.name == "drtp_requests"]
    by_outcome: dict[str, float] = {}
    for sample in total.samples:
        if sample.name == "drtp_requests_total":
            by_outcome[sample.labels["outcome"]] = by_outcome.get(sample.labels["outcome"], 0) + sample.value
    assert sum(by_outcome.values()) == 400 and by_outcome[LOST] == lost
    # and the nodes' load reached its gauges (the survivor's, at least)
    (cpu,) = [f for f in live.families() if f.name == "drtp_node_cpu_ratio"]
    assert nodes[0].address in {s.labels["node"] for s in cpu.samples}


def test_a_registry_stopped_mid_run_gives_failed_rows_not_a_crash(tmp_path):
    trace = make_trace(tmp_path / "trace.json", requests=300, span=30.0)
    nodes = [Node(tmp_path), Node(tmp_path)]
    try:
        reg = LocalRegistry(tmp_path / "registry").start()
        try:
            cfg = write_config(tmp_path, trace, [reg.host], [n.address for n in nodes], wait=True, speedup=10.0)
            run_warmup(cfg, quiet=True)
            stopper = threading.Timer(1.5, reg.stop)
            stopper.start()
            summary = run_replay(cfg, tmp_path / "run", quiet=True)
            stopper.join()
        finally:
            reg.close()
    finally:
        for n in nodes:
            n.stop()
    rows = _read_rows(tmp_path / "run")
    assert len(rows) == 300 == summary["requests"]
    assert summary["dead_nodes"] == {}
    failed = rows[~rows.ok]
    assert summary["failed"] == len(failed) > 0
    assert summary["succeeded"] > 0
    assert (failed.status == 0).all()
    # refused once the registry is gone; a request caught mid-shutdown sees the connection dropped (reset,
    # or truncated when the answer's body had begun); a push whose helper POST was refused was not sent
    assert set(failed.outcome) <= {"refused", "reset", "truncated", "not-sent"}, failed.error.unique()
    assert (failed.outcome == "refused").sum() > 0
    assert (failed.error.str.len() > 0).all()  # every failed row says why
    # what failed started after what succeeded: the registry went away mid-run
    assert failed.start_s.min() > rows[rows.ok].start_s.min()
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["failed"] == len(failed)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_keeps_what_was_measured(tmp_path, signum):
    """SIGTERM (Slurm's time limit, scancel) stops the run as Ctrl-C does: rows kept, summary written."""
    import os
    import subprocess
    import sys

    trace = make_trace(tmp_path / "trace.json", requests=300, span=60.0)
    nodes = [Node(tmp_path), Node(tmp_path)]
    try:
        with LocalRegistry(tmp_path / "registry") as reg:
            write_config(tmp_path, trace, [reg.host], [n.address for n in nodes], wait=True, speedup=2.0)
            run_warmup(load_config(tmp_path / "config.yaml"), quiet=True)
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "drtp.cli",
                    "run",
                    "-c",
                    str(tmp_path / "config.yaml"),
                    "--out",
                    str(tmp_path / "run"),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=dict(os.environ),
            )
            time.sleep(4)
            proc.send_signal(signum)
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 130, err.decode()[-2000:]
            said = "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"
            assert f"drtp: {said}" in err.decode()
            # the nodes dropped the rest: they are idle and still serve
            for n in nodes:
                runs = NodeLink(n.address, TOKEN, None).check()["runs"]
                assert all(r["queued"] == 0 for r in runs.values())
    finally:
        for n in nodes:
            n.stop()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    rows = _read_rows(tmp_path / "run")
    assert summary["interrupted"] is True
    assert summary["complete"] is False and summary["incomplete_reason"] == "interrupted"
    assert 0 < summary["requests"] == len(rows) < 300
    assert summary["not_sent"] == 300 - len(rows)
    assert b"GET manifest" in out  # the summary table was printed
