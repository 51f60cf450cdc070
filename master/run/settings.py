"""What a run needs beyond its config file, made in one place from the config and the command line.

A command's options that mirror config keys (``--max-failed``, ``--slo``, ``--rate``, ``--metrics-port``,
``--token-file``…) are not merged by hand: each becomes an :class:`~drtp.config_overrides.Override` laid over
the file, the environment and ``--set``, and the config's own schema validates the whole, so an option and
its key are checked by the same rule and an error names whichever of the two set the value.
:func:`settings_from_args` is the only place where that happens; everything else a run needs (its folder,
the failure budget and objectives read from the validated config, the stats interval, live metrics…) is
then one :class:`RunSettings` record.

A series of runs (an experiment's registries, repetitions, a ramp's steps) derives each run's config the
same way, through :func:`derive_config`: its keys as overrides validated by the schema, and the few keys a
file may not set (a repetition's repository ``namespace``) through that function's own channel.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from drtp.config import Config, config_from_dict
from drtp.config_overrides import Override, apply_overrides, with_origin
from drtp.errors import ConfigError, DrtpError
from drtp.replay.failure_budget import FailureBudget, parse_max_failed
from drtp.replay.slo import Objective, parse_slo
from drtp.replay.stats_file import DEFAULT_INTERVAL_S

__all__ = ["LiveOptions", "RunSettings", "derive_config", "option_overrides", "settings_from_args"]

# keys drtp sets on a series' runs that no file, environment variable or --set may set (the schema refuses them)
INTERNAL_KEYS = ("namespace",)
# the config's own bookkeeping: where it was read from, never a key of the file
_BOOKKEEPING = ("base_dir", "source")
# a command's options that set config keys: (argparse dest, dotted key, option as errors name it)
OPTION_KEYS: tuple[tuple[str, str, str], ...] = (
    ("rate", "client_info.rate", "--rate"),
    ("arrivals", "client_info.arrivals", "--arrivals"),
    ("seed", "client_info.seed", "--seed"),
    ("repeat", "repeat", "--repeat"),
    ("max_failed", "client_info.max_failed", "--max-failed"),
    ("slo", "client_info.slo", "--slo"),
    ("max_replayer_limited", "client_info.max_replayer_limited", "--max-replayer-limited"),
    ("metrics_port", "live_metrics.port", "--metrics-port"),
    ("metrics_host", "live_metrics.host", "--metrics-host"),
    ("metrics_linger", "live_metrics.linger", "--metrics-linger"),
    ("event", "events", "--event"),  # each --event already parsed into an events entry (options.event_option)
)
EVENT_OPTION = OPTION_KEYS[-1][2]  # how errors name events given on the command line (they replace the config's)
NEEDS_PORT = "needs --metrics-port PORT (or the config key live_metrics.port)"


@dataclass(frozen=True)
class LiveOptions:
    """Where the live metrics are served (the validated ``live_metrics`` section, options laid over it), and
    what a refusal to listen names: the options that gave the address, else the config key."""

    port: int
    host: str
    linger_s: float
    where: str


@dataclass(frozen=True)
class RunSettings:
    """Everything a run needs besides its config: what the run writes where, and how it is judged.

    One record for a single run, a series' runs and a ramp's steps; a series derives each of its runs'
    settings from its own (``dataclasses.replace``: its folder, its tags).
    """

    out_dir: Path | None = None  # the run's folder (None: the command's default, under the config's results)
    budget: FailureBudget = FailureBudget(count=0)  # failed trace requests tolerated for exit 0
    objectives: tuple[Objective, ...] = ()  # what the run must hold for exit 0 (--slo, client_info.slo)
    stats_interval_s: float = DEFAULT_INTERVAL_S  # the width of stats_history.csv's intervals
    max_replayer_limited: bool = False  # a replayer-limited run fails its verdict
    live: LiveOptions | None = None  # serve live metrics (None: neither the options nor the config ask)
    resume: bool = False  # continue the interrupted run (or series) in out_dir
    quiet: bool = False  # no console lines of the run's or the series' own (progress is drtp.progress's)
    tags: dict[str, Any] = field(default_factory=dict)  # summary.json fields of the series the run is part of
    events_origin: str | None = None  # "--event" when the command line gave the events (what errors name)


def option_overrides(args: argparse.Namespace) -> list[Override]:
    """The config keys the command's options set, in the order of :data:`OPTION_KEYS`, ``--token-file`` last.

    ``--token-file``'s secret is read here (the file's errors name the option) and laid over
    ``client_info.token`` like any other key, so the config's rule for a token checks it too.
    """
    found = []
    for dest, key, option in OPTION_KEYS:
        value = getattr(args, dest, None)
        if value is not None:
            found.append(Override(key, value, option))
    token_file = getattr(args, "token_file", None)
    if token_file is not None:
        from drtp.replay.signing import read_token_file

        found.append(Override("client_info.token", read_token_file(token_file), "--token-file"))
    return found


def settings_from_args(args: argparse.Namespace, quiet: bool = False) -> tuple[Config, RunSettings]:
    """The config a replaying command runs with (its options laid over the file as overrides) and its settings.

    ``quiet``: the runs' and the series' console lines off (``drtp ramp -q``; the ``-q`` of run and
    experiment silences only their progress, which drtp.progress does).
    """
    from drtp.cli_options import config_from_args

    given = option_overrides(args)
    loading = argparse.Namespace(**{**vars(args), "overrides": [*getattr(args, "overrides", []), *given]})
    try:
        cfg = config_from_args(loading)
    except ConfigError as e:
        raise _option_error(e, args) from None
    if cfg.events:  # the events' programs, before anything is sent (their times are checked against the trace's)
        from drtp.master.outputs.events import check_event_commands

        check_event_commands(cfg, EVENT_OPTION if getattr(args, "event", None) else None)
    return cfg, RunSettings(
        out_dir=Path(args.out) if getattr(args, "out", None) else None,
        budget=parse_max_failed(cfg.client_info.max_failed),  # valid: the schema checked it
        objectives=tuple(parse_slo(cfg.client_info.slo)) if cfg.client_info.slo is not None else (),
        stats_interval_s=getattr(args, "stats_interval", DEFAULT_INTERVAL_S),
        max_replayer_limited=cfg.client_info.max_replayer_limited,
        live=_live_options(cfg, args),
        resume=bool(getattr(args, "resume", False)),
        quiet=quiet,
        events_origin=EVENT_OPTION if getattr(args, "event", None) else None,
    )


def _option_error(error: ConfigError, args: argparse.Namespace) -> DrtpError:
    """The config's error in the words of the live metrics options, where the schema's words are not theirs."""
    text = str(error)
    if getattr(args, "metrics_port", None) is None and text.endswith("missing key 'live_metrics.port'"):
        for option in ("host", "linger"):
            if getattr(args, f"metrics_{option}", None) is not None:
                return DrtpError(f"--metrics-{option}: {NEEDS_PORT}")
    if text.startswith("--metrics-linger: ") and "≤" in text:
        from drtp.master.outputs.live_metrics import MAX_LINGER_S

        return DrtpError(f"--metrics-linger: at most {MAX_LINGER_S:g} s, got {args.metrics_linger:g}")
    return error


def _live_options(cfg: Config, args: argparse.Namespace) -> LiveOptions | None:
    section = cfg.live_metrics
    if section is None:
        return None
    given = [f"--metrics-{k} {v}" for k in ("port", "host") if (v := getattr(args, f"metrics_{k}", None))]
    where = " ".join(given) or f"{cfg.source}: key 'live_metrics'"
    return LiveOptions(section.port, section.host, section.linger, where)


def derive_config(cfg: Config, overrides: Iterable[Override], namespace: str | None = None) -> Config:
    """``cfg`` with ``overrides`` laid over it, validated by the schema as a file's keys are (a series' run).

    ``namespace``: the internal key no file sets (a repetition's repository prefix); None keeps ``cfg``'s.
    """
    overrides = list(overrides)
    data = msgspec.to_builtins(cfg)
    for key in (*INTERNAL_KEYS, *_BOOKKEEPING):
        data.pop(key, None)
    try:
        derived = config_from_dict(
            apply_overrides(data, overrides), source=cfg.source, base_dir=cfg.base_dir, expand=False
        )
    except ConfigError as e:
        raise with_origin(e, overrides) from None
    derived.namespace = cfg.namespace if namespace is None else namespace
    return derived
