"""The ``drtp`` command: assembles the subcommands every part of drtp registers.

Each module of :data:`COMMAND_MODULES` adds its subcommands through a
``register(subparsers)`` function; their option types and parser class come
from drtp.cli_options.  User mistakes raise :class:`~drtp.errors.DrtpError`
and end as one line on stderr with the error's exit code: 2 for a bad input,
3 (:class:`~drtp.errors.RunError`) when drtp could not run or finish.  A bug
exits 3 with its traceback, never 1: 1 means a run completed with too many
failed requests (drtp.exit_codes).

``drtp --help`` lists the subcommands by what a user comes to do
(:data:`COMMAND_GROUPS`), with one example line per group; the list is made
from the registered subcommands, so a command no group names is still listed,
under "other commands" (and a test fails until it gets its group).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
import threading
import traceback

import msgspec

from drtp import __version__
from drtp.cli_options import (
    DrtpArgumentParser,
    add_config_options,
    add_verbose_option,
    effective_config_from_args,
    refusal,
)
from drtp.errors import DrtpError
from drtp.exit_codes import ExitCode
from drtp.verbosity import set_verbosity

log = logging.getLogger("drtp.cli")


_signals: list[int] = []  # the SIGTERMs this process received: its last line says which stop it was


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM (``kill``, Slurm's time limit and ``scancel``) taken as Ctrl-C: the run stops, keeps what it
    measured and writes its summary (``complete: false``), instead of dying with rows and no summary."""
    _signals.append(signum)
    raise KeyboardInterrupt


