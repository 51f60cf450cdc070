"""Streaming trace reader: IBM JSON arrays, JSON lines and registry access logs.

Memory is bounded by a chunk (a few MB of input) plus the reorder window,
never by the trace.  Each file is read in chunks; a chunk is decoded in one
msgspec call into :class:`TraceRecord` structs (typed decoding in C), its URIs
are checked with one regex over the whole chunk, and it is sorted.  Files are
merged by timestamp with a watermark: records are released once every open
file has read past them (minus ``reorder_window`` seconds of tolerance for
slightly unordered logs).

Only when a chunk fails to decode does the reader fall back to decoding record
by record, to name the exact file and record index of the problem, and to
skip it when asked (``skip_bad``).
"""

from __future__ import annotations

import bisect
import datetime as _dt
import gzip
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from pathlib import Path

import msgspec

from drtp.errors import DrtpError, TraceError
from drtp.outputs import replaced_on_success
from drtp.records import IBM_URI_LINES, URI_LINES, TraceRecord, parse_uri

FORMATS = ("auto", "ibm", "jsonl", "registry-log", "parquet")
CHUNK_BYTES = 1 << 20
_by_time = attrgetter("timestamp")
_RECORD_GAP = re.compile(rb"\}\s*,\s*\{")


@dataclass
class ReadStats:
    """What a read saw besides the records it returned."""

    records: int = 0  # records emitted
    skipped: int = 0  # malformed records dropped under skip_bad
    ignored: int = 0  # well-formed lines that are not object requests (registry logs)
    problems: list[str] = field(default_factory=list)  # first few skipped-record messages

    def skip(self, message: str) -> None:
        self.skipped += 1
        if len(self.problems) < 20:
            self.problems.append(message)


class TraceReader:
    """Reads one or more trace files as one time-ordered stream of records.

    ``limit_type`` is ``"requests"`` or ``"seconds"`` (the original config's
    ``trace.limit``); ``amount`` caps the number of records or the time span
    from the first record.
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
    ) -> None:
        self.paths = [Path(p) for p in paths]
        if not self.paths:
            raise DrtpError("no trace files given")
        for p in self.paths:
            if not p.is_file():
                raise DrtpError(f"{p}: trace file not found")
        if fmt not in FORMATS:
            raise DrtpError(f"unknown trace format {fmt!r} (choose from {', '.join(FORMATS)})")
        if limit_type not in (None, "requests", "seconds"):
            raise DrtpError(f"trace.limit.type must be 'requests' or 'seconds', not {limit_type!r}")
        self.fmt = fmt
        self.limit_type = limit_type if amount is not None else None
        self.amount = amount
        self.skip_bad = skip_bad
        self.window = _dt.timedelta(seconds=reorder_window)
        self.sort_files = sort_files
        self.chunk_bytes = chunk_bytes
        self.stats = ReadStats()

    def __iter__(self) -> Iterator[TraceRecord]:
        return chain.from_iterable(self.batches())

    def batches(self) -> Iterator[list[TraceRecord]]:
        """Time-ordered lists of records (a chunk at a time), limits applied."""
        self.stats = ReadStats()
        merged = _merge([self._file_chunks(p) for p in self.paths], self.window, self.skip_bad, self.stats)
        remaining = int(self.amount) if self.limit_type == "requests" else None
        end: _dt.datetime | None = None
        for batch in merged:
            done = False
            if self.limit_type == "seconds":
                if end is None:
                    end = batch[0].timestamp + _dt.timedelta(seconds=float(self.amount or 0))
                cut = bisect.bisect_right(batch, end, key=_by_time)
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

    # -- per file -------------------------------------------------------------

    def _file_chunks(self, path: Path) -> Iterator[tuple[Path, int, list[TraceRecord]]]:
        fmt = self.fmt if self.fmt != "auto" else detect_format(path)
        reader = {
            "ibm": _read_array,
            "jsonl": _read_lines,
            "registry-log": _read_registry_log,
            "parquet": _read_parquet,
        }[fmt]
        chunks = reader(path, self.chunk_bytes, self.skip_bad, self.stats)
        if not self.sort_files:
            yield from chunks
            return
        # an unordered file: hold this one file (not the trace) in memory and sort it
        records = [rec for _, _, chunk in chunks for rec in chunk]
        records.sort(key=_by_time)
        step = 1 << 16
        for start in range(0, len(records), step):
            yield path, start, records[start : start + step]


def read_trace(paths: Iterable[str | Path], **kwargs) -> list[TraceRecord]:
    """The whole trace as a list (for small traces and tests)."""
    return list(TraceReader(paths, **kwargs))


def open_binary(path: Path):
    """Open a trace file for reading bytes; ``.gz`` files are decompressed."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def detect_format(path: Path) -> str:
    """``ibm`` for a JSON array, ``jsonl`` for IBM records one per line,
    ``registry-log`` for a Distribution registry's JSON log, ``parquet`` for a columnar cache."""
    if path.suffix == ".parquet":
        return "parquet"
    with open_binary(path) as f:
        head = f.read(64 << 10)
    text = head.lstrip()
    if text.startswith(b"["):
        return "ibm"
    if text.startswith(b"{"):
        first = text.split(b"\n", 1)[0]
        if b'"msg"' in first and b'"time"' in first:
            return "registry-log"
        return "jsonl"
    if not text:
        return "ibm"  # an empty file is an empty trace
    raise DrtpError(f"{path}: not a trace (expected a JSON array or JSON lines)")


