"""The trace as columns: object keys of a push, interning order, and the same columns from records and Parquet."""

from __future__ import annotations

import numpy as np
import pytest

from drtp.trace.columns import BLOB, GET, HEAD, MANIFEST, PATCH, POST, PUT, UPLOAD, ColumnBuilder, TraceColumns
from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.parquet import add_parquet, write_parquet
from drtp.trace.reader import TraceReader, write_ibm
from tests.trace_records import rec

DIGEST = "sha256:" + "ab" * 32
ROW_COLUMNS = ("time", "duration", "method", "kind", "upload", "status", "size", "obj", "repo", "client", "host")


def push_and_pull() -> list:
    """A chunked push of DIGEST into u/r, a HEAD and a monolithic PUT on one upload URL, then pulls."""
    return [
        rec(0, "POST", "v2/u/r/blobs/uploads/", status=202),
        rec(1, "PATCH", "v2/u/r/blobs/uploads/abc", size=700, status=202),
        rec(2, "PUT", f"v2/u/r/blobs/uploads/abc?digest={DIGEST.replace(':', '%3A')}", status=201),
        rec(3, "HEAD", "v2/u/q/blobs/uploads/x?digest=L9", status=404),
        rec(4, "PUT", "v2/u/q/blobs/uploads/x?digest=L9", size=50, status=201),
        rec(5, "PUT", "v2/u/r/manifests/v1", size=300, status=201),
        rec(6, "GET", "v2/u/r/manifests/v1", size=300, client="c2"),
        rec(7, "GET", f"v2/u/r/blobs/{DIGEST}", size=700, client="c2", host="h2"),
        rec(8, "GET", "v2/u/q/blobs/L9", size=50, client="c2"),
    ]


def test_push_requests_are_keyed_by_session_and_the_completing_put_by_its_digest():
    cols = TraceColumns.from_records(push_and_pull())
    assert cols.method.tolist() == [POST, PATCH, PUT, HEAD, PUT, PUT, GET, GET, GET]
    assert cols.kind.tolist() == [UPLOAD, UPLOAD, BLOB, UPLOAD, BLOB, MANIFEST, MANIFEST, BLOB, BLOB]
    assert cols.upload.tolist() == [True] * 5 + [False] * 4
    key = [cols.objects[o] for o in cols.obj]
    assert key == ["uploads/", "uploads/abc", DIGEST, "uploads/x", "L9", "u/r:v1", "u/r:v1", DIGEST, "L9"]
    assert cols.objects == ["uploads/", "uploads/abc", DIGEST, "uploads/x", "L9", "u/r:v1"]  # in order of first use
    assert [cols.repositories[r] for r in cols.repo] == ["u/r"] * 3 + ["u/q"] * 2 + ["u/r"] * 3 + ["u/q"]
    assert cols.clients == ["c1", "c2"] and cols.hosts == ["h1", "h2"] and cols.id is None
    assert cols.ingress_bytes() == 750  # the PATCH and the monolithic PUT; not the manifest
    assert cols.layer_gets().tolist() == [7, 8]


def test_names_are_interned_across_batches_in_order_of_first_appearance():
    records = push_and_pull()
    whole = TraceColumns.from_batches([records])
    split = TraceColumns.from_batches([records[:4], records[4:7], records[7:]], with_ids=True)
    for name in ROW_COLUMNS:
        np.testing.assert_array_equal(getattr(whole, name), getattr(split, name), err_msg=name)
    assert (whole.objects, whole.repositories) == (split.objects, split.repositories)
    assert split.id.tolist() == [r.id for r in records]


def test_a_uri_of_another_shape_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown URI shape: 'v2/_catalog'"):
        TraceColumns.from_records([rec(0, "GET", "v2/_catalog")])


def test_parquet_rows_give_the_columns_of_the_records(tmp_path):
    js, pq = tmp_path / "t.json", tmp_path / "t.parquet"
    records = list(generate(GenerateOptions(requests=3000, seed=4, span_s=600))) + [r.to_ibm() for r in push_and_pull()]
    write_ibm(js, sorted(records, key=lambda r: r["timestamp"]))
    write_parquet(pq, TraceReader([js]).batches())
    from_records = TraceColumns.from_batches(TraceReader([js]).batches(), with_ids=True)
    builder = ColumnBuilder(with_ids=True)
    add_parquet(builder, pq)
    from_parquet = builder.build()
    assert len(from_records) == len(from_parquet) == 3009
    for name in (*ROW_COLUMNS, "id"):
        np.testing.assert_array_equal(getattr(from_records, name), getattr(from_parquet, name), err_msg=name)
    for names in ("objects", "repositories", "clients", "hosts"):
        assert getattr(from_records, names) == getattr(from_parquet, names)
    assert set(from_parquet.kind.tolist()) == {MANIFEST, BLOB, UPLOAD}