def _on_sigterm_interrupt() -> object:
    """Make SIGTERM stop the command as Ctrl-C does; returns the handler it replaced (None off the main
    thread, where Python lets no handler be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _terminated)


CONFIG_COMMAND = "drtp.cli"  # the one command this module registers itself: `drtp config`

# modules that add subcommands (each has register(subparsers)), in the order `drtp --help` lists them
COMMAND_MODULES: tuple[str, ...] = (
    "drtp.trace.cli",  # generate, inspect, capture, convert, sample
    "drtp.analysis.cost",  # cost
    CONFIG_COMMAND,  # config
    "drtp.master.demo",  # demo
    "drtp.master.cli",  # warmup, run, experiment, ramp, bench
    "drtp.master.clean",  # clean
    "drtp.client.cli",  # client
    "drtp.cluster.cli",  # slurm, deploy
    "drtp.plugins.cli",  # simulate
    "drtp.analysis.cli",  # analyze
    "drtp.master.selfbench",  # selfbench
)


class CommandGroup(msgspec.Struct, frozen=True):
    """A heading of ``drtp --help``: the subcommands a user looks for under it, and one example line."""

    title: str
    commands: tuple[str, ...]
    example: str


COMMAND_GROUPS: tuple[CommandGroup, ...] = (
    CommandGroup(
        "replay against a registry",
        ("demo", "config", "warmup", "run", "experiment", "ramp", "client", "clean"),
        "drtp warmup -c config.yaml && drtp run -c config.yaml --set client_info.threads=32",
    ),
    CommandGroup(
        "simulate caches and prefetching offline",
        ("simulate",),
        "drtp simulate -c simulate.yaml --set simulate.args.capacity=[2%,4%]",
    ),
    CommandGroup(
        "analyze traces and runs",
        ("analyze", "cost"),
        "drtp analyze results results/run-20260101-120000 --out analysis/",
    ),
    CommandGroup(
        "trace tools",
        ("generate", "inspect", "capture", "convert", "sample"),
        "drtp generate -o trace.json -n 10000 && drtp inspect trace.json",
    ),
    CommandGroup(
        "cluster",
        ("slurm", "deploy"),
        "drtp slurm submit -c config.yaml",
    ),
    CommandGroup(
        "benchmarks",
        ("bench", "selfbench"),
        "drtp bench push --registry http://localhost:5000 --insecure --iterations 10",
    ),
)

OVERRIDES_HELP = """\
config keys from the command line and the environment (every command that takes -c CONFIG):
  --set KEY=VALUE                  e.g. --set client_info.threads=8 --set trace.limit.amount=1000 (repeatable)
  DRTP_CONFIG__SECTION__KEY=VALUE  e.g. DRTP_CONFIG__CLIENT_INFO__THREADS=8
  precedence: file < environment < --set; 'drtp config -c FILE' shows the result
  -v (or the config's verbose: true) logs what drtp does; -vv adds debug detail

'drtp COMMAND --help' tells more about each command."""


def cmd_config(args: argparse.Namespace) -> int:
    from drtp.config import redacted

    effective = effective_config_from_args(args)
    print(f"# {args.config}: valid; every key with the value a command will use (secrets masked)")
    for line in commented_yaml(redacted(effective.config, full=True), effective.origin):
        print(line)
    return 0


def commented_yaml(data: dict, origin, prefix: str = "", indent: str = "") -> list[str]:
    """``data`` as YAML lines, a section per mapping and each value in flow style, marked with where it was set.

    ``origin(key)`` names the environment variable or ``--set`` that set a dotted key (None: the file or
    the default); the marks are YAML comments, so the text still loads as the same data.
    """
    import yaml

    lines = []
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        where = origin(dotted)
        mark = f"  # from {where}" if where else ""
        if isinstance(value, dict) and value:
            lines.append(f"{indent}{key}:{mark}")
            lines.extend(commented_yaml(value, origin, dotted + ".", indent + "  "))
            continue
        text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30, sort_keys=False, allow_unicode=True)
        lines.append(f"{indent}{key}: {text.removesuffix('...' + chr(10)).strip()}{mark}")
    return lines


def register_config(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "config",
        help="validate a config and print every key it sets, defaults included (secrets masked)",
        description="Validate the config file, lay the environment's DRTP_CONFIG__* keys and --set over it, "
        "and print every key with the value a command would use; keys set by the environment or --set "
        "are marked.",
    )
    add_config_options(p)
    p.set_defaults(func=cmd_config)


def grouped_commands(sub: argparse._SubParsersAction) -> str:
    """The subcommands under the headings of :data:`COMMAND_GROUPS`, each with its help line."""
    # argparse keeps each subcommand's help line only on the pseudo-actions it lists in --help
    helps = {action.dest: action.help or "" for action in sub._choices_actions}
    listed = {name for group in COMMAND_GROUPS for name in group.commands}
    sections = [(g.title, [c for c in g.commands if c in helps], g.example) for g in COMMAND_GROUPS]
    others = [name for name in helps if name not in listed]
    if others:
        sections.append(("other commands", others, ""))
    width = max(len(name) for name in helps) + 2
    text = []
    for title, names, example in sections:
        text.append(f"{title}:")
        text.extend(f"  {name:<{width}}{helps[name]}" for name in names)
        if example:
            text.append(f"  e.g. {example}")
        text.append("")
    return "\n".join(text)


def build_parser() -> argparse.ArgumentParser:
    parser = DrtpArgumentParser(
        prog="drtp",
        description="drtp — the Docker Registry Trace Player: replay, simulate and analyse registry traces.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"drtp {__version__}")
    add_verbose_option(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help=argparse.SUPPRESS)
    for name in COMMAND_MODULES:
        register = register_config if name == CONFIG_COMMAND else importlib.import_module(name).register
        register(sub)
    parser.usage = "drtp [-h] [--version] [-v] COMMAND ..."
    parser.epilog = grouped_commands(sub) + "\n\n" + OVERRIDES_HELP
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return ExitCode.BAD_INPUT
    set_verbosity(int(getattr(args, "verbose", 0) or 0))
    log.debug("drtp %s: %s", __version__, args.command)
    prog = getattr(args, "drtp_prog", "drtp")  # the command's name: drtp run, drtp analyze compare…
    previous = _on_sigterm_interrupt()
    try:
        return int(args.func(args) or 0)
    except DrtpError as e:
        print(refusal(prog, str(e)), file=sys.stderr)  # one line: DrtpError escapes any line break it quotes
        return e.exit_code
    except KeyboardInterrupt:
        print("drtp: terminated (SIGTERM)" if _signals else "drtp: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception:  # a bug: its traceback is what a report needs, and Python's own exit 1 would read as a verdict
        traceback.print_exc()
        print(refusal(prog, "internal error (the traceback above is a bug in drtp)"), file=sys.stderr)
        return ExitCode.CANNOT_RUN
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
