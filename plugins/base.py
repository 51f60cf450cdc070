"""The simulation plugin interface and the registry of built-in plugins.

Every simulation is a :class:`SimPlugin`: it declares its arguments as a
msgspec struct (validated from ``simulate.args``, unknown keys refused), is
given the whole trace in time order as a :class:`~drtp.plugins.compact.CompactTrace`
and returns a :class:`SimResult` — a flat summary (``summary.json``) and named
tables (CSV files).  The same few hooks for every policy is what lets caches,
libCacheSim policies and the prefetcher share the runner, the sweep and the
output format.

Plugins written for the original trace player (a ``.py`` file with
``init(requests)`` or ``init(requests, args)``) are run by
:mod:`drtp.plugins.legacy` instead.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgspec
import pandas as pd

from drtp.errors import ConfigError, DrtpError
from drtp.plugins.compact import CompactTrace
from drtp.units import parse_duration, parse_size


class PluginArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of every plugin's argument struct."""


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
    def run(self, trace: CompactTrace) -> SimResult:
        """Simulate over ``trace`` and return the result."""


# -- argument helpers ---------------------------------------------------------------

_PERCENT = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*%\s*$")


def resolve_size(value: int | float | str, key: str, base: int | None = None, base_name: str = "ingress") -> int:
    """Bytes from ``1048576``, ``"64MB"`` or ``"5%"`` (of ``base`` bytes); errors name the key."""
    if isinstance(value, str) and "%" in value:
        m = _PERCENT.match(value)
        if not m:
            raise DrtpError(f"simulate.args.{key}: not a percentage: {value!r} (example: 5%)")
        if base is None:
            raise DrtpError(f"simulate.args.{key}: a percentage is not allowed here")
        if base <= 0:
            raise DrtpError(
                f"simulate.args.{key}: {value} of the trace's {base_name} is 0 bytes "
                f"(the trace has no {'layer uploads' if base_name == 'ingress' else 'layer GETs'}); give bytes instead"
            )
        return int(float(m.group(1)) / 100.0 * base)
    try:
        size = parse_size(value)
    except ValueError as e:
        raise DrtpError(f"simulate.args.{key}: {e}") from None
    if size < 0:
        raise DrtpError(f"simulate.args.{key}: must be ≥ 0, not {value!r}")
    return size


def check_size(value: int | float | str, key: str) -> None:
    """Syntax check of a size or percentage (the base is known only with the trace)."""
    resolve_size(value, key, base=1 if isinstance(value, str) and "%" in value else None)


def resolve_duration(value: int | float | str, key: str) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as e:
        raise DrtpError(f"simulate.args.{key}: {e}") from None
    if seconds < 0:
        raise DrtpError(f"simulate.args.{key}: must be ≥ 0, not {value!r}")
    return seconds


def _explain(e: msgspec.ValidationError) -> str:
    msg = str(e)
    m = re.match(r"(.*?)(?: - at `\$\.?(.*)`)?$", msg)
    text, at = (m.group(1), m.group(2) or "") if m else (msg, "")
    fld = re.search(r"field `([^`]+)`", text)
    if text.startswith("Object contains unknown field") and fld:
        return f"unknown key 'simulate.args.{fld.group(1)}'"
    if text.startswith("Object missing required field") and fld:
        return f"missing key 'simulate.args.{fld.group(1)}'"
    return f"key 'simulate.args.{at}': {text[0].lower() + text[1:]}"


def parse_plugin_args(plugin: type[SimPlugin], raw: dict[str, Any]) -> PluginArgs:
    """Validate ``simulate.args`` for a plugin; a ConfigError names the key and the allowed keys."""
    if not isinstance(raw, dict):
        raise ConfigError(f"simulate.args must be a mapping, not {type(raw).__name__}")
    try:
        args = msgspec.convert(raw, plugin.Args)
    except msgspec.ValidationError as e:
        allowed = ", ".join(plugin.Args.__struct_fields__)
        raise ConfigError(f"plugin '{plugin.name}': {_explain(e)} (allowed: {allowed})") from None
    plugin.check(args)
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
