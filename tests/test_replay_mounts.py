"""Cross-repository blob mounts: kept from the trace, planned, admitted, warmed around and replayed as mounts."""

from __future__ import annotations

import datetime as _dt
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from drtp.client.admission import batch_error
from drtp.errors import TraceError
from drtp.master.run.held import HeldRecords
from drtp.master.run.plan import Planner, registry_for, with_names
from drtp.master.run.warmup import plan_warmup
from drtp.registry.manifest import placeholder_digest
from drtp.registry.repo_names import RepositoryMap
from drtp.replay.messages import ReplayRequest, ReplayResult
from drtp.trace.reader import TraceReader
from drtp.trace.records import Mount, TraceRecord
from tests.conftest import ibm_record, write_json
from tests.images import copy_between_repositories, open_uploads
from tests.replay_support import blob_get

T = _dt.datetime(2024, 1, 1, tzinfo=_dt.timezone.utc)
MOUNT = "v2/team/two/blobs/uploads/?mount=L1&from=team/one"


def rec(method: str, uri: str, status: int = 200, size: int = 0, client: str = "c1") -> TraceRecord:
    return TraceRecord("h", 0.01, method, client, uri, status, size, "id", T)


# -- the trace record ---------------------------------------------------------------------------------


def test_a_mount_is_read_from_the_query_percent_encoded_or_not():
    digest = "sha256:" + "ab" * 32
    raw = f"/v2/team/two/blobs/uploads/?from=team%2Fone&mount={digest.replace(':', '%3A')}"
    assert rec("POST", raw, 201).mount == Mount(digest, "team/one")
    assert rec("POST", MOUNT, 201).mount == Mount("L1", "team/one")
    assert rec("POST", "v2/team/two/blobs/uploads/?mount=L1", 202).mount == Mount("L1", None)
    assert rec("POST", "v2/team/two/blobs/uploads/?upload=u1", 202).mount is None
    assert rec("PATCH", "v2/team/two/blobs/uploads/?mount=L1&from=team/one", 202).mount is None  # POSTs mount


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("mount=../x&from=team/one", "neither a digest nor a blob reference"),
        ("mount=L1&from=Team/One", "from= repository name 'Team/One'"),
        ("mount=L1&from=team/../x", "from= repository name"),
        ("from=team/one", "from= without mount="),
        ("mount=L1&mount=L2&from=team/one", "repeats mount="),
        ("mount=a%0Ab&from=team/one", "neither a digest"),
    ],
)
def test_a_malformed_mount_query_is_a_bad_record_named_by_its_index(tmp_path, query, why):
    recs = [ibm_record(i) for i in range(30)]
    recs[17] = ibm_record(17, **{"http.request.method": "POST", "http.request.uri": f"v2/a/b/blobs/uploads/?{query}"})
    with pytest.raises(TraceError) as err:
        list(TraceReader([write_json(tmp_path / "t.json", recs)]))
    assert err.value.index == 17 and why in str(err.value) and "\n" not in str(err.value)


def test_the_chunk_check_is_never_more_lenient_than_the_record_check_on_mount_queries():
    import random

    from drtp.trace.records import uri_error, uris_valid

    rng = random.Random(5)
    params = ["mount=L1", "mount=../x", "from=team/one", "from=Bad", "mount", "from", "upload=u1", "frommage=x", ""]
    bases = ["v2/a/b/blobs/uploads/", "v2/a/b/blobs/L1", "v2/a/b/manifests/t", "v2/a/b/blobs/uploads/u1"]
    for _ in range(2000):
        uri = rng.choice(bases) + "?" + "&".join(rng.choice(params) for _ in range(rng.randint(1, 3)))
        if uris_valid([uri]):
            assert uri_error(uri) is None, uri


def test_a_mount_query_on_anything_but_an_upload_open_is_a_bad_record(tmp_path):
    path = write_json(tmp_path / "t.json", [ibm_record(0, **{"http.request.uri": "v2/a/b/blobs/L1?mount=L1"})])
    with pytest.raises(TraceError, match="belongs on an upload open"):
        list(TraceReader([path]))


# -- the planner ----------------------------------------------------------------------------------------


