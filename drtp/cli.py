"""The ``drtp`` command: the table of subcommands, and the parser of the one a user names.

Each module of :data:`COMMANDS` adds its subcommands through a
``register(subparsers)`` function; their option types and parser class come
from drtp.cli_options.  Only the named command's module is imported and
registered (a command's module imports what it runs with: the replay's
registry client, the analysis's pandas…), so ``drtp --help`` and a cheap
command start without the costs of the others; every other command is listed
from the table, by its name and help line (a test checks the table against
what the modules register).  User mistakes raise :class:`~drtp.errors.DrtpError`
and end as one line on stderr with the error's exit code: 2 for a bad input,
3 (:class:`~drtp.errors.RunError`) when drtp could not run or finish.  A bug
exits 3 with its traceback, never 1: 1 means a run completed with too many
failed requests (drtp.exit_codes).

``drtp --help`` lists the subcommands by what a user comes to do
(:data:`COMMAND_GROUPS`), with one example line per group; a command no group
names is still listed, under "other commands" (and a test fails until it gets
its group).
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import NamedTuple

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

_signals: list[int] = []  # the SIGTERMs this process received: its last line says which stop it was


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM (``kill``, Slurm's time limit and ``scancel``) taken as Ctrl-C: the run stops, keeps what it
    measured and writes its summary (``complete: false``), instead of dying with rows and no summary."""
    _signals.append(signum)
    raise KeyboardInterrupt


def _on_sigterm_interrupt() -> object:
    """Make SIGTERM stop the command as Ctrl-C does; returns the handler it replaced (None off the main
    thread, where Python lets no handler be set)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _terminated)


CONFIG_COMMAND = "drtp.cli"  # the one command this module registers itself: `drtp config`


class Command(NamedTuple):
    """A subcommand as ``drtp --help`` lists it, and the module whose ``register`` adds it with its options."""

    name: str
    module: str
    help: str


# every subcommand, in the order `drtp --help` and argparse's "choose from" list them; a module's commands are
# consecutive, in the order its register() adds them (tests/test_cli.py checks the table against the modules)
COMMANDS: tuple[Command, ...] = (
    Command("generate", "drtp.trace.cli", "write a synthetic trace in the IBM format"),
    Command("inspect", "drtp.trace.cli", "summarise trace files (counts, span, bytes, clients…)"),
    Command("capture", "drtp.trace.cli", "turn a registry's JSON log into an anonymized IBM-format trace"),
    Command("convert", "drtp.trace.cli", "convert traces: IBM JSON ⇄ Parquet, registry log → IBM JSON"),
    Command("sample", "drtp.trace.cli", "cut a representative day, a steady window, or a budget out of a trace"),
    Command("cost", "drtp.analysis.cost", "storage and egress cost of a trace or run for registry pricing tables"),
    Command(
        "config",
        CONFIG_COMMAND,
        "validate a config and print every key it sets, defaults included (secrets masked)",
    ),
    Command(
        "demo",
        "drtp.master.commands.demo",
        "the main job on a local registry: generate, start a registry, replay, summarise",
    ),
    Command(
        "warmup", "drtp.master.commands.warmup_cmd", "push every object the trace reads into the registry (resumable)"
    ),
    Command("run", "drtp.master.commands.run_cmd", "replay the trace through the client nodes against the registry"),
    Command(
        "experiment",
        "drtp.master.commands.experiment_cmd",
        "warmup + run against each registry of 'registries:' in turn",
    ),
    Command(
        "ramp",
        "drtp.master.commands.ramp_cmd",
        "open-loop steps of rising rate until the registry breaks its objectives (the knee)",
    ),
    Command(
        "bench",
        "drtp.master.commands.bench_cmd",
        "synthetic push/pull/manifest benchmark against a registry (replay-format results)",
    ),
    Command(
        "clean",
        "drtp.master.commands.clean",
        "delete from the registries what warmup, runs and the preflight pushed (dry run without --yes)",
    ),
    Command(
        "verify",
        "drtp.master.commands.verify_cmd",
        "read back every object drtp's records say a registry holds and check its digest (losses: exit 1)",
    ),
    Command("client", "drtp.client.cli", "run a client node (executes replay requests sent by the master)"),
    Command("slurm", "drtp.cluster.cli", "run an experiment as Slurm jobs (submit, status, wait, cancel)"),
    Command(
        "deploy",
        "drtp.cluster.cli",
        "copy drtp, the config and traces to a host over SSH, run there, pull the results back",
    ),
    Command(
        "simulate", "drtp.plugins.cli", "offline simulation: caches, prefetching, sweeps, original-contract plugins"
    ),
    Command(
        "analyze",
        "drtp.analysis.cli",
        "characterize traces or compare replay results; writes JSON, PNG and report.html",
    ),
    Command(
        "selfbench",
        "drtp.master.commands.selfbench",
        "benchmark drtp itself beside its baselines (reader, replay vs wrk, timing, simulation, memory, analysis)",
    ),
)


class CommandGroup(NamedTuple):
    """A heading of ``drtp --help``: the subcommands a user looks for under it, and one example line."""

    title: str
    commands: tuple[str, ...]
    example: str


COMMAND_GROUPS: tuple[CommandGroup, ...] = (
    CommandGroup(
        "replay against a registry",
        ("demo", "config", "warmup", "run", "experiment", "ramp", "client", "clean", "verify"),
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


def grouped_commands() -> str:
    """The subcommands of :data:`COMMANDS` under the headings of :data:`COMMAND_GROUPS`, each with its help line."""
    helps = {command.name: command.help for command in COMMANDS}
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


def register_module(module: str, sub: argparse._SubParsersAction) -> None:
    """Let ``module`` (a :attr:`Command.module`) add its subcommands, with their options, to ``sub``."""
    if module == CONFIG_COMMAND:
        register_config(sub)
        return
    import importlib

    importlib.import_module(module).register(sub)


def named_command(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (drtp's own options take no value)."""
    for i, word in enumerate(argv):
        if word == "--":
            return argv[i + 1] if i + 1 < len(argv) else None
        if not word.startswith("-"):
            return word
    return None


