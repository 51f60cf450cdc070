"""A real containerd's pulls (``ctr content fetch``), captured with ``drtp capture``, replay with containerd's
parallelism: the layer downloads it overlapped overlap in the replay, never more of them at once than it
ran, and with ``client_concurrency: 1`` none.

Whether two downloads overlap in a replay depends on the client gate and on when the node gets to start
them; on a loaded machine a node may start one late enough to miss the other.  So the parallelism test
takes punctuality out: the proxy holds each download's answer until every download that started during it
in the trace has arrived (:class:`Rendezvous`).  Then each pair the trace overlapped overlaps in the
replay, unless the replay held one back until the other ended — which the hold's timeout shows."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import msgspec
import pandas as pd
import pytest

from drtp.master.run.replay import run_replay
from drtp.master.run.warmup import load_map, run_warmup
from drtp.trace.reader import read_trace
from drtp.trace.records import TraceRecord
from tests.containerd_support import available, capture_pulls, most_at_once
from tests.faultproxy import FaultProxy
from tests.replay_support import write_config

pytestmark = pytest.mark.skipif(not available(), reason="containerd/ctr not installed (scripts/install.sh)")

LATENCY_S = 0.1  # added to every blob GET: a registry farther away than loopback


def blob_latency(method: str, path: str) -> float:
    return LATENCY_S if method == "GET" and "/blobs/" in path else 0.0


def overlapping_pairs(spans: list[tuple[float, float]]) -> int:
    return sum(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in itertools.combinations(spans, 2))


class Rendezvous:
    """The proxy's latency for the replay of a capture: a blob GET's answer waits (at most ``timeout_s``)
    until every blob GET that started while it ran in the trace has reached the proxy too.

    ``later``: a download's path -> the paths of those that started during it in the trace.  A hold that
    ran out is in ``timed_out``: the replay did not send a download the trace overlapped while the other
    one ran."""

    def __init__(self, later: dict[str, set[str]], timeout_s: float = 60.0) -> None:
        self.later = later
        self.timeout_s = timeout_s
        self.arrived: set[str] = set()
        self.timed_out: list[str] = []
        self.changed = threading.Condition()

    def __call__(self, method: str, path: str) -> float:
        if method != "GET" or path not in self.later:
            return 0.0
        with self.changed:
            self.arrived.add(path)
            self.changed.notify_all()
            if not self.changed.wait_for(lambda: self.later[path] <= self.arrived, self.timeout_s):
                self.timed_out.append(path)
        return 0.0  # held already


def download_paths(tmp_path: Path, trace: Path) -> dict[str, set[str]]:
    """The trace's blob GETs as the replay sends them (the digests warmup pushed for the trace's), each with
    those that started while it ran in the trace (``Rendezvous.later``)."""
    pushed = {(e["repository"], e["reference"]): e["digest"] for e in load_map(tmp_path / "warmup-map.jsonl")}

    def path(r: TraceRecord) -> str:
        uri = r.parts
        return f"/v2/{uri.repository}/blobs/{pushed.get((uri.repository, uri.reference), uri.reference)}"

    gets = [r for r in read_trace([trace]) if r.method == "GET" and r.kind == "blob"]
    assert len({path(r) for r in gets}) == len(gets)  # one download per blob: a path names it
    # started at once in the trace (its times are to the millisecond), two wait for each other
    return {path(a): {path(b) for b in gets if b is not a and a.time <= b.time < a.time + a.duration} for a in gets}


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """containerd's pulls of 4 images (4 layers each) as a trace, and that trace's blob GET spans.

    containerd starts 3 downloads at once, but on a loaded machine 1 MB layers from loopback can end before
    the next one starts: a capture that overlapped fewer than 2 pairs is taken again (3 captures at most),
    since the parallelism test needs a trace with parallel downloads to replay."""
    for attempt in range(3):
        pulls = capture_pulls(tmp_path_factory.mktemp(f"ctrd{attempt}"), count=4, layers=4, layer_size=1_000_000)
        records = read_trace([pulls.trace])
        spans = [(r.time, r.time + r.duration) for r in records if r.method == "GET" and r.kind == "blob"]
        assert len({r.client for r in records}) == 1 and len(spans) == 4 * 5
        if overlapping_pairs(spans) >= 2 and most_at_once(spans) >= 2:
            break
    return pulls.trace, spans, pulls.log


def replay_spans(
    tmp_path: Path, registry, nodes, trace: Path, latency=blob_latency, **client_info
) -> list[tuple[float, float]]:
    """Replay the capture as is behind the latency proxy: the blob GETs' spans at the proxy.  ``latency``:
    the proxy's, or a function of the warmed-up run directory that makes it.

    The capture reads each manifest by digest, as containerd does: warmup pushes a manifest under its own
    digest for it, and the run's reads address that one (none fails)."""
    run_warmup(write_config(tmp_path, trace, [registry.host], [n.address for n in nodes]), quiet=True)
    if latency is not blob_latency:
        latency = latency(tmp_path)
    with FaultProxy(registry.host, latency=latency) as proxy:
        cfg = write_config(tmp_path, trace, [proxy.address], [n.address for n in nodes], wait=True, **client_info)
        summary = run_replay(cfg, tmp_path / "run", quiet=True)
        assert proxy.errors == [] and summary["failed"] == 0
        forwarded = proxy.forwarded
    by_digest = [f for f in forwarded if f.method == "GET" and "/manifests/sha256:" in f.path]
    assert by_digest and all(f.upstream_status == 200 for f in by_digest)
    return [(f.received, f.answered) for f in forwarded if f.method == "GET" and "/blobs/" in f.path]


