"""Throttling in plain sight, unit level: Retry-After parsed and kept per row, failed requests per HTTP status in
the results model and the console table, ``throttled`` per interval, and the refusal to resume another version's
files.  The end-to-end checks against the real registry behind the fault proxy are in tests/test_throttling_e2e.py
and tests/test_faults_e2e.py (check_statuses)."""

from __future__ import annotations

import csv
import email.utils
import math
import time

import msgspec
import pytest

from drtp.analysis.results import load_requests
from drtp.analysis.run_data import summary_frame
from drtp.errors import DrtpError
from drtp.master.outputs.results import RunResults, format_table
from drtp.master.outputs.stats_history import StatsHistory
from drtp.registry.transport import Response, retry_after_s
from drtp.replay.messages import AuxResult, ReplayRequest, ReplayResult
from drtp.replay.result_row import COLUMNS, cells, parse_cells, rows_of
from drtp.replay.stats_file import STATS_COLUMNS, STATS_COUNTS, STATS_TABLE
from drtp.replay.summary import ResultsModel

NOW = 1_700_000_000.0


def request(seq: int, method: str = "GET", kind: str = "blob") -> ReplayRequest:
    return ReplayRequest(seq, f"t{seq}", "c1", method, kind, "get", "r", "u/r", f"L{seq}", 10, 200)


@pytest.fixture
def far_from_utc(monkeypatch):
    """The local time zone 5 hours from UTC: an HTTP-date must not be read as local time."""
    monkeypatch.setenv("TZ", "EST+05")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_retry_after_in_both_forms(far_from_utc):
    assert retry_after_s("120", NOW) == 120.0
    assert retry_after_s(" 0 ", NOW) == 0.0
    assert retry_after_s(email.utils.formatdate(NOW + 90, usegmt=True), NOW) == 90.0  # IMF-fixdate, GMT
    assert retry_after_s(email.utils.formatdate(NOW + 30), NOW) == 30.0  # a "-0000" zone: UTC all the same
    assert retry_after_s("Sunday, 06-Nov-94 08:49:37 GMT", NOW) == 0.0  # a date passed: come back now
    for bad in ("", "soon", "1.5", "-3", "Mon, 99 Foo 2024", "²", "9" * 400, "Mon, 01 Jan 99999 00:00:00 GMT"):
        assert retry_after_s(bad, NOW) is None, bad
    assert Response(429, {"retry-after": "7"}).retry_after() == 7.0
    assert Response(503, {}).retry_after() is None


def test_rows_keep_retry_after_and_read_it_back():
    told = AuxResult("POST", "blob upload open", 429, 1.0, 0.01, 0, "HTTP 429", "http", 1, 2.5)
    res = ReplayResult(0, 503, False, 1.0, 0.2, outcome="http", retry_after=30.0000004, aux=[told])
    trace, helper = rows_of("n1", request(0), res)
    assert (trace.retry_after_s, helper.retry_after_s) == (30.0, 2.5)
    (plain,) = rows_of("n1", request(1), ReplayResult(1, 200, True, 1.0, 0.1))
    assert plain.retry_after_s is None
    # appended after the original columns (``challenges`` came later): the columns before it keep their places
    assert COLUMNS[COLUMNS.index("auxiliary") + 1 :][:2] == ("retry_after_s", "challenges")
    for row in (trace, helper, plain):
        text = [str(c) for c in cells(row)]
        assert parse_cells(text) == row
    at = COLUMNS.index("retry_after_s")
    assert [str(c) for c in cells(plain)][at] == "" and cells(trace)[at] == "30.000000"


def model_of(results: list[tuple[str, ReplayRequest, ReplayResult]]) -> ResultsModel:
    model = ResultsModel(timed=False, on_time_s=0.01)
    for node, req, res in results:
        for row in rows_of(node, req, res):
            model.add(row)
    return model


def test_failed_requests_per_status_overall_per_slice_per_node_and_merged():
    http = {"outcome": "http"}
    results = [
        ("n1", request(0), ReplayResult(0, 429, False, 0.0, 0.1, **http)),
        ("n1", request(1), ReplayResult(1, 429, False, 0.0, 0.1, **http)),
        ("n2", request(2, "PUT", "manifest"), ReplayResult(2, 503, False, 0.0, 0.1, **http)),
        ("n2", request(3), ReplayResult(3, 500, False, 0.0, 0.1, **http)),
        ("n2", request(4), ReplayResult(4, 0, False, 0.0, 5.0, outcome="timeout")),  # no answer: no status
        ("n1", request(5), ReplayResult(5, 200, True, 0.0, 0.1)),
        ("n1", request(6), ReplayResult(6, 200, False, 0.0, 0.1, outcome="truncated")),  # its answer's status
        # the trace's own 429 replayed as 429 is a match, not a failure
        ("n1", msgspec.structs.replace(request(7), expected_status=429), ReplayResult(7, 429, True, 0.0, 0.1)),
        (
            "n2",
            request(8, "PATCH"),
            ReplayResult(
                8,
                0,
                False,
                0.0,
                0.0,
                outcome="not-sent",
                aux=[AuxResult("POST", "blob upload open", 429, 0.0, 0.01, 0, "HTTP 429", "http")],
            ),
        ),
    ]
    s = model_of(results).summary()
    assert s["failed_statuses"] == {"200": 1, "429": 2, "500": 1, "503": 1}  # in the statuses' order
    assert list(s["failed_statuses"]) == ["200", "429", "500", "503"]
    assert s["failures"] == {"http": 4, "timeout": 1, "truncated": 1, "not-sent": 1}
    assert s["per_method"]["GET blob"]["failed_statuses"] == {"200": 1, "429": 2, "500": 1}
    assert s["per_method"]["PUT manifest"]["failed_statuses"] == {"503": 1}
    assert s["per_method"]["PATCH blob"]["failed_statuses"] == {}
    assert s["per_node"]["n1"]["failed_statuses"] == {"200": 1, "429": 2}
    assert s["per_node"]["n2"]["failed_statuses"] == {"500": 1, "503": 1}
    assert s["auxiliary"]["failed_statuses"] == {"429": 1}  # a throttled helper, apart from the trace's
    # nodes' models merged (what the master does) say the same as one model fed every row
    merged = ResultsModel(timed=False, on_time_s=0.01)
    for node in ("n1", "n2"):
        merged.merge(model_of([r for r in results if r[0] == node]).state())
    assert merged.summary() == s


