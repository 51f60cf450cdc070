"""``drtp ramp``: open-loop steps of rising rate until the registry breaks its objectives — where is the knee?

Each step is a rate-mode run (master.run.replay, ``client_info.rate`` set to the
step's rate) of ``step_duration × rate`` requests, in a run directory of its
own under the ramp's; the steps share one preflight (the first step's).  The
trace runs on from step to step where the last one stopped, and from its start
again when it ends, so a short trace serves a long ramp.  A step holds when
it held every objective (drtp.replay.slo, judged on its summary).  Latency is
judged from each request's intended start, so when drtp itself falls behind
(too few ``threads`` for the rate, a loaded node) the delay is in the latency
judged, not hidden; the step's ``behind`` says so apart, and a step drtp could
not even start at its rate (``under_offered``) does not hold.  A step's
``replayer_limited`` is its summary's (a client node short of CPU or late,
drtp.master.outputs.replayer_health); with ``--max-replayer-limited`` such a step does
not hold either.  The ramp stops after
the first step that did not hold, or after the step at ``stop``.

``ramp.json`` (written after every step, so an interrupted ramp keeps its steps)
lists the steps and ``knee_rps``, the highest rate that held (null when none
did); ``ramp.png`` draws them (drtp.analysis.ramp_figures).  A step that could
not finish (every node died, a failed write, a bug in drtp) ends the ramp there,
its reason in ramp.json's ``error``.

What a ramp finds is the capacity of the path from these nodes: a hosted
registry that limits each source address may throttle a ramp from a few nodes
long before its capacity, and a trace with pushes writes to the registry at
every step, so later steps meet a registry with more in it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from drtp.config import Config
from drtp.config.upstreams import write_routes
from drtp.config_overrides import Override
from drtp.errors import DrtpError
from drtp.master.outputs.results_dir import remove_if_empty, write_failed
from drtp.master.run.plan import Planner, with_names
from drtp.master.run.replay import Replay
from drtp.master.run.settings import RunSettings, derive_config
from drtp.master.run.verdict import judge, replayer_limited
from drtp.outputs import prepare_output_dir
from drtp.registry.repo_names import RepositoryMap
from drtp.replay.failure_budget import FailureBudget
from drtp.replay.slo import Objective, judged_latency, throttled_share
from drtp.replay.summary import BEHIND_SHARE
from drtp.trace.reader import TraceReader
from drtp.trace.records import TraceRecord

if TYPE_CHECKING:  # prometheus-client is imported only by a run that exports
    from drtp.master.outputs.live_metrics import LiveMetrics

RAMP_FILE = "ramp.json"
RAMP_FIGURE = "ramp.png"
MAX_STEPS = 1000  # a ramp without --to stops here at the latest (the config bounds a rate at 1e6/s)


@dataclass(frozen=True)
class RampPlan:
    """The rates of a ramp: ``start``, ``start + step``, … up to ``stop`` (None: until a step breaks)."""

    start: float
    step: float
    stop: float | None
    step_duration_s: float

    def rates(self) -> Iterator[float]:
        for i in range(MAX_STEPS):
            rate = round(self.start + i * self.step, 9)  # 0.1 + 0.2 stays 0.3
            if self.stop is not None and rate > self.stop + 1e-9:
                return
            yield rate

    def requests(self, rate: float) -> int:
        """Requests of a step at ``rate``: its duration's worth, at least one."""
        return max(1, math.ceil(rate * self.step_duration_s - 1e-9))


