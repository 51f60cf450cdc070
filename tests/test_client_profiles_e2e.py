"""Client profiles end to end: ``drtp run`` through client nodes against a real registry, judged by its log.

A real containerd's pulls (``ctr content fetch``) are captured as a trace and replayed with ``profile:
containerd``: the registry must see the pulls on as many connections as containerd used, with containerd's
User-Agent.  A generated trace replayed with ``user_agent: trace`` must reach the registry with the trace's
own user agents.
"""

from __future__ import annotations

import importlib.util
import json
from collections import defaultdict
from pathlib import Path

import pytest

from drtp.master.run import run_replay
from drtp.master.warmup import run_warmup
from drtp.registry.local import LocalRegistry
from drtp.trace.reader import TraceReader
from tests.containerd_support import available, capture_pulls
from tests.registry_log import log_entries, user_agents
from tests.replay_support import make_trace, write_config

pytestmark = pytest.mark.registry


def _replay(tmp_path: Path, trace: Path, nodes, name: str, **client_info) -> tuple[LocalRegistry, int]:
    """Warm up a fresh registry and replay ``trace`` in stress mode; the registry and its log offset after warmup
    (kept open by the caller's ``with``)."""
    work = tmp_path / name
    work.mkdir()
    reg = LocalRegistry(work / "registry").start()
    cfg = write_config(work, trace, [reg.host], [n.address for n in nodes], **client_info)
    run_warmup(cfg, quiet=True)
    offset = reg.log_path.stat().st_size
    summary = run_replay(cfg, work / "run", quiet=True)
    assert summary["failed"] == 0, json.dumps(summary)[:2000]
    return reg, offset


def _request_agents(log_path: Path, offset: int) -> set[str]:
    """The User-Agents of the requests after ``offset`` other than ``/v2/`` pings (the run's preflight is drtp's)."""
    return {
        e["http.request.useragent"]
        for e in log_entries(log_path, offset)
        if str(e.get("msg", "")).startswith("response completed") and e["http.request.uri"] != "/v2/"
    }


def test_a_replay_sends_the_traces_own_user_agents(tmp_path: Path, nodes) -> None:
    trace = make_trace(tmp_path / "trace.json", requests=150)
    wanted = {r.useragent for r in TraceReader([trace], user_agent=True)}
    assert len(wanted) > 1  # the generator gives clients different Docker versions
    reg, offset = _replay(tmp_path, trace, nodes, "trace-agents", user_agent="trace")
    with reg:
        assert _request_agents(reg.log_path, offset) == wanted
    reg, offset = _replay(tmp_path, trace, nodes, "own-agent")
    with reg:
        (own,) = _request_agents(reg.log_path, offset)
        assert own.startswith("drtp")


def _connections_per_image(log_path: Path, offset: int = 0) -> dict[str, set[str]]:
    """Repository (one per image) -> the client connections (remote host:port) its pull's requests came on."""
    out: dict[str, set[str]] = defaultdict(set)
    for e in log_entries(log_path, offset, settle_s=0.3):
        if str(e.get("msg", "")).startswith("response completed") and "/v2/team/" in e["http.request.uri"]:
            out[e["http.request.uri"].split("/")[3]].add(e["http.request.remoteaddr"])
    return dict(out)


@pytest.mark.skipif(not available(), reason="containerd/ctr not installed (scripts/install.sh)")
@pytest.mark.skipif(
    importlib.util.find_spec("drtp.client.client_gate") is None,
    reason="needs the per-client gate (client/client_gate.py) that lets one client's requests overlap",
)
def test_containerds_pulls_replay_on_containerds_connections(tmp_path: Path, nodes) -> None:
    """ctr fetches each image's layers at most 3 at once, each on a connection of its own; the replay of its
    captured pulls with profile containerd uses as many connections per image, sends containerd's agent, and
    keeps 2 idle between images (so the second pull opens fewer new ones than ctr, a new process, did)."""
    pulls = capture_pulls(tmp_path / "capture", count=2, layers=4, layer_size=1_000_000)
    theirs = _connections_per_image(pulls.log)
    (agent,) = set(user_agents(pulls.log, settle_s=0))
    assert sorted(theirs) == ["app0", "app1"] and all(len(c) >= 3 for c in theirs.values()), theirs

    reg, offset = _replay(tmp_path, pulls.trace, nodes, "containerd", profile="containerd", engine="loop")
    with reg:
        ours = _connections_per_image(reg.log_path, offset)
        assert {k: len(v) for k, v in ours.items()} == {k: len(v) for k, v in theirs.items()}
        assert _request_agents(reg.log_path, offset) == {agent}
        assert len(set().union(*ours.values())) < len(set().union(*theirs.values()))

    reg, offset = _replay(tmp_path, pulls.trace, nodes, "one-at-a-time", profile="containerd", client_concurrency=1)
    with reg:
        assert all(len(c) == 1 for c in _connections_per_image(reg.log_path, offset).values())