def test_a_mount_gets_the_source_s_real_digest_waits_for_its_push_and_joins_the_image():
    p = Planner(["r:1"])
    push = p.plan(rec("PUT", "v2/team/one/blobs/L1", 201, 500), 0, None)
    mount = rec("POST", MOUNT, 201)
    assert p.blocked_by(mount) == [("blob", "L1")]  # the blob's push is in flight: wait like a read
    p.done(push, ReplayResult(0, 201, True, 0.0, 0.01, 500, "sha256:" + "1" * 64, size=500))
    assert p.blocked_by(mount) == []
    req = p.plan(mount, 1, None)
    assert (req.op, req.mount, req.mount_from, req.object_size) == (
        "upload-open",
        "sha256:" + "1" * 64,
        "team/one",
        500,
    )
    read = rec("GET", "v2/team/two/blobs/L1")
    assert p.blocked_by(read) == [("blob", "L1")]  # the mount pushes the blob into team/two: reads there wait
    p.done(req, ReplayResult(1, 201, True, 0.0, 0.01, 0, "sha256:" + "1" * 64, size=500))
    assert p.plan(read, 2, None).digest == "sha256:" + "1" * 64
    manifest = p.plan(rec("PUT", "v2/team/two/manifests/v1", 201, 700), 3, None)
    assert [layer.digest for layer in manifest.layers] == ["sha256:" + "1" * 64]  # mounted: a layer of the image


def test_a_refused_mount_s_upload_is_what_the_target_holds_afterwards():
    p = Planner(["r:1"])
    p.learn("team/one", "blob", "L1", "sha256:" + "1" * 64, 500)
    req = p.plan(rec("POST", MOUNT, 201), 0, None)
    p.done(req, ReplayResult(0, 202, False, 0.0, 0.01, 0, "sha256:" + "2" * 64, size=500, outcome="http"))
    assert p.plan(rec("GET", "v2/team/two/blobs/L1"), 1, None).digest == "sha256:" + "2" * 64
    assert p.plan(rec("GET", "v2/team/one/blobs/L1"), 2, None).digest == "sha256:" + "1" * 64


def test_a_trace_s_refused_mount_does_not_join_the_image_and_an_unknown_blob_gets_a_placeholder():
    p = Planner(["r:1"])
    req = p.plan(rec("POST", MOUNT, 202), 0, None)
    assert req.mount == placeholder_digest("L1") and req.object_size is None
    p.done(req, ReplayResult(0, 202, True, 0.0, 0.01))  # the trace's own PATCH/PUT push it: nothing learned
    assert p.plan(rec("PUT", "v2/team/two/manifests/v1", 201, 700), 1, None).layers == []


def test_the_source_is_prefixed_like_any_name_and_a_source_on_another_registry_is_not_sent():
    batch = [rec("POST", MOUNT, 201), rec("POST", "/v2/a/b/blobs/uploads/?upload=from=x", 202)]
    out = next(with_names([batch], RepositoryMap("prefix", "run7/")))
    assert out[0].uri == "v2/run7/team/two/blobs/uploads/?mount=L1&from=run7/team/one"
    assert out[0].mount == Mount("L1", "run7/team/one")
    assert out[1].uri == "/v2/run7/a/b/blobs/uploads/?upload=from=x"  # only the from= parameter is a name
    registries = ["r:1", "r:2"]
    one = next(n for n in (f"team/s{i}" for i in range(50)) if registry_for(n, registries) == "r:1")
    two = next(n for n in (f"team/t{i}" for i in range(50)) if registry_for(n, registries) == "r:2")
    p = Planner(registries)
    req = p.plan(rec("POST", f"v2/{two}/blobs/uploads/?mount=L1&from={one}", 201), 0, None)
    assert req.registry == "r:2" and req.mount_from is None and req.mount == placeholder_digest("L1")


def test_a_held_client_s_manifest_waits_for_the_mounts_and_pushes_released_before_it():
    p = Planner(["r:1"])
    held = HeldRecords(p)
    first = p.plan(rec("PUT", "v2/team/one/blobs/L0", 201, 10), 0, None)
    assert held.hold(rec("GET", "v2/team/one/blobs/L0"), 1, None)
    assert held.hold(rec("POST", MOUNT, 201), 2, None)  # the client waits: its later records queue behind
    assert held.hold(rec("PUT", "v2/team/two/manifests/v1", 201, 700), 3, None)
    p.done(first, ReplayResult(0, 201, True, 0.0, 0.01, 10, "sha256:" + "0" * 64, size=10))
    released = held.release()
    assert [h.seq for h in released] == [1, 2]  # the manifest waits: the mount released with it is not planned yet
    reqs = []
    for h in released:
        held.planned(h)
        reqs.append(p.plan(h.rec, h.seq, h.at))
    assert held.release() == []  # the mount is in flight now
    p.done(reqs[1], ReplayResult(2, 201, True, 0.0, 0.01, 0, "sha256:" + "5" * 64, size=10))
    assert [h.seq for h in held.release()] == [3]


