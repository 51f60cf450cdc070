"""Replayed manifests: the image's own layers and config, exactly the trace's size; HEAD bytes as the trace's."""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from drtp.client.executor import Executor
from drtp.master.outputs.results import format_table
from drtp.master.run.held import HeldRecords
from drtp.master.run.plan import Planner
from drtp.registry.calls import RegistryCalls
from drtp.registry.manifest import (
    ANNOTATION_OVERHEAD,
    CONFIG_BLOB,
    CONFIG_DIGEST,
    build_manifest,
    digest_of,
)
from drtp.replay.messages import ReplayRequest, ReplayResult, RunSpec
from drtp.replay.result_row import trace_row
from drtp.replay.summary import ResultsModel
from drtp.trace.reader import TraceReader
from drtp.trace.records import TraceRecord
from tests.registry_log import logged_requests

needs_skopeo = pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo is not installed")

T = _dt.datetime(2017, 8, 1, tzinfo=_dt.timezone.utc)
D = [f"sha256:{c * 64}" for c in "abcdef"]


def rec(method: str, uri: str, status: int = 200, size: int = 0, client: str = "c1") -> TraceRecord:
    return TraceRecord("h", 0.01, method, client, uri, status, size, "id", T)


# -- build_manifest: exact sizes ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layers", "config"),
    [
        ([], None),
        ([(D[0], 1)], None),
        ([(D[0], 1234567), (D[1], 5), (D[2], 99)], (D[3], 248)),
        ([(D[i % 6], 10**i) for i in range(12)], (D[5], 7000)),
    ],
)
def test_build_manifest_is_exactly_the_size_asked_from_its_minimal_size_up(layers, config):
    minimal = build_manifest(layers, 0, config)
    for size in range(len(minimal), len(minimal) + 201):
        body = build_manifest(layers, size, config)
        assert len(body) == size, (size, len(minimal))
        doc = json.loads(body)  # valid JSON whatever the padding
        assert doc["config"]["digest"] == (config or (CONFIG_DIGEST,))[0]
        assert [(x["digest"], x["size"]) for x in doc["layers"]] == layers
        gap = size - len(minimal)
        assert ("annotations" in doc) == (gap >= ANNOTATION_OVERHEAD)
    for size in (0, 1, len(minimal) - 1):  # a trace size no valid manifest over these blobs fits in
        assert build_manifest(layers, size, config) == minimal


def test_build_manifest_without_config_names_the_minimal_config_blob():
    doc = json.loads(build_manifest([(D[0], 10)]))
    assert doc["config"] == {
        "mediaType": "application/vnd.docker.container.image.v1+json",
        "size": len(CONFIG_BLOB),
        "digest": CONFIG_DIGEST,
    }
    assert [x["digest"] for x in doc["layers"]] == [D[0]]  # the layer is a layer, not the config


@pytest.mark.registry
@pytest.mark.parametrize("gap", [0, 1, ANNOTATION_OVERHEAD - 1, ANNOTATION_OVERHEAD, 500])
def test_a_padded_manifest_is_stored_and_served_byte_for_byte(registry, gap):
    client = RegistryCalls(registry.host)
    layer = b"layer bytes"
    client.push_blob("pad/test", layer, digest_of(layer))
    client.push_blob("pad/test", CONFIG_BLOB, CONFIG_DIGEST)
    minimal = build_manifest([(digest_of(layer), len(layer))])
    body = build_manifest([(digest_of(layer), len(layer))], len(minimal) + gap)
    client.put_manifest("pad/test", f"gap{gap}", body)
    from urllib.request import Request, urlopen

    from drtp.registry.manifest import ACCEPT

    req = Request(f"{registry.url}/v2/pad/test/manifests/gap{gap}", headers={"Accept": ACCEPT})
    with urlopen(req, timeout=10) as r:  # noqa: S310 - the loopback test registry
        assert r.read() == body and r.headers["Docker-Content-Digest"] == digest_of(body)


# -- the planner: an image's blobs, its config last ---------------------------------------------------


def _pushed(p: Planner, repo: str, ref: str, seq: int, digest: str, size: int) -> None:
    req = p.plan(rec("PUT", f"v2/{repo}/blobs/{ref}", 201, size), seq, None)
    p.done(req, ReplayResult(seq, 201, True, 0.0, 0.01, size, digest, size=size))


def test_a_manifest_names_the_images_layers_and_its_config_the_blob_pushed_last():
    p = Planner(["r:1"])
    _pushed(p, "a/x", "L1", 0, D[0], 100)
    _pushed(p, "a/y", "Y1", 1, D[5], 9)  # another repository: another image
    p.learn("a/x", "blob", "base", D[1], 50)
    p.plan(rec("HEAD", "v2/a/x/blobs/base"), 2, None)  # found: part of the image
    p.plan(rec("HEAD", "v2/a/x/blobs/gone", 404, 157), 3, None)  # missing: not part of it
    _pushed(p, "a/x", "CFG", 4, D[2], 248)
    req = p.plan(rec("PUT", "v2/a/x/manifests/v1", 201, 734), 5, None)
    assert [(x.digest, x.size) for x in req.layers] == [(D[0], 100), (D[1], 50)]
    assert (req.config.digest, req.config.size) == (D[2], 248)
    # the next image of the same client and repository starts empty
    _pushed(p, "a/x", "L2", 6, D[3], 10)
    req = p.plan(rec("PUT", "v2/a/x/manifests/v2", 201, 600), 7, None)
    assert [x.digest for x in req.layers] == [D[3]] and req.config is None  # one blob: a layer, minimal config
    assert p.plan(rec("PUT", "v2/a/x/manifests/v3", 201, 600), 8, None).layers == []


