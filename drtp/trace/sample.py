"""``drtp sample``: cut a representative piece out of a long trace, to replay in minutes instead of weeks.

Methods:

* ``day``: the calendar day (UTC) whose requests, egress and ingress are each
  within 10 % of the daily averages (the closest such day; if none qualifies,
  the closest day, and the summary says so);
* ``window``: a sliding window (default 1 hour, 1-minute steps) whose
  per-minute request rate has its 5th and 95th percentiles within 50 % of the
  median (the qualifying window with the smallest spread);
* ``requests`` / ``duration`` / ``bytes``: the first N requests, S seconds, or
  requests up to a byte budget (e.g. "about 3.5 GB"), from ``--start``.

Two streaming passes: one counts per minute, the other writes the chosen
span, so traces of any length can be sampled.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np

from drtp.errors import DrtpError
from drtp.trace.reader import TraceReader, write_ibm
from drtp.units import bin_count

METHODS = ("day", "window", "requests", "duration", "bytes")
INGRESS = ("PUT", "PATCH")


@dataclass
class MinuteCounts:
    """Per-minute requests, egress (GET bytes) and ingress (PUT/PATCH bytes) from ``start``."""

    start: _dt.datetime
    requests: np.ndarray
    egress: np.ndarray
    ingress: np.ndarray


def count_minutes(reader: TraceReader) -> MinuteCounts:
    """Per-minute totals of the whole trace, a batch at a time.

    Each batch is counted over its own minutes only and added into the totals,
    which grow with the trace's span (bounded by drtp.units.MAX_BINS).
    """
    start = None
    totals = np.zeros((3, 0))  # requests, egress, ingress per minute
    for batch in reader.batches():
        if start is None:
            # minutes are counted from the top of the first record's minute
            start = batch[0].timestamp.replace(second=0, microsecond=0)
        minute = np.fromiter(((r.timestamp - start).total_seconds() // 60 for r in batch), np.int64, len(batch))
        size = np.fromiter((r.size for r in batch), np.float64, len(batch))
        get = np.fromiter((r.method == "GET" for r in batch), bool, len(batch))
        put = np.fromiter((r.method in INGRESS for r in batch), bool, len(batch))
        lo, n = int(minute[0]), int(minute[-1]) + 1  # a batch is in time order
        if n > totals.shape[1]:
            bin_count((n - 1) * 60.0, 60.0, "one-minute bins")
            totals = np.concatenate([totals, np.zeros((3, max(n, 2 * totals.shape[1]) - totals.shape[1]))], axis=1)
        rel = minute - lo
        totals[0, lo:n] += np.bincount(rel, minlength=n - lo)
        totals[1, lo:n] += np.bincount(rel, weights=size * get, minlength=n - lo)
        totals[2, lo:n] += np.bincount(rel, weights=size * put, minlength=n - lo)
        length = n
    if start is None:
        raise DrtpError("the trace is empty: nothing to sample")
    req, egress, ingress = totals[:, :length]
    return MinuteCounts(start, req.copy(), egress.copy(), ingress.copy())


def choose_day(m: MinuteCounts, tolerance: float = 0.10) -> tuple[_dt.datetime, _dt.datetime, dict]:
    """The day closest to the daily averages of requests, egress and ingress."""
    offset = int((m.start - m.start.replace(hour=0, minute=0)).total_seconds() // 60)
    day_of = (np.arange(len(m.requests)) + offset) // 1440
    days = int(day_of[-1]) + 1
    # only whole days in the trace count (the first/last may be partial)
    whole = [d for d in range(days) if (day_of == d).sum() == 1440] or list(range(days))
    per = {
        k: np.bincount(day_of, weights=getattr(m, k), minlength=days)[whole] for k in ("requests", "egress", "ingress")
    }
    dev = np.zeros(len(whole))
    for values in per.values():
        mean = values.mean()
        if mean > 0:
            dev = np.maximum(dev, np.abs(values - mean) / mean)
    best = int(np.argmin(dev))
    day0 = m.start.replace(hour=0, minute=0) + _dt.timedelta(days=whole[best])
    qualifying = int((dev <= tolerance).sum())
    why = {
        "days_considered": len(whole),
        "days_within_tolerance": qualifying,
        "tolerance": tolerance,
        "max_deviation": float(dev[best]),
        "daily_mean": {k: float(v.mean()) for k, v in per.items()},
        "chosen_day": {k: float(v[best]) for k, v in per.items()},
        "reason": (
            f"requests, egress and ingress each within {dev[best]:.1%} of the daily averages"
            if qualifying
            else f"no day within {tolerance:.0%}; this day is the closest (largest deviation {dev[best]:.1%})"
        ),
    }
    return day0, day0 + _dt.timedelta(days=1), why


def choose_window(m: MinuteCounts, minutes: int = 60, tolerance: float = 0.5):
    """The sliding window whose per-minute rate has p5 and p95 within ``tolerance`` of the median."""
    rate = m.requests
    if len(rate) < minutes:
        raise DrtpError(f"the trace spans {len(rate)} minutes, less than the {minutes}-minute window")
    windows = np.lib.stride_tricks.sliding_window_view(rate, minutes)
    p5, med, p95 = np.percentile(windows, [5, 50, 95], axis=1)
    ok = (med > 0) & (p5 >= (1 - tolerance) * med) & (p95 <= (1 + tolerance) * med)
    scale = np.maximum(med, 1e-9)
    spread = np.where(med > 0, (p95 - p5) / scale, np.inf)
    # ties (the percentiles ignore a few odd minutes) go to the window closest to its median throughout
    deviation = np.where(med > 0, np.abs(windows - med[:, None]).mean(axis=1) / scale, np.inf)
    candidates = np.flatnonzero(ok) if ok.any() else np.arange(len(windows))
    best = int(candidates[np.lexsort((deviation[candidates], spread[candidates]))[0]])
    candidates = np.flatnonzero(ok)
    start = m.start + _dt.timedelta(minutes=best)
    why = {
        "windows_considered": len(windows),
        "windows_within_tolerance": len(candidates),
        "tolerance": tolerance,
        "per_minute": {"p5": float(p5[best]), "median": float(med[best]), "p95": float(p95[best])},
        "reason": (
            f"per-minute rate p5 {p5[best]:.0f} and p95 {p95[best]:.0f} within {tolerance:.0%} of the median "
            f"{med[best]:.0f}; the steadiest of {len(candidates)} qualifying windows"
            if len(candidates)
            else f"no window within {tolerance:.0%} of its median; this one is the steadiest"
        ),
    }
    return start, start + _dt.timedelta(minutes=minutes), why


def sample(
    paths: list[Path],
    output: Path,
    method: str,
    amount: float | None = None,
    start: _dt.datetime | None = None,
    reader_options: dict | None = None,
    window_minutes: int = 60,
) -> dict:
    """Write the chosen piece of the trace to ``output``; returns the summary (why this piece)."""
    if method not in METHODS:
        raise DrtpError(f"unknown sampling method {method!r} (choose from {', '.join(METHODS)})")
    opts = reader_options or {}
    why: dict = {}
    if method in ("day", "window"):
        counts = count_minutes(TraceReader(paths, **opts))
        lo, hi, why = choose_day(counts) if method == "day" else choose_window(counts, window_minutes)
        keep = _between(lo, hi)
    else:
        if amount is None or not 0 < amount < float("inf"):
            raise DrtpError(f"sampling by {method} needs --amount (a number > 0)")
        keep = _cut(method, amount, start)
        lo, hi = start, None
        why = {
            "reason": f"the first {amount:g} {'bytes' if method == 'bytes' else method} "
            f"from {start.isoformat() if start else 'the start of the trace'}"
        }
    stats = {"records": 0, "bytes": 0, "first": None, "last": None}

    def chosen():
        for batch in TraceReader(paths, **opts).batches():
            for rec in keep(batch):
                if stats["first"] is None:
                    stats["first"] = rec.timestamp.isoformat()
                stats["last"] = rec.timestamp.isoformat()
                stats["records"] += 1
                stats["bytes"] += rec.size
                yield rec
            if keep.done:
                return

    records = chosen()
    first = next(records, None)
    if first is None:  # nothing chosen: say so rather than write an empty trace
        where = f" at or after {start.isoformat()}" if start else ""
        raise DrtpError(f"nothing to sample: no record{where} in {', '.join(map(str, paths))}")
    write_ibm(output, chain([first], records))
    return {
        "method": method,
        "output": str(output),
        "start": lo.isoformat() if lo else stats["first"],
        "end": hi.isoformat() if hi else stats["last"],
        **stats,
        "why": why,
    }


class _between:
    """Keeps records with lo <= timestamp < hi."""

    def __init__(self, lo: _dt.datetime, hi: _dt.datetime) -> None:
        self.lo, self.hi, self.done = lo, hi, False

    def __call__(self, batch):
        if batch[-1].timestamp >= self.hi:
            self.done = True
        return [r for r in batch if self.lo <= r.timestamp < self.hi]


class _cut:
    """Keeps records from ``start`` until a count, a duration or a byte budget is reached."""

    def __init__(self, method: str, amount: float, start: _dt.datetime | None) -> None:
        self.method, self.amount, self.start = method, amount, start
        self.used = 0.0
        self.first: _dt.datetime | None = None
        self.done = False

    def __call__(self, batch):
        out = []
        for r in batch:
            if self.start is not None and r.timestamp < self.start:
                continue
            if self.first is None:
                self.first = r.timestamp
            if self.method == "requests":
                stop = self.used >= self.amount
                self.used += 1
            elif self.method == "duration":
                stop = (r.timestamp - self.first).total_seconds() > self.amount
            else:
                stop = self.used + r.size > self.amount and self.used > 0
                self.used += r.size
            if stop:
                self.done = True
                break
            out.append(r)
        return out
