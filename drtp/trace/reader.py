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

Every problem of the input is a one-line :class:`~drtp.errors.DrtpError`
naming the file and, where there is one, the record: a file that cannot be
read or decompressed, JSON nested too deeply, a record longer than
:data:`MAX_RECORD_BYTES`, a value outside its range (drtp.trace.records), and a file
that holds no records at all.  A UTF-8 byte order mark is read past.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import gzip
import json
import math
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from pathlib import Path

import msgspec

from drtp.errors import DrtpError, TraceError
from drtp.outputs import replaced_on_success
from drtp.trace.records import (
    MAX_TIME,
    MIN_TIME,
    TraceRecord,
    is_object_uri,
    time_problem,
    uri_error,
    uris_valid,
)

FORMATS = ("auto", "ibm", "jsonl", "registry-log", "parquet")
CHUNK_BYTES = 1 << 20
MAX_RECORD_BYTES = 8 << 20  # no record or log line is this long: past it the input is not a trace
_BOM = b"\xef\xbb\xbf"
_DEEP = "JSON nested too deeply"
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
        if not self.stats.records:  # every file held records, yet all were skipped or out of range
            raise DrtpError(
                f"{', '.join(map(str, self.paths))}: no records ({self.stats.skipped:,} bad records skipped)"
            )

    # -- per file -------------------------------------------------------------

    def _file_chunks(self, path: Path) -> Iterator[tuple[Path, int, list[TraceRecord]]]:
        fmt = self.fmt if self.fmt != "auto" else detect_format(path)
        reader = {
            "ibm": _read_array,
            "jsonl": _read_lines,
            "registry-log": _read_registry_log,
            "parquet": _read_parquet,
        }[fmt]
        chunks = _nonempty(path, fmt, reader(path, self.chunk_bytes, self.skip_bad, self.stats), self.stats)
        if not self.sort_files:
            yield from chunks
            return
        # an unordered file: hold this one file (not the trace) in memory and sort it
        records = [rec for _, base, chunk in chunks for rec in _in_range(path, base, chunk, self.skip_bad, self.stats)]
        records.sort(key=_by_time)
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


def check_input_file(path: Path, what: str = "trace file") -> None:
    """Refuse a path that is not a readable regular file, saying which it is (missing, a directory…)."""
    if path.is_dir():
        raise DrtpError(f"{path}: is a directory, not a {what}")
    if not path.exists():
        raise DrtpError(f"{path}: {what} not found")
    if not path.is_file():
        raise DrtpError(f"{path}: not a regular file (a {what} is read twice or in chunks; copy it to a file)")


def open_binary(path: Path):
    """Open a trace file for reading bytes; ``.gz`` files are decompressed."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def read_blocks(path: Path, size: int) -> Iterator[bytes]:
    """The file's bytes ``size`` at a time, decompressed, without a UTF-8 byte order mark.

    Whatever stops the read (a truncated or corrupt gzip stream, a permission, an
    I/O error) becomes one DrtpError naming the file.
    """
    try:
        with open_binary(path) as f:
            data = f.read(max(size, len(_BOM)))
            if data.startswith(_BOM):
                data = data[len(_BOM) :]
            while data:
                yield data
                data = f.read(size)
    except (OSError, EOFError, zlib.error) as e:
        raise DrtpError(f"{path}: {_read_problem(path, e)}") from None


def _read_problem(path: Path, e: BaseException) -> str:
    """A read error in the user's words: which kind of file is broken, and how."""
    detail = getattr(e, "strerror", None) or str(e) or type(e).__name__
    if path.suffix == ".gz" and not isinstance(e, PermissionError):
        return f"not a valid gzip file ({detail})"
    return f"cannot read ({detail})"


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


# -- IBM JSON arrays ------------------------------------------------------------

_chunk_decoder = msgspec.json.Decoder(list[TraceRecord])
_one_decoder = msgspec.json.Decoder(TraceRecord)