def build_parser(command: str | None = None, *, every: bool = True) -> argparse.ArgumentParser:
    """drtp's parser: every subcommand of :data:`COMMANDS` is listed; with ``every`` each registers its options,
    otherwise only the module of ``command`` is imported and registers its subcommands (the others are
    placeholders that carry the name and help line, never parsed: argparse picks the named one)."""
    parser = DrtpArgumentParser(
        prog="drtp",
        description="drtp — the Docker Registry Trace Player: replay, simulate and analyse registry traces.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"drtp {__version__}")
    add_verbose_option(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help=argparse.SUPPRESS)
    loaded = {c.module for c in COMMANDS if every or c.name == command}
    registered: set[str] = set()
    for entry in COMMANDS:
        if entry.module not in loaded:
            sub.add_parser(entry.name, help=entry.help, add_help=False)
        elif entry.module not in registered:  # the module adds all its commands, in the table's order
            register_module(entry.module, sub)
            registered.add(entry.module)
    parser.usage = "drtp [-h] [--version] [-v] COMMAND ..."
    parser.epilog = grouped_commands() + "\n\n" + OVERRIDES_HELP
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(named_command(argv), every=False)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return ExitCode.BAD_INPUT
    from drtp.verbosity import set_verbosity

    verbose = int(getattr(args, "verbose", 0) or 0)
    set_verbosity(verbose)
    if verbose >= 2:  # the only level that shows a debug line
        import logging

        logging.getLogger("drtp.cli").debug("drtp %s: %s", __version__, args.command)
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
        import traceback

        traceback.print_exc()
        print(refusal(prog, "internal error (the traceback above is a bug in drtp)"), file=sys.stderr)
        return ExitCode.CANNOT_RUN
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