# -- IBM JSON arrays ------------------------------------------------------------

_chunk_decoder = msgspec.json.Decoder(list[TraceRecord])
_one_decoder = msgspec.json.Decoder(TraceRecord)


def _check_uris(records: list[TraceRecord]) -> bool:
    """True when every URI has a known shape (both patterns accept only what parse_uri accepts)."""
    text = "\n".join([r.uri for r in records]) + "\n"
    return IBM_URI_LINES.fullmatch(text) is not None or URI_LINES.fullmatch(text) is not None


_LEAD = re.compile(rb"[\s,]*")


def _read_array(path, chunk_bytes, skip_bad, stats):
    """Chunks of an IBM trace file (one JSON array of records).

    Each chunk is cut after its last ``}`` and decoded in one call; copies of
    the chunk are kept to one (the bracketed decode input), which matters at
    a million records a second.
    """
    index = 0
    leftover = b""
    started = False
    with open_binary(path) as f:
        while True:
            data = f.read(chunk_bytes)
            eof = not data
            buf = leftover + data if leftover else data
            if not started:
                buf = buf.lstrip()
                if not buf and not eof:
                    continue
                if eof and not buf:
                    return
                if not buf.startswith(b"["):
                    raise TraceError(str(path), 0, "not a JSON array of records")
                buf = buf[1:]
                started = True
            if eof:
                buf = buf.rstrip()
                if not buf.endswith(b"]"):
                    raise TraceError(str(path), index, "truncated JSON: the array is not closed with ']'")
                cut, leftover = len(buf) - 1, b""
            else:
                cut = buf.rfind(b"}") + 1
                leftover = buf[cut:]
            lead = _LEAD.match(buf, 0, cut).end()
            body = memoryview(buf)[lead:cut].toreadonly()
            if body:
                try:
                    records = _chunk_decoder.decode(b"".join((b"[", body, b"]")))
                    if not _check_uris(records):
                        raise ValueError
                    next_index = index + len(records)
                except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
                    records, rest, next_index = _array_slow(path, bytes(body), index, eof, skip_bad, stats)
                    leftover = rest + leftover
                    if len(leftover) > max(8 * chunk_bytes, 1 << 20):
                        # no record is this long: the JSON is broken here, not cut by the chunk
                        more, _, next_index = _array_slow(path, leftover, next_index, True, skip_bad, stats)
                        records += more
                        leftover = b""
                if records:
                    yield path, index, records
                index = next_index
            if eof:
                return


def _array_slow(path, body: bytes, index: int, final: bool, skip_bad: bool, stats: ReadStats):
    """Decode record by record; returns (records, bytes not yet complete, next record index)."""
    text = body.decode("utf-8", errors="replace")
    scanner = json.JSONDecoder()
    records: list[TraceRecord] = []
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= n:
            return records, b"", index
        try:
            _, end = scanner.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            if not final:  # the chunk may end inside this record: read on
                return records, text[pos:].encode(), index
            _bad(path, index, f"invalid JSON ({e.msg})", skip_bad, stats)
            index += 1
            nxt = _RECORD_GAP.search(body, len(text[:pos].encode()))  # resynchronise (skip_bad only)
            if nxt is None:
                return records, b"", index
            pos = len(body[: nxt.start() + 1].decode("utf-8", errors="replace"))
            continue
        record = _validate(path, index, text[pos:end].encode(), _one_decoder, skip_bad, stats)
        if record is not None:
            records.append(record)
        index += 1
        pos = end


def _validate(path, index, raw: bytes, decoder, skip_bad, stats):
    try:
        record = decoder.decode(raw)
    except msgspec.ValidationError as e:  # a subclass of DecodeError: test it first
        return _bad(path, index, _explain(e), skip_bad, stats)
    except msgspec.DecodeError as e:
        return _bad(path, index, f"invalid JSON ({e})", skip_bad, stats)
    if isinstance(record, TraceRecord) and parse_uri(record.uri) is None:
        return _bad(path, index, f"unknown URI shape {record.uri!r}", skip_bad, stats)
    return record


def _explain(e: msgspec.ValidationError) -> str:
    msg = str(e).replace("`$.", "`").replace(" - at `$`", "")
    return msg.replace("Object missing required field", "missing field")


def _bad(path, index: int, reason: str, skip_bad: bool, stats: ReadStats) -> None:
    err = TraceError(str(path), index, reason)
    if not skip_bad:
        raise err
    stats.skip(str(err))
    return None


# -- JSON lines -----------------------------------------------------------------


