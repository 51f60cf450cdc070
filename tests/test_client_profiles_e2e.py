"""Client profiles end to end: ``drtp run`` through client nodes against a real registry, judged by its log.

A real containerd's pulls (``ctr content fetch``) are captured as a trace and replayed with ``profile:
containerd``: the registry must see the pulls on connections kept as containerd keeps them (per image no more
than ran at once, fewer in all than ctr opened), with containerd's User-Agent.  A generated trace replayed
with ``user_agent: trace`` must reach the registry with the trace's own user agents.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

from drtp.master.run.replay import run_replay
from drtp.master.run.warmup import run_warmup
from drtp.registry.local import LocalRegistry
from drtp.replay.client_profiles import PROFILES
from drtp.trace.reader import TraceReader
from tests.containerd_support import available, capture_pulls, most_at_once
from tests.registry_log import log_entries, user_agents
from tests.replay_support import make_trace, write_config

pytestmark = pytest.mark.registry


def _replay(tmp_path: Path, trace: Path, nodes, name: str, **client_info) -> tuple[LocalRegistry, int]:
    """Warm up a fresh registry and replay ``trace`` in stress mode; the registry (still running: the caller
    closes it) and its log offset after warmup."""
    work = tmp_path / name
    work.mkdir()
    reg = LocalRegistry(work / "registry").start()
    try:
        cfg = write_config(work, trace, [reg.host], [n.address for n in nodes], **client_info)
        run_warmup(cfg, quiet=True)
        offset = reg.log_path.stat().st_size
        summary = run_replay(cfg, work / "run", quiet=True)
        assert summary["failed"] == 0, json.dumps(summary)[:2000]
    except BaseException:
        reg.close()
        raise
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
    try:
        assert _request_agents(reg.log_path, offset) == wanted
    finally:
        reg.close()
    reg, offset = _replay(tmp_path, trace, nodes, "own-agent")
    try:
        (own,) = _request_agents(reg.log_path, offset)
        assert own.startswith("drtp")
    finally:
        reg.close()


def _connections_per_image(log_path: Path, offset: int = 0) -> dict[str, set[str]]:
    """Repository (one per image) -> the client connections (remote host:port) its pull's requests came on."""
    out: dict[str, set[str]] = defaultdict(set)
    for e in log_entries(log_path, offset, settle_s=0.3):
        if str(e.get("msg", "")).startswith("response completed") and "/v2/team/" in e["http.request.uri"]:
            out[e["http.request.uri"].split("/")[3]].add(e["http.request.remoteaddr"])
    return dict(out)


SLOW_BLOB_S = 0.1  # added to blob GETs by the proxy: a registry farther away than loopback, so overlaps show


@pytest.mark.skipif(not available(), reason="containerd/ctr not installed (scripts/install.sh)")
@pytest.mark.parametrize("wait", [False, True], ids=["stress-loop", "as-is-threads"])
def test_containerds_pulls_replay_on_containerds_connections(tmp_path: Path, registry, nodes, wait: bool) -> None:
    """ctr fetches an image's layers up to 3 at once, each at once on a connection of its own, and (a new
    process per pull) opens new ones for every image.  The replay of its captured pulls with profile
    containerd, behind a proxy that slows blob GETs (one registry connection per client connection): per
    image, as many connections as requests ran at once (no fewer than the proxy saw, no more than the node
    ran, and at most containerd's three downloads); between images the two idle ones are kept, so the replay
    opens fewer in all than ctr; every request carries containerd's agent (the
    profile's, or with ``user_agent: trace`` the one ctr sent)."""
    from tests.faultproxy import FaultProxy

    pulls = capture_pulls(tmp_path / "capture", count=3, layers=4, layer_size=1_000_000)
    theirs = _connections_per_image(pulls.log)
    (agent,) = set(user_agents(pulls.log, settle_s=0))
    assert sorted(theirs) == ["app0", "app1", "app2"] and all(len(c) >= 2 for c in theirs.values()), theirs

    trace = pulls.trace  # manifests read by digest, as ctr does: warmup pushes them under their own digests
    nodes_at = [n.address for n in nodes]
    run_warmup(write_config(tmp_path, trace, [registry.host], nodes_at), quiet=True)
    offset = registry.log_path.stat().st_size
    slow = lambda method, path: SLOW_BLOB_S if method == "GET" and "/blobs/" in path else 0.0  # noqa: E731
    with FaultProxy(registry.host, latency=slow) as proxy:
        # stress: the trace's own user agent (ctr's), as is: the profile's
        agents = {} if wait else {"user_agent": "trace"}
        cfg = write_config(tmp_path, trace, [proxy.address], nodes_at, wait=wait, profile="containerd", **agents)
        summary = run_replay(cfg, tmp_path / "run", quiet=True)
        assert proxy.errors == [] and summary["failed"] == 0
        forwarded = proxy.forwarded
    ours = _connections_per_image(registry.log_path, offset)
    rows = pd.read_csv(tmp_path / "run" / "requests.csv")
    at_once = {}
    for image, conns in ours.items():
        # the proxy's spans end when it has written the answer, before the node has read it all and handed
        # its connection back: a floor.  The node's own spans hold each connection's use (taken after the
        # request's start, given back before its end is taken): a ceiling.
        at_once[image] = most_at_once([(f.received, f.answered) for f in forwarded if f"/v2/team/{image}/" in f.path])
        mine = rows[rows["repository"] == f"team/{image}"]
        node_at_once = most_at_once(list(zip(mine["start_s"], mine["start_s"] + mine["latency_s"], strict=True)))
        assert at_once[image] <= len(conns) <= node_at_once <= PROFILES["containerd"].downloads, (
            image,
            conns,
            at_once,
            node_at_once,
        )
    assert max(at_once.values()) >= 2, at_once  # containerd's parallel downloads, replayed
    assert len(set().union(*ours.values())) < len(set().union(*theirs.values()))
    assert _request_agents(registry.log_path, offset) == {PROFILES["containerd"].user_agent if wait else agent}
