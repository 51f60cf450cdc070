"""``drtp warmup`` and ``drtp run``: the master's commands."""

from __future__ import annotations

import argparse
from pathlib import Path


def cmd_warmup(args: argparse.Namespace) -> int:
    from drtp.master.warmup import run_warmup

    from drtp.config import load_config

    cfg = load_config(args.config)
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
    summary = run_replay(cfg, Path(args.out) if args.out else None)
    return 1 if summary["dead_nodes"] and summary["not_sent"] else 0


def register(sub) -> None:
    p = sub.add_parser(
        "warmup",
        help="push every object the trace reads into the registry (resumable)",
        description="Push the blobs and manifests the trace reads (but does not push itself) into the registry, "
        "and save the trace reference → digest map (warmup.output) as it goes.",
    )
    p.add_argument("-c", "--config", required=True, help="YAML config file")
    p.add_argument("--fresh", action="store_true", help="ignore the existing warmup map and start over")
    p.set_defaults(func=cmd_warmup)

    p = sub.add_parser(
        "run",
        help="replay the trace through the client nodes against the registry",
        description="Replay the trace through the client nodes (client_info.client_list) against the registry; "
        "writes requests.csv and summary.json into the run directory.",
    )
    p.add_argument("-c", "--config", required=True, help="YAML config file")
    p.add_argument("--out", help="run directory (default: <results>/run-<date>-<time>)")
    p.set_defaults(func=cmd_run)
