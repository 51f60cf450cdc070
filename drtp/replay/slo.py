"""Service-level objectives a run must hold: ``--slo "p99<200ms,failed<1%"``.

One grammar for ``drtp run``, ``drtp experiment`` and ``drtp ramp`` (and the
config's ``client_info.slo``), judged on a run's ``summary.json`` only, so an
objective says the same about a run whenever it is judged.

Grammar: objectives joined by commas, each ``[SCOPE:]STAT<VALUE``:

* ``STAT`` ``p50``, ``p90``, ``p99`` or ``mean``: latency of the succeeded
  requests, ``VALUE`` in ``ms`` or ``s``;
* ``STAT`` ``failed`` (share of the trace requests that did not succeed) or
  ``throttled`` (share of the requests the registry answered 429 as a failure:
  for the whole run, trace and helper requests both, so a throttled upload
  open, whose trace PATCH is then not sent, counts; for a scope, its trace
  requests), ``VALUE`` a percentage (``1%``);
* ``SCOPE`` a method and kind as the summary's ``per_method`` names them
  (``GET blob``, ``PUT manifest``); without one, the whole run.

The latency judged is ``response_s`` in rate mode (from each request's
intended start, so a registry that stalls cannot hide it by slowing the
sender: coordinated omission) and ``latency_s`` otherwise (from the actual
start).  An objective on a slice with no requests, or on latency where no
request succeeded, does not hold: there is nothing that shows it held.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from drtp.replay.messages import KINDS

LATENCY_STATS = ("p50", "p90", "p99", "mean")
SHARE_STATS = ("failed", "throttled")
THROTTLED_STATUS = "429"
METHODS = ("GET", "HEAD", "PUT", "PATCH", "POST", "DELETE")  # the trace methods a scope may name
_OBJECTIVE = re.compile(
    r"^\s*(?:(?P<scope>[A-Za-z]+\s+[A-Za-z]+)\s*:)?\s*(?P<stat>[A-Za-z0-9]+)\s*<\s*"
    r"(?P<value>\d{1,15}(?:\.\d{0,15})?|\.\d{1,15})\s*(?P<unit>ms|s|%)?\s*$",
    re.ASCII | re.IGNORECASE,  # ASCII digits only (a "１００" is no number here); MS and ms alike
)
GRAMMAR = "objectives as [METHOD KIND:]STAT<VALUE joined by commas, e.g. 'p99<200ms,failed<1%,GET blob:p50<50ms'"


@dataclass(frozen=True)
class Objective:
    """One ``[scope:]stat<limit``; ``limit`` in seconds for latency, as a fraction (0.01 = 1 %) for shares."""

    text: str
    stat: str
    limit: float
    scope: str | None = None  # "GET blob": a key of the summary's per_method; None: the whole run

    def describe(self, value: float) -> str:
        """``value`` of this objective's statistic as a person reads it (ms, or %)."""
        if self.stat in LATENCY_STATS:
            return f"{value * 1000:.1f} ms"
        return f"{value:.2%}"


@dataclass(frozen=True)
class Judged:
    """An objective and what the run showed: ``value`` None when the run had nothing to measure it on."""

    objective: Objective
    value: float | None
    held: bool
    why: str  # one clause: "p99 312.4 ms, not < 200 ms" or "no GET blob requests"


