"""The windows of a run's events and its recovery, on hand-made rows and intervals with hand-worked answers."""

from __future__ import annotations

import csv

import pytest

from drtp.master.outputs.results import format_table
from drtp.master.outputs.stats_history import StatsHistory
from drtp.replay.event_log import EventRecord
from drtp.replay.result_row import ResultRow
from drtp.replay.stats_file import STATS_COLUMNS
from drtp.replay.summary import ResultsModel
from drtp.replay.windows import (
    StatsInterval,
    Window,
    event_entries,
    event_line,
    event_windows,
    events_in,
    read_intervals,
    recovery_s,
)


def row(start: float | None, latency: float = 0.01, outcome: str = "ok", status: int = 200, **over) -> ResultRow:
    fields = dict(
        client="c",
        node="n1",
        trace_id=f"t{start}",
        method="GET",
        kind="blob",
        repository="r",
        reference="sha256:a",
        digest="sha256:a",
        size=10,
        bytes=10,
        intended_s=None,
        start_s=start,
        latency_s=None if start is None else latency,
        response_s=None,
        status=status,
        expected_status=200,
        ok=outcome == "ok",
        outcome=outcome,
        attempts=1,
        error="" if outcome == "ok" else "x",
        auxiliary=False,
    )
    fields.update(over)
    return ResultRow(**fields)


GC = EventRecord(name="gc", planned_s=10.0, started_s=10.0, ended_s=14.0, exit_code=0)
ROWS = [
    row(5.0),  # before every window
    row(6.0, 0.010),  # before: [6, 10)
    row(7.0, 0.020),
    row(9.999, 0.030),
    row(10.0, 0.001, "refused", 0),  # during: [10, 14)
    row(11.0, 0.002, "http", 405, method="PUT"),
    row(12.0, 0.002, "http", 429),
    row(12.5, 0.003, "http", 405, method="POST", auxiliary=True, expected_status=0),
    row(13.0, 0.5),
    row(14.0, 0.015),  # after: [14, 18)
    row(17.9, 0.025),
    row(18.0),  # after every window
    row(None, outcome="lost", status=0),  # never placed in time
]


def test_windows_are_the_events_length_either_side() -> None:
    assert event_windows(GC) == [Window("before", 6.0, 10.0), Window("during", 10.0, 14.0), Window("after", 14.0, 18.0)]
    assert event_windows(EventRecord("x", None, None, None, None)) == []  # never started
    running = EventRecord("x", 1.0, 20.0, None, None)  # still running at the run's end (25)
    assert event_windows(running, 25.0) == [Window("before", 15.0, 20.0), Window("during", 20.0, 25.0)]


def test_window_figures_hand_worked() -> None:
    (entry,) = event_entries(iter(ROWS), [GC], [], timed=False, on_time_s=0.01)
    assert (entry["name"], entry["started_s"], entry["ended_s"], entry["exit_code"]) == ("gc", 10.0, 14.0, 0)
    before, during, after = (entry["windows"][w] for w in ("before", "during", "after"))
    assert (before["from_s"], before["to_s"], before["requests"], before["failed"]) == (6.0, 10.0, 3, 0)
    assert before["latency_s"] == {
        "p50": pytest.approx(0.020, rel=1e-3),
        "p99": pytest.approx(0.030, rel=1e-3),
        "max": 0.030,
    }
    assert before["throughput_rps"] == pytest.approx(3 / (10.029 - 6.0))
    # the refused connection is its own class, apart from the HTTP answers; the helper's 405 is apart
    assert (during["requests"], during["succeeded"], during["failed"]) == (4, 1, 3)
    assert during["failures"] == {"http": 2, "refused": 1}
    assert during["failed_statuses"] == {"405": 1, "429": 1}
    assert during["throttled"] == 1
    assert during["latency_s"]["max"] == 0.5
    assert during["auxiliary"] == {"requests": 1, "failed": 1, "failures": {"http": 1}, "failed_statuses": {"405": 1}}
    assert (after["requests"], after["throttled"], after["failures"]) == (2, 0, {})
    assert entry["recovery_s"] is None  # no intervals


def test_an_event_running_at_the_end_has_no_after_window() -> None:
    restart = EventRecord("restart", 13.0, 13.0, None, None)
    gc, running = event_entries(iter(ROWS), [GC, restart], [], timed=False, on_time_s=0.01, run_end_s=18.0)
    assert gc["windows"]["during"]["requests"] == 4  # one pass over the rows feeds both events' windows
    before, during = running["windows"]["before"], running["windows"]["during"]
    assert (before["from_s"], before["to_s"], before["requests"]) == (8.0, 13.0, 4)  # 9.999, 10, 11, 12
    assert (during["from_s"], during["to_s"], during["requests"]) == (13.0, 18.0, 3)  # 13, 14, 17.9
    assert running["windows"]["after"] is None and running["recovery_s"] is None