def test_a_containerd_pull_replays_with_its_parallelism(tmp_path, registry, nodes, captured):
    trace, traced, _ = captured
    in_trace = overlapping_pairs(traced)
    assert in_trace >= 2 and most_at_once(traced) >= 2  # containerd fetched layers in parallel
    held: list[Rendezvous] = []

    def rendezvous(warmed: Path) -> Rendezvous:
        held.append(Rendezvous(download_paths(warmed, trace)))
        return held[0]

    replayed = replay_spans(tmp_path, registry, nodes, trace, latency=rendezvous)
    assert len(replayed) == len(traced) and len(held[0].arrived) == len(traced)
    # every download waited for those containerd ran during it and none waited in vain: the gate let each
    # start while the one it overlapped ran ...
    assert held[0].timed_out == []
    # ... so every pair containerd overlapped overlaps, and no other pair: the gate starts none while one
    # that ended before it in the trace runs, so none beyond what containerd ran at once either
    assert overlapping_pairs(replayed) == in_trace
    assert most_at_once(replayed) == most_at_once(traced)


def test_client_concurrency_one_replays_it_one_download_at_a_time(tmp_path, registry, nodes, captured):
    trace, traced, _ = captured
    replayed = replay_spans(tmp_path, registry, nodes, trace, client_concurrency=1)
    assert len(replayed) == len(traced) and most_at_once(replayed) == 1


def test_a_registry_log_replays_as_is_from_each_requests_arrival(tmp_path, registry, nodes, captured):
    """The registry's own log stamps each request when it completed: as is, a request is due at its arrival
    (completion less duration), so the layer GETs containerd sent together are due together again."""
    _, _, log = captured
    records = read_trace([log], fmt="registry-log")
    arrivals = {r.id: r.time - r.duration for r in records}
    first = records[0].time - records[0].duration  # the file's order is by completion
    cfg = write_config(tmp_path, log, [registry.host], [n.address for n in nodes], wait=True)
    cfg = msgspec.structs.replace(cfg, trace=msgspec.structs.replace(cfg.trace, format="registry-log"))
    run_warmup(cfg, quiet=True)
    summary = run_replay(cfg, tmp_path / "run", quiet=True)
    assert summary["failed"] == 0
    rows = pd.read_csv(tmp_path / "run" / "requests.csv", keep_default_na=False, na_values=[""])
    rows = rows[~rows.auxiliary]
    assert len(rows) == len(records)
    for row in rows.itertuples():
        assert row.intended_s == pytest.approx(max(0.0, arrivals[row.trace_id] - first), abs=1e-5), row.trace_id
