"""``drtp warmup``: push every object the trace reads into the registry (resumable), for each repetition's
repositories when the config repeats into fresh ones."""

from __future__ import annotations

import argparse

from drtp.cli_options import add_config_options, add_progress_options, apply_progress_options, config_from_args
from drtp.errors import DrtpError


def cmd_warmup(args: argparse.Namespace) -> int:
    from drtp.master.run.warmup import run_warmup

    apply_progress_options(args)
    cfg = config_from_args(args)
    if cfg.registries and not cfg.registry:
        raise DrtpError(
            f"{args.config}: has a 'registries:' list: use 'drtp experiment -c CONFIG' (warmup + run per registry)"
        )
    from drtp.master.series.repeat import repetition_configs

    # repeat: N (fresh): each repetition's repositories and map, as drtp run --repeat replays them
    subs = repetition_configs(cfg) if cfg.repeat_state == "fresh" else [cfg]
    if args.fresh:
        from drtp.registry.repo_hooks import created_path

        for sub in subs:
            path = sub.path(sub.warmup.output)
            for done in (path, created_path(path)):  # the map, and the repositories its hooks created
                done.unlink(missing_ok=True)
    for sub in subs:
        run_warmup(sub)
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "warmup",
        help="push every object the trace reads into the registry (resumable)",
        description="Push the blobs and manifests the trace reads (but does not push itself) into the registry, "
        "and save the trace reference → digest map (warmup.output) as it goes.",
    )
    add_config_options(p)
    p.add_argument("--fresh", action="store_true", help="ignore the existing warmup map and start over")
    add_progress_options(p)
    p.set_defaults(func=cmd_warmup)
