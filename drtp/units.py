"""Parsing of human-friendly sizes and durations used by the CLI and configs.

Both are strict: a size is a whole number of bytes (``1.5`` bytes is refused,
not truncated to 1) that fits a 64-bit integer, a duration a finite number of
seconds; neither is ever negative.  Callers decide whether 0 is allowed.
"""

from __future__ import annotations

import math
import re

from drtp.errors import DrtpError

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgtp]?i?b?)?\s*$", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
MAX_SIZE = 2**63 - 1  # sizes go into int64 columns and arrays


def _bytes(value: float, text: object) -> int:
    """A byte count from a parsed number: whole, finite, ≥ 0 and within int64."""
    if isinstance(value, int) and value > MAX_SIZE:  # checked before any float conversion of a huge int
        raise ValueError(f"size {text!r} is too large (at most {MAX_SIZE} bytes)")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"not a size: {text!r} (a size is a number of bytes ≥ 0)")
    if value != int(value):
        raise ValueError(f"not a whole number of bytes: {text!r}")
    if value > MAX_SIZE:
        raise ValueError(f"size {text!r} is too large (at most {MAX_SIZE} bytes)")
    return int(value)


def parse_size(text: str | int | float) -> int:
    """Bytes in ``"300KB"``, ``"64MiB"``, ``"1.5G"`` or a plain number (KB = 1000, KiB = 1024)."""
    if isinstance(text, bool):
        raise ValueError(f"not a size: {text!r} (examples: 1048576, 300KB, 64MiB)")
    if isinstance(text, (int, float)):
        return _bytes(text, text)
    if not isinstance(text, str):
        raise ValueError(f"not a size: {text!r} (examples: 1048576, 300KB, 64MiB)")
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (examples: 1048576, 300KB, 64MiB)")
    number, unit = m.group(1), (m.group(2) or "").lower()
    if len(number) > 40:  # more digits than any size has (and than int() converts quickly)
        raise ValueError(f"size {text!r} is too large (at most {MAX_SIZE} bytes)")
    base = 1024 if "i" in unit else 1000
    power = _POWERS[unit.rstrip("ib")[:1]]
    if "." not in number:  # exact in integers: a float would round sizes above 2**53
        return _bytes(int(number) * base**power, text)
    return _bytes(round(float(number) * base**power, 6), text)


_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|min|h|d)?\s*$")
_SECONDS = {"ms": 1e-3, "s": 1.0, "": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str | int | float) -> float:
    """Seconds in ``"90"``, ``"1.5h"``, ``"12h"``, ``"1d"``, ``"250ms"``."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise ValueError(f"not a duration: {text!r} (examples: 90, 250ms, 12h, 1d)")
    if isinstance(text, (int, float)):
        seconds = float(text)
    else:
        m = _DURATION.match(text)
        if not m:
            raise ValueError(f"not a duration: {text!r} (examples: 90, 250ms, 12h, 1d)")
        seconds = float(m.group(1)[:40]) * _SECONDS[m.group(2) or ""] if len(m.group(1)) <= 40 else math.inf
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"not a duration: {text!r} (a duration is a finite number of seconds ≥ 0)")
    return seconds


# Histograms over a trace's time (per-minute counts, concurrency bins) hold a few
# numbers per bin: 5 M bins (9.5 years of minutes) cost a few hundred MB at most.
MAX_BINS = 5_000_000


def bin_count(span_s: float, width_s: float, what: str, fix: str = "") -> int:
    """How many bins of ``width_s`` seconds cover ``span_s`` seconds, refused beyond MAX_BINS.

    ``what`` names the bins for the error (e.g. ``"one-minute bins"``) and ``fix``
    says what else the user can change besides cutting the trace.
    """
    n = int(span_s // width_s) + 1
    if n > MAX_BINS:
        raise DrtpError(
            f"the trace spans {span_s / 86400:,.1f} days: {n:,} {what}, more than the {MAX_BINS:,} "
            f"drtp keeps in memory; {fix}cut the trace (--seconds, drtp sample --method duration)"
        )
    return n


# Latency is kept in seconds where machines read it (requests.csv, summary.json, JSON results)
# and shown in milliseconds where people read it (tables, reports, plot axes).
MS_PER_S = 1000.0


def to_ms(seconds: float | None) -> float | None:
    """Seconds as milliseconds; None (no value) stays None."""
    return None if seconds is None else seconds * MS_PER_S
