"""Parquet traces: a columnar cache of a trace for repeated runs and analysis.

A converted trace holds the record fields plus the parsed URI parts
(``repository``, ``kind``, ``reference``), sorted by time, in row groups of
64 k records, so it is written and read as a stream.  ``useragent`` is not
kept (drtp's records do not carry it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from drtp.records import TraceRecord, parse_uri

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
    with pq.ParquetWriter(path, SCHEMA, compression="zstd") as writer:
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


def read_parquet(path: Path, batch_size: int = ROW_GROUP) -> Iterator[list[TraceRecord]]:
    """Batches of TraceRecords from a Parquet trace, in file order."""
    for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size, columns=list(FIELDS)):
        cols = [batch.column(f).to_pylist() for f in FIELDS]
        yield [TraceRecord(*row) for row in zip(*cols, strict=True)]


def read_columns(paths: Iterable[str | Path], columns: list[str] | None = None) -> pa.Table:
    """The trace as one Arrow table (columns only), e.g. for pandas: ``read_columns(p).to_pandas()``."""
    return pa.concat_tables(pq.read_table(p, columns=columns) for p in paths)
