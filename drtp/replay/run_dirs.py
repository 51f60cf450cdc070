"""The layout of a run's folder: a single run, or the ``rep-<k>/`` folders of its repetitions.

Written by the master (drtp.master.series.repeat puts repetition ``k`` in
:func:`rep_dir`) and read by every command that takes "a run" — ``drtp analyze
compare``, ``drtp clean --run``, Slurm's resume — so it sits below all of them:
the master, the analysis and the cluster tools ask this one module.
"""

from __future__ import annotations

from pathlib import Path


def rep_dir(run_dir: Path, k: int) -> Path:
    """The directory of repetition ``k`` (from 1) of the run whose directory is ``run_dir``."""
    return run_dir / f"rep-{k}"


def run_dirs_in(path: Path) -> list[Path]:
    """The run directories ``path`` holds: its repetitions' ``rep-<k>/`` in the order of ``k`` (``rep-10`` after
    ``rep-9``), or, when it has none, ``path`` itself.  The one answer for every command that takes "a run" and
    must take a folder of repetitions alike (``drtp analyze compare``, ``drtp clean --run``, Slurm's resume)."""
    reps = [p for p in path.glob("rep-*") if p.name[4:].isdigit() and p.is_dir()]
    return sorted(reps, key=lambda p: int(p.name[4:])) or [path]
