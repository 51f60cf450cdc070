"""Parquet traces: a columnar cache of a trace for repeated runs and analysis.

A converted trace holds the record fields plus the URI's parts as
:func:`~drtp.trace.records.parse_uri` splits it (``repository``, ``kind``,
``reference``), sorted by time, in row groups of 64 k records, so it is written
and read as a stream.  ``useragent`` is not kept (only a run replaying the
trace's user agents reads it; from a Parquet trace it sends its profile's).
It is read back as records (:func:`read_parquet`, for TraceReader) or
straight into the trace's columns (:func:`add_parquet`, no records built).

A Parquet file is input like any trace: its types and every row are checked
against the same ranges and grammar as decoded records (vectorised per row
group, the URIs by one regex per batch), and whatever pyarrow cannot read is
one DrtpError naming the file.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from drtp.errors import DrtpError, TraceError
from drtp.outputs import replaced_on_success
from drtp.trace.records import (
    MAX_DURATION_S,
    MAX_SIZE,
    MAX_STATUS,
    MAX_TIME,
    METHODS,
    MIN_STATUS,
    MIN_TIME,
    TraceRecord,
    parse_uri,
    uri_error,
    uris_valid,
)

if TYPE_CHECKING:  # reading records needs no pandas: the columns module is imported by its users
    from drtp.trace.columns import ColumnBuilder

_text = pa.dictionary(pa.int32(), pa.string())
SCHEMA = pa.schema(
    [
        ("host", _text),
        ("duration", pa.float64()),
        ("method", _text),
        ("client", _text),
        ("uri", pa.string()),
        ("status", pa.int32()),
        ("size", pa.int64()),
        ("id", pa.string()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("repository", _text),
        ("kind", _text),
        ("reference", pa.string()),
    ]
)
FIELDS = ("host", "duration", "method", "client", "uri", "status", "size", "id", "timestamp")
ROW_GROUP = 1 << 16


def _table(records: list[TraceRecord]) -> pa.Table:
    parts = [parse_uri(r.uri) for r in records]
    columns = {f: [getattr(r, f) for r in records] for f in FIELDS}
    columns["repository"] = [p.repository for p in parts]
    columns["kind"] = [p.kind for p in parts]
    columns["reference"] = [p.reference for p in parts]
    return pa.Table.from_pydict(columns, schema=SCHEMA)


def write_parquet(path: str | Path, batches: Iterable[list[TraceRecord]]) -> int:
    """Write time-ordered batches of records to a Parquet file; returns the record count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    pending: list[TraceRecord] = []
    with replaced_on_success(path) as tmp, pq.ParquetWriter(tmp, SCHEMA, compression="zstd") as writer:
        for batch in batches:
            pending.extend(batch)
            while len(pending) >= ROW_GROUP:
                writer.write_table(_table(pending[:ROW_GROUP]))
                n += ROW_GROUP
                del pending[:ROW_GROUP]
        if pending:
            writer.write_table(_table(pending))
            n += len(pending)
    return n


OnBad = Callable[[int, str], None]


def read_parquet(
    path: Path, batch_size: int = ROW_GROUP, on_bad: OnBad | None = None
) -> Iterator[tuple[int, list[TraceRecord]]]:
    """(index of the batch's first row, its records) of a Parquet trace, in file order.

    Rows outside the ranges of a record go to ``on_bad(index, reason)`` and are
    dropped; without ``on_bad`` the first one raises a TraceError.
    """
    for start, batch, uris in checked_batches(path, list(FIELDS), batch_size, on_bad):
        if batch.num_rows:  # a batch whose every row was bad and skipped yields nothing
            cols = [uris if f == "uri" else _pylist(batch.column(f)) for f in FIELDS]
            yield start, [TraceRecord(*row) for row in zip(*cols, strict=True)]


def add_parquet(builder: ColumnBuilder, path: Path, on_bad: OnBad | None = None) -> None:
    """Add the rows of a Parquet trace to ``builder`` a row group at a time, each checked like a decoded record."""
    wanted = ["timestamp", "duration", "method", "status", "size", "client", "host", "uri"]
    for _, batch, uris in checked_batches(path, wanted + (["id"] if builder.with_ids else []), ROW_GROUP, on_bad):
        builder.add_arrow(batch, uris)


def checked_batches(
    path: Path, columns: list[str], batch_size: int = ROW_GROUP, on_bad: OnBad | None = None
) -> Iterator[tuple[int, pa.RecordBatch, list[str]]]:
    """(first row's index, batch, its URIs) of a Parquet trace, each row checked like a decoded record."""
    if on_bad is None:

        def on_bad(index: int, reason: str) -> None:
            raise TraceError(str(path), index, reason)

    try:
        pf = pq.ParquetFile(path)
        problem = _schema_problem(pf.schema_arrow, columns)
        if problem:
            raise DrtpError(f"{path}: not a drtp Parquet trace ({problem})")
        start = 0
        for batch in pf.iter_batches(batch_size=batch_size, columns=columns):
            rows = batch.num_rows
            uris = _pylist(batch.column("uri")) if "uri" in columns else []
            checks = _row_checks(batch, uris)
            if checks:
                bad = np.logical_or.reduce([mask for mask, _ in checks])
                for i in np.flatnonzero(bad).tolist():
                    on_bad(start + i, next(why(i) for mask, why in checks if mask[i]))
                batch = batch.filter(pa.array(~bad))
                uris = [u for u, b in zip(uris, bad.tolist(), strict=True) if not b] if uris else uris
            yield start, batch, uris
            start += rows
    except (pa.ArrowException, OSError, ValueError, KeyError) as e:  # pyarrow's errors derive from these
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DrtpError(f"{path}: not a drtp Parquet trace ({detail})") from None