def parse_slo(text: str) -> list[Objective]:
    """The objectives of ``text``; ValueError names the objective that is wrong (the caller names the option)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"empty: expected {GRAMMAR}")
    out = []
    for part in text.split(","):
        m = _OBJECTIVE.match(part)
        if m is None:
            raise ValueError(f"{part.strip()!r} is not an objective: expected {GRAMMAR}")
        stat, unit, value = m["stat"].lower(), (m["unit"] or "").lower() or None, float(m["value"])
        if value == 0:
            raise ValueError(f"{part.strip()!r}: a limit of 0 never holds (objectives are '<'): e.g. failed<0.01%")
        if stat in LATENCY_STATS:
            if unit not in ("ms", "s"):
                raise ValueError(f"{part.strip()!r}: {stat} needs a time in ms or s (e.g. {stat}<200ms)")
            limit = value / 1000 if unit == "ms" else value
        elif stat in SHARE_STATS:
            if unit != "%":
                raise ValueError(f"{part.strip()!r}: {stat} needs a percentage (e.g. {stat}<1%)")
            if value > 100:
                raise ValueError(f"{part.strip()!r}: more than 100%")
            limit = value / 100
        else:
            raise ValueError(
                f"{part.strip()!r}: unknown statistic {m['stat']!r}; one of {', '.join(LATENCY_STATS + SHARE_STATS)}"
            )
        scope = None
        if m["scope"]:
            method, kind = m["scope"].split()
            if method.upper() not in METHODS or kind.lower() not in KINDS:
                raise ValueError(
                    f"{part.strip()!r}: scope {m['scope']!r} is not a method ({', '.join(METHODS)}) and kind "
                    f"({', '.join(KINDS)}), e.g. 'GET blob'"
                )
            scope = f"{method.upper()} {kind.lower()}"
        out.append(Objective(" ".join(part.split()), stat, limit, scope))
    return out


def judged_latency(summary: dict) -> str:
    """The summary key of the latency objectives judge: from the intended start in rate mode."""
    return "response_s" if summary.get("mode") == "rate" else "latency_s"


def judge_slo(summary: dict, objectives: list[Objective]) -> list[Judged]:
    """Each objective against ``summary`` (a run's summary.json, with ``failed_statuses`` for ``throttled``)."""
    return [_judge(summary, o) for o in objectives]


def broken(judged: list[Judged]) -> str:
    """One line naming the objectives that did not hold; empty when all held."""
    return "; ".join(f"objective {j.objective.text} broken: {j.why}" for j in judged if not j.held)


def _judge(summary: dict, o: Objective) -> Judged:
    where = "the run" if o.scope is None else o.scope
    group = summary if o.scope is None else summary.get("per_method", {}).get(o.scope)
    if not group or not group.get("requests"):
        return Judged(o, None, False, f"no {o.scope or 'trace'} requests in the run")
    if o.stat in LATENCY_STATS:
        value = (group.get(judged_latency(summary)) or {}).get(o.stat)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return Judged(o, None, False, f"no request of {where} succeeded: its {o.stat} is unknown")
    else:
        requests = int(group["requests"])
        if o.stat == "failed":
            failed = int(group["failed"])
            if o.scope is None:  # requests never sent (every node died) did not succeed either
                failed += int(summary.get("not_sent", 0))
                requests = int(summary.get("trace_requests", requests))
            value = failed / requests if requests else 0.0
        else:
            if group.get("failed_statuses") is None:
                return Judged(o, None, False, f"the summary of {where} has no failed_statuses to count 429s in")
            value = throttled_share(summary if o.scope is None else group, helpers=o.scope is None)
    held = value < o.limit
    limit = o.describe(o.limit)
    why = f"{o.stat} {o.describe(value)}" + ("" if held else f", not < {limit}")
    if o.scope is not None:
        why = f"{o.scope} {why}"
    return Judged(o, value, held, why)


def throttled_share(summary: dict, helpers: bool = True) -> float:
    """The share of requests the registry answered 429 (failed ones: a 429 the trace itself recorded is the
    replay matching it).  ``helpers``: a whole run's summary, whose helper requests (``auxiliary``) count too:
    a registry that throttles upload opens throttles the push, though the trace's own PATCH is not sent."""
    throttled = int((summary.get("failed_statuses") or {}).get(THROTTLED_STATUS, 0))
    requests = int(summary.get("requests", 0))
    aux = summary.get("auxiliary") or {}
    if helpers and aux:
        throttled += int((aux.get("failed_statuses") or {}).get(THROTTLED_STATUS, 0))
        requests += int(aux.get("requests", 0))
    return throttled / requests if requests else 0.0
