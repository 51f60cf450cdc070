"""``stats_history.csv``: the run's figures per interval of time, written as the run goes.

One row per interval of ``interval_s`` seconds of the run's clock (seconds
since the run's start, the origin of requests.csv's ``start_s``):

* ``elapsed_s`` — the interval's end (the last row's: the run's real end);
* ``requests``, ``failures``, ``throttled``, ``bytes`` — the trace requests
  that ended in the interval (``start_s + latency_s``), those of them that
  failed (any outcome but ``ok``), those failed with a 429 answer (the
  interval's share of summary.json's ``failed_statuses["429"]``), and the bytes
  they moved; helper (auxiliary) requests are not counted, as in summary.json's
  figures;
* ``rate_per_s`` — ``requests`` per second of the interval;
* ``p50_ms``, ``p99_ms`` — latency percentiles of the interval's requests that
  succeeded, in milliseconds, empty when none did; nearest rank on the same
  0.1 %-wide histogram as summary.json's percentiles (drtp.replay.summary), so
  both use one definition;
* ``node_cpu_max``, ``loop_lag_ms_max``, ``master_cpu`` — gauges: the largest
  value reported for the interval (:meth:`StatsHistory.gauge`, fed by
  drtp.master.outputs.replayer_health), empty when none was.  A gauge that comes after
  its interval was written is dropped: unlike a count it does not belong to
  another interval.  A starved node's health comes late in just the intervals
  that matter, so the dropped ones are counted (:attr:`StatsHistory.late_gauges`,
  summary.json's ``replayer.late_gauges``); summary.json's ``replayer`` block
  keeps every part, late or not;
* ``event`` — the maintenance events that ran in the interval (drtp.replay.windows
  ``events_in``: started before its end, not ended by its beginning; ``;`` between
  several), empty when none.  The history asks the run's events output
  (drtp.master.outputs.events ``running_in``) when it writes the row: an interval's
  row waits its write lag, so an event that ended in it meanwhile is there too.

A request lost with its node has no end: it counts as a failure in the interval
in which the master learned of it.  Results reach the master a little after
they end, so an interval's row is written (and flushed) once the run's clock is
:data:`WRITE_LAG_S` past its end; a result that comes later still counts in the
oldest interval not yet written, never nowhere, and is counted
(:attr:`StatsHistory.late`, summary.json's ``stats_history_late``): a request
whose helper ran after it (an upload cancel, a mount fallback) behind a slow
registry comes late, as does everything a starved master or node handles late.
The environment variable ``DRTP_STATS_WRITE_LAG_S`` (seconds ≥ 0) sets another
lag for a run (:func:`run_write_lag_s`): ``0`` writes each row as soon as its
interval is over, which makes such results late on purpose — how the tests
make parts late for real; a shorter lag moves results to later rows, never
drops one.

The client nodes group their rows by interval themselves and send each
interval's counts and latency histogram (drtp.replay.frames); the history
merges the nodes' parts, which is exact.  Rows the master makes itself (lost,
reloaded on resume) cost an append here and are grouped when an interval is due.
A write that fails stops the history (its reason is kept for summary.json), not
the run: requests.csv holds every row the history would have counted.  A bug
(an unexpected exception) stops it the same way and is raised to the run, once:
the history's close does not run the failed code again.
On resume the file is appended to: the rows of the interrupted run stay, and
the completed requests it had not yet written into an interval are counted
in the first interval written now.
"""

from __future__ import annotations

import csv
import math
import os
from collections import deque
from collections.abc import Callable
from pathlib import Path

from drtp.errors import DrtpError
from drtp.master.outputs.events import EventsOutput
from drtp.master.outputs.output import RunContext, RunOutput
from drtp.outputs import os_reason, other_columns
from drtp.replay.frames import IntervalPart, IntervalStats, ResultFrame
from drtp.replay.messages import ReplayRequest
from drtp.replay.result_row import ResultRow
from drtp.replay.stats_file import STATS_COLUMNS, STATS_COUNTS, STATS_FILE, STATS_GAUGES
from drtp.units import MS_PER_S