def test_a_held_manifest_waits_for_the_layer_pushes_released_with_it():
    """A client held behind a push: when it goes, its manifest waits for the layer pushes released before it."""
    p = Planner(["r:1"])
    held = HeldRecords(p)
    first = p.plan(rec("PUT", "v2/a/x/blobs/L0", 201, 5), 0, None)
    trace = [
        rec("HEAD", "v2/a/x/blobs/L0"),  # waits for the push of L0 in flight: the client is held from here
        rec("PUT", "v2/a/x/blobs/L1", 201, 7),
        rec("PUT", "v2/a/x/blobs/CFG", 201, 3),
        rec("PUT", "v2/a/x/manifests/t", 201, 900),
    ]
    for seq, r in enumerate(trace, 1):
        assert held.hold(r, seq, None)
    p.done(first, ReplayResult(0, 201, True, 0.0, 0.01, 5, D[0], size=5))
    go = held.release()
    assert [h.seq for h in go] == [1, 2, 3]  # not the manifest: the pushes of L1 and CFG are not even planned
    reqs = []
    for h in go:
        held.planned(h)
        reqs.append(p.plan(h.rec, h.seq, h.at))
    assert held.release() == []  # the pushes are in flight now
    for req, digest in zip(reqs[1:], D[1:3], strict=True):
        p.done(req, ReplayResult(req.seq, 201, True, 0.0, 0.01, req.size, digest, size=req.size))
    (manifest,) = held.release()
    held.planned(manifest)
    req = p.plan(manifest.rec, manifest.seq, None)
    assert [x.digest for x in req.layers] == [D[0], D[1]] and req.config.digest == D[2]


# -- a manifest smaller than any valid one: sent bigger, counted and reported ----------------------


@pytest.mark.registry
def test_a_trace_manifest_below_the_minimal_size_is_counted_and_reported(registry):
    ex = Executor(RunSpec(run="m", start_epoch=time.time(), registries=[registry.url]), time.perf_counter)
    model = ResultsModel(timed=False, on_time_s=0.01)

    def put(tag: str, size: int, seq: int) -> int:
        req = ReplayRequest(seq, "t", "c1", "PUT", "manifest", "manifest-put", registry.url, "m/x", tag, size, 201)
        res = ex.execute(req)
        assert res.ok, res.error
        model.add(trace_row("n1", req, res))
        return res.bytes

    minimal = len(build_manifest([]))
    assert put("small", 40, 0) == minimal  # sent at the smallest valid size
    assert put("exact", minimal + 7, 1) == minimal + 7
    summary = model.summary()
    assert summary["manifests_above_trace_size"] == 1
    assert summary["per_method"]["PUT manifest"]["bytes"] == 2 * minimal + 7
    assert "manifests sent bigger than the trace's size: 1" in format_table(summary)
    # the minimal config blob was pushed once, with one content; the node knows it is there now
    req = ReplayRequest(2, "t", "c1", "PUT", "manifest", "manifest-put", registry.url, "m/x", "third", 0, 201)
    assert ex.execute(req).aux == []
    # the node's next run checks once, and finds it
    again = Executor(RunSpec(run="m2", start_epoch=time.time(), registries=[registry.url]), time.perf_counter)
    req = ReplayRequest(3, "t", "c1", "PUT", "manifest", "manifest-put", registry.url, "m/x", "fourth", 0, 201)
    assert [(a.what, a.status) for a in again.execute(req).aux] == [("config blob check", 200)]


@pytest.mark.registry
def test_a_node_writes_the_minimal_config_once_per_repository_whatever_its_threads(registry):
    """Manifest PUTs of two repositories from 8 threads of one node at once, each needing the minimal config
    blob: the registry sees one check and one upload of it per repository, and stores every manifest (a
    second upload while a manifest PUT reads the blob's link can make the registry refuse that PUT)."""
    threads = 8
    ex = Executor(RunSpec(run="c", start_epoch=time.time(), registries=[registry.url]), time.perf_counter)
    offset = registry.log_path.stat().st_size
    together = threading.Barrier(threads, timeout=60)
    repos = ("m/many", "m/more")

    def put(i: int) -> ReplayResult:
        req = ReplayRequest(
            i, "t", f"c{i}", "PUT", "manifest", "manifest-put", registry.url, repos[i % 2], f"t{i}", 0, 201
        )
        together.wait()
        return ex.execute(req)

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(put, range(4 * threads)))
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    helpers = Counter(a.what for r in results for a in r.aux)
    assert helpers == {"config blob check": 2, "blob upload open": 2, "config blob push": 2}, helpers
    logged = logged_requests(registry.log_path, offset)
    for repo in repos:
        config = [x for x in logged if x.path == f"/v2/{repo}/blobs/{CONFIG_DIGEST}"]
        uploads = [x for x in logged if x.path.startswith(f"/v2/{repo}/blobs/uploads/") and x.method == "PUT"]
        manifests = [x for x in logged if x.path.startswith(f"/v2/{repo}/manifests/")]
        assert [(x.method, x.status) for x in config] == [("HEAD", 404)], repo
        assert [x.status for x in uploads] == [201], repo
        assert [x.status for x in manifests] == [201] * (2 * threads), repo