def test_console_table_splits_failures_by_status():
    results = [
        ("n1", request(0), ReplayResult(0, 429, False, 0.0, 0.1, outcome="http")),
        ("n1", request(1), ReplayResult(1, 429, False, 0.0, 0.1, outcome="http")),
        ("n2", request(2, "HEAD"), ReplayResult(2, 503, False, 0.0, 0.1, outcome="http")),
        ("n2", request(3), ReplayResult(3, 200, True, 0.0, 0.1)),
    ]
    lines = format_table(model_of(results).summary()).splitlines()
    head = lines[0].split("  ")
    assert [c.strip() for c in head if c.strip()][:6] == ["requests", "failed", "http", "HTTP 429", "HTTP 503", "req/s"]
    table = {line.split()[0] + (" " + line.split()[1] if line.startswith("node") else ""): line for line in lines[2:]}
    cols = lines[0].index("HTTP 429") + len("HTTP 429"), lines[0].index("HTTP 503") + len("HTTP 503")

    def at(line: str, end: int) -> str:
        return line[:end].split()[-1]

    assert (at(table["all"], cols[0]), at(table["all"], cols[1])) == ("2", "1")
    assert (at(table["node n1"], cols[0]), at(table["node n1"], cols[1])) == ("2", "0")
    assert (at(table["node n2"], cols[0]), at(table["node n2"], cols[1])) == ("0", "1")
    assert any(line.startswith("HTTP <status>:") for line in lines)
    calm = format_table(model_of(results[3:]).summary())
    assert "HTTP" not in calm  # no failed answer, no status columns


def test_stats_columns_have_one_definition():
    assert STATS_COLUMNS == tuple(c.name for c in STATS_TABLE)
    assert STATS_COUNTS == ("requests", "failures", "throttled", "bytes")
    assert STATS_COLUMNS.index("throttled") == STATS_COLUMNS.index("failures") + 1


def test_resume_refuses_an_older_versions_files_in_one_line(tmp_path):
    older = [c for c in COLUMNS if c != "retry_after_s"]
    path = tmp_path / "requests.csv"
    text = ",".join(older) + "\nc,n,t,GET,blob,u/r,L,,0,0,,0.1,0.1,,200,200,True,ok,1,,False\n"
    path.write_text(text)
    with pytest.raises(DrtpError) as refused:
        RunResults(tmp_path, timed=False, on_time_s=0.01, resume=True)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{path}: written by another drtp version")
    assert "(no column retry_after_s)" in message and "new results directory" in message
    assert path.read_text() == text  # left as it was
    # the same file is still analysed: the column missing is empty (no Retry-After recorded then)
    frame = load_requests(path)
    assert len(frame) == 1 and frame["retry_after_s"].isna().all()

    stats = tmp_path / "stats_history.csv"
    stats.write_text("elapsed_s,requests,failures,bytes,rate_per_s,p50_ms,p99_ms\n1.000,3,0,12,3.000,1.5,2.0\n")
    with pytest.raises(DrtpError, match=r"stats_history.csv: written by another drtp version \(no column throttled, "):
        StatsHistory(stats, 1.0, lambda: 5.0, resume=True)
    with open(stats, newline="") as f:
        assert len(list(csv.reader(f))) == 2  # untouched


def test_run_frames_carry_throttled_per_slice():
    results = [
        ("n1", request(0), ReplayResult(0, 429, False, 0.0, 0.1, outcome="http")),
        ("n2", request(1, "HEAD"), ReplayResult(1, 429, False, 0.0, 0.1, outcome="http")),
        ("n2", request(2, "HEAD"), ReplayResult(2, 503, False, 0.0, 0.1, outcome="http")),
    ]
    summary = model_of(results).summary()
    frame = summary_frame(summary).set_index("key")
    assert frame["throttled"].to_dict() == {"all": 2, "GET blob": 1, "HEAD blob": 1, "n1": 1, "n2": 1}
    del summary["failed_statuses"]  # a summary written before failures were counted per status: not known, not 0
    assert math.isnan(summary_frame(summary).set_index("key").loc["all", "throttled"])