WRITE_LAG_S = 2.0  # how long after an interval's end its row waits for results still on their way
WRITE_LAG_ENV = "DRTP_STATS_WRITE_LAG_S"  # another write lag for a run, in seconds (0: rows written at once)
EDGE = 1e-9  # an end read back from the file lands on the boundary it was written at, despite rounding


def run_write_lag_s() -> float:
    """:data:`WRITE_LAG_S`, or the lag the environment sets (:data:`WRITE_LAG_ENV`); a value that is not a number
    of seconds ≥ 0 is refused in one line."""
    text = os.environ.get(WRITE_LAG_ENV, "").strip()
    if not text:
        return WRITE_LAG_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise DrtpError(f"environment variable {WRITE_LAG_ENV}: expected a number of seconds >= 0, got {text!r}")
    return value


class StatsHistory:
    """Groups result rows by the interval in which they ended and writes one CSV row per interval."""

    def __init__(
        self,
        path: Path,
        interval_s: float,
        clock: Callable[[], float],
        resume: bool = False,
        write_lag_s: float | None = None,
        events: Callable[[float, float], str] | None = None,
    ) -> None:
        """``write_lag_s``: how long after an interval's end its row is written (None: :func:`run_write_lag_s`);
        ``events``: the ``event`` cell of an interval ``[begin_s, end_s)`` (None: always empty)."""
        if not (math.isfinite(interval_s) and interval_s > 0):
            raise ValueError(f"stats interval must be > 0 s, got {interval_s!r}")
        self.path = path
        self.interval_s = interval_s
        self.write_lag_s = run_write_lag_s() if write_lag_s is None else write_lag_s
        self.clock = clock  # seconds since the run's start
        self.events = events
        self.pending: list[ResultRow] = []  # rows added since they were last grouped
        # a row the master recorded: one append, nothing else (a helper's row is left out when grouped)
        self.add: Callable[[ResultRow], None] = self.pending.append
        self.parts: list[IntervalPart] = []  # the nodes' interval parts since they were last grouped
        self.open: dict[int, IntervalStats] = {}  # interval index → the trace requests that ended in it
        # (index, gauge column, value) reported since they were last grouped: a deque, since the master's CPU
        # sampler adds from a thread of its own
        self.gauge_parts: deque[tuple[int, str, float]] = deque()
        self.gauges: dict[int, dict[str, float]] = {}  # interval index → gauge column → the largest value
        self.error: str | None = None  # why the history stopped, when a write failed
        self.late = 0  # rows that ended in an interval already written (counted in the oldest open one)
        self.late_gauges = 0  # gauge values that came after their interval's row was written (dropped)
        written_until = _last_elapsed(path) if resume and path.exists() else None
        self.next_index = 0 if written_until is None else math.floor(written_until / interval_s + EDGE)
        self.written_until = written_until  # reloaded rows that ended before it are in the file already
        if written_until is not None:
            _end_line(path)
        self.file = open(path, "a" if written_until is not None else "w", newline="")
        self.csv = csv.writer(self.file)
        if written_until is None:
            self.csv.writerow(STATS_COLUMNS)
            self.file.flush()

    def reloaded(self, row: ResultRow) -> None:
        """A row of the interrupted run being resumed: counted unless the file holds its interval already."""
        if row.auxiliary or row.start_s is None or row.latency_s is None:
            return
        if self.written_until is None or row.start_s + row.latency_s > self.written_until:
            self.pending.append(row)

    def add_parts(self, parts: list[IntervalPart]) -> None:
        """A node's intervals from one frame (grouped when an interval is due)."""
        self.parts.extend(parts)

    def gauge(self, index: int, name: str, value: float) -> None:
        """A gauge column's value for interval ``index`` (the interval keeps the largest reported)."""
        self.gauge_parts.append((index, name, value))

    def tick(self) -> None:
        """Write the intervals whose rows are due (cheap when none is)."""
        if self.error is not None:
            return
        now = self.clock()
        lag = self.write_lag_s
        if (self.next_index + 1) * self.interval_s + lag > now:
            return
        try:
            self._group(now)
            while (self.next_index + 1) * self.interval_s + lag <= now:
                self._write(self.next_index, (self.next_index + 1) * self.interval_s)
            self.file.flush()
        except OSError as e:
            self._failed(e)
        except Exception as e:
            self._failed(e)
            raise

    def close(self) -> None:
        """Write every interval left, the last one ending at the run's end; close the file."""
        if self.error is not None or self.file.closed:
            return
        try:
            self._close(self.clock())
        except OSError as e:
            self._failed(e)
        except Exception as e:
            self._failed(e)
            raise

    def _close(self, now: float) -> None:
        self._group(now)
        last = max(math.floor(now / self.interval_s), self.next_index)
        if last > self.next_index and now - last * self.interval_s < EDGE:
            last -= 1  # the run ended on a boundary: no empty interval of zero length after it
        # ... unless something is to be written there or later: a node whose clock runs ahead of the master's
        # may report an interval after now, its requests and its gauges alike
        last = max(last, max(self.open, default=0), max(self.gauges, default=0))
        while self.next_index < last:
            self._write(self.next_index, (self.next_index + 1) * self.interval_s)
        end = max(now, last * self.interval_s)
        if self.written_until is not None and end <= self.written_until:
            if last not in self.open and last not in self.gauges:
                self.file.close()  # resumed with nothing left to do: the file ends where it ended
                return
            end = (last + 1) * self.interval_s  # after the interrupted run's last row: the interval's end
        self._write(last, end)
        self.file.close()

    def _failed(self, e: Exception) -> None:
        """A write failed, or a bug struck: the history stops (requests.csv still holds every row it would have
        counted)."""
        why = os_reason(e) if isinstance(e, OSError) else f"internal error ({type(e).__name__})"
        self.error = f"{self.path}: {why}"
        self.pending.clear()
        self.parts.clear()
        self.gauge_parts.clear()
        self.open = {}
        self.gauges = {}
        try:
            self.file.close()
        except OSError:
            pass

    def _interval(self, index: int) -> IntervalStats:
        """The open interval ``index``; one already written is late: its requests go to the oldest open one."""
        if index < self.next_index:
            index = self.next_index
        stats = self.open.get(index)
        if stats is None:
            stats = self.open[index] = IntervalStats()
        return stats

    def _group(self, now: float) -> None:
        """Move the pending rows and the nodes' parts into their intervals."""
        rows = self.pending[:]
        self.pending.clear()  # the same list: ``add`` is bound to it
        iv = self.interval_s
        first = self.next_index
        lost_index = max(first, math.floor(now / iv))  # a lost row has no end: it counts when the master learned
        for row in rows:
            if row.auxiliary:
                continue
            start = row.start_s
            at = lost_index if start is None else math.floor((start + row.latency_s) / iv)
            if at < first:
                self.late += 1
            self._interval(at).add_row(row)
        parts = self.parts[:]
        self.parts.clear()
        for part in parts:
            if part.index < first:
                self.late += part.counts.get("requests", 0)  # its rows, as ``late`` counts the master's own
            self._interval(part.index).add_part(part)
        gauges, pop = self.gauge_parts, self.gauge_parts.popleft
        while gauges:
            index, name, value = pop()
            if index < first:
                self.late_gauges += 1
                continue  # its interval is written: a gauge is of its own interval or of none
            got = self.gauges.setdefault(index, {})
            if value > got.get(name, -math.inf):
                got[name] = value

    def _write(self, index: int, end_s: float) -> None:
        stats = self.open.pop(index, None) or IntervalStats()
        begin_s = index * self.interval_s
        event = self.events(begin_s, end_s) if self.events is not None else ""
        self.csv.writerow(interval_cells(stats, begin_s, end_s, self.gauges.pop(index, {}), event))
        self.next_index = index + 1


