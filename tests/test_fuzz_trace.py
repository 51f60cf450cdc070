"""Property tests: whatever bytes a trace file or a registry log holds, reading it yields valid
records or raises a DrtpError — never another exception, never a hang.

Examples per test come from a hypothesis settings profile: ``fuzz-ci`` (the default, about
half a minute for the whole file) or ``fuzz-deep`` (set ``DRTP_FUZZ=deep`` for a longer hunt).
Each example runs under an alarm, a hang guard far above the time an example takes.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import os
from pathlib import Path

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drtp.errors import DrtpError
from drtp.trace.anonymize import Anonymizer, PlainNames
from drtp.trace.capture import capture_files
from drtp.trace.parquet import SCHEMA
from drtp.trace.reader import read_trace
from drtp.trace.records import (
    IBM_URI_LINES,
    MAX_DURATION_S,
    MAX_SIZE,
    MAX_TIME,
    MIN_TIME,
    URI_LINES,
    TraceRecord,
    parse_uri,
    uris_valid,
)
from tests.conftest import REGISTRY_LOG_LINE, hang_guard, ibm_record

settings.register_profile(
    "fuzz-ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.register_profile("fuzz-deep", max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
FUZZ = settings(settings.get_profile("fuzz-deep" if os.environ.get("DRTP_FUZZ") == "deep" else "fuzz-ci"))
HANG_GUARD_S = 30  # one example takes milliseconds; this only turns a hang into a failure


def check_records(records: list[TraceRecord]) -> None:
    """What every record the reader lets through satisfies, whatever the input was."""
    for r in records:
        assert r.method in ("GET", "HEAD", "PUT", "PATCH", "POST", "DELETE")
        assert 0 <= r.size <= MAX_SIZE and isinstance(r.size, int)
        assert 0 <= r.duration <= MAX_DURATION_S
        assert 100 <= r.status <= 599
        assert MIN_TIME <= r.timestamp < MAX_TIME
        assert parse_uri(r.uri) is not None


def read_or_refuse(path: Path, **kwargs) -> None:
    """Reading ``path`` returns valid records or raises a one-line DrtpError, within the guard."""
    with hang_guard(HANG_GUARD_S):
        try:
            records = read_trace([path], **kwargs)
        except DrtpError as e:
            assert "\n" not in str(e)
            return
    assert records  # no error means something was read: an empty input is an error
    check_records(records)


SUFFIXES = (".json", ".jsonl", ".json.gz", ".parquet", ".log")


@FUZZ
@given(data=st.binary(max_size=4000), suffix=st.sampled_from(SUFFIXES), skip_bad=st.booleans())
def test_any_bytes_in_any_format(tmp_path_factory, data, suffix, skip_bad):
    path = tmp_path_factory.mktemp("fuzz") / f"t{suffix}"
    path.write_bytes(gzip.compress(data) if suffix == ".json.gz" and data[:1] != b"\x1f" else data)
    read_or_refuse(path, skip_bad=skip_bad)
    for fmt in ("ibm", "jsonl", "registry-log"):
        read_or_refuse(path, fmt=fmt, skip_bad=skip_bad)


# values of the wrong type or out of range, and a few right ones, for every field of a record
anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
FIELD_VALUES = {
    "host": st.one_of(anything, st.just("h1")),
    "http.request.duration": st.one_of(anything, st.just(0.5), st.just(86_401.0), st.just(-0.0)),
    "http.request.method": st.one_of(anything, st.sampled_from(["GET", "PUT", "PATCH", "POST", "HEAD", "get"])),
    "http.request.remoteaddr": st.one_of(anything, st.just("c1")),
    "http.request.uri": st.one_of(
        anything,
        st.sampled_from(
            [
                "v2/u/r/blobs/l1",
                "v2/u/r/manifests/t",
                "v2/u/r/blobs/uploads/",
                "v2/u/../manifests/t",
                "v2/u/r/manifests/t\r\nX: y",
                "v2/u/r/manifests/t\nv2/u/r/manifests/s",
                "v2/u/r/blobs/uploads/..",
                "v2/u/r/manifests/t?x=1?y",
                "/v2/a/b/c/blobs/sha256:" + "0" * 64,
            ]
        ),
    ),
    "http.response.status": st.one_of(anything, st.sampled_from([200, 99, 600, 404])),
    "http.response.written": st.one_of(anything, st.sampled_from([0, 1 << 40, (1 << 40) + 1, 10**30, -1])),
    "id": st.one_of(anything, st.just("i")),
    "timestamp": st.one_of(
        anything,
        st.sampled_from(
            ["2017-07-01T00:00:00.000Z", "9999-12-31T23:59:59Z", "1969-12-31T23:59:59Z", "2017-07-01T00:00:00"]
        ),
    ),
}
mutated_record = st.builds(
    lambda i, over: ibm_record(i, **over),
    st.integers(0, 100),
    st.fixed_dictionaries({}, optional=FIELD_VALUES),
)


def _dump(records: list, fmt: str) -> bytes:
    if fmt == "jsonl":
        return b"".join(json.dumps(r).encode() + b"\n" for r in records)
    return json.dumps(records).encode()


@FUZZ
@given(
    records=st.lists(st.one_of(mutated_record, st.builds(ibm_record, st.integers(0, 100))), min_size=0, max_size=12),
    fmt=st.sampled_from(["json", "jsonl", "json.gz"]),
    skip_bad=st.booleans(),
)
def test_records_with_wrong_types_and_values(tmp_path_factory, records, fmt, skip_bad):
    data = _dump(records, "jsonl" if fmt == "jsonl" else "json")
    path = tmp_path_factory.mktemp("fuzz") / f"t.{fmt}"
    path.write_bytes(gzip.compress(data) if fmt.endswith("gz") else data)
    read_or_refuse(path, skip_bad=skip_bad, chunk_bytes=256)


@FUZZ
@given(
    cut=st.floats(0, 1), fmt=st.sampled_from(["json", "jsonl", "json.gz", "parquet"]), chunk=st.sampled_from([64, 4096])
)
def test_a_valid_trace_cut_at_any_byte(tmp_path_factory, cut, fmt, chunk):
    records = [ibm_record(i) for i in range(30)]
    if fmt == "parquet":
        buf = io.BytesIO()
        decoded = [msgspec.convert(r, TraceRecord, strict=False) for r in records]
        from drtp.trace.parquet import _table

        pq.write_table(_table(decoded), buf)
        data = buf.getvalue()
    else:
        data = _dump(records, "jsonl" if fmt == "jsonl" else "json")
        if fmt.endswith("gz"):
            data = gzip.compress(data)
    path = tmp_path_factory.mktemp("fuzz") / f"t.{fmt}"
    path.write_bytes(data[: int(len(data) * cut)])
    read_or_refuse(path, chunk_bytes=chunk)


column_values = {
    "duration": st.floats(allow_nan=True, allow_infinity=True),
    "size": st.integers(-(2**63), 2**63 - 1),
    "status": st.integers(-(2**31), 2**31 - 1),
    "method": st.sampled_from(["GET", "PUT", "BREW", ""]),
    "uri": st.sampled_from(["v2/u/r/blobs/l", "v2/u/../blobs/l", "", "v2/u/r/manifests/t\n"]),
    "timestamp": st.datetimes(
        min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30), timezones=st.just(dt.timezone.utc)
    ),
}


@FUZZ
@given(rows=st.lists(st.fixed_dictionaries({}, optional=column_values), min_size=1, max_size=8), skip_bad=st.booleans())
def test_parquet_rows_of_any_value(tmp_path_factory, rows, skip_bad):
    base = {
        "host": "h",
        "duration": 0.1,
        "method": "GET",
        "client": "c",
        "uri": "v2/u/r/blobs/l",
        "status": 200,
        "size": 1,
        "id": "i",
        "timestamp": dt.datetime(2017, 1, 1, tzinfo=dt.timezone.utc),
        "repository": "u/r",
        "kind": "blob",
        "reference": "l",
    }
    full = [{**base, **row} for row in rows]
    table = pa.Table.from_pylist(full, schema=SCHEMA)
    path = tmp_path_factory.mktemp("fuzz") / "t.parquet"
    pq.write_table(table, path)
    read_or_refuse(path, skip_bad=skip_bad)


# -- the capture parser ---------------------------------------------------------------------

LOG_VALUES = {
    "msg": st.one_of(anything, st.sampled_from(["response completed", "response completed with error"])),
    "time": st.one_of(anything, st.sampled_from(["2024-01-01T00:00:01Z", "garbage", "9999-01-01T00:00:00Z"])),
    "http.request.method": st.one_of(anything, st.sampled_from(["GET", "PUT", "PATCH", "POST", "BREW"])),
    "http.request.uri": st.one_of(
        anything,
        st.sampled_from(
            [
                "/v2/library/alpine/manifests/latest",
                "/v2/library/alpine/blobs/uploads/",
                "/v2/library/alpine/blobs/uploads/u-1?_state=AAAA&digest=sha256:" + "1" * 64,
                "/v2/library/alpine/blobs/uploads/u-1?_state=%%%",
                "/v2/library/alpine/blobs/uploads/?mount=sha256:x&from=a%20b",
                "/v2/library/../manifests/x",
                "/v2/",
            ]
        ),
    ),
    "http.response.status": st.one_of(anything, st.sampled_from([200, 201, 202, 0, 1000])),
    "http.response.written": st.one_of(anything, st.sampled_from([0, 10, -1, 1 << 41])),
    "http.response.duration": st.one_of(anything, st.sampled_from(["1.5ms", "abc", "1h1h", "99999999h", ""])),
    "http.request.id": st.one_of(anything, st.sampled_from(["a", "b"])),
}
log_line = st.one_of(
    st.fixed_dictionaries({}, optional=LOG_VALUES).map(lambda over: json.dumps({**REGISTRY_LOG_LINE, **over})),
    st.text(max_size=40),
)


def capture_or_refuse(path: Path, names) -> None:
    """Capture yields records that read back as a valid trace, or a one-line DrtpError."""
    with hang_guard(HANG_GUARD_S):
        try:
            cap, records = capture_files([path], names)
            records = list(records)
        except DrtpError as e:
            assert "\n" not in str(e)
            return
    assert records and cap.stats.requests == len(records)
    if cap.stats.bad_lines:
        assert "\n" not in cap.stats.warning()
    decoded = [msgspec.convert(r, TraceRecord, strict=False) for r in records]
    assert uris_valid([r.uri for r in decoded]) or all(parse_uri(r.uri) for r in decoded)
    check_records(decoded)


@FUZZ
@given(data=st.binary(max_size=3000), plain=st.booleans())
def test_capture_any_bytes(tmp_path_factory, data, plain):
    path = tmp_path_factory.mktemp("fuzz") / "registry.log"
    path.write_bytes(data)
    capture_or_refuse(path, PlainNames() if plain else Anonymizer("salt"))


@FUZZ
@given(lines=st.lists(log_line, max_size=10), plain=st.booleans())
def test_capture_log_lines_of_any_value(tmp_path_factory, lines, plain):
    path = tmp_path_factory.mktemp("fuzz") / "registry.log"
    path.write_text("\n".join(lines) + "\n")
    capture_or_refuse(path, PlainNames() if plain else Anonymizer("salt"))


# -- the fast chunk checks are never more lenient than the record-by-record check -----------

piece = st.sampled_from(
    ["v2", "a", "b1", "A", "a.b", "a..b", "a__b", "a-_b", "-a", ".", "..", "", "blobs", "manifests", "uploads"]
    + ["sha256:" + "f" * 32, "sha256:1", "x?y", "x y", "x\r", "x\x00", "é", "t" * 130, "u" * 128]
)


@FUZZ
@given(
    parts=st.lists(piece, min_size=1, max_size=7),
    slash=st.booleans(),
    query=st.sampled_from(["", "?a=b", "?a b", "?a?b", "?"]),
)
def test_chunk_checks_never_accept_what_the_slow_path_refuses(parts, slash, query):
    uri = ("/" if slash else "") + "/".join(parts) + query
    for pattern in (IBM_URI_LINES, URI_LINES):
        if pattern.fullmatch(uri + "\n"):
            assert parse_uri(uri) is not None, (pattern is IBM_URI_LINES, uri)
    if uris_valid([uri, "v2/u/r/blobs/l"]):
        assert parse_uri(uri) is not None, uri


@pytest.mark.parametrize("uri", ["v2/u/r/blobs/l\nv2/u/r/blobs/m", "v2/u/r/blobs/l\n"])
def test_chunk_check_refuses_line_breaks_inside_a_uri(uri):
    assert not uris_valid([uri])
