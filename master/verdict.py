"""A finished run's exit code, from its summary, the failure budget (``max_failed``) and the objectives (``--slo``).

A run that completed but whose requests mostly failed measured a broken
registry, not its performance; exit 0 would let a script or a Slurm job file it
as a good result.  The verdict counts every trace request that did not succeed
(failed answers, requests lost with a dead client node, requests never sent)
against the budget, and says in one line when nothing succeeded at all.  A
run that broke one of its objectives (drtp.replay.slo) exits 1 the same way:
its numbers are real, the registry did not meet them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from drtp.exit_codes import ExitCode
from drtp.replay.failure_budget import FailureBudget
from drtp.replay.slo import Judged, Objective, broken, judge_slo


@dataclass(frozen=True)
class Verdict:
    code: ExitCode
    failed: int  # trace requests that did not succeed (failed, lost, not sent)
    total: int  # the trace's requests, the base of a percentage budget
    message: str = ""  # one line for stderr; empty when there is nothing to say
    objectives: list[Judged] = field(default_factory=list)  # each objective and what the run showed


def judge(summary: dict, budget: FailureBudget, objectives: list[Objective] | None = None) -> Verdict:
    """The exit code of a completed run (an interrupted or broken-off one never gets here).

    ``objectives`` that count throttling read ``failed_statuses`` in ``summary`` (the results model counts them).
    """
    total = int(summary.get("trace_requests", summary["requests"]))
    failed = int(summary["failed"]) + int(summary.get("not_sent", 0))
    limit = budget.limit(total)
    over_budget = not budget.allows(failed, total)
    allowed = f"max_failed {budget} allows {limit:,}"
    if total and int(summary.get("succeeded", 0)) == 0:
        message = f"nothing succeeded: all {total:,} trace requests failed ({allowed})"
    elif over_budget:
        message = f"{failed:,} of {total:,} trace requests failed ({failed / total:.2%}); {allowed}"
    else:
        message = ""
    judged = judge_slo(summary, objectives) if objectives else []
    missed = broken(judged)
    if missed:
        message = f"{message}; {missed}" if message else missed
    code = ExitCode.TOO_MANY_FAILED if over_budget or missed else ExitCode.OK
    return Verdict(code, failed, total, message, judged)
