"""``events.csv``: the maintenance events a run started on its clock, one row each.

The master writes it as each event ends (drtp.master.outputs owns the running); the run's summary, its
report and ``drtp analyze`` read it back to cut the run's rows into windows before, during and after each
event.  Times are on requests.csv's ``start_s`` scale (seconds since the run's common start), so a row and
an event compare without conversion.
"""

from __future__ import annotations

import csv
from pathlib import Path

import msgspec

EVENTS_CSV = "events.csv"


class EventRecord(msgspec.Struct, frozen=True):
    """One event of a run as events.csv holds it; the fields are the columns, in order."""

    name: str
    planned_s: float | None  # when it was due (None: due after a count of requests, not at a time)
    started_s: float | None  # when its command started (None: it never started: the run ended first)
    ended_s: float | None  # when it ended: its command, or its ``until`` (None: still running when the run ended)
    exit_code: int | None  # its command's exit code (None: not started, still running, or not found)


COLUMNS: tuple[str, ...] = EventRecord.__struct_fields__


def _cell(value: float | int | None) -> str:
    if value is None:
        return ""
    return f"{value:.6f}" if isinstance(value, float) else str(value)


def write_events(path: Path, records: list[EventRecord]) -> None:
    """Write ``records`` as events.csv (the whole file: a run has few events)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in records:
            w.writerow([r.name, _cell(r.planned_s), _cell(r.started_s), _cell(r.ended_s), _cell(r.exit_code)])
    tmp.replace(path)


def _float(text: str) -> float | None:
    return None if text == "" else float(text)


def read_events(path: Path) -> list[EventRecord]:
    """The events of a run's events.csv (an empty list when the run had none)."""
    if not path.exists():
        return []
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    return [
        EventRecord(
            name=r["name"],
            planned_s=_float(r["planned_s"]),
            started_s=_float(r["started_s"]),
            ended_s=_float(r["ended_s"]),
            exit_code=None if r["exit_code"] == "" else int(r["exit_code"]),
        )
        for r in rows
    ]
