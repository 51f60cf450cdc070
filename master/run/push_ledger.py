"""The push ledger: what each registry accepted from drtp's runs, for ``drtp clean``.

A run's directory is not a reliable record of what it pushed: runs of other
configs share the ``results`` folder, results are moved, a run's folder has
several shapes (``run-*/``, ``experiment-*/<id>/[rep-k/]``, ``ramp-*/step-*/``)
and a Slurm master job writes in its work dir until it is gathered.  So the
master keeps a ledger per registry, beside the run's warmup map (which already
records the warmup's pushes): ``<map stem>.pushes-<registry>.jsonl``, e.g.
``warmup-map-open.pushes-127.0.0.1_5000.jsonl``.  ``drtp clean -c CONFIG`` finds
it from the config alone, as it finds the warmup map.

The ledger is JSON lines, appended only:

* :class:`Push` — one object the registry accepted: a manifest PUT (with its
  tag), a blob upload or mount, the node's helper push of the minimal config
  blob, and a mount fallback's upload (:func:`pushed_by_rows`: the one reading
  of a run's rows, which ``drtp clean --run`` applies to a ``requests.csv``
  too).  The master appends them as the nodes' results arrive, one write per
  result frame and registry, so an interrupted run's pushes are there;
* :class:`Cleared` — written by ``drtp clean --yes`` for each object it
  deleted (or found gone): the pushes of that object written before byte
  ``before`` of the file are over, so a second clean does not ask again.  A
  push of the same object written after that offset (a run that went on while
  the clean ran) still counts.

Appends hold an exclusive ``flock`` on the file, so runs and cleans that write
one ledger at once never interleave their lines; a writer that finds the file
ending in a torn line (a writer that died mid-line) cuts it off before it
appends.  A reader ignores a torn last line (it may be being written), and
refuses a corrupt line anywhere else with one line naming the file and line.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec

from drtp.errors import DrtpError
from drtp.master.outputs.results_dir import write_failed
from drtp.registry.manifest import CONFIG_DIGEST
from drtp.registry.names import digest_error, name_error
from drtp.replay.messages import ReplayRequest, ReplayResult, registry_base
from drtp.replay.result_row import ResultRow, rows_of

# What the client nodes' helper rows say they did (client/executor.py): the minimal config blob pushed before a
# manifest, and a blob uploaded into the upload a registry opened instead of mounting.
CONFIG_PUSH = "config blob push"
MOUNT_FALLBACK = "mount fallback upload"
LEDGER_INFIX = ".pushes-"
LEDGER_SUFFIX = ".jsonl"

Kind = Literal["manifest", "blob"]


class Push(msgspec.Struct, tag="push", tag_field="event", omit_defaults=True):
    """One object a registry accepted from a run."""

    registry: str  # base URL
    kind: Kind
    repository: str
    digest: str
    tag: str = ""  # a manifest's tag ("" for a blob, or a manifest pushed by digest)
    run: str = ""  # the run directory whose request pushed it


class Cleared(msgspec.Struct, tag="cleared", tag_field="event"):
    """``drtp clean`` removed an object: the pushes of it written before byte ``before`` of the file are over."""

    registry: str
    kind: Kind
    repository: str
    digest: str
    before: int


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Push | Cleared).decode


# -- where ------------------------------------------------------------------------------------------------------


def registry_key(registry: str) -> str:
    """A registry as a file name part: its host, port and path (``127.0.0.1_5000``), without the scheme."""
    rest = registry_base(registry).split("://", 1)[1]
    return re.sub(r"[^A-Za-z0-9.-]+", "_", rest).strip("_")


def ledger_path(map_path: Path, registry: str) -> Path:
    """The ledger of ``registry`` beside the warmup map ``map_path``."""
    return map_path.with_name(f"{map_path.stem}{LEDGER_INFIX}{registry_key(registry)}{LEDGER_SUFFIX}")


# -- what a run's rows say it pushed -----------------------------------------------------------------------------


def pushed_by_rows(rows: Iterable[ResultRow]) -> Iterator[tuple[Kind, str, str, str]]:
    """(kind, repository, digest, tag) of every object a run's rows say the registry accepted from drtp.

    A request's helper rows follow its own row (drtp.replay.result_row.rows_of), as in ``requests.csv``."""
    last: ResultRow | None = None
    for row in rows:
        stored = 200 <= row.status < 300
        if not row.auxiliary:
            last = row
            if not stored or not row.digest:
                continue
            if row.method == "PUT" and row.kind == "manifest":
                yield "manifest", row.repository, row.digest, row.reference
                # warmup put the minimal config blob where the run's manifests name it (no map entry, no row)
                yield "blob", row.repository, CONFIG_DIGEST, ""
            elif row.kind == "blob" and (row.method == "PUT" or (row.method == "POST" and row.status == 201)):
                yield "blob", row.repository, row.digest, ""  # an upload completed, or a mount
        elif stored and row.method == "PUT":
            if row.reference == CONFIG_PUSH:
                yield "blob", row.repository, CONFIG_DIGEST, ""
            elif row.reference == MOUNT_FALLBACK and last is not None and last.digest:
                yield "blob", last.repository, last.digest, ""


