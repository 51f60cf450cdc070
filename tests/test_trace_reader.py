"""The streaming trace reader: formats, sorting, limits and bad records."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from drtp.errors import DrtpError, TraceError
from drtp.trace.reader import TraceReader, detect_format, read_trace, write_ibm
from drtp.trace.registry_log import parse_go_duration
from tests.conftest import ibm_record, registry_log_line, write_json


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

    from drtp.trace.generate import GenerateOptions, generate

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

    from drtp.trace.parquet import read_columns

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
    """drtp.trace.parquet reads dictionary and timestamp columns its own (faster) way: same values as Arrow's."""
    import datetime as dt

    import pyarrow as pa

    from drtp.trace.parquet import _pylist

    text = pa.array(["h1", "h2", "h1", "h3"]).dictionary_encode()
    with_null = pa.array(["a", None, "a"]).dictionary_encode()
    utc = dt.timezone.utc
    t = [dt.datetime(2017, 8, 1, 0, 0, 0, 646000, tzinfo=utc), dt.datetime(2017, 6, 20, 23, 59, 59, 999999, tzinfo=utc)]
    micros = pa.array(t, type=pa.timestamp("us", tz="UTC"))
    nanos = pa.array(t, type=pa.timestamp("ns", tz="UTC"))
    for arr in (text, with_null, micros, nanos, pa.array([1.5, 0.0]), pa.array(["x", "y"])):
        assert _pylist(arr) == arr.to_pylist()
    assert _pylist(micros) == t and all(v.utcoffset() == dt.timedelta(0) for v in _pylist(nanos))


# -- hostile and broken inputs: one DrtpError naming the file, never a traceback ------------


def _one_error(paths, match: str, **kwargs) -> DrtpError:
    """Reading ``paths`` raises one DrtpError matching ``match``, whose message is one line."""
    with pytest.raises(DrtpError, match=match) as err:
        read_trace(paths, **kwargs)
    assert "\n" not in str(err.value)
    return err.value


def test_broken_gzip_is_one_error(tmp_path):
    whole = gzip.compress(json.dumps([ibm_record(i) for i in range(200)]).encode())
    truncated = tmp_path / "cut.json.gz"
    truncated.write_bytes(whole[: len(whole) // 2])
    _one_error([truncated], r"cut.json.gz: not a valid gzip file")
    plain = tmp_path / "plain.json.gz"
    plain.write_text(json.dumps([ibm_record(0)]))
    _one_error([plain], r"plain.json.gz: not a valid gzip file")
    corrupt = tmp_path / "corrupt.json.gz"
    corrupt.write_bytes(whole[:20] + bytes(200) + whole[220:])
    _one_error([corrupt], r"corrupt.json.gz: not a valid gzip file")


def test_junk_or_truncated_parquet_is_one_error(tmp_path, small_trace):
    from drtp.trace.parquet import write_parquet

    junk = tmp_path / "junk.parquet"
    junk.write_bytes(random.Random(1).randbytes(5000))
    _one_error([junk], r"junk.parquet: not a drtp Parquet trace")
    good = tmp_path / "good.parquet"
    write_parquet(good, TraceReader([small_trace]).batches())
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(good.read_bytes()[:-100])
    _one_error([cut], r"cut.parquet: not a drtp Parquet trace")


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("deep-array.json", "[" * 100_000 + "]" * 100_000),
        ("deep-object.json", "[" + '{"a":' * 100_000 + "1" + "}" * 100_000 + "]"),
        ("deep-field.json", "[" + json.dumps(ibm_record(0))[:-1] + ', "x":' + "[" * 100_000 + "]" * 100_000 + "}]"),
        ("deep.jsonl", '{"a":' * 100_000 + "1" + "}" * 100_000 + "\n"),
    ],
)
def test_deep_json_is_one_error(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    _one_error([path], rf"{name}: record 0: .*(nested too deeply|Expected `object`)")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"42", "not a trace"),
        (b'"a string"', "not a trace"),
        (b"[\x00\x00]", r"record 0: invalid JSON"),
        (json.dumps([ibm_record(0)]).replace('"579633fd"', '"\xff\xfe"').encode("latin-1"), "invalid UTF-8"),
        (b"[" + b'{"host": "a"' * 3, r"record 0"),  # truncated inside the first record
    ],
)
def test_not_a_trace_is_one_error(tmp_path, content, match):
    path = tmp_path / "odd.json"
    path.write_bytes(content)
    _one_error([path], rf"odd.json: .*{match}")


