"""A run's per-interval stats history as a pandas frame: read from ``stats_history.csv``, or rebuilt from its rows.

The master writes ``stats_history.csv`` beside ``requests.csv`` while a run
goes on, one row per interval (flushed as written, so a killed master leaves
at most one unfinished line).  Runs made before the master wrote it have only
``requests.csv``; for them the same frame, with the same columns, is computed
from the rows, so a notebook draws every run the same way.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pandas as pd

from drtp.errors import DrtpError
from drtp.replay.stats_file import (
    DEFAULT_INTERVAL_S,
    STATS_COLUMNS,
    STATS_COUNTS,
    STATS_GAUGES,
    STATS_LATER,
    STATS_OPTIONAL,
    STATS_TEXT,
)
from drtp.units import MS_PER_S


def read_stats_history(path: Path) -> pd.DataFrame:
    """``stats_history.csv`` as a frame of :data:`STATS_COLUMNS`, checked (a one-line error names row and column).

    A last line without its newline is one the master never finished writing
    (it was killed mid-write): it is dropped rather than read as a short row.
    A column added to the file after its first layout (drtp.replay.stats_file
    ``later``) is NaN throughout in a file written before it existed: not
    counted then, which is not the same as none; a text column (``event``) is "" there.
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DrtpError(f"{path}: cannot read ({e.strerror})") from None
    if data and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
    try:
        raw = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise DrtpError(f"{path}: not a readable CSV ({str(e).splitlines()[0]})") from None
    missing = [c for c in STATS_COLUMNS if c not in raw.columns and c not in STATS_LATER]
    if missing:
        raise DrtpError(f"{path}: missing column(s) {', '.join(missing)}")
    frame = pd.DataFrame(index=raw.index)
    for col in STATS_COLUMNS:
        if col not in raw.columns:  # a file from before the column existed
            frame[col] = "" if col in STATS_TEXT else np.nan
            continue
        text = raw[col].str.strip()
        if col in STATS_TEXT:  # a label: kept as written
            frame[col] = text
            continue
        values = pd.to_numeric(text, errors="coerce")
        bad = values.isna() | ~np.isfinite(values.fillna(0)) | (values < 0)
        if col in STATS_OPTIONAL:
            bad &= text != ""
        elif col in STATS_COUNTS:
            bad |= values.fillna(0) % 1 != 0
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            kind = "a whole number ≥ 0" if col in STATS_COUNTS else "a number ≥ 0"
            raise DrtpError(f"{path}: row {row + 1}: column {col}: not {kind}, got {raw[col].iloc[row][:40]!r}")
        frame[col] = values.astype(np.int64) if col in STATS_COUNTS else values.astype(np.float64)
    return frame


def stats_from_requests(requests: pd.DataFrame, interval_s: float = DEFAULT_INTERVAL_S) -> pd.DataFrame:
    """The stats history the master would have written, rebuilt from a run's rows (a frame of ``load_requests``).

    Trace requests only (helpers apart, as in every count of a run); ``throttled`` counts the failed ones
    that got a 429, as the client nodes do.  A request
    counts in the interval in which it ended (``start_s + latency_s``); one
    without times (lost, never sent) counts in the last.  Intervals run from the
    run's start in steps of ``interval_s``; the last ends at the run's last end,
    and its rate is over its own length.  ``p50_ms``/``p99_ms`` are nearest-rank
    percentiles of the latencies of the requests that succeeded in the interval
    (NaN when none did).  The gauges (``node_cpu_max``, ``loop_lag_ms_max``,
    ``master_cpu``) are NaN: the replayer's own load is not in the rows.
    """
    main = requests[~requests["auxiliary"].to_numpy(dtype=bool)]
    if main.empty:
        return empty_stats()
    end = main["end_s"].to_numpy(dtype=np.float64)
    last_end = float(np.nanmax(end)) if np.isfinite(end).any() else 0.0
    n_intervals = max(1, math.ceil(last_end / interval_s))
    idx = np.ceil(np.nan_to_num(end, nan=last_end) / interval_s).astype(np.int64) - 1
    idx = np.clip(idx, 0, n_intervals - 1)
    failed = ~main["ok"].to_numpy(dtype=bool)
    throttled = failed & (main["status"].to_numpy() == 429)
    elapsed = np.arange(1, n_intervals + 1, dtype=np.float64) * interval_s
    elapsed[-1] = max(last_end, elapsed[-2] if n_intervals > 1 else 0.0)
    lengths = np.diff(elapsed, prepend=0.0)
    counts = np.bincount(idx, minlength=n_intervals)
    frame = pd.DataFrame(
        {
            "elapsed_s": elapsed,
            "requests": counts.astype(np.int64),
            "failures": np.bincount(idx, weights=failed, minlength=n_intervals).astype(np.int64),
            "throttled": np.bincount(idx, weights=throttled, minlength=n_intervals).astype(np.int64),
            "bytes": np.bincount(idx, weights=main["bytes"].to_numpy(np.float64), minlength=n_intervals).astype(
                np.int64
            ),
            "rate_per_s": np.divide(counts, lengths, out=np.full(n_intervals, np.nan), where=lengths > 0),
        }
    )
    ok = ~failed & np.isfinite(main["latency_s"].to_numpy(dtype=np.float64))
    frame["p50_ms"], frame["p99_ms"] = (
        _nearest_rank(idx[ok], main["latency_s"].to_numpy(np.float64)[ok] * MS_PER_S, q, n_intervals)
        for q in (0.50, 0.99)
    )
    for name in STATS_GAUGES:  # the nodes' and the master's own load is not in requests.csv
        frame[name] = np.nan
    for name in STATS_TEXT:  # the run's events are not in requests.csv
        frame[name] = ""
    return frame[list(STATS_COLUMNS)]


def _nearest_rank(groups: np.ndarray, values: np.ndarray, q: float, n_groups: int) -> np.ndarray:
    """Per group 0…n_groups-1, the value at rank ceil(q·n) of its sorted values (NaN for an empty group)."""
    order = np.lexsort((values, groups))
    sizes = np.bincount(groups, minlength=n_groups)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    rank = np.maximum(np.ceil(q * sizes).astype(np.int64), 1) - 1
    out = np.full(n_groups, np.nan)
    has = sizes > 0
    out[has] = values[order][starts[has] + rank[has]]
    return out


def empty_stats() -> pd.DataFrame:
    """A stats history without intervals, typed like a full one."""
    return pd.DataFrame(
        {
            c: pd.Series(dtype=np.int64 if c in STATS_COUNTS else object if c in STATS_TEXT else np.float64)
            for c in STATS_COLUMNS
        }
    )
