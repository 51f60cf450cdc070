"""IBM trace records as a JSON array (the IBM traces' own files) or as JSON lines, read a chunk at a time.

A chunk is decoded in one msgspec call into :class:`TraceRecord` structs
(typed decoding in C) and its URIs are checked with one regex over the whole
chunk.  Only when a chunk fails does the reader decode record by record, to
name the exact record of the problem (drtp.trace.bad_records).
"""

from __future__ import annotations

import json
import re

import msgspec

from drtp.errors import TraceError
from drtp.trace.bad_records import TOO_DEEP, ReadStats, decode_record, reject
from drtp.trace.input_files import MAX_RECORD_BYTES, line_chunks, read_blocks
from drtp.trace.records import AgentRecord, TraceRecord, uris_valid

_RECORD_GAP = re.compile(rb"\}\s*,\s*\{")

_chunk_decoder = msgspec.json.Decoder(list[TraceRecord])
_one_decoder = msgspec.json.Decoder(TraceRecord)
# with the user agents (``agent=True``): only for a run that replays them, the rest skip the field
_agent_decoders = (msgspec.json.Decoder(list[AgentRecord]), msgspec.json.Decoder(AgentRecord))


def _check_uris(records: list[TraceRecord]) -> bool:
    """True when every URI of the chunk is valid (a whole-chunk check; False: look one by one)."""
    return uris_valid([r.uri for r in records])


_LEAD = re.compile(rb"[\s,]*")


def read_array(path, chunk_bytes, skip_bad, stats, agent: bool = False):
    """Chunks of an IBM trace file (one JSON array of records); ``agent``: AgentRecords, with user agents.

    Each chunk is cut after its last ``}`` and decoded in one call; copies of
    the chunk are kept to one (the bracketed decode input), which matters at
    a million records a second.
    """
    chunk_decoder, one_decoder = _agent_decoders if agent else (_chunk_decoder, _one_decoder)
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
                records = chunk_decoder.decode(b"".join((b"[", body, b"]")))
                if not _check_uris(records):
                    raise ValueError
                next_index = index + len(records)
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
                records, rest, next_index = _array_slow(path, bytes(body), index, eof, skip_bad, stats, one_decoder)
                leftover = rest + leftover
                if len(leftover) > limit:
                    # no record is this long: the JSON is broken here, not cut by the chunk
                    more, _, next_index = _array_slow(path, leftover, next_index, True, skip_bad, stats, one_decoder)
                    records += more
                    leftover = b""
            if records:
                yield path, index, records
            index = next_index
        if eof:
            return


def _array_slow(path, body: bytes, index: int, final: bool, skip_bad: bool, stats: ReadStats, decoder=_one_decoder):
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
            reason = TOO_DEEP if isinstance(e, RecursionError) else f"invalid JSON ({e.msg})"
            reject(path, index, reason, skip_bad, stats)
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
        record = decode_record(path, index, raw, decoder, skip_bad, stats)
        if record is not None:
            records.append(record)
        index += 1
        pos = end


def read_lines(path, chunk_bytes, skip_bad, stats, agent: bool = False):
    """Chunks of IBM records written one JSON object per line; index = line number - 1."""
    one_decoder = _agent_decoders[1] if agent else _one_decoder
    for first_line, body in line_chunks(path, chunk_bytes):
        try:
            records = one_decoder.decode_lines(body)
            if len(records) != body.count(b"\n") + (not body.endswith(b"\n")) or not _check_uris(records):
                raise ValueError  # blank lines shift indices: take the exact path
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
            records = []
            for i, raw in enumerate(body.split(b"\n")):
                if raw.strip():
                    rec = decode_record(path, first_line + i, raw, one_decoder, skip_bad, stats)
                    if rec is not None:
                        records.append(rec)
        if records:
            yield path, first_line, records
