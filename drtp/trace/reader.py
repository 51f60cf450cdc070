"""Streaming trace reader: the trace files of a run as one time-ordered stream of records.

Memory is bounded by a chunk (a few MB of input) plus the reorder window,
never by the trace.  :class:`TraceReader` picks each file's format reader
(:func:`detect_format`): IBM JSON arrays and JSON lines (drtp.trace.ibm_json),
registry access logs (drtp.trace.registry_log) or Parquet (drtp.trace.parquet).
Each reads its file in chunks (drtp.trace.input_files); a chunk is decoded in
one msgspec call, its URIs are checked with one regex over the whole chunk,
and it is sorted.  Files are merged by timestamp with a watermark
(drtp.trace.merge): records are released once every open file has read past
them (minus ``reorder_window`` seconds of tolerance for slightly unordered
logs).

Only when a chunk fails to decode does the reader fall back to decoding record
by record, to name the exact file and record index of the problem, and to
skip it when asked (``skip_bad``; drtp.trace.bad_records).

Every problem of the input is a one-line :class:`~drtp.errors.DrtpError`
naming the file and, where there is one, the record: a file that cannot be
read or decompressed, JSON nested too deeply, a record longer than
``MAX_RECORD_BYTES``, a value outside its range (drtp.trace.records), and a file
that holds no records at all.  A UTF-8 byte order mark is read past.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import gzip
import math
from collections.abc import Iterable, Iterator
from itertools import chain
from pathlib import Path

import msgspec

from drtp.errors import DrtpError
from drtp.outputs import replaced_on_success
from drtp.trace.bad_records import ReadStats, reject
from drtp.trace.formats import FORMATS
from drtp.trace.ibm_json import read_array, read_lines
from drtp.trace.input_files import check_input_file, read_blocks
from drtp.trace.merge import by_time, in_range, merge_by_time
from drtp.trace.records import TraceRecord
from drtp.trace.registry_log import read_registry_log

CHUNK_BYTES = 1 << 20


class TraceReader:
    """Reads one or more trace files as one time-ordered stream of records.

    ``limit_type`` is ``"requests"`` or ``"seconds"`` (the original config's
    ``trace.limit``); ``amount`` caps the number of records or the time span
    from the first record.  ``user_agent``: records keep the trace's user agent
    (:class:`~drtp.trace.records.AgentRecord`; IBM JSON, JSON lines and registry
    logs have one), for a replay that sends it; otherwise it is not decoded.
    """

    def __init__(
        self,
        paths: Iterable[str | Path],
        *,
        fmt: str = "auto",
        limit_type: str | None = None,
        amount: float | None = None,
        skip_bad: bool = False,
        reorder_window: float = 60.0,
        sort_files: bool = False,
        chunk_bytes: int = CHUNK_BYTES,
        user_agent: bool = False,
    ) -> None:
        self.paths = [Path(p) for p in paths]
        if not self.paths:
            raise DrtpError("no trace files given")
        for p in self.paths:
            check_input_file(p)
        if fmt not in FORMATS:
            raise DrtpError(f"unknown trace format {fmt!r} (choose from {', '.join(FORMATS)})")
        if limit_type not in (None, "requests", "seconds"):
            raise DrtpError(f"trace.limit.type must be 'requests' or 'seconds', not {limit_type!r}")
        if amount is not None and not _limit_ok(limit_type, amount):
            raise DrtpError(
                f"trace limit of {amount!r} {limit_type}: must be a whole number ≥ 1 of requests "
                "or a finite number ≥ 0 of seconds"
            )
        if not (isinstance(reorder_window, (int, float)) and 0 <= reorder_window <= 86_400 * 365):
            raise DrtpError(f"trace reorder window {reorder_window!r}: must be between 0 and a year (seconds)")
        if not (isinstance(chunk_bytes, int) and chunk_bytes > 0):
            raise DrtpError(f"trace chunk size {chunk_bytes!r}: must be a positive number of bytes")
        self.fmt = fmt
        self.limit_type = limit_type if amount is not None else None
        self.amount = amount
        self.skip_bad = skip_bad
        self.window = _dt.timedelta(seconds=reorder_window)
        self.sort_files = sort_files
        self.chunk_bytes = chunk_bytes
        self.user_agent = user_agent  # records with the trace's user agent (AgentRecord), where the format has it
        self.stats = ReadStats()

    def __iter__(self) -> Iterator[TraceRecord]:
        return chain.from_iterable(self.batches())

    def batches(self) -> Iterator[list[TraceRecord]]:
        """Time-ordered lists of records (a chunk at a time), limits applied."""
        self.stats = ReadStats()
        merged = merge_by_time([self._file_chunks(p) for p in self.paths], self.window, self.skip_bad, self.stats)
        remaining = int(self.amount) if self.limit_type == "requests" else None
        end: _dt.datetime | None = None
        for batch in merged:
            done = False
            if self.limit_type == "seconds":
                if end is None:
                    end = batch[0].timestamp + _dt.timedelta(seconds=float(self.amount or 0))
                cut = bisect.bisect_right(batch, end, key=by_time)
                done = cut < len(batch)
                batch = batch[:cut]
            elif remaining is not None:
                batch = batch[:remaining]
                remaining -= len(batch)
                done = remaining == 0
            if batch:
                self.stats.records += len(batch)
                yield batch
            if done:
                return
        if not self.stats.records:  # every file held records, yet all were skipped or out of range
            raise DrtpError(
                f"{', '.join(map(str, self.paths))}: no records ({self.stats.skipped:,} bad records skipped)"
            )

    # -- per file -------------------------------------------------------------

    def _file_chunks(self, path: Path) -> Iterator[tuple[Path, int, list[TraceRecord]]]:
        fmt = self.fmt if self.fmt != "auto" else detect_format(path)
        reader = {
            "ibm": read_array,
            "jsonl": read_lines,
            "registry-log": read_registry_log,
            "parquet": _read_parquet,
        }[fmt]
        args = (path, self.chunk_bytes, self.skip_bad, self.stats)
        # Parquet traces hold no user agent (drtp.trace.parquet): their records have none
        chunks = reader(*args, agent=True) if self.user_agent and fmt != "parquet" else reader(*args)
        chunks = _nonempty(path, fmt, chunks, self.stats)
        if not self.sort_files:
            yield from chunks
            return
        # an unordered file: hold this one file (not the trace) in memory and sort it
        records = [rec for _, base, chunk in chunks for rec in in_range(path, base, chunk, self.skip_bad, self.stats)]
        records.sort(key=by_time)
        step = 1 << 16
        for start in range(0, len(records), step):
            yield path, start, records[start : start + step]


def _limit_ok(limit_type: str | None, amount: float) -> bool:
    """A limit that selects something: at least one request, or a finite span of seconds (0: one instant)."""
    if isinstance(amount, bool) or not isinstance(amount, (int, float)):
        return False
    if limit_type == "requests":
        return amount >= 1 and float(amount).is_integer() and amount < math.inf
    return 0 <= amount < math.inf


def read_trace(paths: Iterable[str | Path], **kwargs) -> list[TraceRecord]:
    """The whole trace as a list (for small traces and tests)."""
    return list(TraceReader(paths, **kwargs))


def detect_format(path: Path) -> str:
    """``ibm`` for a JSON array, ``jsonl`` for IBM records one per line,
    ``registry-log`` for a Distribution registry's JSON log, ``parquet`` for a columnar cache."""
    if path.suffix == ".parquet":
        return "parquet"
    head = next(read_blocks(path, 64 << 10), b"")
    text = head.lstrip()
    if text.startswith(b"["):
        return "ibm"
    if text.startswith(b"{"):
        first = text.split(b"\n", 1)[0]
        if b'"msg"' in first and b'"time"' in first:
            return "registry-log"
        return "jsonl"
    if not text:
        return "ibm"  # an empty file: the reader says it holds no records
    raise DrtpError(f"{path}: not a trace (expected a JSON array or JSON lines)")


