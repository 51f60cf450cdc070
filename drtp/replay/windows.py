"""The windows of a run's maintenance events: the run's figures before, during and after each event.

A run's events (drtp.replay.event_log: events.csv) mark when maintenance — a collection, a read-only
switch, a restart — ran on the run's clock.  To say what it cost the clients, each event cuts the run's
rows into three windows of the same length, on requests.csv's ``start_s`` scale:

* ``before`` — ``[started_s − L, started_s)``, ``L`` the event's length ``ended_s − started_s``;
* ``during`` — ``[started_s, ended_s)``;
* ``after`` — ``[ended_s, ended_s + L)``.

Bounds are kept to the microsecond, as rows' times are.  A request belongs to the window its start falls
in (a request that started before an event and hung through it is a ``before`` request: the window says
when the client asked).  A row without a start (lost,
never sent) is in no window.  Each window's figures are a :class:`~drtp.replay.summary.ResultsModel` fed
its rows, the model of the whole run's summary: requests, failed per outcome class (a connection refused
while the registry restarts is ``refused``, apart from an HTTP answer's ``http``) and per status of the
answer, ``throttled`` (the failed ones answered 429), latency p50/p99/max over the requests that succeeded,
and throughput (succeeded requests per second of the span from the window's first start to its last end,
as the run's own ``throughput_rps``).  Helper (auxiliary) requests are counted apart, in the window's
``auxiliary`` block, never among its trace figures — as in the run's summary; a push's upload open is
a helper, so a read-only window's refused uploads show there.

An event that never started has no windows; one still running when the run ended has ``before`` and
``during`` (to the end of the run's last request) and no ``after``.

``recovery_s`` says how long the registry took to serve as before: from the event's end to the start of
the first of :data:`RECOVERY_INTERVALS` consecutive stats intervals (stats_history.csv's rows; an interval
counts from the first that ends after the event's end) whose p99 latency is at most
:data:`RECOVERY_FACTOR` × the ``before`` window's p99.  An interval in which no request ended neither
counts nor breaks the run of intervals (an idle trace is not a slow registry); one in which requests
ended but none succeeded breaks it.  ``None`` when it never happened before the run ended, when the
before window has no p99 (nothing succeeded in it), or when the event did not end.  Interval latencies
are over the requests that *ended* in each interval, windows' over those that *started* in each window:
recovery is about when the registry answered fast again.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from drtp.replay.event_log import EventRecord
from drtp.replay.result_row import TIME_DIGITS, ResultRow
from drtp.replay.summary import ResultsModel

WINDOWS = ("before", "during", "after")
RECOVERY_INTERVALS = 3  # consecutive intervals back at the before window's p99 that make a recovery
RECOVERY_FACTOR = 1.1  # an interval is "as before" at a p99 up to this many times the before window's
THROTTLED_STATUS = "429"
LATENCY_KEYS = ("p50", "p99", "max")
EVENT_SEPARATOR = ";"  # stats_history.csv's ``event`` cell when several events ran in one interval


class Window(NamedTuple):
    """One window of an event: ``[from_s, to_s)`` of requests.csv's ``start_s``."""

    name: str  # before, during, after
    from_s: float
    to_s: float


class StatsInterval(NamedTuple):
    """One row of stats_history.csv, as the recovery reads it."""

    start_s: float  # the previous row's end (0 for the first)
    end_s: float  # its ``elapsed_s``
    requests: int  # trace requests that ended in it
    p99_s: float | None  # the p99 latency of those that succeeded, seconds (None: none did)


def event_windows(event: EventRecord, run_end_s: float | None = None) -> list[Window]:
    """The windows of ``event``, in :data:`WINDOWS` order; none when it never started.

    An event still running when the run ended (``ended_s`` None) lasted to ``run_end_s`` (the run's last
    end; None: unknown, then it has no windows): its before and during windows, no after."""
    start = event.started_s
    if start is None:
        return []
    end = event.ended_s
    if end is None:
        if run_end_s is None:
            return []
        end = max(start, run_end_s)
        return [Window("before", _t(start - (end - start)), start), Window("during", start, end)]
    length = max(0.0, end - start)
    return [
        Window("before", _t(start - length), start),
        Window("during", start, end),
        Window("after", end, _t(end + length)),
    ]


def _t(seconds: float) -> float:
    """A window's bound to the microsecond, as rows' times are (0.1, not 0.10000000000000009)."""
    return round(seconds, TIME_DIGITS)


def events_in(events: Iterable[EventRecord], begin_s: float, end_s: float) -> str:
    """The names of the events that ran in ``[begin_s, end_s)`` (stats_history.csv's ``event`` cell): those
    that started before its end and had not ended by its beginning; "" when none did."""
    names = [
        e.name
        for e in events
        if e.started_s is not None and e.started_s < end_s and (e.ended_s is None or e.ended_s > begin_s)
    ]
    return EVENT_SEPARATOR.join(names)


