"""requests.csv rows (drtp.replay.result_row), the results model (drtp.replay.summary) and resuming
(master.outputs.results)."""

from __future__ import annotations

import csv

import pytest

from drtp.errors import DrtpError
from drtp.master.outputs.results import RunResults, format_table
from drtp.replay.messages import AuxResult, ReplayRequest, ReplayResult
from drtp.replay.result_row import COLUMNS, cells, parse_cells, rows_of
from drtp.replay.summary import ResultsModel


def request(seq: int = 0, method: str = "GET", kind: str = "blob", at: float | None = None, **kw) -> ReplayRequest:
    fields = dict(client="c1", op="get", registry="r", repository="u/r", reference="L1", size=100, expected_status=200)
    fields.update(kw)
    return ReplayRequest(seq=seq, trace_id=f"t{seq}", method=method, kind=kind, at=at, **fields)


def test_helper_rows_say_why_they_failed():
    helper = AuxResult("POST", "blob upload open", 503, 1.0, 0.01, 0, outcome="http")
    refused = AuxResult("HEAD", "config blob check", 0, 1.0, 0.01, 0, "connection refused", outcome="refused")
    res = ReplayResult(
        0, 0, False, 1.0, 0.0, error="helper POST failed: 503", outcome="not-sent", aux=[helper, refused]
    )
    trace, a, b = rows_of("n1", request(method="PUT"), res)
    assert (trace.outcome, trace.ok, trace.auxiliary) == ("not-sent", False, False)
    assert (a.outcome, a.error, a.ok, a.auxiliary, a.expected_status) == ("http", "HTTP 503", False, True, 0)
    assert (b.outcome, b.error) == ("refused", "connection refused")


def test_results_without_a_class_are_never_successes():
    (answered,) = rows_of("n1", request(), ReplayResult(0, 503, False, 1.0, 0.1))
    (silent,) = rows_of("n1", request(), ReplayResult(0, 0, False, 1.0, 0.1, error="timed out"))
    assert (answered.outcome, answered.error) == ("http", "HTTP 503")
    assert (silent.outcome, silent.error) == ("error", "timed out")


def test_lost_rows_and_cells_round_trip():
    (lost,) = rows_of("n1", request(at=2.5), None, lost_reason="client node n1 died")
    assert (lost.outcome, lost.attempts, lost.start_s, lost.error) == ("lost", 0, None, "lost: client node n1 died")
    res = ReplayResult(0, 200, True, 2.6000004, 0.0123456789, 100, "sha256:x", attempts=2)
    (row,) = rows_of("n1", request(at=2.5), res)
    assert row.latency_s == 0.012346 and row.response_s == round(2.6000004 + 0.0123456789 - 2.5, 6)
    for r in (row, lost):
        text = [str(c) for c in cells(r)]
        assert len(text) == len(COLUMNS) and parse_cells(text) == r
    with pytest.raises(ValueError):
        parse_cells([str(c) for c in cells(row)][:-3])  # a line torn by an interruption


def test_model_counts_helpers_apart_and_failures_per_class():
    model = ResultsModel(timed=False, on_time_s=0.01)
    ok = ReplayResult(0, 201, True, 0.0, 0.5, 1000, aux=[AuxResult("POST", "blob upload open", 202, 0.0, 0.1, 0)])
    results = [
        (request(0, "PUT"), ok),
        (request(1), ReplayResult(1, 404, False, 0.1, 0.2, 10, outcome="http")),
        (request(2), ReplayResult(2, 0, False, 0.2, 5.0, outcome="timeout", error="read timeout")),
        (request(3), None),
    ]
    for req, res in results:
        for row in rows_of("n1", req, res, "gone"):
            model.add(row)
    s = model.summary()
    assert (s["requests"], s["succeeded"], s["failed"], s["lost"]) == (4, 1, 3, 1)
    assert s["failures"] == {"http": 1, "timeout": 1, "lost": 1}  # in drtp.replay.outcome's order
    assert s["auxiliary"] == {"requests": 1, "failed": 0, "failures": {}, "failed_statuses": {}}
    assert s["failed_statuses"] == {"404": 1}  # the timeout and the lost request got no status
    assert s["bytes"] == 1010 and s["latency_s"]["max"] == 0.5  # measured bytes; latency of successes only
    assert s["throughput_rps"] == pytest.approx(1 / 5.2)  # succeeded per second, first start to last end
    assert "POST blob" not in s["per_method"]
    table = format_table(s)
    assert "timeout" in table.splitlines()[0] and "helper requests (not counted above): 1, 0 failed" in table


def test_resume_keeps_completed_rows_and_refuses_other_columns(tmp_path):
    first = RunResults(tmp_path, timed=False, on_time_s=0.01)
    push = request(0, "PUT", reference="L9")
    first.add("n1", push, ReplayResult(0, 201, True, 0.0, 0.5, 100, "sha256:abc"))
    first.add("n1", request(1), ReplayResult(1, 404, False, 0.5, 0.1, outcome="http"))
    first.add("n1", request(2), None, "client node n1 died")
    with open(tmp_path / "requests.csv", "a") as f:
        f.write("c1,n1,t3,GET,blob,u/r,L1,")  # torn by the interruption
    first.file.close()

    again = RunResults(tmp_path, timed=False, on_time_s=0.01, resume=True)
    assert again.completed == {"t0", "t1"}  # the lost one is sent again
    assert again.pushed == [("u/r", "L9", "sha256:abc", 100)] and again.resumed_end == 0.6
    assert (again.all.requests, again.failed) == (2, 1)
    summary = again.close()
    with open(tmp_path / "requests.csv", newline="") as f:
        assert len(list(csv.reader(f))) == 3 and summary["failures"] == {"http": 1}

    old = tmp_path / "old"
    old.mkdir()
    (old / "requests.csv").write_text(
        "client,node,trace_id,method,kind,ok,error,auxiliary\nc,n,t,GET,blob,True,,False\n"
    )
    with pytest.raises(DrtpError, match="cannot be resumed"):
        RunResults(old, timed=False, on_time_s=0.01, resume=True)
    assert (old / "requests.csv").read_text().startswith("client,node,trace_id,method,kind,ok,")  # left as it was
