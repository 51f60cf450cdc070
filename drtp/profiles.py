"""Workload profiles: generator settings and published targets per availability zone, as YAML data.

A profile is a YAML file with ``generator`` (fields of
:class:`~drtp.generate.GenerateOptions`, plus ``requests_per_day`` which sets
the default time span), ``targets`` (characteristic: [value, tolerance]) and
free-form ``description``/``published`` notes.  The built-in profiles live in
``configs/profiles/``; any path to such a file works too, so users write
their own.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from drtp.config import read_yaml
from drtp.errors import ConfigError
from drtp.generate import GenerateOptions

PROFILE_DIR = Path(__file__).resolve().parent.parent / "configs" / "profiles"
_OPTION_FIELDS = {f.name for f in dataclasses.fields(GenerateOptions)} - {"requests", "seed", "start", "span_s"}


def builtin_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def profile_path(name: str) -> Path:
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    candidate = PROFILE_DIR / f"{name}.yaml"
    if candidate.is_file():
        return candidate
    raise ConfigError(f"unknown profile {name!r} (built-in: {', '.join(builtin_profiles())}; or a path to a .yaml)")


def load_profile(name: str) -> dict[str, Any]:
    """The profile as a dict with 'generator', 'targets', 'requests_per_day', 'path'; validated."""
    path = profile_path(name)
    data = read_yaml(path) or {}
    unknown = set(data) - {"description", "published", "generator", "targets", "known_gaps"}
    if unknown:
        raise ConfigError(f"{path}: unknown key '{sorted(unknown)[0]}'")
    gen = dict(data.get("generator") or {})
    per_day = gen.pop("requests_per_day", None)
    for key, value in gen.items():
        if key not in _OPTION_FIELDS:
            raise ConfigError(f"{path}: unknown key 'generator.{key}'")
        default = getattr(GenerateOptions, key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) != isinstance(default, bool):
            raise ConfigError(f"{path}: key 'generator.{key}': expected a number, got {value!r}")
    if per_day is not None and (not isinstance(per_day, (int, float)) or per_day <= 0):
        raise ConfigError(f"{path}: key 'generator.requests_per_day': expected a positive number")
    targets = data.get("targets") or {}
    for key, value in targets.items():
        if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value)):
            raise ConfigError(f"{path}: key 'targets.{key}': expected [value, tolerance]")
    return {
        "path": path,
        "generator": gen,
        "requests_per_day": per_day,
        "targets": targets,
        "description": data.get("description", ""),
    }


def options_for(
    profile: dict[str, Any], requests: int, seed: int = 1, span_s: float | None = None, **overrides: Any
) -> GenerateOptions:
    """GenerateOptions for a profile; the span follows the profile's request rate unless given."""
    if span_s is None:
        per_day = profile["requests_per_day"] or 10_000
        span_s = requests / per_day * 86_400
    return GenerateOptions(requests=requests, seed=seed, span_s=span_s, **{**profile["generator"], **overrides})
