"""Workload profiles: generator settings and published targets per availability zone, as YAML data.

A profile is a YAML file with ``generator`` (fields of
:class:`~drtp.trace.generate.GenerateOptions`, plus ``requests_per_day`` which sets
the default time span), ``targets`` (characteristic: [value, tolerance]) and
free-form ``description``/``published`` notes.  The built-in profiles live in
``configs/profiles/``; any path to such a file works too, so users write
their own.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from drtp.errors import ConfigError
from drtp.trace.generate import GenerateOptions, option_problem
from drtp.yamlfile import read_yaml_mapping

PROFILE_DIR = Path(__file__).resolve().parents[2] / "configs" / "profiles"
_OPTION_FIELDS = {f.name for f in dataclasses.fields(GenerateOptions)} - {"requests", "seed", "start", "span_s"}


def builtin_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def profile_path(name: str) -> Path:
    path = Path(name)
    if path.suffix in (".yaml", ".yml") or "/" in name:
        if path.is_dir():
            raise ConfigError(f"{path}: is a directory, not a profile .yaml")
        if not path.exists():
            raise ConfigError(f"{path}: profile file not found")
        return path
    candidate = PROFILE_DIR / f"{name}.yaml"
    if candidate.is_file():
        return candidate
    raise ConfigError(f"unknown profile {name!r} (built-in: {', '.join(builtin_profiles())}; or a path to a .yaml)")


def _mapping(value: Any, path: Path, key: str) -> dict[str, Any]:
    """A section of the profile that must be a mapping (absent: empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: key '{key}': expected a mapping of keys, got {type(value).__name__}")
    return value


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def load_profile(name: str) -> dict[str, Any]:
    """The profile as a dict with 'generator', 'targets', 'requests_per_day', 'path'; validated."""
    path = profile_path(name)
    data = read_yaml_mapping(path)
    if not data.get("generator") and not data.get("targets"):
        raise ConfigError(f"{path}: an empty profile (it needs generator: or targets:)")
    unknown = set(data) - {"description", "published", "generator", "targets", "known_gaps"}
    if unknown:
        raise ConfigError(f"{path}: unknown key '{sorted(map(str, unknown))[0]}'")
    gen = dict(_mapping(data.get("generator"), path, "generator"))
    per_day = gen.pop("requests_per_day", None)
    for key, value in gen.items():
        if key not in _OPTION_FIELDS:
            raise ConfigError(f"{path}: unknown key 'generator.{key}'")
        problem = option_problem(key, value)
        if problem:
            raise ConfigError(f"{path}: key 'generator.{key}': {problem}")
    if per_day is not None and not (_finite(per_day) and 0 < per_day <= 1e12):
        raise ConfigError(f"{path}: key 'generator.requests_per_day': expected a number > 0, got {per_day!r}")
    targets = _mapping(data.get("targets"), path, "targets")
    for key, value in targets.items():
        if not (isinstance(value, list) and len(value) == 2 and all(_finite(v) for v in value)):
            raise ConfigError(f"{path}: key 'targets.{key}': expected [value, tolerance] (two numbers), got {value!r}")
    description = data.get("description", "")
    return {
        "path": path,
        "generator": gen,
        "requests_per_day": per_day,
        "targets": targets,
        "description": description if isinstance(description, str) else str(description),
    }


def options_for(
    profile: dict[str, Any], requests: int, seed: int = 1, span_s: float | None = None, **overrides: Any
) -> GenerateOptions:
    """GenerateOptions for a profile; the span follows the profile's request rate unless given."""
    if span_s is None:
        per_day = profile["requests_per_day"] or 10_000
        span_s = requests / per_day * 86_400
    return GenerateOptions(requests=requests, seed=seed, span_s=span_s, **{**profile["generator"], **overrides})