# -- writing ----------------------------------------------------------------------------------------------------


def append(path: Path, data: bytes) -> None:
    """Append whole lines to a ledger under its lock; a torn line at its end (a writer that died) is cut off."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        end = os.lseek(fd, 0, os.SEEK_END)
        if end and os.pread(fd, 1, end - 1) != b"\n":
            os.ftruncate(fd, _line_start(fd, end))
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)  # releases the lock


def _line_start(fd: int, end: int, chunk: int = 4096) -> int:
    """Where the last (unterminated) line of the file begins: after its last newline, or 0."""
    pos = end
    while pos > 0:
        start = max(0, pos - chunk)
        found = os.pread(fd, pos - start, start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        pos = start
    return 0


class PushLedger:
    """A run's output of pushes: fed the results of its write requests as they arrive, it appends the pushes
    each registry accepted to that registry's ledger beside the run's warmup map."""

    def __init__(self, map_path: Path, run: str) -> None:
        """Raises OSError when the map's folder cannot take a ledger: before the run starts, not at its first push."""
        if map_path.parent.is_dir() and not os.access(map_path.parent, os.W_OK):  # (a missing one is made)
            raise PermissionError(errno.EACCES, "cannot write a push ledger there", str(map_path.parent))
        self.map_path = map_path
        self.run = run  # the run's directory, named in each line
        self.paths: dict[str, tuple[str, Path]] = {}  # a request's registry -> (base URL, its ledger)
        self.written = 0  # lines appended by this run

    def add(self, node: str, answered: Iterable[tuple[ReplayRequest, ReplayResult]]) -> None:
        """Append what ``answered`` (the requests of one frame with their results) pushed, a write per ledger."""
        batches: dict[Path, list[bytes]] = {}
        for req, res in answered:
            if not res.aux and not 200 <= res.status < 300:
                continue  # neither it nor a helper of it stored anything
            where = self.paths.get(req.registry)
            if where is None:
                base = registry_base(req.registry)
                where = self.paths[req.registry] = (base, ledger_path(self.map_path, base))
            base, path = where
            for kind, repo, digest, tag in pushed_by_rows(rows_of(node, req, res)):
                line = _encode(Push(base, kind, repo, digest, tag, self.run)) + b"\n"
                batches.setdefault(path, []).append(line)
        for path, lines in batches.items():
            try:
                append(path, b"".join(lines))
            except OSError as e:
                raise write_failed(path, e) from None
            self.written += len(lines)


def mark_cleared(path: Path, registry: str, objects: Iterable[tuple[str, str, str]], before: int) -> int:
    """Append a :class:`Cleared` line per (kind, repository, digest) in ``objects``; how many."""
    lines = [_encode(Cleared(registry, kind, repo, digest, before)) + b"\n" for kind, repo, digest in objects]
    if lines:
        append(path, b"".join(lines))
    return len(lines)


# -- reading ----------------------------------------------------------------------------------------------------


@dataclass
class LedgerRead:
    """A ledger as one reading found it: the pushes not cleared since, and where the reading ended."""

    path: Path
    pushes: list[Push] = field(default_factory=list)
    end: int = 0  # bytes of whole lines read: a Cleared line written after this reading names it as ``before``

    def objects(self) -> set[tuple[str, str, str]]:
        """(kind, repository, digest) of the pushes read."""
        return {(p.kind, p.repository, p.digest) for p in self.pushes}


def read_ledger(path: Path) -> LedgerRead:
    """The pushes of a ledger not cleared since; a torn last line is ignored, a corrupt one elsewhere refused."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DrtpError(f"{path}: cannot read the push ledger ({e.strerror or e})") from None
    lines = data.split(b"\n")
    lines.pop()  # b"" after a final newline; else a line torn or still being written: not read
    live: dict[tuple[str, str, str, str], list[tuple[int, Push]]] = {}
    offset = 0
    for number, line in enumerate(lines, 1):
        at, offset = offset, offset + len(line) + 1
        if not line.strip():
            continue
        try:
            record = _decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise DrtpError(f"{path}: line {number}: not a push ledger record ({e})") from None
        if why := name_error(record.repository) or digest_error(record.digest):
            raise DrtpError(f"{path}: line {number}: {why}")
        key = (registry_base(record.registry), record.kind, record.repository, record.digest)
        if isinstance(record, Push):
            live.setdefault(key, []).append((at, record))
        elif key in live:
            live[key] = [(o, p) for o, p in live[key] if o >= record.before]
    out = LedgerRead(path, end=offset)
    out.pushes = [p for _, p in sorted(item for pushes in live.values() for item in pushes)]
    return out
