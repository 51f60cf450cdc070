"""Parsing of human-friendly sizes and durations used by the CLI and configs."""

from __future__ import annotations

import re

from drtp.errors import DrtpError

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgtp]?i?b?)?\s*$", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_size(text: str | int | float) -> int:
    """Bytes in ``"300KB"``, ``"64MiB"``, ``"1.5G"`` or a plain number (KB = 1000, KiB = 1024)."""
    if isinstance(text, (int, float)):
        return int(text)
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (examples: 1048576, 300KB, 64MiB)")
    number, unit = float(m.group(1)), (m.group(2) or "").lower()
    base = 1024 if "i" in unit else 1000
    return int(number * base ** _POWERS[unit.rstrip("ib")[:1]])


_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|min|h|d)?\s*$")
_SECONDS = {"ms": 1e-3, "s": 1.0, "": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str | int | float) -> float:
    """Seconds in ``"90"``, ``"1.5h"``, ``"12h"``, ``"1d"``, ``"250ms"``."""
    if isinstance(text, (int, float)):
        return float(text)
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"not a duration: {text!r} (examples: 90, 250ms, 12h, 1d)")
    return float(m.group(1)) * _SECONDS[m.group(2) or ""]


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
