"""The run directory once a run is under way: what a write that fails mid-run becomes.

Before a run starts, its directory is proven writable like every output path
(drtp.outputs.prepare_output_dir: a bad path is exit 2).  A write that fails
later (disk full, file size limit) must stop the run instead of measuring into
nothing: a :class:`~drtp.errors.RunError` (exit 3) with one line naming the
file and the system's reason.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from drtp.errors import RunError
from drtp.outputs import os_reason


class ResultsWriteError(RunError):
    """Writing a run's results failed mid-run (``requests.csv`` or ``summary.json``)."""


def remove_if_empty(path: Path) -> None:
    """Take back a directory made for a run that never started (a failed preflight), unless something is in it."""
    with contextlib.suppress(OSError):
        path.rmdir()


def write_failed(what: Path, e: OSError) -> ResultsWriteError:
    """The error of a failed write of ``what``, one line."""
    return ResultsWriteError(f"writing {what} failed ({os_reason(e)})")
