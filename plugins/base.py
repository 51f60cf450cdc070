"""The simulation plugin interface and the registry of built-in plugins.

Every simulation is a :class:`SimPlugin`: it declares its arguments as a
msgspec struct (validated from ``simulate.args``, unknown keys refused), is
given the whole trace in time order as a :class:`~drtp.trace.columns.TraceColumns`
and returns a :class:`SimResult` — a flat summary (``summary.json``) and named
tables (CSV files).  The same few hooks for every policy is what lets caches,
libCacheSim policies and the prefetcher share the runner, the sweep and the
output format.

Plugins written for the original trace player (a ``.py`` file with
``init(requests)`` or ``init(requests, args)``) are run by
:mod:`drtp.plugins.legacy` instead.
"""

from __future__ import annotations

import datetime as _dt
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import msgspec
import pandas as pd

from drtp.errors import ConfigError, DrtpError
from drtp.schema import convert
from drtp.trace.columns import TraceColumns
from drtp.units import parse_duration, parse_size


class PluginArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of every plugin's argument struct."""


# ``compat`` of the plugins with a counterpart in the original trace player: "none" simulates as the
# IBM Cloud registry workload study describes; "original" reproduces the original plugin's numbers
Compat = Literal["none", "original"]
COMPAT_HELP = (
    "none (default: as the published study describes) or original (the original trace player's plugin, "
    "its numbers exactly; docs/simulate.md lists the differences)"
)


@dataclass
class SimResult:
    """What a simulation returns: a flat summary and named tables."""

    summary: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    kind: str = "custom"  # "cache", "prefetch" or "custom": which figures apply


class SimPlugin(ABC):
    """A simulation fed the whole trace in time order."""

    name: ClassVar[str]
    description: ClassVar[str]
    Args: ClassVar[type[PluginArgs]]
    arg_help: ClassVar[dict[str, str]] = {}

    def __init__(self, args: PluginArgs) -> None:
        self.args = args

    @classmethod
    def check(cls, args: PluginArgs) -> None:
        """Refuse bad argument values before any trace is read (raise DrtpError naming the key)."""
        return None

    @abstractmethod
    def run(self, trace: TraceColumns) -> SimResult:
        """Simulate over ``trace`` and return the result."""


def iso_time(t: float) -> str:
    """Seconds since the epoch as ISO 8601 UTC text (``2017-08-01T00:00:00Z``), as results tables show times."""
    return _dt.datetime.fromtimestamp(float(t), _dt.timezone.utc).isoformat().replace("+00:00", "Z")


# -- argument helpers ---------------------------------------------------------------

_PERCENT = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*%\s*$")


def parse_percent(value: str, key: str) -> float:
    """A percentage in (0, 100] from ``"5%"``: of a cache, 0 % is no cache and more than 100 % is not a share."""
    m = _PERCENT.match(value)
    if not m:
        raise DrtpError(f"simulate.args.{key}: not a percentage: {value!r} (example: 5%)")
    percent = float(m.group(1))
    if not 0 < percent <= 100:
        raise DrtpError(f"simulate.args.{key}: a percentage must be more than 0% and at most 100%, got {value!r}")
    return percent


def resolve_size(
    value: int | float | str, key: str, base: int | None = None, base_name: str = "ingress", minimum: int = 0
) -> int:
    """Bytes from ``1048576``, ``"64MB"`` or ``"5%"`` (of ``base`` bytes), at least ``minimum``; errors name the key."""
    if isinstance(value, str) and "%" in value:
        percent = parse_percent(value, key)
        if base is None:
            raise DrtpError(f"simulate.args.{key}: a percentage is not allowed here")
        if base <= 0:
            raise DrtpError(
                f"simulate.args.{key}: {value} of the trace's {base_name} is 0 bytes "
                f"(the trace has no {'layer uploads' if base_name == 'ingress' else 'layer GETs'}); give bytes instead"
            )
        size = int(percent / 100.0 * base)
        if size < minimum:
            raise DrtpError(
                f"simulate.args.{key}: {value} of the trace's {base_name} ({base:,} bytes) is less than "
                f"{minimum} byte; give a larger share or bytes"
            )
        return size
    try:
        size = parse_size(value)
    except ValueError as e:
        raise DrtpError(f"simulate.args.{key}: {e}") from None
    if size < minimum:
        raise DrtpError(f"simulate.args.{key}: must be at least {minimum} byte, got {value!r}")
    return size


def check_size(value: int | float | str, key: str, minimum: int = 0) -> None:
    """Check a size or percentage before the trace is read (the base of a percentage is known only with it)."""
    if isinstance(value, str) and "%" in value:
        parse_percent(value, key)
    else:
        resolve_size(value, key, minimum=minimum)


def resolve_duration(value: int | float | str, key: str) -> float:
    """Seconds from ``3600``, ``"1h"`` or ``"1d"`` (finite, ≥ 0); errors name the key."""
    try:
        return parse_duration(value)
    except ValueError as e:
        raise DrtpError(f"simulate.args.{key}: {e}") from None


def parse_plugin_args(plugin: type[SimPlugin], raw: dict[str, Any], source: str = "") -> PluginArgs:
    """Validate ``simulate.args`` for a plugin; a ConfigError names the config, the plugin and the key."""
    in_file = f"{source}: " if source else ""
    if not isinstance(raw, dict):
        raise ConfigError(f"{in_file}simulate.args must be a mapping, not {type(raw).__name__}")
    where = f"{in_file}plugin '{plugin.name}'"
    args = convert(raw, plugin.Args, where, prefix="simulate.args.", list_allowed=True)
    try:
        plugin.check(args)
    except DrtpError as e:
        raise ConfigError(f"{where}: {e}") from None
    return args


def describe_args(plugin: type[SimPlugin]) -> list[tuple[str, str, str]]:
    """(key, default, help) for each argument of a plugin; default 'required' when there is none."""
    info = msgspec.structs.fields(plugin.Args)
    rows = []
    for f in info:
        if f.required:
            default = "required"
        elif f.default is not msgspec.NODEFAULT:
            default = repr(f.default)
        else:
            default = repr(f.default_factory())
        rows.append((f.name, default, plugin.arg_help.get(f.name, "")))
    return rows


# -- registry -------------------------------------------------------------------------

_REGISTRY: dict[str, Callable[[], type[SimPlugin]]] = {}
LIBCACHESIM_PREFIX = "libcachesim:"


def register(name: str, loader: Callable[[], type[SimPlugin]]) -> None:
    _REGISTRY[name] = loader


def _builtins() -> None:
    if _REGISTRY:
        return
    from drtp.plugins import cache, prefetch

    for cls in (cache.LRUPlugin, cache.TwoLevelPlugin, cache.CachePlugin, prefetch.PrefetchPlugin):
        register(cls.name, lambda cls=cls: cls)


def builtin_names() -> list[str]:
    _builtins()
    return list(_REGISTRY)


def find_plugin(name: str) -> type[SimPlugin]:
    """The plugin class for ``simulate.name`` (built-in name or ``libcachesim:<policy>``)."""
    _builtins()
    if name in _REGISTRY:
        return _REGISTRY[name]()
    if name.lower().startswith(LIBCACHESIM_PREFIX):
        from drtp.plugins.cache import libcachesim_plugin

        return libcachesim_plugin(name[len(LIBCACHESIM_PREFIX) :])
    raise ConfigError(
        f"simulate.name: unknown plugin {name!r} (built-ins: {', '.join(_REGISTRY)}, "
        f"libcachesim:<policy>, or a path to a .py file; see 'drtp simulate --list')"
    )
