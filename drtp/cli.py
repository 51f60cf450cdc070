"""The ``drtp`` command: assembles the subcommands every part of drtp registers.

Each module of :data:`COMMAND_MODULES` adds its subcommands through a
``register(subparsers)`` function; their option types and parser class come
from drtp.cli_options.  User mistakes raise :class:`~drtp.errors.DrtpError`
and end as one line on stderr with the error's exit code: 2 for a bad input,
3 (:class:`~drtp.errors.RunError`) when drtp could not run or finish.  A bug
exits 3 with its traceback, never 1: 1 means a run completed with too many
failed requests (drtp.exit_codes).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from drtp import __version__
from drtp.cli_options import DrtpArgumentParser
from drtp.errors import DrtpError
from drtp.exit_codes import ExitCode

CONFIG_COMMAND = "drtp.cli"  # the one command this module registers itself: `drtp config`

# modules that add subcommands (each has register(subparsers)), in the order `drtp --help` lists them
COMMAND_MODULES: tuple[str, ...] = (
    "drtp.trace.cli",  # generate, inspect, capture, convert, sample
    "drtp.analysis.cost",  # cost
    CONFIG_COMMAND,  # config
    "drtp.master.demo",  # demo
    "drtp.master.cli",  # warmup, run, experiment, bench
    "drtp.client.cli",  # client
    "drtp.cluster.cli",  # slurm, deploy
    "drtp.plugins.cli",  # simulate
    "drtp.analysis.cli",  # analyze
    "drtp.master.selfbench",  # selfbench
)


def cmd_config(args: argparse.Namespace) -> int:
    import yaml

    from drtp.config import load_config, redacted

    cfg = load_config(args.config)
    print(f"# {args.config}: valid")
    print(yaml.safe_dump(redacted(cfg), sort_keys=False), end="")
    return 0


def register_config(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="validate a config file and print it (secrets masked)")
    p.add_argument("-c", "--config", required=True, help="YAML config file")
    p.set_defaults(func=cmd_config)


def build_parser() -> argparse.ArgumentParser:
    parser = DrtpArgumentParser(
        prog="drtp",
        description="drtp — the Docker Registry Trace Player: replay, simulate and analyse registry traces.",
    )
    parser.add_argument("--version", action="version", version=f"drtp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        register = register_config if name == CONFIG_COMMAND else importlib.import_module(name).register
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return ExitCode.BAD_INPUT
    try:
        return int(args.func(args) or 0)
    except DrtpError as e:
        print(f"drtp: error: {e}", file=sys.stderr)  # one line: DrtpError escapes any line break it quotes
        return e.exit_code
    except KeyboardInterrupt:
        print("drtp: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception:  # a bug: its traceback is what a report needs, and Python's own exit 1 would read as a verdict
        traceback.print_exc()
        print("drtp: internal error (the traceback above is a bug in drtp)", file=sys.stderr)
        return ExitCode.CANNOT_RUN


if __name__ == "__main__":
    sys.exit(main())
