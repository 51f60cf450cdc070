"""The real Distribution registry fixture: a push and a pull through python-dxf."""

from __future__ import annotations

import hashlib
import os
from collections import Counter

import requests
from dxf import DXF

from drtp.trace.reader import TraceReader


def test_push_and_pull_through_python_dxf(registry):
    data = os.urandom(200_000)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    dxf = DXF(registry.host, "drtp/test", insecure=True)
    assert dxf.push_blob(data=data, digest=digest) == digest
    assert dxf.blob_size(digest) == len(data)
    assert b"".join(dxf.pull_blob(digest)) == data
    assert requests.get(f"{registry.url}/v2/drtp/test/blobs/sha256:{'0' * 64}", timeout=5).status_code == 404

    # the registry's JSON log is the ground truth of what was sent
    reader = TraceReader([registry.log_path], fmt="registry-log")
    recs = list(reader)
    sent = Counter((r.method, r.kind) for r in recs)
    assert sent[("HEAD", "blob")] >= 2  # push_blob's existence check and blob_size
    assert sent[("POST", "blob")] == 1 and sent[("PUT", "blob")] == 1
    assert sent[("GET", "blob")] == 2  # the pull and the 404
    assert any(r.status == 404 for r in recs)
    put = next(r for r in recs if r.method == "PUT")
    assert put.is_upload and put.repository == "drtp/test"
    get = next(r for r in recs if r.method == "GET" and r.status == 200)
    assert get.size == len(data) and get.reference == digest


def test_registry_stops_and_frees_its_port(tmp_path):
    from drtp.registry.local import LocalRegistry

    reg = LocalRegistry(tmp_path / "r").start()
    url = reg.url
    assert requests.get(f"{url}/v2/", timeout=5).status_code == 200
    reg.close()
    try:
        requests.get(f"{url}/v2/", timeout=2)
        raise AssertionError("the registry still answers after close()")
    except requests.ConnectionError:
        pass