def interval(start: float, p99_ms: float | None, requests: int = 5) -> StatsInterval:
    return StatsInterval(start, start + 1.0, requests, None if p99_ms is None else p99_ms / 1000)


def test_recovery_hand_worked() -> None:
    # before p99 30 ms: "as before" is up to 33 ms
    intervals = [
        interval(13.0, 10.0),  # ends at the event's end: not after it
        interval(14.0, 40.0),  # slow
        interval(15.0, 30.0),  # 1
        interval(16.0, None, requests=0),  # idle: neither counts nor breaks
        interval(17.0, 32.0),  # 2
        interval(18.0, None),  # requests ended, none succeeded: breaks
        interval(19.0, 20.0),  # 1
        interval(20.0, 20.0),  # 2
        interval(21.0, 25.0),  # 3: recovered from 19 s, 5 s after the end
    ]
    assert recovery_s(14.0, 0.030, intervals) == 5.0
    assert recovery_s(14.0, 0.030, intervals[:-1]) is None  # never three in a row
    assert recovery_s(14.0, None, intervals) is None  # nothing succeeded before
    assert recovery_s(None, 0.030, intervals) is None  # did not end
    # the interval holding the end counts, and an idle one between does not break: recovered at once (0 s)
    quick = [interval(14.0, 1.0), interval(15.0, None, requests=0), interval(16.0, 1.0), interval(17.0, 1.0)]
    assert recovery_s(14.5, 0.001, quick) == 0.0


def test_events_in_an_interval() -> None:
    running = EventRecord("restart", 1.0, 12.0, None, None)
    pending = EventRecord("later", 50.0, None, None, None)
    assert events_in([GC, running, pending], 9.0, 10.0) == ""
    assert events_in([GC, running, pending], 10.0, 11.0) == "gc"
    assert events_in([GC, running, pending], 13.0, 14.0) == "gc;restart"
    assert events_in([GC, running, pending], 14.0, 15.0) == "restart"


def test_read_intervals(tmp_path) -> None:
    path = tmp_path / "stats_history.csv"
    blank = {c: "" for c in STATS_COLUMNS}
    lines = [",".join(STATS_COLUMNS)]
    for end, requests, p99 in (("1.000", "3", "12.500"), ("2.000", "0", ""), ("2.400", "1", "3.000")):
        cells = {**blank, "elapsed_s": end, "requests": requests, "p99_ms": p99}
        lines.append(",".join(cells[c] for c in STATS_COLUMNS))
    path.write_text("\n".join(lines) + "\n2.9,")  # a last line torn by a kill
    assert read_intervals(path) == [
        StatsInterval(0.0, 1.0, 3, 0.0125),
        StatsInterval(1.0, 2.0, 0, None),
        StatsInterval(2.0, 2.4, 1, 0.003),
    ]
    assert read_intervals(tmp_path / "none.csv") == []


def test_console_line() -> None:
    (entry,) = event_entries(iter(ROWS), [GC], [], timed=False, on_time_s=0.01)
    during = entry["windows"]["during"]["latency_s"]["p99"] * 1000  # the histogram's 0.1 %-wide bucket of 500 ms
    assert during == pytest.approx(500.0, rel=1e-3)
    assert event_line(entry) == (
        f"event gc (10.0–14.0 s): p99 ms before 30.0, during {during:.1f}, after 25.0; failed before 0/3, during 3/4, "
        "after 0/2 (during: http 2, refused 1, HTTP 405 1, HTTP 429 1); recovery none in the run"
    )
    model = ResultsModel(timed=False, on_time_s=0.01)
    for r in ROWS:
        model.add(r)
    assert format_table(model.summary(events=[entry])).endswith("\n" + event_line(entry))  # under the table


def test_stats_history_event_column(tmp_path) -> None:
    """The history names the events as they stand when it writes each row (the events output's records change
    as events start and end)."""
    records = [EventRecord("gc", 1.0, 1.5, None, None)]  # running
    now = [0.0]
    history = StatsHistory(
        tmp_path / "h.csv", 1.0, lambda: now[0], write_lag_s=0.0, events=lambda b, e: events_in(records, b, e)
    )
    history.add(row(0.5))
    now[0] = 2.0
    history.tick()  # [0, 1) and [1, 2) written
    records[:] = [EventRecord("gc", 1.0, 1.5, 2.5, 0), EventRecord("ro", 2.0, 2.8, 3.2, 1)]
    now[0] = 4.0
    history.tick()
    history.close()
    with (tmp_path / "h.csv").open() as f:
        assert [r["event"] for r in csv.DictReader(f)] == ["", "gc", "gc;ro", "ro", ""]  # the last: the close at 4 s
