"""The exit codes of ``drtp run`` and ``drtp experiment``: the contract a script or a Slurm job relies on.

A wrapper must tell apart a run that measured a sick registry (its numbers are
real, keep them), a typo (fix it, do not retry) and a run that never happened or
broke off (retry it).  Each gets its own code, and the codes are ordered by
severity, so that when several runs end in one code (``drtp experiment``) the
highest one is the honest summary of them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # the run completed and its failed trace requests are within max_failed
    TOO_MANY_FAILED = 1  # the run completed, more trace requests failed than max_failed allows
    BAD_INPUT = 2  # a mistake in the config, an option or the trace (nothing was run)
    CANNOT_RUN = 3  # could not run or finish: preflight, client nodes, a results write mid-run, a bug in drtp
    INTERRUPTED = 130  # Ctrl-C (SIGINT) or SIGTERM (kill, Slurm's time limit, scancel); what was measured is kept


def worst(codes: Iterable[int]) -> int:
    """The most severe of several exit codes (their maximum: the values are ordered so); 0 for none."""
    return max(codes, default=ExitCode.OK)
