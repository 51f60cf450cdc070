"""The master's planner (remapping, dependencies) and its running percentiles, without a registry."""

from __future__ import annotations

import datetime as _dt
import math
import random

import numpy as np
import pytest

from drtp.master.outputs.results import LogHistogram
from drtp.master.run.plan import Planner, registry_for
from drtp.registry.manifest import placeholder_digest
from drtp.replay.messages import ReplayResult
from drtp.trace.records import TraceRecord

T = _dt.datetime(2017, 8, 1, tzinfo=_dt.timezone.utc)


def rec(method: str, uri: str, status: int = 200, size: int = 0, client: str = "c1") -> TraceRecord:
    return TraceRecord("h", 0.01, method, client, uri, status, size, "id", T)


def test_a_push_remaps_later_reads_and_keeps_other_repositories_digests():
    p = Planner(["r:1"])
    p.learn("a/x", "blob", "L1", "sha256:warm", 10)
    p.learn("a/y", "blob", "L1", "sha256:warm", 10)  # mounted into a second repository
    put = p.plan(rec("PUT", "v2/a/z/blobs/L1", 201, 10), 0, None)
    assert put.op == "upload-close" and put.digest is None
    get = rec("GET", "v2/a/y/blobs/L1")
    assert p.blocked_by(get) == [("blob", "L1")]  # the push is in flight: wait for it
    p.done(put, ReplayResult(0, 201, True, 0.0, 0.01, 10, "sha256:new", size=10))
    assert p.blocked_by(get) == []
    assert p.plan(get, 1, None).digest == "sha256:warm"  # a/y keeps what it had
    assert p.plan(rec("GET", "v2/a/z/blobs/L1"), 2, None).digest == "sha256:new"
    assert p.plan(rec("GET", "v2/b/q/blobs/L9", 404), 3, None).digest == placeholder_digest("L9")


def test_a_manifest_put_stays_a_put_and_carries_the_pushed_layers():
    p = Planner(["r:1"])
    p.learn("a/x", "blob", "base", "sha256:base", 5)
    p.plan(rec("HEAD", "v2/a/x/blobs/base"), 0, None)
    put_layer = p.plan(rec("PUT", "v2/a/x/blobs/L2", 201, 7), 1, None)
    manifest = rec("PUT", "v2/a/x/manifests/v1", 201, 900)
    assert p.blocked_by(manifest) == [("blob", "L2")]
    p.done(put_layer, ReplayResult(1, 201, True, 0.0, 0.01, 7, "sha256:l2", size=7))
    req = p.plan(manifest, 2, None)
    assert (req.method, req.op) == ("PUT", "manifest-put")
    # the image's blobs: the last one (pushed just before the manifest) is its config
    assert [(layer.digest, layer.size) for layer in req.layers] == [("sha256:base", 5)]
    assert (req.config.digest, req.config.size) == ("sha256:l2", 7)
    # a pull of that tag waits for the manifest push
    assert p.blocked_by(rec("GET", "v2/a/x/manifests/v1", client="c2")) == [("manifest", "a/x", "v1")]
    p.done(req, ReplayResult(2, 201, True, 0.0, 0.01))
    assert p.blocked_by(rec("GET", "v2/a/x/manifests/v1", client="c2")) == []


def test_a_failed_push_leaves_reads_on_a_digest_that_fails():
    p = Planner(["r:1"])
    put = p.plan(rec("PUT", "v2/a/x/blobs/L3", 201, 7), 0, None)
    p.done(put, ReplayResult(0, 500, False, 0.0, 0.01, error="HTTP 500"))
    assert p.plan(rec("GET", "v2/a/x/blobs/L3"), 1, None).digest == placeholder_digest("L3")


def test_registry_for_is_stable_and_spreads():
    regs = ["a:1", "b:2", "c:3"]
    chosen = {registry_for(f"u/r{i}", regs) for i in range(100)}
    assert chosen == set(regs)
    assert registry_for("u/r1", regs) == registry_for("u/r1", list(regs))


@pytest.mark.parametrize("seed", [1, 2])
def test_log_histogram_percentiles_match_nearest_rank(seed):
    rng = random.Random(seed)
    values = [rng.lognormvariate(math.log(0.01), 1.5) for _ in range(5000)] + [0.0, 5e-7]
    h = LogHistogram()
    for v in values:
        h.add(v)
    for q in (0.5, 0.9, 0.99):
        exact = np.percentile(values, q * 100, method="inverted_cdf")
        assert h.quantile(q) == pytest.approx(exact, rel=1e-3)
    assert h.describe()["max"] == max(values)


