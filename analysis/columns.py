"""A trace as columns: the form every characterization computation works on.

Records come from :class:`drtp.trace.reader.TraceReader` a batch at a time; each
batch is turned into numpy arrays at once and its strings (clients, hosts,
repositories, objects) into integer codes against dictionaries that grow with
the trace, so memory holds a few numbers per record and one copy of each
distinct name, never the records themselves.  URIs are split once per
distinct URI of a batch, not once per record.

Columns of the resulting :class:`pandas.DataFrame` (one row per request, in
time order):

``time`` (s since the epoch), ``duration`` (s), ``method``, ``kind``
('manifest' | 'blob'), ``client``, ``host``, ``repository``, ``user`` (first
path component of the repository), ``object`` (layer digest, or
``repository:tag`` for manifests; missing for blob uploads without a digest),
``upload`` (blob upload URL), ``status``, ``size`` (bytes written); and on
request ``id`` (the trace's request id).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from functools import lru_cache
from operator import attrgetter
from pathlib import Path

import numpy as np
import pandas as pd

from drtp.errors import DrtpError, TraceError
from drtp.trace.reader import TraceReader
from drtp.trace.records import KINDS, METHODS, TraceRecord, parse_uri

COLUMNS = (
    "time",
    "duration",
    "method",
    "kind",
    "client",
    "host",
    "repository",
    "user",
    "object",
    "upload",
    "status",
    "size",
)
_METHOD_CODE = {m: i for i, m in enumerate(METHODS)}
_epoch = _dt.datetime.timestamp
_get = {
    name: attrgetter(name) for name in ("timestamp", "duration", "method", "status", "size", "client", "host", "uri")
}


def _column(batch: list[TraceRecord], name: str, dtype) -> np.ndarray:
    return np.fromiter(map(_get[name], batch), dtype=dtype, count=len(batch))


def _strings(batch: list[TraceRecord], name: str) -> np.ndarray:
    return np.array(list(map(_get[name], batch)), dtype=object)


class _Names:
    """Maps strings to dense integer codes, one dictionary for the whole trace."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    def encode(self, values: list[str] | np.ndarray) -> np.ndarray:
        local, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
        table = self.codes
        mapping = np.fromiter((table.setdefault(u, len(table)) for u in uniques), dtype=np.int32, count=len(uniques))
        out = np.full(len(local), -1, dtype=np.int32)
        ok = local >= 0
        out[ok] = mapping[local[ok]]
        return out

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        return pd.Categorical.from_codes(codes, categories=pd.Index(list(self.codes), dtype=object))


@lru_cache(maxsize=1 << 18)
def _uri_parts(uri: str) -> tuple[str, int, str | None, bool]:
    """(repository, kind code, object key, upload) for one URI."""
    parts = parse_uri(uri)
    if parts is None:  # the reader only yields parseable URIs; hand-made frames may not
        return "", 1, None, False
    kind = 0 if parts.kind == "manifest" else 1
    if kind == 0:
        return parts.repository, 0, f"{parts.repository}:{parts.reference}", False
    if parts.reference.startswith("uploads/"):
        query = uri.partition("?")[2]
        if not query:
            return parts.repository, 1, None, True
        digest = next((v for k, _, v in (p.partition("=") for p in query.split("&")) if k == "digest" and v), None)
        return parts.repository, 1, digest, True
    return parts.repository, 1, parts.reference, False


