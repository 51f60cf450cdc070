"""``drtp inspect``'s numbers: the column-at-a-time summary of record batches, the summary of the trace's
columns (``drtp analyze``'s form) and the record-by-record definition give the same numbers.

On a generated trace (uploads, failed statuses, manifests and layers) and on the edge cases: no
record, one record, upload sessions and the PUT that completes one, a layer shared by repositories,
failed requests, and URIs that repeat across batches.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from drtp.analysis.trace_frame import frame_from_records, load_trace
from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.reader import TraceReader, write_ibm
from drtp.trace.records import KINDS, METHODS, TraceRecord, parse_uri, split_valid_uri
from drtp.trace.summary import format_summary, summarize, summarize_frame
from tests.trace_records import rec


def record_by_record(records: list[TraceRecord]) -> dict:
    """The summary's definition, one record at a time, every URI through the checking parser."""
    kinds, objects, repos = Counter(), set(), set()
    for r in records:
        parts = parse_uri(r.uri)
        kinds[parts.kind] += 1
        repos.add(parts.repository)
        if parts.kind == "manifest":
            objects.add((parts.repository, parts.reference))
        elif not parts.reference.startswith("uploads/"):
            objects.add(("", parts.reference))
    methods = Counter(r.method for r in records)
    first, last = (records[0].timestamp, records[-1].timestamp) if records else (None, None)
    return {
        "records": len(records),
        "span_s": (last - first).total_seconds() if records else 0.0,
        "first": first.isoformat() if first else None,
        "last": last.isoformat() if last else None,
        "by_method": {m: methods[m] for m in METHODS if methods[m]},
        "by_kind": {k: kinds[k] for k in KINDS if kinds[k]},
        "bytes": sum(r.size for r in records),
        "clients": len({r.client for r in records}),
        "repositories": len(repos),
        "objects": len(objects),
    }


def in_batches(records: list[TraceRecord], size: int) -> list[list[TraceRecord]]:
    ordered = sorted(records, key=lambda r: r.timestamp)
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def three_ways(records: list[TraceRecord], batch: int = 3) -> dict:
    """The summary, after checking that all three ways give it."""
    ordered = sorted(records, key=lambda r: r.timestamp)
    streamed = summarize(in_batches(records, batch))
    assert streamed == summarize_frame(frame_from_records(records))
    assert streamed == record_by_record(ordered)
    return streamed


UP = "v2/u2/r2/blobs/uploads/"

EDGE_CASES = {
    "no record": [],
    "one record": [rec(5, "GET", "v2/u1/r1/manifests/v1", client="c1", size=1234)],
    "uploads": [
        rec(0, "POST", UP, client="c3", status=202),
        rec(1, "PATCH", UP + "abc", client="c3", size=700, status=202),
        rec(2, "PUT", UP + "abc?digest=sha256:" + "a" * 64, client="c3", size=300, status=201),
        rec(3, "PUT", "v2/u2/r2/manifests/latest", client="c3", size=900, status=201),
        rec(4, "POST", UP + "?mount=sha256:" + "b" * 64 + "&from=u1/r1", client="c3", status=201),
    ],
    "failed statuses": [
        rec(0, "GET", "v2/u1/r1/blobs/L1", client="c1", status=404),
        rec(1, "HEAD", "v2/u1/r1/blobs/L1", client="c2", status=500),
        rec(2, "GET", "v2/u1/r1/manifests/v9", client="c1", status=401),
        rec(3, "DELETE", "v2/u1/r1/manifests/sha256:" + "c" * 64, client="c1", status=202),
    ],
    "a layer in two repositories, repeated across batches": [
        rec(t, "GET", f"v2/{repo}/blobs/L1", client=f"c{t % 2}", size=10)
        for t, repo in enumerate(["u1/r1", "u2/r2", "u1/r1", "a/b/c", "u1/r1", "u2/r2", "u1/r1"])
    ],
}


@pytest.mark.parametrize("case", list(EDGE_CASES))
def test_the_three_summaries_agree_on_the_edge_cases(case):
    s = three_ways(EDGE_CASES[case])
    assert s["records"] == len(EDGE_CASES[case])
    format_summary(s)  # prints, also with no record


def test_counts_of_the_edge_cases_by_hand():
    assert three_ways(EDGE_CASES["no record"])["first"] is None
    uploads = three_ways(EDGE_CASES["uploads"])
    # the sessions and the completing PUT are not objects; the manifest is
    assert uploads["objects"] == 1 and uploads["by_kind"] == {"manifest": 1, "blob": 4}
    assert uploads["by_method"] == {"PUT": 2, "PATCH": 1, "POST": 2} and uploads["bytes"] == 1900
    shared = three_ways(EDGE_CASES["a layer in two repositories, repeated across batches"], batch=2)
    assert shared["objects"] == 1 and shared["repositories"] == 3 and shared["clients"] == 2
    assert shared["by_kind"] == {"blob": 7} and shared["bytes"] == 70


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """A generated trace file: manifests, layers, uploads and 404s."""
    path = tmp_path_factory.mktemp("summary") / "t.json"
    write_ibm(path, generate(GenerateOptions(requests=5000, seed=11)))
    return path


def test_the_three_summaries_agree_on_a_generated_trace(generated):
    batches = list(TraceReader([generated], chunk_bytes=1 << 16).batches())
    assert len(batches) > 1
    records = [r for b in batches for r in b]
    assert {r.status for r in records} >= {200, 201, 202, 404}
    assert any("/uploads/" in r.uri for r in records)
    s = summarize(batches)
    assert s == summarize_frame(load_trace([generated])) == record_by_record(records)
    assert s["records"] == 5000 and set(s["by_method"]) >= {"GET", "HEAD", "PUT", "PATCH", "POST"}


def test_inspect_prints_the_numbers_of_the_trace_columns(generated):
    res = subprocess.run(
        [sys.executable, "-m", "drtp.cli", "inspect", "--json", str(generated)], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    printed = json.loads(res.stdout)
    assert printed == {**summarize_frame(load_trace([generated])), "skipped": 0, "ignored": 0}


@pytest.mark.parametrize(
    "uri",
    [
        "v2/u1/r1/manifests/v1",
        "/v2/a/b/c/blobs/sha256:" + "d" * 64,
        "v2/u2/r2/blobs/uploads/",
        "v2/u2/r2/blobs/uploads/abc?digest=sha256:" + "a" * 64,
        "v2/u2/r2/blobs/uploads/?mount=sha256:" + "b" * 64 + "&from=u1/r1",
    ],
)
def test_a_valid_uri_splits_as_the_checking_parser_splits_it(uri):
    assert parse_uri(uri) is not None and split_valid_uri(uri) == parse_uri(uri)


@pytest.mark.parametrize("uri", ["v2/", "v2/_catalog", "v1/u/r/manifests/x", "v2/u/r/tags/list", "v2/manifests/x"])
def test_what_has_no_object_uri_shape_splits_to_nothing(uri):
    assert split_valid_uri(uri) is None and parse_uri(uri) is None