def test_a_manifest_push_waits_for_the_earlier_reads_of_its_tag():
    """Order of one object holds both ways: a later PUT of a tag does not overtake an earlier GET of it."""
    p = Planner(["r:1"])
    get = p.plan(rec("GET", "v2/a/x/manifests/v1", client="c2"), 0, None)
    head = p.plan(rec("HEAD", "v2/a/x/manifests/v1", client="c3"), 1, None)
    push = rec("PUT", "v2/a/x/manifests/v1", 201, 900)
    assert p.blocked_by(push) == [("manifest", "a/x", "v1")]
    assert p.blocked_by(rec("PUT", "v2/a/x/manifests/v2", 201, 900)) == []  # another tag: free
    p.done(get, ReplayResult(0, 200, True, 0.0, 0.01))
    assert p.blocked_by(push) == [("manifest", "a/x", "v1")]  # the HEAD is still out
    p.done(head, None)  # lost with its node: nothing will come, the push may go
    assert p.blocked_by(push) == []


def test_a_blob_read_carries_the_objects_known_size():
    p = Planner(["r:1"])
    p.learn("a/x", "blob", "L1", "sha256:warm", 1234)
    assert p.plan(rec("GET", "v2/a/x/blobs/L1"), 0, None).object_size == 1234
    assert p.plan(rec("HEAD", "v2/a/x/blobs/L1"), 1, None).object_size is None  # no body to count
    assert p.plan(rec("GET", "v2/a/x/blobs/L404", 404), 2, None).object_size is None  # unknown object


def test_held_records_wait_per_client_and_keep_each_objects_order():
    """A record waiting for a push in flight holds back only its client; held pushes are not overtaken."""
    from drtp.master.run.held import HeldRecords

    p = Planner(["r:1"])
    held = HeldRecords(p)
    push = p.plan(rec("PUT", "v2/a/x/blobs/L1", 201, 10, client="c1"), 0, None)
    read = rec("GET", "v2/a/x/blobs/L1", client="c2")
    assert held.hold(read, 1, None)  # waits for the push in flight
    after = rec("PUT", "v2/a/x/manifests/t", 201, 900, client="c2")  # c2's next record: held behind it
    assert held.hold(after, 2, None)
    other = rec("GET", "v2/a/x/manifests/t", client="c3")  # reads the tag c2's held push will write
    assert held.hold(other, 3, None)
    assert not held.hold(rec("GET", "v2/b/y/blobs/L7", client="c4"), 4, None)  # unrelated: goes now
    assert held.release() == [] and len(held) == 3
    p.done(push, ReplayResult(0, 201, True, 0.0, 0.01, 10, "sha256:new", size=10))
    first = held.release()
    assert [h.seq for h in first] == [1, 2]  # c2 in trace order; c3 still waits for c2's manifest push
    for h in first:
        held.planned(h)
        req = p.plan(h.rec, h.seq, h.at)
    assert held.release() == []
    p.done(req, ReplayResult(2, 201, True, 0.0, 0.01))
    assert [h.seq for h in held.release()] == [3] and len(held) == 0


def test_every_planned_field_lands_in_its_own_field_of_the_request():
    """The planner builds requests positionally (keywords cost the master per request): each value must land
    in the field it names, checked against requests built by keyword for every kind of field."""
    from drtp.replay.messages import Layer, ReplayRequest
    from drtp.trace.records import AgentRecord

    p = Planner(["r:1"])
    p.learn("a/x", "blob", "base", "sha256:base", 5)
    p.learn("a/x", "blob", "L2", "sha256:l2", 7)
    later = T + _dt.timedelta(seconds=1.5)
    agent = AgentRecord("h", 0.25, "GET", "c9", "v2/a/x/blobs/base", 200, 5, "g1", later, useragent="docker/24.0")
    p.plan(rec("HEAD", "v2/a/x/blobs/base"), 0, None)  # the image's blobs: base, then L2 (its config)
    p.plan(rec("HEAD", "v2/a/x/blobs/L2"), 1, None)
    got = [
        p.plan(agent, 2, 0.75),
        p.plan(rec("PUT", "v2/a/x/manifests/v1", 201, 900), 3, None),
        p.plan(rec("POST", "v2/a/y/blobs/uploads/?mount=base&from=a/x", 202), 4, None, upload="#4"),
    ]
    base = {"registry": "r:1", "trace_start": 1.5, "trace_end": 1.75}
    want = [
        ReplayRequest(seq=2, trace_id="g1", client="c9", method="GET", kind="blob", op="get", repository="a/x",
                      reference="base", size=5, expected_status=200, digest="sha256:base", object_size=5, at=0.75,
                      user_agent="docker/24.0", **base),
        ReplayRequest(seq=3, trace_id="id", client="c1", method="PUT", kind="manifest", op="manifest-put",
                      registry="r:1", repository="a/x", reference="v1", size=900,
                      expected_status=201, layers=[Layer("sha256:base", 5)], config=Layer("sha256:l2", 7),
                      trace_start=0.0, trace_end=0.01),
        ReplayRequest(seq=4, trace_id="id", client="c1", method="POST", kind="blob", op="upload-open",
                      registry="r:1", repository="a/y", reference="uploads/", size=0,
                      expected_status=202, object_size=5, mount="sha256:base",
                      mount_from="a/x", trace_start=0.0, trace_end=0.01, upload="#4"),
    ]  # fmt: skip
    assert got == want
