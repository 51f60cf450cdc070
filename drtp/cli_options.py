"""What every command's options share: the parser class, option types, and the config options.

Each package's ``cli`` module builds its subcommands with these, so that a bad
option reads the same everywhere: one line naming the command and the option,
exit 2.  The option types raise :class:`argparse.ArgumentTypeError`, and
argparse names the option in front of their message.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import sys
from typing import NoReturn

from drtp.exit_codes import ExitCode


class DrtpArgumentParser(argparse.ArgumentParser):
    """argparse, with a bad option reported as one line naming the command and the option (exit 2).

    argparse prints the usage and then the error: two lines where drtp promises
    one.  Sub-parsers are made with the parent's class, so every subcommand
    (and sub-subcommand) reports this way, in the one format of every refusal:
    ``drtp[ COMMAND]: error: WHAT`` (:func:`refusal`).  Each parser leaves its
    name in the parsed arguments (``drtp_prog``; the innermost one's wins), so
    a refusal raised later, while the command runs, names the same command.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.set_defaults(drtp_prog=self.prog)

    def error(self, message: str) -> NoReturn:
        message = message.removeprefix("argument ")
        print(refusal(self.prog, f"{' '.join(message.split())} (see {self.prog} --help)"), file=sys.stderr)
        sys.exit(ExitCode.BAD_INPUT)


def refusal(prog: str, what: str) -> str:
    """The one line of every refusal, whatever its exit code: ``drtp[ COMMAND]: error: WHAT`` (argparse's form),
    so a script finds each with one pattern."""
    return f"{prog}: error: {what}"


def _integer(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be an integer ≥ {minimum}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer ≥ 1: counts of things to make or do (records, jobs, layers, threads)."""
    return _integer(text, 1)


def non_negative_int(text: str) -> int:
    """An integer ≥ 0 (random seeds)."""
    return _integer(text, 0)


def positive_float(text: str) -> float:
    """A finite number > 0 (months, seconds between polls…)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def port_number(text: str) -> int:
    """A TCP port to listen on, 1–65535."""
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65_535:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r} (1–65535)")
    return port


def size(text: str) -> int:
    """A size in bytes, with or without a unit (``4MB``, ``1GiB``, ``512``)."""
    from drtp.units import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def positive_size(text: str) -> int:
    """A size of at least one byte (a layer, a chunk)."""
    value = size(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return value


def sizes(text: str) -> list[int]:
    """Comma-separated sizes of at least one byte each: ``1MB,10MB``."""
    return [positive_size(part) for part in text.split(",")]


def duration(text: str) -> float:
    """Seconds, with or without a unit (``30``, ``1h``, ``1d``)."""
    from drtp.units import parse_duration

    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def positive_duration(text: str) -> float:
    """A duration longer than 0 s."""
    seconds = duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be longer than 0 s, got {text!r}")
    return seconds


def timestamp(text: str) -> _dt.datetime:
    """An ISO timestamp; one without a zone is UTC."""
    try:
        ts = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO timestamp: {text!r}") from None
    return ts if ts.tzinfo else ts.replace(tzinfo=_dt.timezone.utc)


SET_HELP = (
    "set a config key over the file's, e.g. client_info.threads=8 or client_info.client_list=[a:8081,b:8081] "
    "(YAML value; repeatable; the environment sets keys as DRTP_CONFIG__CLIENT_INFO__THREADS=8; "
    "precedence: file < environment < --set)"
)


def config_override(text: str):
    """One ``--set key=value`` (drtp.config_overrides.Override); a malformed one is argparse's one-line error."""
    from drtp.config_overrides import parse_set
    from drtp.errors import ConfigError

    try:
        override = parse_set(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--set ")) from None
    if secret := _secret_key(override.key, override.value):
        # the command line is public (ps, /proc/<pid>/cmdline, shell history): secrets come another way
        raise argparse.ArgumentTypeError(
            f"{override.key}: sets the secret '{secret}' on the command line, where ps shows it; use the "
            "environment (DRTP_CONFIG__…), a ${VAR} or *_file key in the config, or --token-file"
        )
    return override


def _secret_key(key: str, value) -> str | None:
    """The secret key (token, password) an override sets, directly or inside a mapping or list it sets."""
    from drtp.config import SECRET_KEYS

    if key.rsplit(".", 1)[-1] in SECRET_KEYS and value not in (None, ""):
        return key
    if isinstance(value, dict):
        return next((found for k, v in value.items() if (found := _secret_key(f"{key}.{k}", v))), None)
    if isinstance(value, list):
        return next((found for i, v in enumerate(value) if (found := _secret_key(f"{key}[{i}]", v))), None)
    return None


def add_config_options(p: argparse.ArgumentParser, required: bool = True, help: str = "YAML config file") -> None:
    """``-c/--config``, ``--set KEY=VALUE`` and ``-v/--verbose``: the options of every command that reads a config."""
    p.add_argument("-c", "--config", required=required, help=help)
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], type=config_override, metavar="KEY=VALUE",
        help=SET_HELP,
    )  # fmt: skip
    add_verbose_option(p)


def add_verbose_option(p: argparse.ArgumentParser) -> None:
    """``-v`` (INFO) / ``-vv`` (DEBUG); left unset when not given, so ``drtp -v COMMAND`` is not reset to 0."""
    p.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS,
        help="log what drtp does on stderr (-vv: debug detail); the config's verbose: true is -v",
    )  # fmt: skip


def effective_config_from_args(args: argparse.Namespace, path=None):
    """The config of ``args.config`` (or ``path``) with the environment's keys and ``--set`` over it.

    drtp.config.EffectiveConfig; its ``verbose: true`` raises logging to INFO here.
    """
    import os

    from drtp.config import effective_config
    from drtp.verbosity import set_verbosity

    effective = effective_config(path if path is not None else args.config, os.environ, getattr(args, "overrides", []))
    if effective.config.verbose:
        set_verbosity(1)
    effective.log()
    return effective


def config_from_args(args: argparse.Namespace, path=None):
    """drtp.config.Config of :func:`effective_config_from_args`: what a command that takes ``-c`` runs with."""
    return effective_config_from_args(args, path).config


def add_progress_options(p: argparse.ArgumentParser) -> None:
    """``--progress-interval`` and ``-q`` of the long-running commands (see drtp.progress)."""
    p.add_argument(
        "--progress-interval",
        type=positive_duration,
        metavar="SECONDS",
        help="when stderr is not a terminal (a batch job's log, 2> file): one progress line every SECONDS (default 10)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr (neither bar nor lines)")


def apply_progress_options(args: argparse.Namespace) -> None:
    """Make the options of :func:`add_progress_options` the settings of this process's progress displays."""
    from drtp.progress import configure

    configure(args.progress_interval, args.quiet)
