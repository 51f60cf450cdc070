"""``drtp ramp``: open-loop steps of rising rate until the registry breaks its objectives (the knee).

Exit codes: 0 the ramp ran (ramp.json's knee_rps says where it broke); 1 not even the first step held (or a
step was replayer-limited under ``--max-replayer-limited``); 2 bad input; 3 a step could not run or finish.
"""

from __future__ import annotations

import argparse

from drtp.cli_options import (
    add_config_options,
    add_progress_options,
    apply_progress_options,
    non_negative_int,
    positive_duration,
    positive_float,
)
from drtp.errors import DrtpError
from drtp.master.commands.options import (
    SLO_HELP,
    add_event_option,
    add_live_metrics_options,
    add_max_replayer_limited_option,
    add_stats_interval_option,
    add_token_file_option,
    say,
    start_live_metrics,
)


def cmd_ramp(args: argparse.Namespace) -> int:
    import datetime as _dt
    from pathlib import Path

    from drtp.exit_codes import ExitCode
    from drtp.master.outputs.live_metrics import exporting
    from drtp.master.run.settings import settings_from_args
    from drtp.master.series.ramp import RampPlan, run_ramp, step_config

    apply_progress_options(args)
    cfg, settings = settings_from_args(args, quiet=args.quiet)
    if cfg.registries and not cfg.registry:
        raise DrtpError(f"{args.config}: has a 'registries:' list: a ramp runs against one registry ('registry:')")
    step_config(cfg, args.start)  # a config that cannot replay in rate mode is refused before anything starts
    if cfg.repeat > 1:
        raise DrtpError(f"{cfg.source}: key 'repeat': a ramp runs once (its steps are the series); remove the key")
    if args.to is not None and args.to < args.start:
        raise DrtpError(f"--to {args.to:g}: below --from {args.start:g}")
    if not settings.objectives:
        raise DrtpError("--slo: missing: a ramp needs the objectives a step must hold (or client_info.slo)")
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else cfg.path(cfg.results) / f"ramp-{stamp}"
    plan = RampPlan(args.start, args.step, args.to, args.step_duration)
    if cfg.events:  # each step runs them on its own clock: each must fit the first step, the one of fewest requests
        from drtp.master.outputs.events import check_event_times

        check_event_times(cfg, args.step_duration, plan.requests(args.start), settings.events_origin)
    slo_text = ",".join(o.text for o in settings.objectives)
    with exporting(start_live_metrics(settings)) as live:
        ramp = run_ramp(cfg, out, plan, settings, live=live)
    knee = ramp["knee_rps"]
    if not args.quiet:
        print(
            f"knee: {_knee_text(ramp)} ({slo_text}); results in {out}/ (ramp.json, ramp.png, a run directory per step)"
        )
    limited = [s for s in ramp["steps"] if s["replayer_limited"]]
    if settings.max_replayer_limited and limited:  # the step that ended the ramp: the knee is the replayer's
        step = limited[0]
        say(args, f"step at {step['rate']:g}/s: {step['broken']}", 1)
        return ExitCode.TOO_MANY_FAILED
    if knee is None:
        say(args, f"no step held the objectives {slo_text}: the first, at {args.start:g}/s, broke them", 1)
        return ExitCode.TOO_MANY_FAILED
    return ExitCode.OK


def _knee_text(ramp: dict) -> str:
    """Where the ramp's objectives broke, or that they never did (the last rate is then no knee)."""
    knee = ramp["knee_rps"]
    if knee is None:
        return "none"
    if not ramp.get("broke"):
        return f"none found: every step held, up to {knee:g} requests/s"
    return f"{knee:g} requests/s"


def register(sub) -> None:
    p = sub.add_parser(
        "ramp",
        help="open-loop steps of rising rate until the registry breaks its objectives (the knee)",
        description="Rate-mode runs at --from, --from + --step, ... requests per second, --step-duration seconds "
        "each (the trace continues from step to step, from its start again at its end), until a step breaks the "
        "--slo objectives or the step at --to; writes ramp.json (each step; knee_rps, the highest rate that held) "
        "and ramp.png into --out, and each step's run directory. A ramp from a few nodes may find a per-source-"
        "address limit of a hosted registry, not its capacity; a trace with pushes changes the registry between "
        "steps. Run 'drtp warmup' first. Exit codes: 0 the ramp ran (knee_rps says where it broke); 1 not even "
        "the first step held; 2 bad input; 3 a step could not run or finish; 130 interrupted.",
    )
    add_config_options(p)
    p.add_argument("--out", help="ramp directory (default: <results>/ramp-<date>-<time>)")
    p.add_argument("--from", dest="start", type=positive_float, required=True, metavar="R0",
                   help="rate of the first step (requests/s)")  # fmt: skip
    p.add_argument("--step", type=positive_float, required=True, metavar="DR", help="rate added at each step")
    p.add_argument("--to", type=positive_float, metavar="RMAX", help="rate of the last step (default: until broken)")
    p.add_argument("--step-duration", type=positive_duration, required=True, metavar="SECONDS",
                   help="seconds of requests per step (rate × this many requests)")  # fmt: skip
    p.add_argument("--slo", metavar="EXPR", help=SLO_HELP.replace("for exit 0", "at each step"))
    add_max_replayer_limited_option(p, ramp=True)
    p.add_argument(
        "--arrivals",
        choices=("constant", "poisson"),
        help="starts 1/R apart (constant) or independent (poisson); default: client_info.arrivals",
    )
    p.add_argument("--seed", type=non_negative_int, help="poisson arrivals: the random seed")
    add_token_file_option(p)
    add_stats_interval_option(p)
    add_live_metrics_options(p)
    add_event_option(p)  # each step runs the events on its own clock
    add_progress_options(p)
    p.set_defaults(func=cmd_ramp)
