"""``drtp run``: replay the trace through the client nodes against the registry (once, or ``--repeat N`` times).

It ends with the exit codes of drtp.exit_codes, so that a script or a Slurm job can tell a run that measured
too many failures (1) from a bad input (2), a run that could not run or finish (3) and Ctrl-C (130).
"""

from __future__ import annotations

import argparse

from drtp.cli_options import add_config_options, apply_progress_options
from drtp.errors import DrtpError
from drtp.master.commands.options import (
    EXIT_CODES_HELP,
    add_replay_options,
    say,
    start_live_metrics,
)


def cmd_run(args: argparse.Namespace) -> int:
    import dataclasses

    from drtp.master.outputs.live_metrics import exporting
    from drtp.master.run.replay import default_out, run_replay
    from drtp.master.run.settings import settings_from_args
    from drtp.master.run.verdict import judge

    apply_progress_options(args)
    cfg, settings = settings_from_args(args)
    if args.resume and not args.out:
        raise DrtpError("--resume needs --out DIR: the directory of the interrupted run")
    if cfg.registries and not cfg.registry:  # a registry list: one experiment, warmup + run per registry
        from drtp.master.commands.experiment_cmd import run_experiment_command

        return run_experiment_command(args, cfg, settings)
    settings = dataclasses.replace(settings, out_dir=settings.out_dir or default_out(cfg))
    out = settings.out_dir
    if cfg.repeat > 1:  # repetitions: a series of runs, recorded and judged as an experiment's registries
        from drtp.exit_codes import worst
        from drtp.master.series.experiment import run_series
        from drtp.master.series.repeat import run_parts

        with exporting(start_live_metrics(settings)) as live:
            status = run_series(run_parts(cfg, out), out, settings, repeat=cfg.repeat, what="run", live=live)
        return worst(s["exit_code"] for s in status.values())
    if args.resume:
        from drtp.master.series.repeat import check_layout

        check_layout([out], 1)
    with exporting(start_live_metrics(settings)) as live:
        summary = run_replay(cfg, settings, live=live)
    verdict = judge(summary, settings.budget, list(settings.objectives), settings.max_replayer_limited)
    say(args, verdict.message, verdict.code)
    return verdict.code


def register(sub) -> None:
    p = sub.add_parser(
        "run",
        help="replay the trace through the client nodes against the registry",
        description="Replay the trace through the client nodes (client_info.client_list) against the registry; "
        "writes requests.csv and summary.json into the run directory. " + EXIT_CODES_HELP,
    )
    add_config_options(p)
    p.add_argument("--out", help="run directory (default: <results>/run-<date>-<time>)")
    p.add_argument(
        "--resume", action="store_true", help="continue the interrupted run in --out DIR; completed requests are kept"
    )
    add_replay_options(p)
    p.set_defaults(func=cmd_run)
