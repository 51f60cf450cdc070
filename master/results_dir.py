"""The run directory: proven writable before a run starts, and what a write that fails mid-run becomes.

A replay loads a registry and client nodes for minutes or hours; finding out at
the first result that ``requests.csv`` cannot be written wastes all of it, and a
write that fails later (disk full, file size limit) must stop the run instead of
measuring into nothing.  Both end as a :class:`~drtp.errors.RunError` (exit 3)
with one line naming the directory and the system's reason.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from drtp.errors import RunError

PROBE_NAME = ".drtp-write-probe"


class ResultsWriteError(RunError):
    """Writing a run's results failed (the directory, ``requests.csv`` or ``summary.json``)."""


def _reason(e: OSError) -> str:
    return e.strerror or type(e).__name__


def prepare_results_dir(path: Path) -> bool:
    """Make ``path`` (and its parents) and prove a file can be written and synced in it; True if it was made.

    A real write, not a permission check: root passes every permission check and
    still cannot write to a read-only file system or under a regular file.
    """
    if path.exists() and not path.is_dir():
        raise ResultsWriteError(f"results directory {path} is not a directory")
    made = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ResultsWriteError(f"results directory {path} cannot be created ({_reason(e)})") from None
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
        raise ResultsWriteError(f"results directory {path} is not writable ({_reason(e)})") from None
    return made


def remove_if_empty(path: Path) -> None:
    """Take back a directory made for a run that never started (a failed preflight), unless something is in it."""
    with contextlib.suppress(OSError):
        path.rmdir()


def write_failed(what: Path, e: OSError) -> ResultsWriteError:
    """The error of a failed write of ``what``, one line."""
    return ResultsWriteError(f"writing {what} failed ({_reason(e)})")
