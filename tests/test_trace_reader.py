"""The streaming trace reader: formats, sorting, limits and bad records."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from drtp.errors import DrtpError, TraceError
from drtp.trace import TraceReader, detect_format, parse_go_duration, read_trace, write_ibm
from tests.conftest import ibm_record, write_json


def ids(records) -> list[str]:
    return [r.id for r in records]


def test_reads_all_fields(small_trace):
    recs = read_trace([small_trace])
    assert len(recs) == 50
    r = recs[7]
    assert (r.host, r.duration, r.method, r.client, r.status, r.size, r.id) == (
        "579633fd",
        0.25,
        "GET",
        "client1",
        200,
        1007,
        "id7",
    )
    assert (r.repository, r.kind, r.reference) == ("user1/repo3", "blob", "layer7")
    assert r.timestamp.isoformat() == "2017-07-01T01:00:07.007000+00:00"


def test_every_method_is_kept(tmp_path):
    methods = ["GET", "HEAD", "PUT", "PATCH", "POST"]
    uris = [
        "v2/u/r/blobs/l",
        "v2/u/r/manifests/t",
        "v2/u/r/blobs/l2",
        "v2/u/r/blobs/uploads/u1",
        "v2/u/r/blobs/uploads/",
    ]
    path = write_json(
        tmp_path / "m.json",
        [
            ibm_record(i, **{"http.request.method": m, "http.request.uri": u})
            for i, (m, u) in enumerate(zip(methods, uris, strict=True))
        ],
    )
    recs = read_trace([path])
    assert [r.method for r in recs] == methods
    assert [r.is_upload for r in recs] == [False, False, False, True, True]


def test_sorts_unsorted_records_and_merges_files(tmp_path):
    recs = [ibm_record(i) for i in range(300)]
    shuffled = recs[:]
    random.Random(3).shuffle(shuffled)
    a = write_json(tmp_path / "a.json", sorted(shuffled[:150], key=lambda r: r["id"]))  # each file unsorted
    b = write_json(tmp_path / "b.json", shuffled[150:])
    with pytest.raises(TraceError, match="earlier than records already read.*--sort-files"):
        read_trace([a, b], chunk_bytes=700)  # streaming tolerates only reorder_window of disorder
    out = read_trace([a, b], chunk_bytes=700, sort_files=True)
    assert ids(out) == [r["id"] for r in recs]


def test_merges_overlapping_files_and_tolerates_jitter(tmp_path):
    recs = [ibm_record(i) for i in range(400)]
    jittered = recs[:]
    for i in range(0, 398, 3):  # swap neighbours: a few seconds of disorder
        jittered[i], jittered[i + 2] = jittered[i + 2], jittered[i]
    a = write_json(tmp_path / "a.json", jittered[0::2])  # two interleaved files
    b = write_json(tmp_path / "b.json", jittered[1::2])
    out = read_trace([a, b], chunk_bytes=600)
    assert ids(out) == [r["id"] for r in recs]


def test_chunk_boundaries_inside_strings(tmp_path):
    # braces and brackets inside strings must not confuse the chunking
    recs = [ibm_record(i, **{"http.request.useragent": 'weird }, {" ]agent' * (i % 3)}) for i in range(40)]
    path = write_json(tmp_path / "w.json", recs)
    for chunk in (50, 97, 333, 4096):
        assert ids(read_trace([path], chunk_bytes=chunk)) == [f"id{i}" for i in range(40)]


def test_limit_by_requests_and_seconds(small_trace):
    assert len(read_trace([small_trace], limit_type="requests", amount=12)) == 12
    # record i arrives at i s + i ms: 10.5 s after the first record covers records 0..10
    assert len(read_trace([small_trace], limit_type="seconds", amount=10.5)) == 11
    for amount in (0, -10, 1.5, float("nan"), float("inf")):  # a limit that selects nothing, or nonsense
        with pytest.raises(DrtpError, match="trace limit"):
            TraceReader([small_trace], limit_type="requests", amount=amount)
    with pytest.raises(DrtpError, match="trace limit"):
        TraceReader([small_trace], limit_type="seconds", amount=float("nan"))


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ({"http.response.written": -5}, "written"),
        ({"timestamp": "yesterday"}, "timestamp"),
        ({"timestamp": "2017-07-01T01:00:00"}, "timestamp"),  # no time zone
        ({"http.request.method": "FETCH"}, "method"),
        ({"http.request.uri": "v2/_catalog"}, "unknown URI shape"),
        ({"http.request.duration": "slow"}, "duration"),
    ],
)
def test_bad_record_names_file_and_index(tmp_path, override, reason):
    recs = [ibm_record(i) for i in range(30)]
    recs[17] = ibm_record(17, **override)
    path = write_json(tmp_path / "bad.json", recs)
    with pytest.raises(TraceError) as err:
        read_trace([path])
    assert err.value.index == 17 and err.value.path == str(path)
    assert reason in str(err.value) and str(path) in str(err.value) and "record 17" in str(err.value)
    reader = TraceReader([path], skip_bad=True)
    assert len(list(reader)) == 29
    assert reader.stats.skipped == 1 and "record 17" in reader.stats.problems[0]


def test_missing_field(tmp_path):
    recs = [ibm_record(i) for i in range(5)]
    del recs[3]["timestamp"]
    path = write_json(tmp_path / "missing.json", recs)
    with pytest.raises(TraceError, match=r"record 3: missing field `timestamp`"):
        read_trace([path])


def test_bad_json_is_reported_and_skippable(tmp_path):
    lines = [json.dumps(ibm_record(i)) for i in range(20)]
    lines[9] = lines[9].replace('"GET"', "GET")  # not JSON
    path = tmp_path / "broken.json"
    path.write_text("[\n" + ",\n".join(lines) + "\n]\n")
    with pytest.raises(TraceError, match=r"record 9: invalid JSON"):
        read_trace([path])
    reader = TraceReader([path], skip_bad=True, chunk_bytes=300)
    assert len(list(reader)) == 19 and reader.stats.skipped == 1


def test_indices_stay_exact_after_skipped_records(tmp_path):
    recs = [ibm_record(i) for i in range(60)]
    recs[3] = ibm_record(3, **{"http.response.written": -1})
    recs[40] = ibm_record(40, **{"http.request.uri": "v2/"})
    path = write_json(tmp_path / "two-bad.json", recs)
    reader = TraceReader([path], skip_bad=True, chunk_bytes=400)
    assert len(list(reader)) == 58
    assert [p.split(": ")[1] for p in reader.stats.problems] == ["record 3", "record 40"]


def test_truncated_and_non_array_files(tmp_path):
    path = tmp_path / "trunc.json"
    path.write_text("[\n" + json.dumps(ibm_record(0)) + ",\n" + json.dumps(ibm_record(1))[:40])
    with pytest.raises(TraceError, match="trunc.json"):
        read_trace([path])
    other = tmp_path / "other.txt"
    other.write_text("hello")
    with pytest.raises(DrtpError, match="not a trace"):
        read_trace([other])
    with pytest.raises(DrtpError, match="not found"):
        read_trace([tmp_path / "nope.json"])
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    with pytest.raises(DrtpError, match="empty.json: no records"):  # nothing to read is an error
        read_trace([empty])


def test_out_of_order_beyond_window(tmp_path):
    recs = [ibm_record(i) for i in range(200)]
    late = recs.pop(5)
    recs.insert(190, late)  # about 3 minutes late, with many chunks in between
    path = write_json(tmp_path / "late.json", recs)
    with pytest.raises(TraceError, match="record 190: timestamp .* earlier"):
        read_trace([path], chunk_bytes=500, reorder_window=10)
    assert ids(read_trace([path], chunk_bytes=500, reorder_window=600)) == [f"id{i}" for i in range(200)]


def test_json_lines_and_gzip(tmp_path):
    recs = [ibm_record(i) for i in range(25)]
    lines = tmp_path / "t.jsonl"
    lines.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    assert detect_format(lines) == "jsonl"
    assert ids(read_trace([lines], chunk_bytes=200)) == [r["id"] for r in recs]
    gz = tmp_path / "t.json.gz"
    with gzip.open(gz, "wt") as f:
        json.dump(recs, f)
    assert ids(read_trace([gz])) == [r["id"] for r in recs]


def test_json_lines_bad_line_is_named(tmp_path):
    recs = [json.dumps(ibm_record(i)) for i in range(6)]
    recs[4] = json.dumps(ibm_record(4, **{"http.response.written": -1}))
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(recs) + "\n")
    with pytest.raises(TraceError, match=r"record 4: .*written"):
        read_trace([path])


def test_write_ibm_round_trip(tmp_path, small_trace):
    recs = read_trace([small_trace])
    out = tmp_path / "copy.json"
    assert write_ibm(out, recs) == 50
    assert read_trace([out]) == recs


def test_go_durations():
    assert parse_go_duration("909.307µs") == pytest.approx(909.307e-6)
    assert parse_go_duration("2.406772ms") == pytest.approx(2.406772e-3)
    assert parse_go_duration("1m2.5s") == pytest.approx(62.5)
    assert parse_go_duration("150ns") == pytest.approx(150e-9)
    with pytest.raises(ValueError):
        parse_go_duration("fast")


def test_registry_log_lines(tmp_path: Path):
    lines = [
        {"level": "info", "msg": "listening on 127.0.0.1:5000", "time": "2026-11-22T18:46:27.444492534Z"},
        {
            "http.request.host": "127.0.0.1:5000",
            "http.request.id": "r1",
            "http.request.method": "GET",
            "http.request.remoteaddr": "127.0.0.1:40000",
            "http.request.uri": "/v2/",
            "http.response.duration": "2ms",
            "http.response.status": 200,
            "http.response.written": 2,
            "msg": "response completed",
            "time": "2026-11-22T18:46:28.951432286Z",
        },
        {
            "http.request.host": "127.0.0.1:5000",
            "http.request.id": "r2",
            "http.request.method": "GET",
            "http.request.remoteaddr": "127.0.0.1:40002",
            "http.request.uri": "/v2/a/b/manifests/latest",
            "http.response.duration": "942.857µs",
            "http.response.status": 404,
            "http.response.written": 96,
            "msg": "response completed with error",
            "time": "2026-11-22T18:46:28.959848435Z",
        },
    ]
    path = tmp_path / "registry.log"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert detect_format(path) == "registry-log"
    reader = TraceReader([path])
    recs = list(reader)
    assert len(recs) == 1 and reader.stats.ignored == 1
    r = recs[0]
    assert (r.method, r.uri, r.status, r.size, r.id, r.client) == (
        "GET",
        "v2/a/b/manifests/latest",
        404,
        96,
        "r2",
        "127.0.0.1:40002",
    )
    assert r.duration == pytest.approx(942.857e-6)


def test_memory_is_bounded_by_the_chunk_not_the_trace(tmp_path):
    import tracemalloc

    from drtp.generate import GenerateOptions, generate

    path = tmp_path / "big.json"
    write_ibm(path, generate(GenerateOptions(requests=60_000, seed=2, span_s=86_400)))
    size = path.stat().st_size
    tracemalloc.start()
    n = sum(len(batch) for batch in TraceReader([path], chunk_bytes=256 << 10).batches())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert n == 60_000
    assert size > 15e6 and peak < size / 4  # a few chunks of records, never the whole trace


def test_parquet_cache_round_trip(tmp_path, generated_trace):
    import subprocess
    import sys

    from drtp.columnar import read_columns

    pq_path = tmp_path / "t.parquet"
    res = subprocess.run(
        [sys.executable, "-m", "drtp.cli", "convert", str(generated_trace), "-o", str(pq_path)],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert read_trace([pq_path]) == read_trace([generated_trace])
    back = tmp_path / "back.json.gz"
    subprocess.run([sys.executable, "-m", "drtp.cli", "convert", str(pq_path), "-o", str(back)], check=True)
    assert read_trace([back]) == read_trace([generated_trace])
    df = read_columns([pq_path], ["method", "kind", "size"]).to_pandas()
    assert len(df) == 5000 and set(df["kind"]) == {"manifest", "blob"}
    limited = read_trace([pq_path], limit_type="requests", amount=10)
    assert [r.id for r in limited] == [r.id for r in read_trace([generated_trace])[:10]]


def test_parquet_fast_column_paths_equal_arrow_to_pylist():
    """drtp.columnar reads dictionary and timestamp columns its own (faster) way: same values as Arrow's."""
    import datetime as dt

    import pyarrow as pa

    from drtp.columnar import _pylist

    text = pa.array(["h1", "h2", "h1", "h3"]).dictionary_encode()
    with_null = pa.array(["a", None, "a"]).dictionary_encode()
    utc = dt.timezone.utc
    t = [dt.datetime(2017, 8, 1, 0, 0, 0, 646000, tzinfo=utc), dt.datetime(2017, 6, 20, 23, 59, 59, 999999, tzinfo=utc)]
    micros = pa.array(t, type=pa.timestamp("us", tz="UTC"))
    nanos = pa.array(t, type=pa.timestamp("ns", tz="UTC"))
    for arr in (text, with_null, micros, nanos, pa.array([1.5, 0.0]), pa.array(["x", "y"])):
        assert _pylist(arr) == arr.to_pylist()
    assert _pylist(micros) == t and all(v.utcoffset() == dt.timedelta(0) for v in _pylist(nanos))
