"""A trace as a pandas frame: the form every characterization computation works on.

The frame is a view of :class:`drtp.trace.columns.TraceColumns` (the trace as
numpy columns with interned strings), its codes turned into categoricals, so
memory holds a few numbers per record and one copy of each distinct name.

Columns (one row per request, in time order):

``time`` (s since the epoch), ``duration`` (s), ``method``, ``kind``
('manifest' | 'blob'), ``client``, ``host``, ``repository``, ``user`` (first
path component of the repository), ``object`` (layer digest, or
``repository:tag`` for manifests; missing for requests to a blob upload
session, except the PUT that completes it with ``?digest=``), ``upload`` (blob
upload URL), ``status``, ``size`` (bytes written); and on request ``id`` (the
trace's request id).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from drtp.errors import DrtpError, TraceError
from drtp.trace.columns import MANIFEST, UPLOAD, ColumnBuilder, Names, TraceColumns
from drtp.trace.reader import TraceReader, check_input_file
from drtp.trace.records import KINDS, METHODS, TraceRecord


def _categorical(codes: np.ndarray, names: list[str]) -> pd.Categorical:
    return pd.Categorical.from_codes(codes, categories=pd.Index(names, dtype=object))


def frame_of(columns: TraceColumns) -> pd.DataFrame:
    """The frame of a trace's columns (see the module docstring); arrays are shared, not copied, where they can be."""
    users = Names()
    user_of_repo = users.encode([r.split("/", 1)[0] for r in columns.repositories])
    repo = columns.repo
    sessions = columns.kind == UPLOAD  # an upload session is not an object of the registry
    objects = _categorical(np.where(sessions, -1, columns.obj) if sessions.any() else columns.obj, columns.objects)
    if sessions.any():
        objects = objects.remove_unused_categories()
    kind = np.where(columns.kind == MANIFEST, KINDS.index("manifest"), KINDS.index("blob")).astype(np.int8)
    df = pd.DataFrame(
        {
            "time": columns.time,
            "duration": columns.duration,
            "method": pd.Categorical.from_codes(columns.method, categories=list(METHODS)),
            "kind": pd.Categorical.from_codes(kind, categories=list(KINDS)),
            "client": _categorical(columns.client, columns.clients),
            "host": _categorical(columns.host, columns.hosts),
            "repository": _categorical(repo, columns.repositories),
            "user": _categorical(user_of_repo[repo], users.names()),
            "object": objects,
            "upload": columns.upload,
            "status": columns.status,
            "size": columns.size,
        },
        copy=False,
    )
    if columns.id is not None:
        df["id"] = columns.id
    return df


def frame_from_batches(batches: Iterable[list[TraceRecord]], with_ids: bool = False) -> pd.DataFrame:
    """Frame of a stream of record batches; ``with_ids`` adds the request ids as an ``id``
    column (to match replay results to trace records)."""
    return frame_of(TraceColumns.from_batches(batches, with_ids))


def frame_from_records(records: Iterable[TraceRecord]) -> pd.DataFrame:
    """Frame of hand-made records (tests, notebooks); they are sorted by time first."""
    return frame_of(TraceColumns.from_records(records))


def load_trace(
    paths: Iterable[str | Path], with_ids: bool = False, progress_desc: str | None = None, **reader_options
) -> pd.DataFrame:
    """Read trace files (merged in time order) into a frame; options go to TraceReader.

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
    """Frame of Parquet traces, a row group at a time; files are merged by time and the
    ``requests``/``seconds`` limits applied like TraceReader applies them."""
    from drtp.trace.parquet import add_parquet  # pyarrow is imported only for Parquet input

    for p in paths:
        check_input_file(p)
    builder = ColumnBuilder(with_ids)
    skipped = 0
    for p in paths:

        def bad(index: int, reason: str, p: Path = p) -> None:
            nonlocal skipped
            if not skip_bad:
                raise TraceError(str(p), index, reason)
            skipped += 1

        add_parquet(builder, p, bad)
    df = frame_of(builder.build())
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