# -- admission on the node --------------------------------------------------------------------------------

TARGETS = frozenset({"http://127.0.0.1:5000"})


def mount_request(seq: int, **over) -> ReplayRequest:
    fields = dict(
        method="POST",
        op="upload-open",
        repository="team/two",
        reference="uploads/",
        size=0,
        expected_status=201,
        digest=None,
        mount="sha256:" + "ab" * 32,
        mount_from="team/one",
    )
    fields.update(over)
    return blob_get(seq, **fields)


@pytest.mark.parametrize(
    ("over", "why"),
    [
        ({"mount": "sha256:../../x"}, "mount: digest"),
        ({"mount": "sha256:ab?x=1"}, "mount: digest"),
        ({"mount_from": "../etc"}, "mount: repository name"),
        ({"mount_from": "team/one?mount=x"}, "mount: repository name"),
        ({"mount": None}, "with the digest to mount"),
        ({"method": "GET", "op": "get", "reference": "L1"}, "an upload open's"),
    ],
)
def test_the_node_refuses_a_bad_mount_naming_the_request(over, why):
    error = batch_error([mount_request(1), mount_request(7, **over), mount_request(9)], TARGETS)
    assert error is not None and error.startswith("request seq 7: ") and why in error


def test_good_mounts_pass_and_other_requests_carry_no_mount_bytes():
    assert batch_error([mount_request(1), mount_request(2, mount_from=None)], TARGETS) is None
    plain = mount_request(3, mount=None, mount_from=None, expected_status=202)
    assert b"mount" not in __import__("msgspec").json.encode(plain)  # omit_defaults: free for other requests


# -- warmup ---------------------------------------------------------------------------------------------------


def traced(i: int, method: str, uri: str, status: int = 200, size: int = 0, client: str = "client0") -> dict:
    """An IBM-format record of one trace client (its requests keep their order in a replay)."""
    over = {"http.request.method": method, "http.request.uri": uri, "http.response.status": status}
    return ibm_record(i, **over, **{"http.response.written": size, "http.request.remoteaddr": client})


def test_warmup_leaves_a_mount_s_target_to_the_run_and_warms_a_source_the_trace_never_pushed(tmp_path):
    records = [
        traced(0, "HEAD", "v2/team/two/blobs/L1", 404),
        traced(1, "POST", MOUNT, 201),
        traced(2, "GET", "v2/team/two/blobs/L1", 200, 3000),
        # pushed into team/three first: not warmed there; team/four's mount of it reads the pushed blob
        traced(3, "PUT", "v2/team/three/blobs/L2", 201, 10),
        traced(4, "POST", "v2/team/four/blobs/uploads/?mount=L2&from=team/three", 201),
        # refused in the trace: its source is not warmed (the run meets the same refusal)
        traced(5, "POST", "v2/team/five/blobs/uploads/?mount=L3&from=team/six", 202),
    ]
    plan = plan_warmup(TraceReader([write_json(tmp_path / "t.json", records)]), ["r:1"])
    # only the source, at the size the trace reads the blob with (in the target, after the mount)
    assert plan.blobs == {("r:1", "L1"): [3000, ["team/one"]]}
    assert plan.manifests == {}


# -- end to end: real skopeo traffic, a real registry -----------------------------------------------------------


def _replay(tmp_path: Path, trace: Path, registries: list[str]) -> pd.DataFrame:
    from drtp.master.run.replay import run_replay
    from drtp.master.run.warmup import run_warmup
    from tests.replay_support import Node, write_config

    node = Node(tmp_path)
    try:
        cfg = write_config(tmp_path, trace, registries, [node.address])
        run_warmup(cfg, quiet=True)
        run_replay(cfg, tmp_path / "run", quiet=True)
    finally:
        node.stop()
    return pd.read_csv(tmp_path / "run" / "requests.csv", keep_default_na=False, na_values=[""])


def _logged(log: Path) -> list[dict]:
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    return [x for x in lines if x.get("msg", "").startswith("response completed")]


