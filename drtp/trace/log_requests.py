"""The request lines of a registry's JSON log as capture takes them: checked, timed and counted.

A log is input like any trace: a request line whose time, duration, status,
size, method or URI is garbage is left out and counted in
:class:`CaptureStats`, and the first such line is named (``first_bad``) for the
command to report.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec

from drtp.trace.input_files import line_chunks
from drtp.trace.records import (
    MAX_DURATION_S,
    MAX_SIZE,
    MAX_STATUS,
    METHODS,
    MIN_STATUS,
    AwareDatetime,
    is_object_uri,
    time_problem,
    uri_error,
)
from drtp.trace.registry_log import RegistryLogLine as LogLine
from drtp.trace.registry_log import decode_log_line, parse_go_duration

_datetime = msgspec.json.Decoder(AwareDatetime).decode


@dataclass
class CaptureStats:
    """What a capture counted besides its records: the lines it read, left out, and where sizes came from."""

    lines: int = 0
    requests: int = 0  # records written
    ignored: int = 0  # log lines that are not object requests
    uploads: int = 0
    sizes_from_log: int = 0
    sizes_from_registry: int = 0
    unresolved_sizes: int = 0
    bad_lines: int = 0  # lines left out: not JSON, or a request with garbage in it
    first_bad: str = ""  # "FILE line N: what is wrong" of the first of them

    def bad(self, where: str, reason: str) -> None:
        self.bad_lines += 1
        if not self.first_bad:
            self.first_bad = f"{where}: {reason}"

    def warning(self) -> str | None:
        """One line about the lines left out, or None when there were none."""
        if not self.bad_lines:
            return None
        return f"left out {self.bad_lines:,} bad log line(s); the first: {self.first_bad}"


def completion_time(line: LogLine) -> _dt.datetime:
    """When the registry logged the request as completed (its line's ``time``)."""
    return _datetime(msgspec.json.encode(line.time))


def time_or_none(text: str) -> _dt.datetime | None:
    """An aware time in range from the log's text, or None."""
    try:
        ts = _datetime(msgspec.json.encode(text))
    except msgspec.ValidationError:
        return None
    return ts if time_problem(ts) is None else None


def parse_request(raw: bytes, where: str, stats: CaptureStats) -> LogLine | None:
    """The log line when it is an object request with sane values; None (counted) otherwise.

    ``where`` (``FILE line N``) names the line in the report of bad lines.
    """
    line = decode_log_line(raw)
    if isinstance(line, str):
        stats.bad(where, line)
        return None
    if not line.msg.startswith("response completed"):
        return None
    stats.lines += 1
    if not is_object_uri(line.uri):
        stats.ignored += 1
        return None
    problem = request_problem(line)
    if problem is not None:
        stats.bad(where, problem)
        return None
    return line


def request_problem(line: LogLine) -> str | None:
    """What makes a request line unusable (garbage time, duration, status…); None when it is fine."""
    problem = uri_error(line.uri)
    if problem is not None:
        return problem
    if line.method not in METHODS:
        return f"unknown method {line.method[:20]!r}"
    if not MIN_STATUS <= line.status <= MAX_STATUS:
        return f"status {line.status} outside {MIN_STATUS}..{MAX_STATUS}"
    if not 0 <= line.written <= MAX_SIZE:
        return f"written {line.written} outside 0..{MAX_SIZE}"
    try:
        duration = parse_go_duration(line.duration)
    except ValueError as e:
        return str(e)
    if not duration <= MAX_DURATION_S:
        return f"duration {line.duration[:40]!r} longer than {MAX_DURATION_S:g} s"
    done = time_or_none(line.time)
    if done is None:
        return f"time {line.time[:40]!r} is not an ISO time with a zone between 1970 and 2099"
    if time_problem(done - _dt.timedelta(seconds=duration)) is not None:
        return f"time {line.time[:40]!r} minus the duration is before 1970"
    return None


def arrival_and_duration(line: LogLine) -> tuple[_dt.datetime, float]:
    """(arrival, duration) of a line :func:`parse_request` accepted."""
    done = completion_time(line)
    duration = parse_go_duration(line.duration)
    return done - _dt.timedelta(seconds=duration), duration


def request_lines(path: Path, stats: CaptureStats) -> Iterator[tuple[str, LogLine]]:
    """(``FILE line N``, line) of the object requests of a log, the bad lines counted on the way."""
    for first, body in line_chunks(path, 1 << 20):
        for i, raw in enumerate(body.split(b"\n")):
            if raw.strip():
                where = f"{path} line {first + i + 1}"
                line = parse_request(raw, where, stats)
                if line is not None:
                    yield where, line
