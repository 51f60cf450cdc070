"""The name and columns of a run's ``stats_history.csv``: one definition for its writer and its readers.

The master writes the file as a run goes (drtp.master.outputs.stats_history); the
client nodes count an interval's figures (drtp.replay.frames); the pandas view
of a run reads it back or rebuilds it from ``requests.csv``
(drtp.analysis.run_stats).  Each of them takes the columns from
:data:`STATS_TABLE`: their order, their kind (which says how a value is
written, read and merged) and their meaning (the docs' table says the same).

A new column is a line here, and the code of its kind produces it (a ``count`` needs nothing more; a new
``time``, ``rate`` or ``ms`` column also needs its computation in drtp.master.outputs.stats_history
``interval_cells`` and in the rebuild from ``requests.csv``, which name those columns):

* ``count`` — a whole number the client nodes count per interval
  (drtp.replay.frames ``IntervalStats``: a slot, its increment in ``add_row``);
  the nodes' parts carry every count by name and the master adds them up;
* ``gauge`` — a number the master takes the largest of (a node's CPU, an event
  loop's lag, the master's own CPU): the nodes send theirs in the frames' health
  parts (drtp.replay.frames ``HealthPart``), drtp.master.outputs.replayer_health hands
  them to the history by name, merged by ``max``; empty when none was reported
  for the interval, and in the rebuild from ``requests.csv`` (which cannot know them);
* ``time``, ``rate``, ``ms`` — computed by the writer from the interval and its
  counts and latency histogram (``ms`` empty when nothing succeeded; it is the
  latency from the actual start, ``latency_s``, in every mode: in rate mode the
  wait before a late start is in summary.json's ``response_s``, not here);
* ``text`` — a label the writer gives the interval (``event``: the events of the run's events.csv that ran
  in it, drtp.replay.windows ``events_in``); empty when none, also in the rebuild from ``requests.csv``
  unless the run's events are given.

``later`` marks a column added after the file's first layout: a file written
before it existed lacks it, and readers give it as missing (NaN) there instead
of refusing the file.  A run is never resumed across layouts (its master refuses).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

STATS_FILE = "stats_history.csv"
DEFAULT_INTERVAL_S = 1.0  # the width of an interval, in seconds of the run, unless the run sets another


class StatsColumn(NamedTuple):
    name: str
    kind: Literal["time", "count", "gauge", "rate", "ms", "text"]
    meaning: str
    later: bool = False  # added after the file's first layout: older files lack it


STATS_TABLE: tuple[StatsColumn, ...] = (
    StatsColumn("elapsed_s", "time", "the interval's end, seconds since the run's start (the last row: the run's end)"),
    StatsColumn("requests", "count", "trace requests that ended in the interval (helper requests are not counted)"),
    StatsColumn("failures", "count", "those of them that failed (outcome not ok)"),
    StatsColumn("throttled", "count", "those of them that failed with a 429 answer (Too Many Requests)", later=True),
    StatsColumn("bytes", "count", "the bytes they moved"),
    StatsColumn("rate_per_s", "rate", "requests per second of the interval"),
    StatsColumn("p50_ms", "ms", "median latency of the interval's succeeded requests, ms; empty when none succeeded"),
    StatsColumn("p99_ms", "ms", "99th percentile of the same, ms; empty when none succeeded"),
    StatsColumn(
        "node_cpu_max", "gauge", "the busiest client node's CPU (user + system) in the interval, share of one core "
        "(1.0 = a whole core); empty when no node reported", later=True,
    ),
    StatsColumn(
        "loop_lag_ms_max", "gauge", "the largest p99 of a client node's engine lag in the interval (how late its "
        "event loop or scheduler handled what was due), ms; empty when no node reported", later=True,
    ),
    StatsColumn(
        "master_cpu", "gauge", "the master process's CPU (user + system) in the interval, share of one core",
        later=True,
    ),
    StatsColumn(
        "event", "text", "the maintenance events (events.csv) that ran in the interval, ';' between several; "
        "empty when none", later=True,
    ),
)  # fmt: skip
STATS_COLUMNS: tuple[str, ...] = tuple(c.name for c in STATS_TABLE)
STATS_COUNTS: tuple[str, ...] = tuple(c.name for c in STATS_TABLE if c.kind == "count")
STATS_OPTIONAL: tuple[str, ...] = tuple(c.name for c in STATS_TABLE if c.kind in ("ms", "gauge"))
STATS_LATER: tuple[str, ...] = tuple(c.name for c in STATS_TABLE if c.later)
STATS_GAUGES: tuple[str, ...] = tuple(c.name for c in STATS_TABLE if c.kind == "gauge")
STATS_TEXT: tuple[str, ...] = tuple(c.name for c in STATS_TABLE if c.kind == "text")