def test_byte_order_mark_is_read_past(tmp_path):
    recs = [ibm_record(i) for i in range(5)]
    bom = b"\xef\xbb\xbf"
    array = tmp_path / "bom.json"
    array.write_bytes(bom + json.dumps(recs).encode())
    lines = tmp_path / "bom.jsonl"
    lines.write_bytes(bom + "\n".join(json.dumps(r) for r in recs).encode())
    packed = tmp_path / "bom.json.gz"
    packed.write_bytes(gzip.compress(bom + json.dumps(recs).encode()))
    for path in (array, lines, packed):
        assert ids(read_trace([path])) == [r["id"] for r in recs], path
    log = tmp_path / "bom.log"
    log.write_bytes(bom + registry_log_line().encode() + b"\n")
    assert detect_format(log) == "registry-log" and len(read_trace([log])) == 1


def test_directory_missing_and_empty_inputs(tmp_path, small_trace):
    _one_error([tmp_path], r"is a directory")
    _one_error([tmp_path / "nope.json"], r"nope.json: trace file not found")
    for name, text in [("empty.json", ""), ("blank.json", "  \n"), ("empty-array.json", "[ ]"), ("e.jsonl", "\n\n")]:
        path = tmp_path / name
        path.write_text(text)
        _one_error([path], rf"{name}: no records")
        _one_error([small_trace, path], rf"{name}: no records")  # also beside a good file
    pings = tmp_path / "pings.log"
    pings.write_text(registry_log_line(**{"http.request.uri": "/v2/"}) + "\n")
    _one_error([pings], r"no registry requests in .*pings.log")
    every_bad = write_json(tmp_path / "all-bad.json", [ibm_record(0, **{"http.response.written": -1})])
    _one_error([every_bad], r"no records \(1 bad records skipped\)", skip_bad=True)


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ({"http.response.written": 10**30}, "written"),
        ({"http.response.written": (1 << 40) + 1}, "written"),
        ({"http.response.written": 1.5}, "written"),
        ({"http.request.duration": -0.1}, "duration"),
        ({"http.request.duration": 86_401}, "duration"),
        ({"http.response.status": 99}, "status"),
        ({"http.response.status": 600}, "status"),
        ({"timestamp": "1969-12-31T23:59:59.000Z"}, "outside 1970..2099"),
        ({"timestamp": "9999-12-31T23:59:59.000Z"}, "outside 1970..2099"),
        ({"http.request.method": "CONNECT"}, "method"),
        ({"http.request.uri": "v2/user1/repo1/manifests/x\r\nHost: evil"}, "neither a tag"),
        ({"http.request.uri": "v2/user1/../manifests/latest"}, "not a Distribution name"),
        ({"http.request.uri": "v2/user1/repo1/blobs/uploads/.."}, "neither a tag"),
        ({"http.request.uri": "v2/user 1/repo1/manifests/x"}, "not a Distribution name"),
        ({"http.request.uri": "v2/User1/repo1/manifests/x"}, "not a Distribution name"),
        ({"http.request.uri": "v2/user1/repo1/manifests/x\x00"}, "neither a tag"),
        ({"http.request.uri": "v2/user1/repo1/manifests/x?a=1?b=2"}, "query"),
        ({"http.request.uri": "v2/user1/repo1/manifests/x?a=1\r\nb"}, "query"),
        ({"http.request.uri": "v2/user1/repo1/manifests/" + "t" * 129}, "neither a tag"),
        ({"http.request.uri": "v2/" + "a" * 128 + "/" + "b" * 128 + "/manifests/t"}, "longer than 255"),
    ],
)
def test_out_of_range_values_are_refused(tmp_path, override, reason):
    recs = [ibm_record(i) for i in range(40)]
    recs[23] = ibm_record(23, **override)
    for path in (write_json(tmp_path / "t.json", recs), _jsonl(tmp_path / "t.jsonl", recs)):
        err = _one_error([path], reason)
        assert isinstance(err, TraceError) and err.index == 23
        reader = TraceReader([path], skip_bad=True)
        assert len(list(reader)) == 39 and reader.stats.skipped == 1


def test_a_uri_holding_a_line_break_cannot_pass_the_chunk_check(tmp_path):
    # joined one per line, "…/x\nv2/u/r/manifests/y" would read as two valid URIs
    recs = [ibm_record(i) for i in range(50)]
    recs[30] = ibm_record(30, **{"http.request.uri": "v2/user1/repo1/manifests/x\nv2/user1/repo1/manifests/y"})
    err = _one_error([write_json(tmp_path / "nl.json", recs)], "record 30")
    assert "\\n" in str(err)  # the URI is shown escaped: still one line