@pytest.mark.registry
@pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo is not installed")
def test_a_skopeo_copy_between_repositories_replays_its_mounts_as_mounts(tmp_path):
    from drtp.registry.local import LocalRegistry
    from drtp.trace.anonymize import Anonymizer
    from drtp.trace.capture import capture_files
    from drtp.trace.reader import write_ibm

    with LocalRegistry(tmp_path / "captured-registry") as reg:
        copy_between_repositories(tmp_path / "skopeo", reg.host, "team/one", "team/two")
        _, records = capture_files([reg.log_path], Anonymizer("mounts"), registry_url=reg.url)
        trace = tmp_path / "captured.json"
        write_ibm(trace, records)
    captured = list(TraceReader([trace]))
    mounts = [r for r in captured if r.mount is not None]
    assert len(mounts) >= 2 and {r.status for r in mounts} == {201}  # skopeo mounted the layers it copied
    assert all(r.mount.source != r.repository for r in mounts)

    with LocalRegistry(tmp_path / "fresh") as fresh:
        df = _replay(tmp_path, trace, [fresh.host])
        logged = _logged(fresh.log_path)
    main = df[~df.auxiliary]
    assert len(main) == len(captured)
    assert (main.status == main.expected_status).all(), main[main.status != main.expected_status].to_string()
    assert main.ok.all()
    posts = [x for x in logged if x["http.request.method"] == "POST" and "mount=" in x["http.request.uri"]]
    assert len(posts) == len(mounts) and all("from=" in x["http.request.uri"] for x in posts)
    assert {x["http.response.status"] for x in posts} == {201}
    assert open_uploads(tmp_path / "fresh" / "storage") == []
    # the mounted blobs were not warmed into the target: warmup pushed nothing there
    warmed = [json.loads(x) for x in (tmp_path / "warmup-map.jsonl").read_text().splitlines()]
    targets = {r.repository for r in mounts}
    assert not [e for e in warmed if e["repository"] in targets]


@pytest.mark.registry
def test_a_refused_mount_falls_back_to_an_upload_and_no_session_outlives_the_run(tmp_path):
    """Two registries: the mount's source lies on the other one, so the target's registry refuses (202)."""
    from drtp.registry.local import LocalRegistry

    with LocalRegistry(tmp_path / "reg-a") as a, LocalRegistry(tmp_path / "reg-b") as b:
        registries = [a.host, b.host]
        source = next(f"team/s{i}" for i in range(99) if registry_for(f"team/s{i}", registries) == a.host)
        target = next(f"team/t{i}" for i in range(99) if registry_for(f"team/t{i}", registries) == b.host)
        lone = next(f"team/u{i}" for i in range(99) if registry_for(f"team/u{i}", registries) == a.host)
        records = [
            traced(0, "GET", f"v2/{source}/blobs/L1", 200, 5000),
            traced(1, "POST", f"v2/{target}/blobs/uploads/?mount=L1&from={source}", 201),
            traced(2, "GET", f"v2/{target}/blobs/L1", 200, 5000),
            traced(3, "POST", f"v2/{lone}/blobs/uploads/", 202),  # an upload the trace never completes
        ]
        trace = write_json(tmp_path / "trace.json", records)
        df = _replay(tmp_path, trace, registries)
        mounts_sent = [x for x in _logged(b.log_path) if "mount=" in x["http.request.uri"]]
        deletes = [x for x in _logged(a.log_path) if x["http.request.method"] == "DELETE"]
    main, aux = df[~df.auxiliary], df[df.auxiliary]
    mount = main[main.method == "POST"].iloc[0]
    assert (mount.status, mount.expected_status, mount.ok, mount.outcome) == (202, 201, False, "http")
    assert "mount refused (202)" in mount.error
    assert "from=" not in mounts_sent[0]["http.request.uri"]  # no repository of the target's registry holds it
    fallback = aux[aux.reference == "mount fallback upload"]
    assert list(fallback.status) == [201] and fallback.ok.all()
    read = main[(main.method == "GET") & (main.repository == target)].iloc[0]
    assert read.status == 200 and read.ok and read.bytes == 5000  # the uploaded blob, at the mounted one's size
    assert len(deletes) == 1 and deletes[0]["http.response.status"] == 204  # the lone upload, at the run's end
    assert open_uploads(tmp_path / "reg-a" / "storage") == open_uploads(tmp_path / "reg-b" / "storage") == []