def _check_uris(records: list[TraceRecord]) -> bool:
    """True when every URI of the chunk is valid (a whole-chunk check; False: look one by one)."""
    return uris_valid([r.uri for r in records])


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
    limit = max(MAX_RECORD_BYTES, 8 * chunk_bytes)
    blocks = read_blocks(path, chunk_bytes)
    while True:
        data = next(blocks, b"")
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
            if len(leftover) > limit:  # no record is this long: not an array of records
                raise TraceError(str(path), index, f"no record ends within {limit >> 20} MiB")
        lead = _LEAD.match(buf, 0, cut).end()
        body = memoryview(buf)[lead:cut].toreadonly()
        if body:
            try:
                records = _chunk_decoder.decode(b"".join((b"[", body, b"]")))
                if not _check_uris(records):
                    raise ValueError
                next_index = index + len(records)
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
                records, rest, next_index = _array_slow(path, bytes(body), index, eof, skip_bad, stats)
                leftover = rest + leftover
                if len(leftover) > limit:
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
    """Decode record by record; returns (records, bytes not yet complete, next record index).

    The text keeps undecodable bytes as surrogates, so each record is checked
    on its own original bytes (invalid UTF-8 is refused, not replaced).
    """
    text = body.decode("utf-8", errors="surrogateescape")
    scanner = json.JSONDecoder()
    records: list[TraceRecord] = []
    pos, n = 0, len(text)
    anchor = (0, 0)  # a (character, byte) offset pair of the text, to map one to the other in steps
    while True:
        while pos < n and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= n:
            return records, b"", index
        try:
            _, end = scanner.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError) as e:
            if not final and not isinstance(e, RecursionError):  # the chunk may end inside this record
                return records, text[pos:].encode("utf-8", errors="surrogateescape"), index
            reason = _DEEP if isinstance(e, RecursionError) else f"invalid JSON ({e.msg})"
            _bad(path, index, reason, skip_bad, stats)
            index += 1
            # resynchronise at the next "},{" (skip_bad only); offsets are mapped from the last
            # anchor on, so a chunk of many bad records stays linear
            at = anchor[1] + len(text[anchor[0] : pos].encode("utf-8", errors="surrogateescape"))
            nxt = _RECORD_GAP.search(body, at)
            if nxt is None:
                return records, b"", index
            pos += len(body[at : nxt.start() + 1].decode("utf-8", errors="surrogateescape"))
            anchor = (pos, nxt.start() + 1)
            continue
        raw = text[pos:end].encode("utf-8", errors="surrogateescape")
        record = _validate(path, index, raw, _one_decoder, skip_bad, stats)
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
    except UnicodeDecodeError as e:
        return _bad(path, index, f"invalid UTF-8 ({e.reason} at byte {e.start})", skip_bad, stats)
    except RecursionError:
        return _bad(path, index, _DEEP, skip_bad, stats)
    if isinstance(record, TraceRecord):
        problem = uri_error(record.uri)
        if problem is not None:
            return _bad(path, index, problem, skip_bad, stats)
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
    """(number of the chunk's first line, whole lines) for a JSON-lines file.

    A line longer than MAX_RECORD_BYTES is an error: no record or log line is
    that long, and holding it would grow without bound.
    """
    line = 0
    leftover = b""
    limit = max(MAX_RECORD_BYTES, 8 * chunk_bytes)
    for data in chain(read_blocks(path, chunk_bytes), (b"",)):
        buf = leftover + data
        if not data:
            if buf.strip():
                yield line, buf
            return
        cut = buf.rfind(b"\n")
        if cut < 0:
            if len(buf) > limit:
                raise TraceError(str(path), line, f"line longer than {limit >> 20} MiB: not JSON lines")
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
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
            records = []
            for i, raw in enumerate(body.split(b"\n")):
                if raw.strip():
                    rec = _validate(path, first_line + i, raw, _one_decoder, skip_bad, stats)
                    if rec is not None:
                        records.append(rec)
        if records:
            yield path, first_line, records


def _read_parquet(path, chunk_bytes, skip_bad, stats):
    """Chunks of a Parquet trace (``drtp convert``); rows are checked like decoded records."""
    from drtp.trace.columnar import read_parquet

    def bad(index: int, reason: str) -> None:
        _bad(path, index, reason, skip_bad, stats)

    for start, records in read_parquet(path, on_bad=bad):
        yield path, start, records


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


def decode_log_line(raw: bytes) -> RegistryLogLine | str:
    """A registry log line, or what is wrong with it (not JSON, too deep, not UTF-8, wrong types)."""
    try:
        return _log_decoder.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        return f"invalid log line ({e})"
    except RecursionError:
        return f"invalid log line ({_DEEP})"


def _read_registry_log(path, chunk_bytes, skip_bad, stats):
    """Chunks of requests from a registry's JSON log; index = line number - 1."""
    convert = msgspec.json.Decoder(TraceRecord)
    for first_line, body in line_chunks(path, chunk_bytes):
        records = []
        for i, raw in enumerate(body.split(b"\n")):
            if not raw.strip():
                continue
            index = first_line + i
            line = decode_log_line(raw)
            if isinstance(line, str):
                _bad(path, index, line, skip_bad, stats)
                continue
            if not line.msg.startswith("response completed"):
                continue
            if not is_object_uri(line.uri):
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
            # sorted: its first and last records tell whether every timestamp is in range
            if ordered and (ordered[0].timestamp < MIN_TIME or ordered[-1].timestamp >= MAX_TIME):
                chunk = _in_range(path, base, chunk, skip_bad, stats)
                ordered = sorted(chunk, key=_by_time)
            if ordered and emitted is not None and ordered[0].timestamp < emitted:
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


def _in_range(path, base, chunk, skip_bad, stats) -> list[TraceRecord]:
    """The records of a chunk whose timestamps lie in the range every consumer can handle."""
    if chunk and MIN_TIME <= min(map(_by_time, chunk)) and max(map(_by_time, chunk)) < MAX_TIME:
        return chunk
    kept = []
    for offset, rec in enumerate(chunk):
        problem = time_problem(rec.timestamp)
        if problem is None:
            kept.append(rec)
        else:
            _bad(path, base + offset, problem, skip_bad, stats)
    return kept


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