def line_chunks(path, chunk_bytes) -> Iterator[tuple[int, bytes]]:
    """(number of the chunk's first line, whole lines) for a JSON-lines file."""
    line = 0
    leftover = b""
    with open_binary(path) as f:
        while True:
            data = f.read(chunk_bytes)
            buf = leftover + data
            if not data:
                if buf.strip():
                    yield line, buf
                return
            cut = buf.rfind(b"\n")
            if cut < 0:
                leftover = buf
                continue
            body, leftover = buf[: cut + 1], buf[cut + 1 :]
            yield line, body
            line += body.count(b"\n")


def _read_lines(path, chunk_bytes, skip_bad, stats):
    """Chunks of IBM records written one JSON object per line; index = line number - 1."""
    for first_line, body in line_chunks(path, chunk_bytes):
        try:
            records = _one_decoder.decode_lines(body)
            if len(records) != body.count(b"\n") + (not body.endswith(b"\n")) or not _check_uris(records):
                raise ValueError  # blank lines shift indices: take the exact path
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
            records = []
            for i, raw in enumerate(body.split(b"\n")):
                if raw.strip():
                    rec = _validate(path, first_line + i, raw, _one_decoder, skip_bad, stats)
                    if rec is not None:
                        records.append(rec)
        if records:
            yield path, first_line, records


def _read_parquet(path, chunk_bytes, skip_bad, stats):
    """Chunks of a Parquet trace written by ``drtp convert`` (already validated)."""
    from drtp.columnar import read_parquet

    index = 0
    for records in read_parquet(path):
        yield path, index, records
        index += len(records)


# -- Distribution registry JSON logs ---------------------------------------------


class RegistryLogLine(msgspec.Struct, gc=False):
    """A line of the registry's JSON log; only 'response completed' lines are requests."""

    msg: str = ""
    time: str = ""
    method: str = msgspec.field(default="", name="http.request.method")
    uri: str = msgspec.field(default="", name="http.request.uri")
    client: str = msgspec.field(default="", name="http.request.remoteaddr")
    useragent: str = msgspec.field(default="", name="http.request.useragent")
    host: str = msgspec.field(default="", name="http.request.host")
    request_id: str = msgspec.field(default="", name="http.request.id")
    status: int = msgspec.field(default=0, name="http.response.status")
    written: int = msgspec.field(default=0, name="http.response.written")
    duration: str = msgspec.field(default="0s", name="http.response.duration")


_log_decoder = msgspec.json.Decoder(RegistryLogLine)
_GO_DURATION = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration string such as ``909.307µs`` or ``1m2.5s``."""
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text.lstrip("+"):
        raise ValueError(f"not a Go duration: {text!r}")
    return sum(float(n) * _GO_UNITS[u] for n, u in parts)


def _read_registry_log(path, chunk_bytes, skip_bad, stats):
    """Chunks of requests from a registry's JSON log; index = line number - 1."""
    convert = msgspec.json.Decoder(TraceRecord)
    for first_line, body in line_chunks(path, chunk_bytes):
        records = []
        for i, raw in enumerate(body.split(b"\n")):
            if not raw.strip():
                continue
            index = first_line + i
            try:
                line = _log_decoder.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError) as e:
                _bad(path, index, f"invalid log line ({e})", skip_bad, stats)
                continue
            if not line.msg.startswith("response completed"):
                continue
            if parse_uri(line.uri) is None:
                stats.ignored += 1  # /v2/ pings, _catalog, tags/list
                continue
            try:
                duration = parse_go_duration(line.duration)
            except ValueError as e:
                _bad(path, index, str(e), skip_bad, stats)
                continue
            raw_record = msgspec.json.encode(
                {
                    "host": line.host,
                    "http.request.duration": duration,
                    "http.request.method": line.method,
                    "http.request.remoteaddr": line.client,
                    "http.request.uri": line.uri.lstrip("/"),
                    "http.response.status": line.status,
                    "http.response.written": line.written,
                    "id": line.request_id,
                    "timestamp": line.time,
                }
            )
            rec = _validate(path, index, raw_record, convert, skip_bad, stats)
            if rec is not None:
                records.append(rec)
        if records:
            yield path, first_line, records


# -- merging files by time ----------------------------------------------------------


def _merge(streams, window: _dt.timedelta, skip_bad: bool, stats: ReadStats):
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
            ordered = sorted(chunk, key=_by_time)
            if emitted is not None and ordered[0].timestamp < emitted:
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
                    pending.sort(key=_by_time)
        if not active:
            break
        if len(latest) < len(active):
            continue  # some file has not produced a record yet
        mark = min(latest.values()) - window
        cut = bisect.bisect_right(pending, mark, key=_by_time)
        if cut:
            batch, pending = pending[:cut], pending[cut:]
            emitted = batch[-1].timestamp
            yield batch
    if pending:
        yield pending


def _drop_late(path, base, chunk, emitted, skip_bad, stats):
    """Records older than what was already released cannot be replayed in order."""
    kept = []
    for offset, rec in enumerate(chunk):
        if rec.timestamp < emitted:
            _bad(
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
    kept.sort(key=_by_time)
    return kept


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