class HistoryOutput(RunOutput):
    """stats_history.csv as one of the run's outputs: the nodes' interval parts and the master's lost rows in,
    a row per interval as each is due, and summary.json's ``stats_history_late`` (and ``stats_history_error``).
    """

    name = "stats history"

    def __init__(self, run: RunContext, history: StatsHistory) -> None:
        self.run = run
        self.history = history

    @classmethod
    def open(cls, run: RunContext) -> HistoryOutput:
        events = run.output(EventsOutput)  # opened first: the run's events, as they start and end
        running = events.running_in if events is not None else None
        return cls(run, StatsHistory(run.out_dir / STATS_FILE, run.interval_s, run.clock, run.resume, events=running))

    def start(self) -> None:
        if self.run.resume:  # the interrupted run's rows that requests.csv kept
            for row in self.run.results.resumed_rows():
                self.history.reloaded(row)

    def frame(self, node: str, frame: ResultFrame) -> None:
        if frame.intervals:
            self.history.add_parts(frame.intervals)

    def lost(self, node: str, req: ReplayRequest, rows: list[ResultRow]) -> None:
        add = self.history.add
        for row in rows:
            add(row)

    def tick(self, in_flight: int | None) -> None:
        self.history.tick()

    def finish(self, summary: dict) -> None:
        history = self.history
        try:
            history.close()
        finally:  # a bug in the close still leaves what the history counted, and why it stopped
            if history.error is not None:
                summary["stats_history_error"] = f"could not write {history.error}"
            # results that reached the master after their interval's row was written (counted in a later row)
            summary["stats_history_late"] = history.late


