"""The cache column and the upstream's access log, without processes: verdicts, log lines, classes, old files."""

from __future__ import annotations

import csv
import json

import msgspec
import pytest

from drtp.analysis.report import cache_latency_table
from drtp.analysis.results import load_requests
from drtp.master.outputs.results import RunResults, format_table
from drtp.master.outputs.upstream import (
    HIT,
    MISS,
    WAIT,
    absences,
    mark_waits,
    upstream_block,
    verdict,
)
from drtp.registry.flow import cache_verdict
from drtp.replay.result_row import COLUMNS, ResultRow, cells, parse_cells
from drtp.trace.access_log import NGINX, log_time, parse_log_line, read_upstream_log
from tests.conftest import registry_log_line

DIGEST = "sha256:" + "a" * 64


def row(**over) -> ResultRow:
    fields = dict(
        client="c1", node="n1", trace_id="t", method="GET", kind="blob", repository="lib/a", reference="layer0",
        digest=DIGEST, size=10, bytes=10, intended_s=None, start_s=1.0, latency_s=0.5, response_s=None,
        status=200, expected_status=200, ok=True, outcome="ok", attempts=1, error="", auxiliary=False,
    )  # fmt: skip
    fields.update(over)
    return ResultRow(**fields)


def test_cache_verdict_from_nginx_and_varnish_headers():
    assert cache_verdict({}) == ""
    assert cache_verdict({"x-cache-status": "HIT"}) == "hit"
    assert cache_verdict({"x-cache-status": "UPDATING"}) == "hit"
    assert cache_verdict({"x-cache-status": "EXPIRED"}) == "miss"
    assert cache_verdict({"x-cache-status": "BYPASS"}) == "miss"
    assert cache_verdict({"x-cache": "HIT from varnish"}) == "hit"
    assert cache_verdict({"x-cache": "miss"}) == "miss"


def test_distribution_and_nginx_log_lines():
    line = registry_log_line(
        time="2024-01-01T00:00:02.5Z",
        **{
            "http.request.uri": f"/v2/lib/a/blobs/{DIGEST}",
            "http.response.written": 99,
            "http.response.duration": "1.5s",
        },
    )
    r = parse_log_line(line.encode())
    assert (r.kind, r.repository, r.reference, r.bytes, r.fetch) == ("blob", "lib/a", DIGEST, 99, True)
    assert r.end - r.start == 1.5 and r.end == 1704067202.5
    ping = parse_log_line(registry_log_line(**{"http.request.uri": "/v2/"}).encode())
    assert ping.kind == "ping" and not ping.fetch
    assert parse_log_line(b'{"msg": "authorized request"}') is None
    combined = b'127.0.0.1 - - [01/Jan/2024:00:00:02 +0000] "HEAD /v2/lib/a/manifests/v1 HTTP/1.1" 200 0 "-" "nginx"'
    r = parse_log_line(combined)
    assert (r.method, r.kind, r.reference, r.end, r.start) == ("HEAD", "manifest", "v1", 1704067202.0, 1704067202.0)
    assert r.log == NGINX
    timed = combined.replace(b"HEAD", b"GET") + b" 0.250"
    r = parse_log_line(timed)
    assert r.fetch and r.end - r.start == 0.25


def test_distribution_times_trimmed_with_nanoseconds_and_with_an_offset():
    # Go trims a fraction's trailing zeros and keeps up to nine digits; a registry on local time logs an offset
    assert log_time("2026-11-28T04:06:27.97019Z") == pytest.approx(1795838787.97019, abs=1e-6)
    assert log_time("2026-11-28T04:06:27.970190123Z") == pytest.approx(1795838787.970190123, abs=1e-6)
    assert log_time("2026-11-28T04:06:27Z") == 1795838787.0
    assert log_time("2026-11-28T05:06:27.5+01:00") == 1795838787.5
    assert log_time("2026-11-27T23:06:27.25-05:00") == 1795838787.25
    for bad in ("2026-11-28T04:06:27.97019", "2026-11-28 04:06:27Z", "yesterday", "2026-11-28T04:06:27.Z"):
        with pytest.raises(ValueError):
            log_time(bad)
    # a request line with such a time is read, a line with a broken one is no request
    line = registry_log_line(time="2026-11-28T04:06:27.97019Z", **{"http.response.duration": "970.19ms"})
    r = parse_log_line(line.encode())
    assert r.end == pytest.approx(1795838787.97019, abs=1e-6) and r.start == pytest.approx(1795838787.0, abs=1e-6)
    assert parse_log_line(registry_log_line(time="2026-11-28T04:06:27.97019++00:00").encode()) is None


