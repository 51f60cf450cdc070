"""Trace columns: the Parquet fast path gives exactly the frame the record path gives."""

from __future__ import annotations

import pandas as pd
import pytest

from drtp.analysis.characterize import characterize
from drtp.analysis.trace_frame import load_trace
from drtp.errors import DrtpError
from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.parquet import write_parquet
from drtp.trace.reader import TraceReader, write_ibm


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("cols")
    out = []
    for seed in (1, 2):
        js = d / f"t{seed}.json"
        write_ibm(js, generate(GenerateOptions(requests=2500, seed=seed, span_s=3600, clients=15, repositories=20)))
        pq = d / f"t{seed}.parquet"
        write_parquet(pq, TraceReader([js]).batches())
        out.append((js, pq))
    return out


def same_frames(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    for c in a.columns:
        left, right = a[c].reset_index(drop=True), b[c].reset_index(drop=True)
        if isinstance(left.dtype, pd.CategoricalDtype):
            left, right = left.astype(object), right.astype(object)
        pd.testing.assert_series_equal(left, right, check_names=False)


def test_parquet_equals_records_path(traces):
    (js, pq), _ = traces
    a, b = load_trace([js], with_ids=True), load_trace([pq], with_ids=True)
    same_frames(a, b)
    ca, cb = characterize(a), characterize(b)
    ca.pop("generated"), cb.pop("generated")
    assert ca == cb


def test_parquet_files_merge_by_time_and_limits_apply(traces):
    (js1, pq1), (js2, pq2) = traces
    a, b = load_trace([js1, js2]), load_trace([pq1, pq2])
    assert b["time"].is_monotonic_increasing and len(b) == 5000
    pd.testing.assert_series_equal(a["time"], b["time"])
    assert len(load_trace([pq1], limit_type="requests", amount=100)) == 100
    cut_json = load_trace([js1], limit_type="seconds", amount=600)
    cut_parquet = load_trace([pq1], limit_type="seconds", amount=600)
    same_frames(cut_json, cut_parquet)


def test_bad_parquet_is_a_user_error(tmp_path):
    bad = tmp_path / "x.parquet"
    bad.write_text("not parquet")
    with pytest.raises(DrtpError, match="not a drtp Parquet trace"):
        load_trace([bad])