def interval_cells(
    stats: IntervalStats, begin_s: float, end_s: float, gauges: dict[str, float] | None = None, event: str = ""
) -> list:
    """The CSV cells of one interval, in drtp.replay.stats_file's column order: each column by its kind
    (``gauges``: the interval's gauge values by column; a column without one is empty; ``event``: the events
    that ran in it)."""
    length = end_s - begin_s
    latency = stats.latency
    values: dict[str, object] = {name: getattr(stats, name) for name in STATS_COUNTS}
    values["elapsed_s"] = f"{end_s:.3f}"
    values["rate_per_s"] = f"{stats.requests / length if length > 0 else 0.0:.3f}"
    values["p50_ms"] = f"{latency.quantile(0.50) * MS_PER_S:.3f}" if latency.n else ""
    values["p99_ms"] = f"{latency.quantile(0.99) * MS_PER_S:.3f}" if latency.n else ""
    gauges = gauges or {}
    for name in STATS_GAUGES:
        value = gauges.get(name)
        values[name] = "" if value is None else f"{value:.3f}"
    values["event"] = event
    return [values[name] for name in STATS_COLUMNS]


def _last_elapsed(path: Path) -> float | None:
    """The end of the last interval an interrupted run wrote; None when the file holds no row."""
    last = None
    with open(path, newline="") as f:
        lines = csv.reader(f)
        header = next(lines, None)
        if header is None:
            return None
        if tuple(header) != STATS_COLUMNS:
            raise other_columns(path, header, STATS_COLUMNS)
        for values in lines:
            try:
                last = float(values[0])
            except (ValueError, IndexError):
                continue  # a line torn by the interruption
    return last if last is not None else 0.0


def _end_line(path: Path) -> None:
    """A file cut in the middle of a row gets its line ended, so that appended rows start on a line of their own."""
    with open(path, "rb+") as f:
        if f.seek(0, 2) == 0:
            return
        f.seek(-1, 2)
        if f.read(1) != b"\n":
            f.write(b"\n")
