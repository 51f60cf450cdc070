"""Output paths given on the command line, checked before any work is done.

A command that generates, simulates or analyses for minutes and then finds
that ``-o`` names a directory, or that ``--out`` sits on a read-only file
system, has wasted the minutes and ends in a traceback.  These checks make
the path (and its parents) and prove it can be written, so the one-line error
comes first.  ``drtp run`` and ``drtp experiment`` check their run directory
with :func:`~drtp.master.results_dir.prepare_results_dir` directly: a run
directory that cannot be written is their exit code 3 ("could not run").
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from drtp.errors import DrtpError


def _reason(e: OSError) -> str:
    return e.strerror or type(e).__name__


def prepare_output_dir(path: Path, option: str) -> None:
    """Make the directory ``path`` and prove a file can be written in it; DrtpError naming ``option``."""
    from drtp.master.results_dir import ResultsWriteError, prepare_results_dir

    try:
        prepare_results_dir(path)
    except ResultsWriteError as e:
        raise DrtpError(f"{option}: {e}") from None


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
        raise DrtpError(f"{option} {path}: its folder cannot be created ({_reason(e)})") from None
    existed = path.exists()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.close(fd)
    except OSError as e:
        raise DrtpError(f"{option} {path}: cannot be written ({_reason(e)})") from None
    if not existed:
        with contextlib.suppress(OSError):
            path.unlink()