class ColumnBuilder:
    """Accumulates record batches as column chunks; :meth:`frame` joins them."""

    def __init__(self, with_ids: bool = False) -> None:
        self.with_ids = with_ids
        self.clients = _Names()
        self.hosts = _Names()
        self.repos = _Names()
        self.objects = _Names()
        self.chunks: list[dict[str, np.ndarray]] = []

    def _uri_columns(self, uris: np.ndarray) -> dict[str, np.ndarray]:
        """repository, kind, object, upload of each URI; each distinct URI of the chunk is split once."""
        uri_codes, uniques = pd.factorize(uris)
        parts = [_uri_parts(u) for u in uniques]
        repo_u = self.repos.encode([p[0] for p in parts])
        kind_u = np.fromiter((p[1] for p in parts), dtype=np.int8, count=len(parts))
        obj_u = self.objects.encode(np.array([p[2] for p in parts], dtype=object))
        upload_u = np.fromiter((p[3] for p in parts), dtype=bool, count=len(parts))
        return {
            "repository": repo_u[uri_codes],
            "kind": kind_u[uri_codes],
            "object": obj_u[uri_codes],
            "upload": upload_u[uri_codes],
        }

    def add(self, batch: list[TraceRecord]) -> None:
        """Add a batch of records (any trace format, through TraceReader)."""
        n = len(batch)
        chunk = {
            "time": np.fromiter(map(_epoch, map(_get["timestamp"], batch)), dtype=np.float64, count=n),
            "duration": _column(batch, "duration", np.float64),
            "method": np.fromiter(map(_METHOD_CODE.__getitem__, map(_get["method"], batch)), np.int8, count=n),
            "status": _column(batch, "status", np.int16),
            "size": _column(batch, "size", np.int64),
            "client": self.clients.encode(_strings(batch, "client")),
            "host": self.hosts.encode(_strings(batch, "host")),
        }
        if self.with_ids:
            chunk["id"] = np.array([r.id for r in batch], dtype=object)
        chunk.update(self._uri_columns(_strings(batch, "uri")))
        self.chunks.append(chunk)

    def add_arrow(self, batch) -> None:
        """Add a record batch of a Parquet trace (:mod:`drtp.trace.columnar`): columns in, no records built."""
        import pyarrow as pa
        import pyarrow.compute as pc

        def text(name: str) -> np.ndarray:
            column = batch.column(name)
            if pa.types.is_dictionary(column.type):
                column = column.dictionary_decode()
            return column.to_numpy(zero_copy_only=False)

        stamps = batch.column("timestamp").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        methods = pd.Categorical(text("method"), categories=list(METHODS))
        if (methods.codes < 0).any():
            raise DrtpError(f"unknown HTTP method in Parquet trace: {sorted(set(text('method')) - set(METHODS))}")
        chunk = {
            "time": stamps.to_numpy() / 1e6,
            "duration": pc.cast(batch.column("duration"), pa.float64()).to_numpy(),
            "method": methods.codes.astype(np.int8),
            "status": pc.cast(batch.column("status"), pa.int16()).to_numpy(),
            "size": pc.cast(batch.column("size"), pa.int64()).to_numpy(),
            "client": self.clients.encode(text("client")),
            "host": self.hosts.encode(text("host")),
        }
        if self.with_ids:
            chunk["id"] = text("id").astype(object)
        chunk.update(self._uri_columns(text("uri").astype(object)))
        self.chunks.append(chunk)

    def frame(self) -> pd.DataFrame:
        def col(name: str, dtype) -> np.ndarray:
            """One whole column; its chunks are released as it is built (peak ≈ one copy)."""
            if not self.chunks:
                return np.empty(0, dtype=dtype)
            return np.concatenate([c.pop(name) for c in self.chunks])

        repo_codes = col("repository", np.int32)
        repo_names = list(self.repos.codes)
        users = _Names()
        user_of_repo = users.encode([r.split("/", 1)[0] for r in repo_names]) if repo_names else np.empty(0, np.int32)
        df = pd.DataFrame(
            {
                "time": col("time", np.float64),
                "duration": col("duration", np.float64),
                "method": pd.Categorical.from_codes(col("method", np.int8), categories=list(METHODS)),
                "kind": pd.Categorical.from_codes(col("kind", np.int8), categories=list(KINDS)),
                "client": self.clients.categorical(col("client", np.int32)),
                "host": self.hosts.categorical(col("host", np.int32)),
                "repository": self.repos.categorical(repo_codes),
                "user": users.categorical(user_of_repo[repo_codes] if len(repo_codes) else repo_codes),
                "object": self.objects.categorical(col("object", np.int32)),
                "upload": col("upload", bool),
                "status": col("status", np.int16),
                "size": col("size", np.int64),
            },
            copy=False,
        )
        if self.with_ids:
            df["id"] = col("id", object)
        self.chunks = []
        return df


