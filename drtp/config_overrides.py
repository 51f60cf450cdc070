"""Config keys set outside the file: ``--set key=value`` options and ``DRTP_CONFIG__*`` environment variables.

A dotted key (``client_info.threads``) names one key of the config file; its
value is read as YAML, the way the file would spell it (``8``, ``true``,
``[a:1, b:2]``, ``{capacity: 5%}``), and laid over the file's data before the
whole is validated by the file's own schema.  The environment spells the same
key ``DRTP_CONFIG__CLIENT_INFO__THREADS``: the ``DRTP_CONFIG__`` prefix and
the double underscore between keys keep these apart from the variables drtp
reads for itself (``DRTP_TOKEN``, ``DRTP_REGISTRY_PASSWORD``…) and from keys
that hold an underscore (``max_failed``).

Precedence, lowest first: the file, the environment, then ``--set`` in the
order given (a later ``--set`` of the same key wins), then a command's own
options that mirror a key (``--rate``, ``--max-failed``; drtp.master.run.settings).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from drtp.errors import ConfigError
from drtp.yamlfile import parse_yaml

__all__ = ["ENV_PREFIX", "Override", "apply_overrides", "env_overrides", "parse_set", "is_option", "with_origin"]

ENV_PREFIX = "DRTP_CONFIG__"
ENV_SEPARATOR = "__"
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_NAMED_KEY = re.compile(r"((?:unknown |missing )?key) '([^']*)'")


class Override(msgspec.Struct, frozen=True):
    """One key set outside the file, and where it was set (what an error or ``drtp config`` names)."""

    key: str  # dotted: client_info.threads
    value: Any
    # "--set", the environment variable's name, the command's option (--max-failed) or the series that derived
    # the config; never the value (it may be a secret)
    origin: str


def parse_set(text: str) -> Override:
    """``key=value`` of one ``--set`` option; a malformed one is a one-line ConfigError."""
    key, eq, raw = text.partition("=")
    key = key.strip()
    if not eq or not _KEY.fullmatch(key):
        raise ConfigError(f"--set {text!r}: expected key=value with a dotted key, e.g. client_info.threads=8")
    return Override(key, _value(raw, f"--set {key}"), "--set")


def env_overrides(environ: Mapping[str, str]) -> list[Override]:
    """The config keys the environment sets (``DRTP_CONFIG__A__B=value`` sets ``a.b``), sorted by name."""
    found = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX):
            continue
        key = ".".join(part.lower() for part in name[len(ENV_PREFIX) :].split(ENV_SEPARATOR))
        if not _KEY.fullmatch(key):
            raise ConfigError(
                f"environment variable {name}: not a config key (spell a.b_c as {ENV_PREFIX}A{ENV_SEPARATOR}B_C)"
            )
        found.append(Override(key, _value(environ[name], f"environment variable {name}"), name))
    return found


def _value(raw: str, where: str) -> Any:
    """A value as YAML reads it: numbers, booleans, null, flow lists and mappings; anything else a string."""
    if raw.strip() == "":
        return None  # `--set trace.limit=` clears a key: null is what an empty value means in the file too
    return parse_yaml(raw, where)


def apply_overrides(data: dict[str, Any], overrides: Iterable[Override]) -> dict[str, Any]:
    """A copy of the file's ``data`` with each override laid over it, in order (later ones win)."""
    merged = _copy(data)
    for ov in overrides:
        parts = ov.key.split(".")
        node = merged
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                section = ".".join(parts[: depth + 1])
                raise ConfigError(f"key '{ov.key}' (from {ov.origin}): '{section}' holds a {type(child).__name__}, "
                                  "not keys: set it whole")  # fmt: skip
            node = child
        node[parts[-1]] = ov.value
    return merged


def _copy(value: Any) -> Any:
    """A copy of nested dicts (lists and scalars are replaced whole by an override, never changed in place)."""
    return {k: _copy(v) for k, v in value.items()} if isinstance(value, dict) else value


def with_origin(error: ConfigError, overrides: list[Override]) -> ConfigError:
    """``error`` with the key it names marked ``(from --set)`` / ``(from DRTP_CONFIG__…)`` when an override set it.

    A key a command's own option set (``--max-failed``, :func:`is_option`) is named by that option alone
    (``--max-failed: …``): the user typed the option, not the key.  An error about a key the file set is
    returned as it is: it names the file already.
    """
    text = str(error)
    m = _NAMED_KEY.search(text)
    if m is None:
        return error
    origin = origin_of(m.group(2), overrides)
    if origin is None:
        return error
    if is_option(origin) and m.group(1) == "key":
        return ConfigError(f"{origin}: {text[m.end() :].removeprefix(':').strip()}")
    return ConfigError(f"{text[: m.end()]} (from {origin}){text[m.end() :]}")


def is_option(origin: str) -> bool:
    """Whether ``origin`` is a command's own option that mirrors a key (``--slo``), not ``--set`` or a variable."""
    return origin.startswith("--") and origin != "--set"


def origin_of(key: str, overrides: list[Override], inside: bool = True) -> str | None:
    """Where the value at ``key`` (``a.b``, ``a.b[2].c``) was last set, if an override set it or a section above it.

    ``inside``: a section counts as set when an override set a key inside it (what an error about the
    whole section must name); without it only the key itself or a section above it does.
    """
    plain = re.sub(r"\[\d+\]", "", key)
    for ov in reversed(overrides):
        if plain == ov.key or plain.startswith(ov.key + ".") or (inside and ov.key.startswith(plain + ".")):
            return ov.origin
    return None
