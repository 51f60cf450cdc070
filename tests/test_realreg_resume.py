"""Resume: a run whose master is killed (SIGKILL) mid-way, resumed with --resume, ends with the
request set of an uninterrupted run — every trace request exactly once — and the summary counts them all.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter

import pandas as pd
import pytest
import yaml

from drtp.master.run.replay import run_replay
from drtp.master.run.warmup import run_warmup
from drtp.registry.local import LocalRegistry
from drtp.trace.reader import TraceReader
from tests.replay_support import Node, make_trace, write_config

pytestmark = pytest.mark.registry


def _rows(path) -> int:
    try:
        return max(0, path.read_bytes().count(b"\n") - 1)
    except FileNotFoundError:
        return 0


def test_killed_run_resumes_to_the_full_request_set(tmp_path):
    trace = make_trace(tmp_path / "trace.json", requests=400, span=40.0)
    records = list(TraceReader([trace]))
    nodes = [Node(tmp_path), Node(tmp_path)]
    try:
        with LocalRegistry(tmp_path / "registry") as reg:
            # as is, 10x faster: about 4 s, long enough to be killed in the middle
            cfg = write_config(tmp_path, trace, [reg.host], [n.address for n in nodes], wait=True, speedup=10.0)
            run_warmup(cfg, quiet=True)
            out = tmp_path / "run"
            cmd = [sys.executable, "-m", "drtp.cli", "run", "-c", str(tmp_path / "config.yaml"), "--out", str(out)]
            master = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 60
            while _rows(out / "requests.csv") < 60 and master.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            master.kill()
            master.wait()
            before = _rows(out / "requests.csv")
            assert 0 < before < len(records), "the run was not interrupted in the middle"
            assert not (out / "summary.json").exists()
            time.sleep(1.0)  # let the nodes finish what the dead master had sent
            summary = run_replay(cfg, out, quiet=True, resume=True)
    finally:
        for n in nodes:
            n.stop()

    df = pd.read_csv(out / "requests.csv", keep_default_na=False, na_values=[""])
    main = df[~df.auxiliary]
    # every trace request exactly once, as one uninterrupted run has them
    assert Counter(main.trace_id) == Counter(r.id for r in records)
    want = Counter((r.id, r.method, r.kind, r.repository, r.reference) for r in records)
    got = Counter(zip(main.trace_id, main.method, main.kind, main.repository, main.reference, strict=True))
    assert got == want
    bad = main[~main.ok]
    assert bad.empty, bad[["method", "kind", "reference", "status", "error"]].head().to_string()
    saved = json.loads((out / "summary.json").read_text())
    assert saved["requests"] == summary["requests"] == len(records)
    assert saved["not_sent"] == 0
    # the resumed part continues the timeline: its starts come after the kept rows' starts
    assert main.start_s.max() > main.start_s.iloc[: before // 2].max()
    # the replayer block covers the resumed session only, and says from when
    assert 0 < saved["replayer"]["since_s"] <= main.start_s.max()


def test_experiment_resume_skips_done_registries_and_retries_failed_ones(tmp_path):
    from drtp.config import load_config
    from drtp.master.series.experiment import run_experiment
    from drtp.registry.local import free_port

    trace = make_trace(tmp_path / "trace.json", requests=120)
    node = Node(tmp_path)
    late_port = free_port()
    try:
        with LocalRegistry(tmp_path / "a") as reg_a:
            cfg = write_config(tmp_path, trace, [], [node.address])
            path = tmp_path / "config.yaml"
            data = yaml.safe_load(path.read_text())
            data.pop("registry")
            data["registries"] = [
                {"id": "a", "url": reg_a.url, "insecure": True},
                {"id": "b", "url": f"http://127.0.0.1:{late_port}", "insecure": True},
            ]
            path.write_text(yaml.safe_dump(data))
            cfg = load_config(path)
            first = run_experiment(cfg, tmp_path / "exp", quiet=True)
            assert first["a"]["ok"] and not first["b"]["ok"]
            assert "registry b is not reachable" in first["b"]["error"]
            size_a = reg_a.log_path.stat().st_size
            with LocalRegistry(tmp_path / "b", port=late_port):
                second = run_experiment(cfg, tmp_path / "exp", quiet=True, resume=True)
            assert reg_a.log_path.stat().st_size == size_a  # a was done: nothing sent to it again
    finally:
        node.stop()
    assert second["a"] == first["a"] and second["b"]["ok"]
    df = pd.read_csv(tmp_path / "exp" / "b" / "requests.csv")
    assert Counter(df[~df.auxiliary].trace_id) == Counter(r.id for r in TraceReader([trace]))