def frame_from_batches(batches: Iterable[list[TraceRecord]], with_ids: bool = False) -> pd.DataFrame:
    """Columns of a stream of record batches (see the module docstring); ``with_ids`` adds the
    request ids as an ``id`` column (to match replay results to trace records)."""
    builder = ColumnBuilder(with_ids)
    for batch in batches:
        builder.add(batch)
    return builder.frame()


def load_trace(
    paths: Iterable[str | Path], with_ids: bool = False, progress_desc: str | None = None, **reader_options
) -> pd.DataFrame:
    """Read trace files (merged in time order) into columns; options go to TraceReader.

    Parquet traces (``drtp convert``) are read column by column, without
    building records; every other format goes through TraceReader.
    ``progress_desc`` shows a progress bar (records read) on a terminal.
    """
    paths = [Path(p) for p in paths]
    if _all_parquet(paths, reader_options.get("fmt", "auto")):
        return load_parquet(paths, with_ids, **reader_options)
    batches = TraceReader(paths, **reader_options).batches()
    if progress_desc is None:
        return frame_from_batches(batches, with_ids)
    from drtp.progress import progress

    with progress(total=None, desc=progress_desc, unit="rec") as bar:
        return frame_from_batches(_counted(batches, bar), with_ids)


def _all_parquet(paths: list[Path], fmt: str) -> bool:
    if fmt == "parquet":
        return True
    return fmt == "auto" and bool(paths) and all(p.suffix == ".parquet" for p in paths)


def load_parquet(
    paths: list[Path],
    with_ids: bool = False,
    *,
    limit_type: str | None = None,
    amount: float | None = None,
    fmt: str = "parquet",
    skip_bad: bool = False,
    **_ignored,
) -> pd.DataFrame:
    """Columns of Parquet traces, a row group at a time; files are merged by time and the
    ``requests``/``seconds`` limits applied like TraceReader applies them."""

    from drtp.trace.columnar import checked_batches
    from drtp.trace.reader import check_input_file

    for p in paths:
        check_input_file(p)
    builder = ColumnBuilder(with_ids)
    wanted = ["timestamp", "duration", "method", "status", "size", "client", "host", "uri"] + (
        ["id"] if with_ids else []
    )
    skipped = 0
    for p in paths:

        def bad(index: int, reason: str, p: Path = p) -> None:
            nonlocal skipped
            if not skip_bad:
                raise TraceError(str(p), index, reason)
            skipped += 1

        for _, batch, _ in checked_batches(p, wanted, 1 << 16, bad):
            builder.add_arrow(batch)
    df = builder.frame()
    if df.empty:
        note = f" ({skipped:,} bad records skipped)" if skipped else ""
        raise DrtpError(f"{', '.join(map(str, paths))}: no records{note}")
    if not df["time"].is_monotonic_increasing:
        df = df.iloc[np.argsort(df["time"].to_numpy(), kind="stable")].reset_index(drop=True)
    if amount is not None and limit_type == "requests":
        df = df.iloc[: int(amount)]
    elif amount is not None and limit_type == "seconds" and len(df):
        df = df[df["time"] <= df["time"].iloc[0] + float(amount)]
    return df


def _counted(batches, bar):
    for batch in batches:
        bar.update(len(batch))
        yield batch


def frame_from_records(records: Iterable[TraceRecord]) -> pd.DataFrame:
    """Columns of hand-made records (tests, notebooks); they are sorted by time first."""
    ordered = sorted(records, key=lambda r: r.timestamp)
    return frame_from_batches([ordered] if ordered else [])
