"""``drtp warmup`` and ``drtp run``: the master's commands."""

from __future__ import annotations

import argparse
from pathlib import Path

from drtp.errors import DrtpError


def cmd_warmup(args: argparse.Namespace) -> int:
    from drtp.master.warmup import run_warmup

    from drtp.config import load_config

    cfg = load_config(args.config)
    if args.fresh and args.resume:
        raise DrtpError("--fresh and --resume contradict each other")
    if cfg.registries and not cfg.registry:
        raise DrtpError(
            f"{args.config}: has a 'registries:' list: use 'drtp experiment -c CONFIG' (warmup + run per registry)"
        )
    if args.fresh:
        path = cfg.path(cfg.warmup.output)
        if path.exists():
            path.unlink()
    run_warmup(cfg)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from drtp.master.run import run_replay

    from drtp.config import load_config

    cfg = load_config(args.config)
    if args.resume and not args.out:
        raise DrtpError("--resume needs --out DIR: the directory of the interrupted run")
    if cfg.registries and not cfg.registry:  # a registry list: one experiment, warmup + run per registry
        return cmd_experiment(args)
    summary = run_replay(cfg, Path(args.out) if args.out else None, resume=args.resume)
    return 1 if summary["dead_nodes"] and summary["not_sent"] else 0


def cmd_experiment(args: argparse.Namespace) -> int:
    from drtp.master.experiment import run_experiment

    from drtp.config import load_config

    cfg = load_config(args.config)
    if args.resume and not args.out:
        raise DrtpError("--resume needs --out DIR: the directory of the interrupted experiment")
    status = run_experiment(cfg, Path(args.out) if args.out else None, resume=args.resume)
    return 0 if all(s["ok"] for s in status.values()) else 1


def register(sub) -> None:
    p = sub.add_parser(
        "warmup",
        help="push every object the trace reads into the registry (resumable)",
        description="Push the blobs and manifests the trace reads (but does not push itself) into the registry, "
        "and save the trace reference → digest map (warmup.output) as it goes.",
    )
    p.add_argument("-c", "--config", required=True, help="YAML config file")
    p.add_argument("--fresh", action="store_true", help="ignore the existing warmup map and start over")
    p.add_argument(
        "--resume", action="store_true", help="continue from the warmup map (the default; says so explicitly)"
    )
    p.set_defaults(func=cmd_warmup)

    p = sub.add_parser(
        "run",
        help="replay the trace through the client nodes against the registry",
        description="Replay the trace through the client nodes (client_info.client_list) against the registry; "
        "writes requests.csv and summary.json into the run directory.",
    )
    p.add_argument("-c", "--config", required=True, help="YAML config file")
    p.add_argument("--out", help="run directory (default: <results>/run-<date>-<time>)")
    p.add_argument(
        "--resume", action="store_true", help="continue the interrupted run in --out DIR; completed requests are kept"
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "experiment",
        help="warmup + run against each registry of 'registries:' in turn",
        description="For each entry of the config's 'registries:' list: preflight, warmup and run, results in "
        "OUT/<id>/; a registry that fails is recorded in OUT/experiment.json and the next one runs.",
    )
    p.add_argument("-c", "--config", required=True, help="YAML config file")
    p.add_argument("--out", help="experiment directory (default: <results>/experiment-<date>-<time>)")
    p.add_argument("--resume", action="store_true", help="skip registries done in --out DIR, resume the others")
    p.set_defaults(func=cmd_experiment)
