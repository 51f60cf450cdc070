"""Results that reach the master after their interval's row of stats_history.csv was written, for real.

A real ``drtp run`` (a subprocess: its exit code counts) through two client nodes and the fault proxy to a
real Distribution registry.  The proxy answers a few upload PATCHes with 503, so the node cancels each of
those uploads with a helper DELETE, and it holds the answers to those DELETEs: the PATCH's row ends when its
503 came, but its result (and its node's interval part) reaches the master only after the DELETE, seconds
later.  With the write lag at 0 (``DRTP_STATS_WRITE_LAG_S``, drtp.master.outputs.stats_history) the master writes an
interval's row as soon as the interval is over, and it looks at least once a second while it waits for
results, so each such part comes after its row was written: it must count in a later row, be counted as
late, and the run must end as any other.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from drtp.master.outputs.stats_history import WRITE_LAG_ENV
from drtp.master.run.warmup import run_warmup
from drtp.registry.local import LocalRegistry
from drtp.replay.result_row import parse_cells
from drtp.replay.stats_file import STATS_FILE
from tests.faultproxy import Chosen, FaultProxy
from tests.replay_support import make_trace, write_config

pytestmark = pytest.mark.registry

HOLD_S = 3.0  # how long the proxy holds an upload cancel's answer: longer than the master's longest wait
FAULTED_PATCHES = 3  # upload PATCHes answered 503 (each then cancelled by a held DELETE)
INTERVAL_S = 0.25  # --stats-interval: many rows, each written long before the held results come


def held_cancels(method: str, path: str) -> float:
    """The proxy's added latency: only the answers to upload cancels (DELETE of an upload session) wait."""
    return HOLD_S if method == "DELETE" and "/blobs/uploads/" in path else 0.0


@pytest.fixture(scope="module")
def warmed(tmp_path_factory, nodes):
    """A registry warmed up directly (no proxy) for a small generated trace with uploads: (registry, trace, map)."""
    workdir = tmp_path_factory.mktemp("late-warm")
    trace = make_trace(workdir / "trace.json", requests=300, span=20.0)
    with LocalRegistry(workdir / "registry") as reg:
        run_warmup(write_config(workdir, trace, [reg.host], [n.address for n in nodes]), quiet=True)
        yield reg, trace, workdir / "warmup-map.jsonl"


@pytest.mark.parametrize("engine", ["loop", "threads"])
def test_results_that_come_after_their_interval_was_written_count_in_a_later_row_and_the_run_ends_well(
    tmp_path: Path, warmed, nodes, engine: str
):
    reg, trace, warm_map = warmed
    shutil.copy(warm_map, tmp_path / "warmup-map.jsonl")
    run_dir = tmp_path / "run"
    # the loop engine replays as fast as it can (stress); the thread engine as is, as the trace timed it
    mode = {"wait": True, "speedup": 4.0} if engine == "threads" else {}
    plan = Chosen(kinds=("503",), per_kind=FAULTED_PATCHES, start=0, gap=1, methods=("PATCH",))
    with FaultProxy(reg.host, plan, latency=held_cancels) as proxy:
        write_config(tmp_path, trace, [proxy.address], [n.address for n in nodes], engine=engine, **mode)
        cmd = [sys.executable, "-m", "drtp.cli", "run", "-c", str(tmp_path / "config.yaml"), "--out", str(run_dir)]
        cmd += ["--stats-interval", str(INTERVAL_S), "--max-failed", "10%", "-q"]
        env = dict(os.environ, **{WRITE_LAG_ENV: "0"})
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        assert proxy.errors == []
        held = [f for f in proxy.forwarded if held_cancels(f.method, f.path)]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [f.kind for f in proxy.injected] == ["503"] * FAULTED_PATCHES
    assert len(held) >= FAULTED_PATCHES  # each faulted PATCH's upload was cancelled, its answer held
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] is True
    with open(run_dir / "requests.csv", newline="") as f:
        lines = csv.reader(f)
        next(lines)
        trace_rows = [row for row in map(parse_cells, lines) if not row.auxiliary]
    assert len(trace_rows) == summary["requests"] == summary["trace_requests"]
    failed = [row for row in trace_rows if not row.ok]
    assert [(row.method, row.status) for row in failed] == [("PATCH", 503)] * FAULTED_PATCHES
    # late parts were seen: results that came after their interval's row was written, counted in a later one
    assert summary["stats_history_late"] > 0
    with open(run_dir / STATS_FILE, newline="") as f:
        history = list(csv.DictReader(f))
    assert len(history) > 1
    # ... and none was lost: the rows of stats_history.csv count what requests.csv holds
    assert sum(int(h["requests"]) for h in history) == len(trace_rows)
    assert sum(int(h["failures"]) for h in history) == len(failed)
    assert sum(int(h["bytes"]) for h in history) == sum(row.bytes for row in trace_rows)
