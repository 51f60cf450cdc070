"""``drtp experiment``: warmup + run against each registry of the config's ``registries:`` list, in turn.

The exit code is the highest of the registries' runs (drtp.exit_codes: 130 > 3 > 2 > 1 > 0).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from drtp.cli_options import add_config_options, apply_progress_options
from drtp.errors import DrtpError
from drtp.master.commands.options import (
    EXIT_CODES_HELP,
    add_replay_options,
    start_live_metrics,
)

if TYPE_CHECKING:
    from drtp.config import Config
    from drtp.master.run.settings import RunSettings


def cmd_experiment(args: argparse.Namespace) -> int:
    from drtp.master.run.settings import settings_from_args

    apply_progress_options(args)
    cfg, settings = settings_from_args(args)
    return run_experiment_command(args, cfg, settings)


def run_experiment_command(args: argparse.Namespace, cfg: Config, settings: RunSettings) -> int:
    """The experiment of ``cfg`` with ``settings`` (also ``drtp run`` of a config with a ``registries:`` list)."""
    from drtp.exit_codes import worst
    from drtp.master.outputs.live_metrics import exporting
    from drtp.master.series.experiment import run_experiment

    if args.resume and not args.out:
        raise DrtpError("--resume needs --out DIR: the directory of the interrupted experiment")
    with exporting(start_live_metrics(settings)) as live:
        status = run_experiment(cfg, settings, live=live)
    return worst(s["exit_code"] for s in status.values())


def register(sub) -> None:
    p = sub.add_parser(
        "experiment",
        help="warmup + run against each registry of 'registries:' in turn",
        description="For each entry of the config's 'registries:' list: preflight, warmup and run, results in "
        "OUT/<id>/; a registry that fails is recorded in OUT/experiment.json and the next one runs. "
        "The exit code is the highest of the registries' runs (130 > 3 > 2 > 1 > 0). " + EXIT_CODES_HELP,
    )
    add_config_options(p)
    p.add_argument("--out", help="experiment directory (default: <results>/experiment-<date>-<time>)")
    p.add_argument("--resume", action="store_true", help="skip registries done in --out DIR, resume the others")
    add_replay_options(p, each="for each registry's run")
    p.set_defaults(func=cmd_experiment)