class TraceLoop:
    """The trace's records (names mapped as a run maps them), from where the last step stopped, round and round."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.names = RepositoryMap.for_config(cfg)
        self.records: Iterator[TraceRecord] = iter(())
        self.laps = 0  # how often the trace was started from its beginning

    def _batches(self):
        return with_names(TraceReader(self.cfg.trace_paths(), **self.cfg.reader_options()).batches(), self.names)

    def check(self) -> int:
        """Read the whole trace once (a bad record is refused before any step); its number of requests."""
        total = sum(len(b) for b in self._batches())
        if total == 0:
            raise DrtpError(f"{self.cfg.source}: the trace has no requests to ramp with")
        return total

    def take(self, n: int) -> list[TraceRecord]:
        out: list[TraceRecord] = []
        while len(out) < n:
            out.extend(itertools.islice(self.records, n - len(out)))
            if len(out) < n:
                self.records = itertools.chain.from_iterable(self._batches())
                self.laps += 1
        return out


def step_entry(
    rate: float, summary: dict, run_dir: Path, objectives: list[Objective], max_replayer_limited: bool = False
) -> dict:
    """One step of ramp.json: what was offered and achieved, latency, failures per status, and whether it held.

    ``under_offered``: drtp started the step's requests at under 95 % of the offered rate (the step does not
    hold); ``replayer_limited``: the step's summary.json's (a client node short of CPU or late), which ends
    the ramp only with ``max_replayer_limited``.
    """
    # only the objectives (and, when asked, the replayer's health) judge a step, never its failures
    verdict = judge(summary, FailureBudget(percent=100), objectives, max_replayer_limited)
    latency = summary.get(judged_latency(summary)) or {}
    requests = int(summary["requests"])
    statuses = summary["failed_statuses"]
    achieved = summary.get("achieved_rps")
    offered = summary.get("offered_rps")
    broke = [j.why for j in verdict.objectives if not j.held]
    # a step drtp could not send at its rate did not show the registry held that rate: it ends the ramp
    # (with the replayer's limit named, not the registry's) rather than let the knee claim it
    under_offered = offered is not None and (achieved is None or achieved < BEHIND_SHARE * offered)
    if under_offered:
        shown = "none" if achieved is None else f"{achieved:.1f}/s"
        broke.append(
            f"drtp sent {shown} of the {offered:.1f}/s offered: the replayer's limit, not the registry's "
            "(more client nodes or threads)"
        )
    limited = replayer_limited(summary) if max_replayer_limited else None
    if limited:
        broke.append(limited)
    return {
        "rate": rate,
        "offered_rps": summary.get("offered_rps"),
        "achieved_rps": achieved,
        "requests": requests,
        "p50_ms": _ms(latency.get("p50")),
        "p99_ms": _ms(latency.get("p99")),
        "failed": (int(summary["failed"]) + int(summary.get("not_sent", 0))) / requests if requests else 0.0,
        "throttled": throttled_share(summary),
        "failed_statuses": statuses,
        "held": not broke,
        "under_offered": under_offered,
        "replayer_limited": bool(summary.get("replayer_limited")),
        "broken": "; ".join(broke) or None,
        "behind": summary.get("behind"),
        "run": run_dir.name,
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None or math.isnan(seconds) else seconds * 1000


def step_config(cfg: Config, rate: float) -> Config:
    """The config of the ramp's step at ``rate``: the ramp's, in rate mode at that rate (checked by the schema,
    so a config that cannot replay in rate mode is refused as a file setting ``client_info.rate`` would be)."""
    return derive_config(cfg, [Override("client_info.rate", rate, f"the ramp's step at {rate:g}/s")])


def run_ramp(cfg: Config, out: Path, plan: RampPlan, settings: RunSettings, live: LiveMetrics | None = None) -> dict:
    """Run the ramp's steps into ``out``; returns ramp.json's content.

    ``settings``: the steps' objectives (each must hold them), ``max_replayer_limited`` (a replayer-limited step
    does not hold), stats interval, and ``quiet`` for the ramp's own lines (each step's run prints none);
    ``live``: one exporter of live metrics for every step (each step offers its rate: ``drtp_offered_rps``).
    """
    objectives = list(settings.objectives)
    slo_text = ",".join(o.text for o in objectives)
    quiet, max_replayer_limited = settings.quiet, settings.max_replayer_limited
    made = prepare_output_dir(out, "--out")
    trace = TraceLoop(cfg)
    try:
        trace.check()
    except DrtpError:
        if made:
            remove_if_empty(out)  # no empty ramp directory for a ramp that never started
        raise
    ramp: dict = {
        "slo": slo_text,
        "latency": "response_s",
        "step_duration_s": plan.step_duration_s,
        "arrivals": cfg.client_info.arrivals,
        "steps": [],
        "knee_rps": None,
        "broke": False,  # a step broke the objectives (False with a knee: every step held, up to --to)
        "complete": False,
    }
    # one for every step: the trace goes on from step to step
    planner = Planner(cfg.require("registry"), writes=write_routes(cfg))
    run_dir: Path | None = None
    try:
        for i, rate in enumerate(plan.rates()):
            records = trace.take(plan.requests(rate))
            run_dir = out / f"step-{i + 1:02d}-{rate:g}rps"
            if not quiet:
                print(f"step {i + 1}: {rate:g} requests/s, {len(records):,} requests → {run_dir.name}/", flush=True)
            replay = Replay(
                step_config(cfg, rate),
                dataclasses.replace(settings, out_dir=run_dir, quiet=True, resume=False, tags={}),
                source=lambda records=records: [records],
                preflight=i == 0,
                planner=planner,
                live=live,
            )
            entry = step_entry(rate, replay.run(), run_dir, objectives, max_replayer_limited)
            ramp["steps"].append(entry)
            if entry["held"]:
                ramp["knee_rps"] = rate
            ramp["trace_laps"] = trace.laps
            _write(out, ramp)
            if not quiet:
                print("  " + describe_step(entry), flush=True)
            if not entry["held"]:
                ramp["broke"] = True
                break
        ramp["complete"] = True
    except DrtpError as e:  # a step that could not finish (a bug in drtp too): ramp.json says why, none follows
        ramp["error"] = str(e)
        raise
    finally:
        # a step that broke off still wrote its summary.json: ramp.json then says why the ramp ended there
        ran = ramp["steps"] or ramp["complete"] or (run_dir is not None and (run_dir / "summary.json").exists())
        if not ran:
            if made:
                remove_if_empty(out)  # the first step never ran (its preflight failed…): nothing to keep
        else:
            _write(out, ramp)
        if ramp["steps"]:
            from drtp.analysis.plotting import save
            from drtp.analysis.ramp_figures import fig_ramp

            save(fig_ramp(ramp), out / RAMP_FIGURE)
    return ramp


def describe_step(s: dict) -> str:
    """A step in one line, as the console shows it."""
    p50 = "-" if s["p50_ms"] is None else f"{s['p50_ms']:.1f}"
    p99 = "-" if s["p99_ms"] is None else f"{s['p99_ms']:.1f}"
    line = (
        f"offered {_rate(s['offered_rps'])}, achieved {_rate(s['achieved_rps'])}, p50 {p50} ms, p99 {p99} ms, "
        f"failed {s['failed']:.1%}, throttled {s['throttled']:.1%}: "
    )
    return line + ("held" if s["held"] else f"broken ({s['broken']})")


def _rate(rps: float | None) -> str:
    return "-" if rps is None else f"{rps:.1f}/s"


def _write(out: Path, ramp: dict) -> None:
    path = out / RAMP_FILE
    try:
        path.write_text(json.dumps(ramp, indent=2, allow_nan=False))
    except OSError as e:
        raise write_failed(path, e) from None
