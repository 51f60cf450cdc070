"""A finished run's exit code, from its summary, the failure budget (``max_failed``), the objectives (``--slo``)
and, when asked (``--max-replayer-limited``), whether the replayer limited the run.

A run that completed but whose requests mostly failed measured a broken
registry, not its performance; exit 0 would let a script or a Slurm job file it
as a good result.  The verdict counts every trace request that did not succeed
(failed answers, requests lost with a dead client node, requests never sent)
against the budget, and says in one line when nothing succeeded at all.  A
run that broke one of its objectives (drtp.replay.slo) exits 1 the same way:
its numbers are real, the registry did not meet them.  With
``max_replayer_limited`` a replayer-limited run (summary.json's
``replayer_limited``: a client node short of CPU or late,
drtp.master.outputs.replayer_health) exits 1 too: its latencies are partly the
replayer's own.

A summary marked ``complete: false`` (the run broke off: interrupted, every node lost,
a failed write, a bug in drtp) is never judged a result, whatever its figures: it gets
the code of a run that could not finish (130 when interrupted), its reason as the line.
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


def judge(
    summary: dict, budget: FailureBudget, objectives: list[Objective] | None = None, max_replayer_limited: bool = False
) -> Verdict:
    """The exit code of a completed run (an interrupted or broken-off one never gets here).

    ``objectives`` that count throttling read ``failed_statuses`` in ``summary`` (the results model counts them).
    ``max_replayer_limited``: a replayer-limited run fails (1), its line naming the node and the span.
    """
    total = int(summary.get("trace_requests", summary.get("requests", 0)))
    failed = int(summary.get("failed", 0)) + int(summary.get("not_sent", 0))
    if summary.get("complete") is False:
        code = ExitCode.INTERRUPTED if summary.get("interrupted") else ExitCode.CANNOT_RUN
        return Verdict(code, failed, total, f"the run did not finish: {summary.get('incomplete_reason', 'incomplete')}")
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
    limited = replayer_limited(summary) if max_replayer_limited else None
    if limited:
        message = f"{message}; {limited}" if message else limited
    code = ExitCode.TOO_MANY_FAILED if over_budget or missed or limited else ExitCode.OK
    return Verdict(code, failed, total, message, judged)


def replayer_limited(summary: dict) -> str | None:
    """What ``--max-replayer-limited`` refuses, in words; None when the run was not replayer-limited."""
    if not summary.get("replayer_limited"):
        return None
    found = (summary.get("replayer") or {}).get("limited") or {}
    span = f" from {found['from_s']:g} s to {found['to_s']:g} s" if "from_s" in found else ""
    return (
        f"replayer-limited (--max-replayer-limited): client node {found.get('node', '?')}{span} was "
        f"{found.get('why', 'short of CPU or late')}"
    )