def test_direct_requests_and_lines_outside_the_window_left_out(tmp_path):
    log = tmp_path / "up.log"
    lines = [
        registry_log_line(time="2024-01-01T00:00:02Z", **{"http.request.useragent": "drtp-direct/1 python"}),
        registry_log_line(time="2024-01-01T00:00:02Z", **{"http.request.useragent": "docker-distribution"}),
        registry_log_line(time="2024-01-01T00:00:09Z"),
        "not a log line",
    ]
    log.write_text("\n".join(lines) + "\n")
    start = 1704067201.0
    got = read_upstream_log(log, start, start + 5)
    assert [r.agent for r in got] == ["docker-distribution"]


def test_classes_waits_and_absences():
    fetch = parse_log_line(
        registry_log_line(
            time="2024-01-01T00:00:01.2Z",
            **{"http.request.uri": f"/v2/lib/a/blobs/{DIGEST}", "http.response.duration": "100ms"},
        ).encode()
    )
    fetches = {("blob", DIGEST): [fetch]}
    epoch = 1704067200.0
    assert verdict(row(start_s=1.0, latency_s=0.5), epoch, fetches) == MISS  # the fetch ran during it
    assert verdict(row(start_s=3.0, latency_s=0.5), epoch, fetches) == HIT
    assert verdict(row(start_s=1.0, cache=HIT), epoch, fetches) == HIT  # the cache's own word wins
    rows = [row(start_s=1.0, cache=MISS), row(start_s=1.1, cache=HIT), row(start_s=5.0, cache=HIT)]
    mark_waits(rows)
    assert [r.cache for r in rows] == [MISS, WAIT, HIT]
    # overlapping misses share one absence; a later miss is another; waits alone are none
    spans = [row(start_s=0.0, cache=MISS), row(start_s=0.1, cache=MISS), row(start_s=4.0, cache=MISS)]
    assert absences(spans) == 2
    assert absences([row(start_s=0.0, cache=WAIT)]) == 0


def test_upstream_block_counts_and_ratios():
    up = [
        parse_log_line(registry_log_line(**{"http.request.uri": uri, "http.request.method": m}).encode())
        for uri, m in [(f"/v2/lib/a/blobs/{DIGEST}", "GET"), (f"/v2/lib/a/blobs/{DIGEST}", "GET"), ("/v2/", "GET")]
    ]
    rows = [row(cache=MISS, bytes=10), row(start_s=1.1, cache=MISS, bytes=10), row(start_s=9.0, cache=HIT, bytes=30)]
    b = upstream_block(rows, up, False, 0.01)
    assert b["requests"] == {"blob": {"GET": 2}, "ping": {"GET": 1}}
    assert b["amplification"]["blob"]["requests"] == 2 / 3
    assert b["hit_ratio"]["blob"] == {"requests": 1 / 3, "bytes": 30 / 50}
    assert b["upstream_gets_per_object"]["blob"] == {"gets": 2, "absences": 1, "per_absence": 2.0}
    assert b["classes"] == {"hit": 1, "wait": 0, "miss": 2}
    assert set(b["latency_by_class"]) == {"hit", "miss"}
    summary = {"upstream": {"reg": json.loads(json.dumps(b))}}
    assert "cache reg: hit 1" in "\n".join(format_table_lines(summary))
    table = cache_latency_table({"run1": summary})
    assert list(table["class"]) == ["hit", "miss"] and list(table["requests"]) == [1, 2]


def format_table_lines(summary: dict) -> list[str]:
    from drtp.master.outputs.results import cache_lines

    return cache_lines(summary)


def test_files_without_the_cache_column_still_read_and_resume(tmp_path):
    old = [c for c in COLUMNS if c != "cache"]
    run = tmp_path / "run"
    run.mkdir()
    values = cells(row())[:-1]
    with open(run / "requests.csv", "w", newline="") as f:
        csv.writer(f).writerows([old, values])
    assert parse_cells([str(v) for v in values]).cache == ""
    df = load_requests(run / "requests.csv")
    assert list(df["cache"]) == [""]
    results = RunResults(run, timed=False, on_time_s=0.01, resume=True)  # resumes a file of the older layout
    results.file.close()
    with open(run / "requests.csv", newline="") as f:
        header, kept = list(csv.reader(f))
    assert tuple(header) == COLUMNS and len(kept) == len(COLUMNS) and results.resumed == 1
    assert msgspec.structs.asdict(parse_cells(kept))["cache"] == ""
    assert "cache" not in format_table({**results.summary(), "per_method": {}, "per_node": {}})
