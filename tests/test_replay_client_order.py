"""A trace client's requests overlap in the replay as they overlapped in the trace, and wait where the trace
ordered them, whatever the routing and the engine: seen at a proxy in front of the real registry that
adds latency to blob GETs (or PATCHes), so the replay's requests last longer than the trace's.  One
client's uploads overlap too, each in its own upload session, when the trace tells them apart."""

from __future__ import annotations

import itertools
import shutil
import urllib.request

import pandas as pd
import pytest

from drtp.master.run.replay import run_replay
from drtp.master.run.warmup import run_warmup
from drtp.registry.local import LocalRegistry
from tests.conftest import ibm_record, write_json
from tests.faultproxy import FaultProxy, Forwarded
from tests.replay_support import write_config

# added to every blob GET's answer: longer than the trace's layer GETs took, and than a loaded machine delays a start
BLOB_LATENCY_S = 0.6


def pull_trace(path, clients: tuple[str, ...] = ("10.0.0.1",)):
    """Per client: a manifest GET; three layer GETs that overlapped in the trace after it had ended; a fourth
    that started after those three had ended (in the trace, 0.1 s each: the replay's take 0.6 s more)."""
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

    # hash routing may put all three clients on one node: 9 blob GETs at once, more than write_config's 8 slots
    # (a ninth would wait for a slot, not for its client's order)
    client_info.setdefault("threads", 12)
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


def upload_trace(path, named: bool):
    """One client pushing two layers at once into one repository: two upload sessions that overlapped in the
    trace.  ``named``: a capture's upload ids (``?upload=`` on POST and PUT); else an IBM trace's (the
    registry's session on PATCH and PUT only)."""
    steps = [
        (0.0, 0.01, "POST", "blobs/uploads/?upload=A" if named else "blobs/uploads/", 202, 0),
        (0.005, 0.01, "POST", "blobs/uploads/?upload=B" if named else "blobs/uploads/", 202, 0),
        (0.02, 0.5, "PATCH", "blobs/uploads/A", 202, 50_000),
        (0.03, 0.5, "PATCH", "blobs/uploads/B", 202, 60_000),
        (0.6, 0.01, "PUT", "blobs/layerA?upload=A" if named else "blobs/uploads/A", 201, 0),
        (0.61, 0.01, "PUT", "blobs/layerB?upload=B" if named else "blobs/uploads/B", 201, 0),
    ]
    records = [
        ibm_record(
            i,
            **{
                "http.request.remoteaddr": "10.0.0.9",
                "http.request.method": method,
                "http.request.uri": f"v2/team/push/{obj}",
                "http.request.duration": duration,
                "http.response.status": status,
                "http.response.written": size,
                "timestamp": f"2024-01-01T00:00:00.{int(start * 1000):03d}Z",
                "id": f"up-{i}",
            },
        )
        for i, (start, duration, method, obj, status, size) in enumerate(steps)
    ]
    return write_json(path, records)


@pytest.mark.parametrize("named", [True, False], ids=["capture-ids", "ibm-ids"])
def test_one_clients_uploads_overlap_when_the_trace_tells_them_apart(tmp_path, nodes, named):
    trace = upload_trace(tmp_path / "push.json", named)
    with LocalRegistry(tmp_path / "registry") as reg:

        def slow_patches(method: str, path: str) -> float:
            return BLOB_LATENCY_S if method == "PATCH" else 0.0

        with FaultProxy(reg.host, latency=slow_patches) as proxy:
            cfg = write_config(tmp_path, trace, [proxy.address], [n.address for n in nodes], wait=True)
            (tmp_path / "warmup-map.jsonl").write_text("")  # the trace reads nothing: nothing to warm up
            summary = run_replay(cfg, tmp_path / "run", quiet=True)
            assert proxy.errors == []
            forwarded = proxy.forwarded
        rows = pd.read_csv(tmp_path / "run" / "requests.csv", keep_default_na=False, na_values=[""])
        # the layers each PUT completed, as the registry holds them: each upload got its own PATCH's bytes
        sizes = []
        for digest in rows[rows.method == "PUT"].digest:
            head = urllib.request.Request(f"{reg.url}/v2/team/push/blobs/{digest}", method="HEAD")
            with urllib.request.urlopen(head, timeout=10) as answer:
                sizes.append(int(answer.headers["Content-Length"]))
    # each PATCH and PUT found the session its own POST opened: no helper POST, no cancelled session
    assert summary["failed"] == 0 and not rows.auxiliary.any(), rows[["method", "reference", "error"]].to_string()
    assert sorted(sizes) == [50_000, 60_000]
    patches = [f for f in forwarded if f.method == "PATCH"]
    assert len(patches) == 2 and overlap(*patches)  # the two uploads overlapped, as in the trace