_KINDS_OF_TYPE = {
    "size": ("an integer", pa.types.is_integer),
    "status": ("an integer", pa.types.is_integer),
    "duration": ("a number", lambda t: pa.types.is_floating(t) or pa.types.is_integer(t)),
    "timestamp": ("a timestamp", pa.types.is_timestamp),
}


def _schema_problem(schema: pa.Schema, columns: list[str]) -> str | None:
    """What is wrong with the file's columns for a trace (missing, or of another type); None when fine."""
    for name in columns:
        if name not in schema.names:
            return f"no column {name!r}"
        kind = schema.field(name).type
        if pa.types.is_dictionary(kind):
            kind = kind.value_type
        what, fits = _KINDS_OF_TYPE.get(name, ("text", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)))
        if not fits(kind):
            return f"column {name!r} is {kind}, not {what}"
    return None


_MIN_US = int(MIN_TIME.timestamp() * 1_000_000)
_MAX_US = int(MAX_TIME.timestamp() * 1_000_000)


def _row_checks(batch: pa.RecordBatch, uris: list[str]) -> list[tuple[np.ndarray, Callable[[int], str]]]:
    """(rows that fail, why row i fails) for each check that some row of the batch fails.

    Whole columns are compared at once; only a failing check names its rows.
    """
    checks: list[tuple[np.ndarray, Callable[[int], str]]] = []
    names = batch.schema.names

    def add(mask: np.ndarray, why: Callable[[int], str]) -> None:
        if mask.any():
            checks.append((mask, why))

    for name in names:
        column = batch.column(name)
        if column.null_count:
            add(pc.is_null(column).to_numpy(zero_copy_only=False), lambda i, name=name: f"{name} is missing (null)")

    def numbers(name: str) -> np.ndarray:
        return batch.column(name).to_numpy(zero_copy_only=False)

    ranges = (("size", 0, MAX_SIZE, "size (http.response.written)"), ("duration", 0, MAX_DURATION_S, "duration"))
    ranges += (("status", MIN_STATUS, MAX_STATUS, "status"),)
    for name, lo, hi, label in ranges:
        if name in names:
            v = numbers(name)
            with np.errstate(invalid="ignore"):
                add(
                    ~((v >= lo) & (v <= hi)),
                    lambda i, v=v, lo=lo, hi=hi, label=label: f"{label} {v[i].item()!r} outside {lo}..{hi}",
                )
    if "timestamp" in names:
        us = (
            batch.column("timestamp").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy(zero_copy_only=False)
        )
        with np.errstate(invalid="ignore"):
            add(
                ~((us >= _MIN_US) & (us < _MAX_US)),
                lambda i: f"timestamp outside {MIN_TIME.year}..{MAX_TIME.year - 1}",
            )
    if "method" in names:
        column = batch.column("method")
        if pa.types.is_dictionary(column.type):
            # rows hold the dictionary's values: when those are all known methods, so is every row
            if set(column.dictionary.to_pylist()) <= set(METHODS):
                column = None
            else:
                column = column.dictionary_decode()
        if column is not None:
            known = pc.is_in(column, value_set=pa.array(METHODS)).to_numpy(zero_copy_only=False)
            add(~known, lambda i, column=column: f"unknown method {column[i].as_py()!r}")
    if uris and not _uris_valid(batch.column("uri"), uris):
        problems = [uri_error(u) if isinstance(u, str) else "uri is missing (null)" for u in uris]
        add(np.array([p is not None for p in problems]), lambda i: problems[i])
    return checks


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def _uris_valid(column: pa.Array, uris: list[str]) -> bool:
    """True when every URI of the batch is valid; a dictionary column is checked by its distinct values.

    Every row of a dictionary column holds one of the dictionary's values (or
    null, checked apart), so a valid dictionary makes every row valid; an
    invalid value, even an unused one, sends the caller to its row-by-row check.
    """
    if pa.types.is_dictionary(column.type):
        values = [v for v in column.dictionary.to_pylist() if v is not None]
        if uris_valid(values):
            return True
    return not column.null_count and uris_valid(uris)  # a null row goes to the row-by-row check


def _pylist(arr: pa.Array) -> list:
    """A column as Python values, by the fast path where there is one.

    Arrow's own to_pylist builds a string per row of a dictionary column and a
    zoneinfo datetime per timestamp (≈1 µs and ≈2.5 µs a row); indexing the
    dictionary's few values and adding microseconds to the epoch cost ≈0.02 and
    ≈0.6 µs (the same values: tests/test_trace_reader.py).
    """
    if arr.null_count:
        return arr.to_pylist()
    if pa.types.is_dictionary(arr.type):
        values = arr.dictionary.to_pylist()
        return [values[i] for i in arr.indices.to_numpy().tolist()]
    if pa.types.is_timestamp(arr.type):
        micros = arr.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy().tolist()
        return [_EPOCH + _dt.timedelta(microseconds=us) for us in micros]
    return arr.to_pylist()


def read_columns(paths: Iterable[str | Path], columns: list[str] | None = None) -> pa.Table:
    """The trace as one Arrow table (columns only), e.g. for pandas: ``read_columns(p).to_pandas()``."""
    return pa.concat_tables(pq.read_table(p, columns=columns) for p in paths)
