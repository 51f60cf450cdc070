"""Layers larger than the in-memory limit are streamed, on push (PATCH and monolithic PUT) and in warmup."""

from __future__ import annotations

import datetime as _dt

import pandas as pd
import pytest
import requests

from drtp.master.run.replay import run_replay
from drtp.master.run.warmup import run_warmup
from drtp.registry.content import STREAM_ABOVE
from drtp.registry.local import LocalRegistry
from drtp.trace.reader import write_ibm
from drtp.trace.records import format_timestamp
from tests.replay_support import Node, write_config

pytestmark = pytest.mark.registry
BIG = STREAM_ABOVE + 3_000_001
T0 = _dt.datetime(2017, 8, 1, tzinfo=_dt.timezone.utc)


def test_large_layers_are_streamed(tmp_path):
    steps = [
        ("GET", "v2/u/a/blobs/old", 200, BIG),  # warmed: streamed by warmup
        ("POST", "v2/u/a/blobs/uploads/", 202, 0),
        ("PUT", "v2/u/a/blobs/mono", 201, BIG),  # monolithic
        ("POST", "v2/u/a/blobs/uploads/", 202, 0),
        ("PATCH", "v2/u/a/blobs/uploads/x1", 202, BIG + 1),  # chunked
        ("PUT", "v2/u/a/blobs/chunked", 201, 0),
        ("GET", "v2/u/a/blobs/mono", 200, BIG),
        ("GET", "v2/u/a/blobs/chunked", 200, BIG + 1),
    ]
    trace = tmp_path / "big.json"
    write_ibm(
        trace,
        [
            {
                "host": "h",
                "http.request.duration": 0.1,
                "http.request.method": m,
                "http.request.remoteaddr": "c1",
                "http.request.uri": uri,
                "http.response.status": status,
                "http.response.written": size,
                "id": f"r{i}",
                "timestamp": format_timestamp(T0 + _dt.timedelta(seconds=i)),
            }
            for i, (m, uri, status, size) in enumerate(steps)
        ],
    )
    node = Node(tmp_path)
    try:
        with LocalRegistry(tmp_path / "registry") as reg:
            cfg = write_config(tmp_path, trace, [reg.host], [node.address])
            run_warmup(cfg, quiet=True)
            summary = run_replay(cfg, tmp_path / "run", quiet=True)
            rows = pd.read_csv(tmp_path / "run" / "requests.csv")
            main = rows[~rows.auxiliary]
            assert summary["failed"] == 0, main[["method", "reference", "status", "error"]].to_string()
            gets = main[main.method == "GET"].set_index("reference")
            assert gets.loc["old", "bytes"] == BIG
            assert gets.loc["mono", "bytes"] == BIG
            assert gets.loc["chunked", "bytes"] == BIG + 1
            for ref in ("mono", "chunked"):
                digest = gets.loc[ref, "digest"]
                head = requests.head(f"{reg.url}/v2/u/a/blobs/{digest}", timeout=5)
                assert head.status_code == 200 and int(head.headers["Content-Length"]) == gets.loc[ref, "bytes"]
    finally:
        node.stop()
