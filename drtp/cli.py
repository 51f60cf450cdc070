"""The ``drtp`` command: one subcommand per job.

Core subcommands live here; each other part of drtp (master, plugins,
analysis…) registers its own subcommands through a ``register(subparsers)``
function listed in :data:`COMMAND_MODULES`.  User mistakes raise
:class:`~drtp.errors.DrtpError` and end as one line on stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import sys
import time
from pathlib import Path

from drtp import __version__
from drtp.errors import DrtpError

# modules that add subcommands of their own (each has register(subparsers))
COMMAND_MODULES: tuple[str, ...] = ("drtp.master.cli", "drtp.client.cli", "drtp.cluster.cli")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0: {text!r}")
    return value


def _size(text: str) -> int:
    from drtp.units import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _duration(text: str) -> float:
    from drtp.units import parse_duration

    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _timestamp(text: str) -> _dt.datetime:
    try:
        ts = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO timestamp: {text!r}") from None
    return ts if ts.tzinfo else ts.replace(tzinfo=_dt.timezone.utc)


def add_trace_options(p: argparse.ArgumentParser) -> None:
    """Options every command that reads trace files shares."""
    p.add_argument(
        "--format",
        default="auto",
        choices=["auto", "ibm", "jsonl", "registry-log"],
        help="input format (default: detected from the file)",
    )
    p.add_argument("--skip-bad", action="store_true", help="skip and count malformed records instead of stopping")
    limit = p.add_mutually_exclusive_group()
    limit.add_argument("--requests", type=_positive_int, metavar="N", help="read only the first N records")
    limit.add_argument("--seconds", type=_duration, metavar="S", help="read only the first S seconds of the trace")


def reader_from_args(args: argparse.Namespace):
    from drtp.trace import TraceReader

    limit_type, amount = (None, None)
    if args.requests is not None:
        limit_type, amount = "requests", args.requests
    elif args.seconds is not None:
        limit_type, amount = "seconds", args.seconds
    return TraceReader(args.files, fmt=args.format, skip_bad=args.skip_bad, limit_type=limit_type, amount=amount)


# -- generate -------------------------------------------------------------------


def cmd_generate(args: argparse.Namespace) -> int:
    from drtp.generate import GenerateOptions, generate
    from drtp.progress import progress
    from drtp.trace import write_ibm

    opts = GenerateOptions(
        requests=args.requests,
        seed=args.seed,
        span_s=args.span,
        start=args.start,
        clients=args.clients,
        repositories=args.repositories,
        max_layer_size=args.max_layer_size,
    )
    t0 = time.perf_counter()
    with progress(total=args.requests, desc="generate", unit="req") as bar:
        n = write_ibm(args.output, bar.wrap(generate(opts)))
    print(f"wrote {n:,} records to {args.output} in {time.perf_counter() - t0:.1f} s")
    return 0


# -- inspect --------------------------------------------------------------------


def cmd_inspect(args: argparse.Namespace) -> int:
    from drtp.analysis.trace_summary import format_summary, summarize

    reader = reader_from_args(args)
    summary = summarize(reader.batches())
    summary["skipped"] = reader.stats.skipped
    summary["ignored"] = reader.stats.ignored
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        print()
    else:
        print(format_summary(summary))
    for problem in reader.stats.problems[:5]:
        print(f"skipped: {problem}", file=sys.stderr)
    return 0


# -- config ---------------------------------------------------------------------


def cmd_config(args: argparse.Namespace) -> int:
    import yaml

    from drtp.config import load_config, redacted

    cfg = load_config(args.config)
    print(f"# {args.config}: valid")
    print(yaml.safe_dump(redacted(cfg), sort_keys=False), end="")
    return 0


# -- demo -----------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    from drtp.demo import run_demo

    return run_demo(Path(args.out), requests=args.requests, seed=args.seed)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="drtp",
        description="drtp — the Docker Registry Trace Player: replay, simulate and analyse registry traces.",
    )
    parser.add_argument("--version", action="version", version=f"drtp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "generate",
        help="write a synthetic trace in the IBM format",
        description="Write a synthetic registry trace (IBM JSON format) with a realistic shape.",
    )
    p.add_argument("-o", "--output", required=True, help="trace file to write (.json, or .json.gz)")
    p.add_argument("-n", "--requests", type=_positive_int, default=10_000, help="number of records (default 10000)")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument(
        "--span", type=_duration, default=86_400.0, help="approximate time span, e.g. 3600 or 1d (default 1d)"
    )
    p.add_argument(
        "--start",
        type=_timestamp,
        default=_dt.datetime(2017, 8, 1, tzinfo=_dt.timezone.utc),
        help="timestamp of the start (default 2017-08-01T00:00:00Z)",
    )
    p.add_argument("--clients", type=_positive_int, default=200, help="number of distinct clients (default 200)")
    p.add_argument("--repositories", type=_positive_int, default=300, help="number of repositories (default 300)")
    p.add_argument(
        "--max-layer-size", type=_size, default=256 << 20, help="cap on layer sizes, e.g. 4MB (default 256MiB)"
    )
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser(
        "inspect",
        help="summarise trace files (counts, span, bytes, clients…)",
        description="Read trace files and print what they hold; also checks them for bad records.",
    )
    p.add_argument("files", nargs="+", help="trace files: IBM JSON arrays, JSON lines or registry JSON logs")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_trace_options(p)
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("config", help="validate a config file and print it (secrets masked)")
    p.add_argument("-c", "--config", required=True, help="YAML config file")
    p.set_defaults(func=cmd_config)

    p = sub.add_parser("demo", help="the main job on a local registry: generate, start a registry, replay, summarise")
    p.add_argument("--out", default="results/demo", help="output directory (default results/demo)")
    p.add_argument("--requests", type=_positive_int, default=2000, help="trace length (default 2000)")
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=cmd_demo)

    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except DrtpError as e:
        print(f"drtp: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("drtp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
