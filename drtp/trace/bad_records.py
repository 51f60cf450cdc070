"""What a reader does with a bad record: name its file and index, then stop, or skip it and count it.

Records are decoded a chunk at a time; only a chunk that fails is decoded
record by record (:func:`decode_record`), so that the problem names the exact
record.  With ``skip_bad`` the record is left out and counted in
:class:`ReadStats`; without it the first bad record ends the read as one
:class:`~drtp.errors.TraceError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from drtp.errors import TraceError
from drtp.schema import explain
from drtp.trace.records import TraceRecord, uri_error

TOO_DEEP = "JSON nested too deeply"


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


def decode_record(path, index, raw: bytes, decoder, skip_bad, stats):
    """One record decoded with ``decoder`` and its URI checked; None when it is bad and skipped."""
    try:
        record = decoder.decode(raw)
    except msgspec.ValidationError as e:  # a subclass of DecodeError: test it first
        return reject(path, index, explain(e, plain=True), skip_bad, stats)
    except msgspec.DecodeError as e:
        return reject(path, index, f"invalid JSON ({e})", skip_bad, stats)
    except UnicodeDecodeError as e:
        return reject(path, index, f"invalid UTF-8 ({e.reason} at byte {e.start})", skip_bad, stats)
    except RecursionError:
        return reject(path, index, TOO_DEEP, skip_bad, stats)
    if isinstance(record, TraceRecord):
        problem = uri_error(record.uri)
        if problem is not None:
            return reject(path, index, problem, skip_bad, stats)
    return record


def reject(path, index: int, reason: str, skip_bad: bool, stats: ReadStats) -> None:
    """A bad record: raised as a TraceError naming it, or under ``skip_bad`` counted and left out."""
    err = TraceError(str(path), index, reason)
    if not skip_bad:
        raise err
    stats.skip(str(err))
    return None
