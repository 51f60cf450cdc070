"""Files merged into one time-ordered stream of record batches, with a watermark.

Records are released once every open file has read past them, minus the
reorder window (tolerance for slightly unordered logs); a record older than
what was already released, or outside the time range every consumer handles,
is a bad record (drtp.trace.bad_records).
"""

from __future__ import annotations

import bisect
import datetime as _dt
from operator import attrgetter

from drtp.trace.bad_records import ReadStats, reject
from drtp.trace.records import MAX_TIME, MIN_TIME, TraceRecord, time_problem

by_time = attrgetter("timestamp")


def merge_by_time(streams, window: _dt.timedelta, skip_bad: bool, stats: ReadStats):
    """Merge per-file chunk streams into time-ordered batches (watermark merge)."""
    active = {i: s for i, s in enumerate(streams)}
    latest: dict[int, _dt.datetime] = {}
    pending: list[TraceRecord] = []
    emitted: _dt.datetime | None = None
    while active:
        # read from the file that is furthest behind, so files advance together
        i = min(active, key=lambda k: latest.get(k, _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)))
        try:
            path, base, chunk = next(active[i])
        except StopIteration:
            del active[i]
            latest.pop(i, None)
        else:
            ordered = sorted(chunk, key=by_time)
            # sorted: its first and last records tell whether every timestamp is in range
            if ordered and (ordered[0].timestamp < MIN_TIME or ordered[-1].timestamp >= MAX_TIME):
                chunk = in_range(path, base, chunk, skip_bad, stats)
                ordered = sorted(chunk, key=by_time)
            if ordered and emitted is not None and ordered[0].timestamp < emitted:
                ordered = _drop_late(path, base, chunk, emitted, skip_bad, stats)
            if ordered:
                top = ordered[-1].timestamp
                latest[i] = max(latest.get(i, top), top)
                if not pending:
                    pending = ordered
                elif pending[-1].timestamp <= ordered[0].timestamp:
                    pending += ordered  # the common case: files in order, nothing to interleave
                else:
                    pending += ordered
                    pending.sort(key=by_time)
        if not active:
            break
        if len(latest) < len(active):
            continue  # some file has not produced a record yet
        mark = min(latest.values()) - window
        cut = bisect.bisect_right(pending, mark, key=by_time)
        if cut:
            batch, pending = pending[:cut], pending[cut:]
            emitted = batch[-1].timestamp
            yield batch
    if pending:
        yield pending


def in_range(path, base, chunk, skip_bad, stats) -> list[TraceRecord]:
    """The records of a chunk whose timestamps lie in the range every consumer can handle."""
    if chunk and MIN_TIME <= min(map(by_time, chunk)) and max(map(by_time, chunk)) < MAX_TIME:
        return chunk
    kept = []
    for offset, rec in enumerate(chunk):
        problem = time_problem(rec.timestamp)
        if problem is None:
            kept.append(rec)
        else:
            reject(path, base + offset, problem, skip_bad, stats)
    return kept


def _drop_late(path, base, chunk, emitted, skip_bad, stats):
    """Records older than what was already released cannot be replayed in order."""
    kept = []
    for offset, rec in enumerate(chunk):
        if rec.timestamp < emitted:
            reject(
                path,
                base + offset,
                f"timestamp {rec.timestamp.isoformat()} is earlier than records already read "
                "beyond the reorder window; sort the files (--sort-files, trace.sort_files) "
                "or raise trace.reorder_window",
                skip_bad,
                stats,
            )
        else:
            kept.append(rec)
    kept.sort(key=by_time)
    return kept
