"""Output paths given on the command line, checked before any work is done.

A command that generates, simulates or analyses for minutes and then finds
that ``-o`` names a directory, or that ``--out`` sits on a read-only file
system, has wasted the minutes and ends in a traceback.  These checks make
the path (and its parents) and prove it can be written, so the one-line error
comes first.  A path the user gave (or the default under ``results/``) that
cannot be written is a bad input: exit 2, like any other.  A write that fails
later, mid-run, is something else (drtp.master.outputs.results_dir: exit 3).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from drtp.errors import DrtpError


def os_reason(e: OSError) -> str:
    """The system's reason for a failed file operation, for a one-line message."""
    return e.strerror or type(e).__name__


def other_columns(path: Path, found: list[str], expected: tuple[str, ...]) -> DrtpError:
    """The one-line refusal to resume a results file written with other columns (another drtp version): which
    columns differ, and what to do.  Appending rows of this version's layout to it would misread or mix them."""
    missing = [c for c in expected if c not in found]
    unknown = [c for c in found if c not in expected]
    diff = (
        "; ".join(
            part
            for part in (
                f"no column {', '.join(missing)}" if missing else "",
                f"columns this version has not: {', '.join(unknown)}" if unknown else "",
            )
            if part
        )
        or "its columns are in another order"
    )
    return DrtpError(
        f"{path}: written by another drtp version ({diff}); a run cannot be resumed across versions — "
        "start it in a new results directory (this one is left as it is)"
    )


PROBE_NAME = ".drtp-write-probe"


def prepare_output_dir(path: Path, option: str | None = None) -> bool:
    """Make the directory ``path`` (and its parents) and prove a file can be written and synced in it.

    True if the directory was made.  A real write, not a permission check: root
    passes every permission check and still cannot write to a read-only file
    system or under a regular file.  Errors name ``option`` when one is given.
    """
    label = f"{option}: results directory {path}" if option else f"results directory {path}"
    if path.exists() and not path.is_dir():
        raise DrtpError(f"{label} is not a directory")
    made = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DrtpError(f"{label} cannot be created ({os_reason(e)})") from None
    probe = path / f"{PROBE_NAME}-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"drtp\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        probe.unlink()
    except OSError as e:
        with contextlib.suppress(OSError):
            probe.unlink(missing_ok=True)
        raise DrtpError(f"{label} is not writable ({os_reason(e)})") from None
    return made


def check_output_file(path: Path, option: str) -> None:
    """``path`` can be written as a file: not a directory, its folder made and writable.

    The file itself is not left behind when it did not exist: a command that
    fails later must not leave an empty "result".
    """
    if path.is_dir():
        raise DrtpError(f"{option} {path}: is a directory; give a file name")
    folder = path.parent
    if folder.exists() and not folder.is_dir():
        raise DrtpError(f"{option} {path}: {folder} is not a directory")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DrtpError(f"{option} {path}: its folder cannot be created ({os_reason(e)})") from None
    existed = path.exists()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.close(fd)
    except OSError as e:
        raise DrtpError(f"{option} {path}: cannot be written ({os_reason(e)})") from None
    if not existed:
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def replaced_on_success(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` that becomes ``path`` only when the block ends without an error.

    A command that stops half-way (a bad record in the input, Ctrl-C, a full
    disk) leaves neither a torn output nor a clobbered earlier one behind.
    """
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
