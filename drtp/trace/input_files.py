"""A trace or log file as bytes: checked, decompressed, read in blocks or whole lines.

Every format reader starts here, so a file that is missing, a directory, not
readable or a broken gzip stream is refused the same way: one DrtpError naming
the file.  A UTF-8 byte order mark is read past.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from itertools import chain
from pathlib import Path

from drtp.errors import DrtpError, TraceError

MAX_RECORD_BYTES = 8 << 20  # no record or log line is this long: past it the input is not a trace
_BOM = b"\xef\xbb\xbf"


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
