"""A finished run's exit code, from its summary and the failure budget (``max_failed``).

A run that completed but whose requests mostly failed measured a broken
registry, not its performance; exit 0 would let a script or a Slurm job file it
as a good result.  The verdict counts every trace request that did not succeed
(failed answers, requests lost with a dead client node, requests never sent)
against the budget, and says in one line when nothing succeeded at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from drtp.exit_codes import ExitCode
from drtp.replay.failure_budget import FailureBudget


@dataclass(frozen=True)
class Verdict:
    code: ExitCode
    failed: int  # trace requests that did not succeed (failed, lost, not sent)
    total: int  # the trace's requests, the base of a percentage budget
    message: str = ""  # one line for stderr; empty when there is nothing to say


def judge(summary: dict, budget: FailureBudget) -> Verdict:
    """The exit code of a completed run (an interrupted or broken-off one never gets here)."""
    total = int(summary.get("trace_requests", summary["requests"]))
    failed = int(summary["failed"]) + int(summary.get("not_sent", 0))
    limit = budget.limit(total)
    code = ExitCode.OK if budget.allows(failed, total) else ExitCode.TOO_MANY_FAILED
    allowed = f"max_failed {budget} allows {limit:,}"
    if total and int(summary.get("succeeded", 0)) == 0:
        message = f"nothing succeeded: all {total:,} trace requests failed ({allowed})"
    elif code is ExitCode.TOO_MANY_FAILED:
        message = f"{failed:,} of {total:,} trace requests failed ({failed / total:.2%}); {allowed}"
    else:
        message = ""
    return Verdict(code, failed, total, message)