@pytest.mark.registry
def test_head_bytes_are_what_the_registry_logs(registry):
    """A HEAD of a missing blob: the registry logs its 157-byte error body; the row says the same."""
    ex = Executor(RunSpec(run="h", start_epoch=time.time(), registries=[registry.url]), time.perf_counter)
    client = RegistryCalls(registry.host)
    client.push_blob("h/x", b"found", digest_of(b"found"))

    def head(digest: str) -> int:
        req = ReplayRequest(0, "t", "c1", "HEAD", "blob", "get", registry.url, "h/x", digest, 0, 0, digest=digest)
        return ex.execute(req).bytes

    assert head(D[0]) == 157 and head(digest_of(b"found")) == 0
    time.sleep(0.3)  # the registry logs a request just after answering it
    logged = [r for r in TraceReader([registry.log_path], fmt="registry-log") if r.method == "HEAD"]
    assert [r.size for r in logged[-2:]] == [157, 0]  # (the push before checked with a HEAD of its own)


# -- real skopeo traffic, captured and replayed ------------------------------------------------------


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    from tests.skopeo_capture import capture_session, replay_session

    captured = capture_session(tmp_path_factory.mktemp("skopeo"))
    return captured, replay_session(captured.trace, tmp_path_factory.mktemp("replay"))


@needs_skopeo
@pytest.mark.registry
def test_replayed_manifests_have_the_traces_sizes(session):
    captured, run = session
    puts = [r for r in TraceReader([captured.trace]) if r.method == "PUT" and r.kind == "manifest"]
    assert len(puts) == 3 and all(r.size > len(build_manifest([])) for r in puts)
    df = run.requests
    rows = df[(df.method == "PUT") & (df.kind == "manifest") & ~df.auxiliary]
    assert rows.ok.all() and (rows.bytes == rows["size"]).all()  # exact, manifest by manifest
    assert abs(rows.bytes.sum() / sum(r.size for r in puts) - 1) < 0.01
    for r in puts:
        assert len(run.manifests[f"{r.repository}:{r.reference}"]) == r.size
    assert run.summary["manifests_above_trace_size"] == 0


@needs_skopeo
@pytest.mark.registry
def test_replayed_manifests_reference_the_images_layers_and_config(session):
    from tests.skopeo_capture import pushed_blob_digests

    captured, run = session
    digests = pushed_blob_digests(run)
    for tag, image in captured.images.items():
        repo = tag.rsplit(":", 1)[0]
        doc = json.loads(run.manifests[tag])
        # skopeo may push an image's layers in parallel: the trace shows their order of completion
        assert sorted(x["digest"] for x in doc["layers"]) == sorted(digests[(repo, d)] for d in image["layers"]), tag
        assert doc["config"]["digest"] == digests[(repo, image["config"])], tag
        config_file = next(captured.trace.parent.glob(f"img*/{image['config'].split(':')[1]}"))
        assert doc["config"]["size"] == config_file.stat().st_size, tag


@needs_skopeo
@pytest.mark.registry
def test_each_config_blob_is_pushed_once_and_no_helper_blob(session):
    captured, run = session
    trace_pushes = [r for r in TraceReader([captured.trace]) if r.method == "PUT" and r.kind == "blob"]
    layers = {d for tag, image in captured.images.items() for d in image["layers"]}
    assert len(trace_pushes) == len(layers) + 2  # each layer once (one is shared), and the two configs
    logged_pushes = [
        x for x in run.logged if x["http.request.method"] == "PUT" and "/blobs/uploads/" in x["http.request.uri"]
    ]
    assert len(logged_pushes) == len(trace_pushes)
    assert not run.requests.auxiliary.any()  # no minimal config blob, no extra upload
    assert not [x for x in run.logged if CONFIG_DIGEST in x["http.request.uri"]]


@needs_skopeo
@pytest.mark.registry
def test_a_captured_push_session_replays_with_every_status_and_byte_count_matched(session):
    captured, run = session
    df = run.requests
    main = df[~df.auxiliary]
    assert (main.status == main.expected_status).all() and main.ok.all()
    heads = main[main.method == "HEAD"]
    assert (heads.bytes == heads["size"]).all()
    assert (heads[heads.status == 404].bytes == 157).all() and (heads.status == 404).any()
    assert run.open_uploads == 0