def completion_stamped(paths: Iterable[str | Path], fmt: str = "auto") -> bool:
    """Whether the timestamps of a trace's records are completion times (a registry's log), not arrivals."""
    return all((fmt if fmt != "auto" else detect_format(Path(p))) == "registry-log" for p in paths)


def _nonempty(path: Path, fmt: str, chunks, stats: ReadStats):
    """The file's chunks; a file that yields no record at all is an error, not an empty trace."""
    skipped, ignored = stats.skipped, stats.ignored
    n = 0
    for chunk in chunks:
        n += len(chunk[2])
        yield chunk
    if n:
        return
    why = []
    if stats.skipped > skipped:
        why.append(f"{stats.skipped - skipped:,} bad records skipped")
    if stats.ignored > ignored:
        why.append(f"{stats.ignored - ignored:,} requests that are not object requests")
    detail = f" ({'; '.join(why)})" if why else ""
    if fmt == "registry-log":
        raise DrtpError(f"no registry requests in {path}{detail}")
    raise DrtpError(f"{path}: no records{detail}")


def _read_parquet(path, chunk_bytes, skip_bad, stats):
    """Chunks of a Parquet trace (``drtp convert``); rows are checked like decoded records."""
    from drtp.trace.parquet import read_parquet

    def bad(index: int, reason: str) -> None:
        reject(path, index, reason, skip_bad, stats)

    for start, records in read_parquet(path, on_bad=bad):
        yield path, start, records


# -- writing ------------------------------------------------------------------------


def write_ibm(path: str | Path, records: Iterable[dict | TraceRecord]) -> int:
    """Write an IBM-format trace (a JSON array, one record per line); returns the count.

    ``.gz`` paths are compressed. Records are written as they come (streaming).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    encode = msgspec.json.Encoder().encode
    n = 0
    opener = gzip.open if path.suffix == ".gz" else open
    with replaced_on_success(path) as tmp, opener(tmp, "wb") as f:
        f.write(b"[")
        for rec in records:
            f.write(b"\n" if n == 0 else b",\n")
            f.write(encode(rec.to_ibm() if isinstance(rec, TraceRecord) else rec))
            n += 1
        f.write(b"\n]\n")
    return n
