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

import msgspec

from drtp.errors import ConfigError
from drtp.schema import convert
from drtp.trace.generate import GenerateOptions, option_problem
from drtp.yamlfile import read_yaml_mapping

PROFILE_DIR = Path(__file__).resolve().parents[2] / "configs" / "profiles"


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


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# ``generator:`` takes the generator's options (minus what the command line sets) and the rate the default span
# follows; the values are checked by option_problem, which knows the ranges the generator can work with.
_GENERATOR_KEYS = [
    f.name for f in dataclasses.fields(GenerateOptions) if f.name not in {"requests", "seed", "start", "span_s"}
]
GeneratorSection = msgspec.defstruct(
    "GeneratorSection",
    [(name, Any, msgspec.UNSET) for name in [*_GENERATOR_KEYS, "requests_per_day"]],
    forbid_unknown_fields=True,
)


class ProfileFile(msgspec.Struct, forbid_unknown_fields=True):
    """The keys of a profile file; ``description``, ``published`` and ``known_gaps`` are notes for people."""

    description: Any = ""
    published: Any = None
    known_gaps: Any = None
    generator: GeneratorSection = msgspec.field(default_factory=GeneratorSection)
    targets: dict[str, Any] = {}  # characteristic: [value, tolerance]


def load_profile(name: str) -> dict[str, Any]:
    """The profile as a dict with 'generator', 'targets', 'requests_per_day', 'path'; validated."""
    path = profile_path(name)
    data = read_yaml_mapping(path)
    if not data.get("generator") and not data.get("targets"):
        raise ConfigError(f"{path}: an empty profile (it needs generator: or targets:)")
    # a key left empty (``generator:`` with nothing under it) reads as null: the same as no key
    profile = convert({key: value for key, value in data.items() if value is not None}, ProfileFile, str(path))
    given = msgspec.structs.asdict(profile.generator)
    gen = {key: value for key, value in given.items() if value is not msgspec.UNSET}
    per_day = gen.pop("requests_per_day", None)
    for key, value in gen.items():
        problem = option_problem(key, value)
        if problem:
            raise ConfigError(f"{path}: key 'generator.{key}': {problem}")
    if per_day is not None and not (_finite(per_day) and 0 < per_day <= 1e12):
        raise ConfigError(f"{path}: key 'generator.requests_per_day': expected a number > 0, got {per_day!r}")
    targets = profile.targets
    for key, value in targets.items():
        if not (isinstance(value, list) and len(value) == 2 and all(_finite(v) for v in value)):
            raise ConfigError(f"{path}: key 'targets.{key}': expected [value, tolerance] (two numbers), got {value!r}")
    description = profile.description
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