def window_figures(summary: dict, window: Window) -> dict:
    """A window's block of summary.json's ``events[]``, from its model's ``summary()``."""
    latency = summary.get("latency_s") or {}
    statuses = summary.get("failed_statuses") or {}
    helpers = summary.get("auxiliary") or {}
    return {
        "from_s": window.from_s,
        "to_s": window.to_s,
        "requests": summary["requests"],
        "succeeded": summary["succeeded"],
        "failed": summary["failed"],
        "failures": summary["failures"],
        "failed_statuses": statuses,
        "throttled": statuses.get(THROTTLED_STATUS, 0),
        "latency_s": {k: latency.get(k) for k in LATENCY_KEYS},
        "throughput_rps": summary["throughput_rps"],
        "auxiliary": {k: helpers.get(k) for k in ("requests", "failed", "failures", "failed_statuses")},
    }


def recovery_s(ended_s: float | None, before_p99_s: float | None, intervals: list[StatsInterval]) -> float | None:
    """Seconds from the event's end to the first of :data:`RECOVERY_INTERVALS` consecutive intervals back
    at :data:`RECOVERY_FACTOR` × the before window's p99 (the module's docstring has the rules)."""
    if ended_s is None or before_p99_s is None:
        return None
    limit = RECOVERY_FACTOR * before_p99_s
    streak: list[StatsInterval] = []
    for interval in intervals:
        if interval.end_s <= ended_s or interval.requests == 0:
            continue
        if interval.p99_s is not None and interval.p99_s <= limit:
            streak.append(interval)
            if len(streak) == RECOVERY_INTERVALS:
                return max(0.0, streak[0].start_s - ended_s)
        else:
            streak.clear()
    return None


def event_entries(
    rows: Iterable[ResultRow],
    events: list[EventRecord],
    intervals: list[StatsInterval],
    timed: bool,
    on_time_s: float,
    run_end_s: float | None = None,
) -> list[dict]:
    """summary.json's ``events[]``: per event its record, its windows' figures and its ``recovery_s``.

    ``rows`` are read once, as they come (requests.csv may be large); ``timed`` and ``on_time_s`` are the
    run's, so each window's model is made as the run's own; ``run_end_s`` the run's last end (where an event
    still running at the end stops; None: such an event has no windows)."""
    windows = [event_windows(e, run_end_s) for e in events]
    models = [[ResultsModel(timed, on_time_s) for _ in ws] for ws in windows]
    cells = [(w.from_s, w.to_s, m) for ws, ms in zip(windows, models, strict=True) for w, m in zip(ws, ms, strict=True)]
    for row in rows:
        start = row.start_s
        if start is None:
            continue
        for low, high, model in cells:
            if low <= start < high:
                model.add(row)
    entries = []
    for event, ws, ms in zip(events, windows, models, strict=True):
        figures = {w.name: window_figures(m.summary(), w) for w, m in zip(ws, ms, strict=True)}
        before_p99 = (figures.get("before") or {}).get("latency_s", {}).get("p99")
        entries.append(
            {
                "name": event.name,
                "planned_s": event.planned_s,
                "started_s": event.started_s,
                "ended_s": event.ended_s,
                "exit_code": event.exit_code,
                "windows": {name: figures.get(name) for name in WINDOWS},
                "recovery_s": recovery_s(event.ended_s, _finite(before_p99), intervals),
            }
        )
    return entries


def _finite(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value


def read_intervals(path: Path) -> list[StatsInterval]:
    """stats_history.csv's rows as the recovery reads them (an empty list without the file); a line the
    master never finished (the last, killed mid-write) or that does not parse is skipped."""
    if not path.exists():
        return []
    out: list[StatsInterval] = []
    with path.open(newline="") as f:
        previous = 0.0
        for r in csv.DictReader(f):
            try:
                end = float(r["elapsed_s"])
                requests = int(r["requests"])
                p99 = r["p99_ms"].strip()
                p99_s = float(p99) / 1000.0 if p99 else None
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
            out.append(StatsInterval(previous, end, requests, p99_s))
            previous = end
    return out


def _ms(latency: dict | None) -> str:
    p99 = (latency or {}).get("p99")
    return "-" if p99 is None else f"{p99 * 1000:.1f}"


def event_line(entry: dict) -> str:
    """One line of an ``events[]`` entry for the console and the report: its span, each window's p99 and
    failed requests (the during window's per class), and its recovery."""
    windows = entry.get("windows") or {}
    started, ended = entry.get("started_s"), entry.get("ended_s")
    if started is None:
        return f"event {entry['name']}: never started"
    span = f"{started:.1f}–{ended:.1f} s" if ended is not None else f"from {started:.1f} s, still running at the end"
    code = entry.get("exit_code")
    head = f"event {entry['name']} ({span}" + (f", exit {code}" if code not in (None, 0) else "") + ")"
    present = [(name, windows[name]) for name in WINDOWS if windows.get(name)]
    p99 = ", ".join(f"{name} {_ms(w.get('latency_s'))}" for name, w in present)
    failed = ", ".join(f"{name} {w['failed']:,}/{w['requests']:,}" for name, w in present)
    during = windows.get("during") or {}
    why = ", ".join(f"{c} {n:,}" for c, n in (during.get("failures") or {}).items())
    why += "".join(f", HTTP {s} {n:,}" for s, n in (during.get("failed_statuses") or {}).items())
    recovery = entry.get("recovery_s")
    line = f"{head}: p99 ms {p99}; failed {failed}" + (f" (during: {why})" if why else "")
    return line + "; recovery " + ("none in the run" if recovery is None else f"{recovery:.1f} s")
