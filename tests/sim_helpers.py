"""Helpers for the simulation tests: hand-made and generated traces."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from drtp.trace.columns import TraceColumns
from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.reader import TraceReader, write_ibm
from drtp.trace.records import TraceRecord

T0 = _dt.datetime(2017, 8, 1, tzinfo=_dt.timezone.utc)


def rec(
    t: float, method: str, uri: str, size: int = 0, client: str = "c1", host: str = "h1", status: int = 200
) -> TraceRecord:
    return TraceRecord(
        host=host,
        duration=0.01,
        method=method,
        client=client,
        uri=uri,
        status=status,
        size=size,
        id=f"id{t}-{method}-{uri}",
        timestamp=T0 + _dt.timedelta(seconds=t),
    )


def layer_get(t: float, layer: str, size: int, client: str = "c1", host: str = "h1", repo: str = "u/r") -> TraceRecord:
    return rec(t, "GET", f"v2/{repo}/blobs/{layer}", size, client, host)


def hand_trace(records: list[TraceRecord]) -> TraceColumns:
    return TraceColumns.from_records(records)


def gen_trace_file(path: Path, requests: int = 6000, seed: int = 3, **kw) -> Path:
    opts = GenerateOptions(requests=requests, seed=seed, span_s=kw.pop("span_s", 6 * 3600), **kw)
    write_ibm(path, generate(opts))
    return path


def load(path: Path) -> TraceColumns:
    return TraceColumns.from_batches(TraceReader([path]).batches())