def test_valid_traces_keep_the_fast_path_and_every_uri_shape(tmp_path, generated_trace):
    from drtp.trace.records import IBM_URI_LINES, URI_LINES

    recs = read_trace([generated_trace])
    assert IBM_URI_LINES.fullmatch("\n".join(r.uri for r in recs) + "\n")  # generated traces: the fastest check
    digest = "sha256:" + "ab" * 32
    shapes = [
        "v2/library/alpine/manifests/3.19",
        f"/v2/library/alpine/manifests/{digest}",
        "v2/a/b/c/blobs/uploads/",
        f"v2/a.b/c-d/e__f/blobs/{digest}?upload=u1&digest={digest}",
        "v2/single/blobs/uploads/3f0e-44_x=",
    ]
    assert URI_LINES.fullmatch("\n".join(shapes) + "\n")
    # a mount's parameters are checked one record at a time: never by the chunk patterns
    mount = f"v2/a.b/c-d/e__f/blobs/uploads/?upload=u1&mount={digest}&from=a/b"
    assert not URI_LINES.fullmatch(mount + "\n") and not IBM_URI_LINES.fullmatch(mount + "\n")
    shapes.append(mount)
    path = write_json(
        tmp_path / "shapes.json", [ibm_record(i, **{"http.request.uri": u}) for i, u in enumerate(shapes)]
    )
    assert [r.uri for r in read_trace([path])] == shapes


def test_unbounded_lines_and_records_stop_early(tmp_path):
    no_newline = tmp_path / "one-line.jsonl"
    no_newline.write_bytes(b"{" + b" " * (9 << 20))
    _one_error([no_newline], r"line longer than 8 MiB")
    no_record_end = tmp_path / "open.json"
    no_record_end.write_bytes(b"[{" + b" " * (9 << 20))
    _one_error([no_record_end], r"no record ends within 8 MiB")


def test_parquet_rows_are_checked_like_records(tmp_path, small_trace):
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    from drtp.trace.parquet import write_parquet

    good = tmp_path / "good.parquet"
    write_parquet(good, TraceReader([small_trace]).batches())
    table = pq.read_table(good)
    far = dt.datetime(9999, 1, 1, tzinfo=dt.timezone.utc)
    for column, value, reason in [
        ("size", -5, "size"),
        ("duration", float("nan"), "duration"),
        ("status", 0, "status"),
        ("timestamp", far, "outside 1970..2099"),
        ("uri", "v2/user1/../blobs/x", "not a Distribution name"),
        ("method", "BREW", "unknown method"),
        ("host", None, "host is missing"),
    ]:
        values = table.column(column).to_pylist()
        values[7] = value
        bad = tmp_path / f"bad-{column}.parquet"
        pq.write_table(
            table.set_column(
                table.schema.get_field_index(column), column, pa.array(values, table.schema.field(column).type)
            ),
            bad,
        )
        err = _one_error([bad], reason)
        assert isinstance(err, TraceError) and err.index == 7, column
        assert len(read_trace([bad], skip_bad=True)) == 49
    wrong = tmp_path / "wrong.parquet"
    pq.write_table(pa.table({"host": [1]}), wrong)
    _one_error([wrong], r"not a drtp Parquet trace \(.*column")


def test_long_spans_are_refused_before_allocating(tmp_path):
    from drtp.analysis.characterize import characterize
    from drtp.analysis.trace_frame import frame_from_records

    recs = [ibm_record(0, timestamp="1971-01-01T00:00:00.000Z"), ibm_record(1, timestamp="2099-01-01T00:00:00.000Z")]
    df = frame_from_records(read_trace([write_json(tmp_path / "span.json", recs)]))
    with pytest.raises(DrtpError, match=r"one-minute bins, more than the 5,000,000"):
        characterize(df)
    short = frame_from_records(read_trace([write_json(tmp_path / "day.json", [ibm_record(i) for i in range(30)])]))
    with pytest.raises(DrtpError, match=r"concurrency bins.*raise --bin"):
        characterize(short, bin_s=1e-6)
    with pytest.raises(DrtpError, match="--bin"):
        characterize(short, bin_s=0.0)


def _jsonl(path: Path, records: list) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path
