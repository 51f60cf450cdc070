"""A trace client's requests overlap in the replay as they overlapped in the trace, and wait where the trace
ordered them, whatever the routing and the engine: seen at a proxy in front of the real registry that
adds latency to blob GETs, so the replay's requests last longer than the trace's."""

from __future__ import annotations

import itertools
import shutil

import pytest

from drtp.master.run import run_replay
from drtp.master.warmup import run_warmup
from drtp.registry.local import LocalRegistry
from tests.conftest import ibm_record, write_json
from tests.faultproxy import FaultProxy, Forwarded
from tests.replay_support import write_config

BLOB_LATENCY_S = 0.4  # added to every blob GET's answer: longer than the trace's layer GETs took


def pull_trace(path, clients: tuple[str, ...] = ("10.0.0.1",)):
    """Per client: a manifest GET; three layer GETs that overlapped in the trace after it had ended; a fourth
    that started after those three had ended (in the trace, 0.1 s each: the replay's take 0.4 s more)."""
    records = []
    spans = [(0.0, 0.05, "manifests/v1"), (0.1, 0.1, "blobs/l1"), (0.11, 0.1, "blobs/l2"), (0.12, 0.1, "blobs/l3")]
    spans.append((0.3, 0.1, "blobs/l4"))
    for n, client in enumerate(clients):
        for i, (start, duration, obj) in enumerate(spans):
            ms = int(start * 1000) + n
            records.append(
                ibm_record(
                    len(records),
                    **{
                        "http.request.remoteaddr": client,
                        "http.request.uri": f"v2/team/app{n}/{obj}",
                        "http.request.duration": duration,
                        "http.response.written": 2000 + i,
                        "timestamp": f"2024-01-01T00:00:00.{ms:03d}Z",
                        "id": f"{client}-{i}",
                    },
                )
            )
    return write_json(path, records)


@pytest.fixture(scope="module")
def warmed(tmp_path_factory, nodes):
    """A real registry warmed up for the pull trace of three clients (round-robin over two nodes would send
    the requests of each to both): (registry, trace, warmup map)."""
    workdir = tmp_path_factory.mktemp("order")
    trace = pull_trace(workdir / "pull.json", clients=("10.0.0.1", "10.0.0.2", "10.0.0.3"))
    with LocalRegistry(workdir / "registry") as reg:
        cfg = write_config(workdir, trace, [reg.host], [n.address for n in nodes])
        run_warmup(cfg, quiet=True)
        yield reg, trace, workdir / "warmup-map.jsonl"


def replay_blob_gets(tmp_path, warmed, nodes, **client_info) -> dict[str, list[Forwarded]]:
    """Replay the pull trace behind the latency proxy; each trace client's blob GETs as the proxy saw them,
    in the order they arrived there."""
    reg, trace, warm_map = warmed
    shutil.copy(warm_map, tmp_path / "warmup-map.jsonl")

    def latency(method: str, path: str) -> float:
        return BLOB_LATENCY_S if method == "GET" and "/blobs/" in path else 0.0

    with FaultProxy(reg.host, latency=latency) as proxy:
        cfg = write_config(tmp_path, trace, [proxy.address], [n.address for n in nodes], **client_info)
        summary = run_replay(cfg, tmp_path / "run", quiet=True)
        assert proxy.errors == []
        forwarded = proxy.forwarded
    assert summary["requests"] == summary["trace_requests"] == 15 and summary["failed"] == 0
    by_repo: dict[str, list[Forwarded]] = {}
    for f in sorted(forwarded, key=lambda f: f.received):
        if f.method == "GET" and "/blobs/" in f.path and "/app" in f.path:
            by_repo.setdefault(f.path.split("/")[3], []).append(f)
    assert sorted(by_repo) == ["app0", "app1", "app2"] and all(len(gets) == 4 for gets in by_repo.values())
    return by_repo


def overlap(a: Forwarded, b: Forwarded) -> bool:
    return a.received < b.answered and b.received < a.answered


MODES = [
    pytest.param({"wait": True, "route": False}, id="as-is-round-robin"),
    pytest.param({"wait": True, "route": True}, id="as-is-hash"),
    pytest.param({"wait": False, "route": False}, id="stress-round-robin"),
]


@pytest.mark.parametrize("mode", MODES)
def test_layers_that_overlapped_overlap_and_the_next_waits_for_them(tmp_path, warmed, nodes, mode):
    for client, gets in replay_blob_gets(tmp_path, warmed, nodes, **mode).items():
        three, fourth = gets[:3], gets[3]
        assert all(overlap(a, b) for a, b in itertools.combinations(three, 2)), (client, three)
        # the fourth started after the three had ended in the trace: it waits for them although it is due
        assert fourth.received >= max(f.answered for f in three), (client, gets)


@pytest.mark.parametrize(
    "mode",
    [pytest.param({"wait": True, "route": False}, id="as-is-round-robin"), pytest.param({"wait": False}, id="stress")],
)
def test_client_concurrency_one_overlaps_nothing(tmp_path, warmed, nodes, mode):
    for client, gets in replay_blob_gets(tmp_path, warmed, nodes, client_concurrency=1, **mode).items():
        assert not any(overlap(a, b) for a, b in itertools.combinations(gets, 2)), (client, gets)


def test_unlimited_keeps_no_order(tmp_path, warmed, nodes):
    """The original player's behaviour: the fourth layer GET goes when it is due, into the three."""
    for client, gets in replay_blob_gets(tmp_path, warmed, nodes, client_concurrency="unlimited", wait=True).items():
        assert any(overlap(gets[3], f) for f in gets[:3]), (client, gets)
