"""``drtp simulate``: run an offline simulation plugin (or a sweep) over a trace."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from drtp.cli_options import add_config_options, config_from_args, positive_int


def cmd_simulate(args: argparse.Namespace) -> int:
    if args.list:
        print(list_plugins())
        return 0
    if not args.config:
        from drtp.errors import DrtpError

        raise DrtpError("simulate: give -c CONFIG (or --list)")
    import pandas as pd

    from drtp.outputs import prepare_output_dir
    from drtp.plugins.run import default_out_dir, format_summary, format_sweep, simulate

    cfg = config_from_args(args)
    if cfg.simulate is None:
        from drtp.errors import ConfigError

        raise ConfigError(f"{args.config}: missing key 'simulate' (required for this command)")
    out = Path(args.out) if args.out else default_out_dir(cfg, cfg.simulate.name)
    prepare_output_dir(out, "--out" if args.out else f"{args.config}: key 'results'")
    summary = simulate(cfg, out, jobs=args.jobs)
    if "sweep" in summary:
        print(format_sweep(pd.read_csv(out / "sweep.csv")))
        print(f"\n{summary['points']} points in {summary['sweep_s']:.2f} s (trace loaded in {summary['load_s']:.2f} s)")
    else:
        print(format_summary(summary))
    print(f"results: {out}")
    return 0


def list_plugins() -> str:
    """Every plugin and its arguments, for ``drtp simulate --list``."""
    from drtp.plugins.base import builtin_names, describe_args, find_plugin
    from drtp.plugins.policies import libcachesim_policies, policy_parameters

    lines = []
    for name in builtin_names():
        cls = find_plugin(name)
        lines.append(f"{name}: {cls.description}")
        for key, default, help_text in describe_args(cls):
            lines.append(f"    {key:<17} {default:<12} {help_text}")
        lines.append("")
    lines.append("libcachesim:<policy>: a libCacheSim eviction policy over the same layer requests;")
    lines.append("    arguments as for lru, plus 'params' (the policy's own parameters). Policies:")
    for cls in libcachesim_policies().values():
        params = policy_parameters(cls)
        extra = ", ".join(f"{k}={json.dumps(v)}" for k, v in params.items())
        lines.append(f"    libcachesim:{cls.__name__}" + (f"  params: {extra}" if extra else ""))
    lines.append("")
    lines.append("<path>.py: an original-contract plugin, init(requests) or init(requests, args);")
    lines.append("    args are passed through unchanged.")
    lines.append("<path>.py defining Plugin (a drtp.plugins.base.SimPlugin subclass): runs like a built-in.")
    lines.append("")
    lines.append("A list as an argument's value (capacity: [2%, 4%]) runs a sweep over it.")
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="offline simulation: caches, prefetching, sweeps, original-contract plugins",
        description="Feed the trace to a simulation plugin (simulate.name / simulate.args in the config). "
        "A list as an argument value runs a sweep over it in parallel processes.",
    )
    add_config_options(p, required=False, help="YAML config with trace: and simulate: sections")
    p.add_argument("--out", help="results directory (default <results>/simulate-<name>-<time>)")
    p.add_argument(
        "--jobs", type=positive_int, default=os.cpu_count() or 1, help="worker processes for sweeps (default: CPUs)"
    )
    p.add_argument("--list", action="store_true", help="list the plugins and their arguments")
    p.set_defaults(func=cmd_simulate)
