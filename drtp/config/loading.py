"""Loading a config: the file, ``${ENV_VAR}`` in its strings, the environment's and ``--set``'s keys over it.

Every command that takes ``-c CONFIG`` loads it through :func:`effective_config`;
the data is converted to the schema's structs (drtp.config.schema) and checked
(drtp.config.checks), and every error becomes one line naming the file and
the key.  Values of secret keys (token, password) are never printed: a
config is shown and recorded only through :func:`redacted`.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from drtp.config.checks import check_config
from drtp.config.schema import SECRET_KEYS, Config
from drtp.config_overrides import Override, apply_overrides, env_overrides, origin_of, with_origin
from drtp.errors import ConfigError
from drtp.schema import convert
from drtp.yamlfile import read_yaml

log = logging.getLogger("drtp.config")


_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(value: Any, where: str, path: str) -> Any:
    """Replace ``${VAR}`` in strings, recursively; a missing variable is an error."""
    if isinstance(value, dict):
        return {k: _expand(v, where, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, where, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):

        def sub(m: re.Match) -> str:
            var = m.group(1)
            if var not in os.environ:
                raise ConfigError(f"{where}: key '{path}': environment variable {var} is not set")
            return os.environ[var]

        return _ENV.sub(sub, value)
    return value


def load_config(path: str | Path) -> Config:
    """Load and validate a config file as written (no environment, no ``--set``); one clear line on error."""
    data = read_yaml(path)
    path = Path(path)
    return config_from_dict(data if data is not None else {}, source=str(path), base_dir=str(path.parent))


class EffectiveConfig(msgspec.Struct):
    """The config a command runs with, and which keys the environment or ``--set`` gave it."""

    config: Config
    overrides: list[Override]  # in the order applied: environment (by name), then --set (as given)

    def origin(self, key: str) -> str | None:
        """``--set`` or the environment variable that set the dotted ``key`` (None: the file or the default)."""
        return origin_of(key, self.overrides, inside=False)

    def log(self) -> None:
        """Log where the keys came from (INFO; each override at DEBUG), once logging is set as asked."""
        from_env = sum(1 for ov in self.overrides if ov.origin != "--set")
        n_set = len(self.overrides) - from_env
        log.info("config %s: %d keys from the environment, %d from --set", self.config.source, from_env, n_set)
        for ov in self.overrides:
            log.debug("config key %s set by %s", ov.key, ov.origin)  # never the value: it may be a secret
        _note_unused_port(self.config)


def effective_config(path: str | Path, environ: Mapping[str, str], sets: Iterable[Override] = ()) -> EffectiveConfig:
    """The file's config with the environment's ``DRTP_CONFIG__*`` keys over it, and ``--set`` keys over both.

    Every command that takes ``-c CONFIG`` loads its config here, so the same
    key means the same thing from any of the three, and one schema validates
    the result.  An invalid value names its key and where it came from.
    """
    overrides = [*env_overrides(environ), *sets]
    path = Path(path)
    data = read_yaml(path)
    data = data if data is not None else {}
    if overrides and not isinstance(data, dict):  # the overlay needs keys to lay over: say what the file holds
        config_from_dict(data, source=str(path))
    merged = apply_overrides(data, overrides) if overrides else data
    try:
        cfg = config_from_dict(merged, source=str(path), base_dir=str(path.parent))
    except ConfigError as e:
        raise with_origin(e, overrides) from None
    return EffectiveConfig(cfg, overrides)


def _note_unused_port(cfg: Config) -> None:
    """Say, when asked for detail, that ``client_info.port`` (an original config's callback port) is not used."""
    if cfg.client_info.port is not None:
        log.info(
            "client_info.port %d not used: it is the original trace player's master callback port; drtp's "
            "results come back on its connection to each client node",
            cfg.client_info.port,
        )


def config_from_dict(data: Any, source: str = "<config>", base_dir: str = ".", expand: bool = True) -> Config:
    """The config ``data`` (a file's mapping) holds, converted and checked; errors name ``source`` and the key.

    ``expand`` False: ``data`` comes from a config already loaded (a series deriving a run's config), whose
    ``${VAR}`` were replaced once; a value that holds ``${`` after that (a password, say) is kept as it is."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the config must be a mapping of keys, not {type(data).__name__}")
    for internal in ("base_dir", "source", "namespace"):
        if internal in data:
            raise ConfigError(f"{source}: unknown key '{internal}'")
    if expand:
        data = _expand(data, source, "")
    if isinstance(data.get("registry"), str):  # the original allowed a single host:port
        data["registry"] = [data["registry"]]
    cfg = convert(data, Config, source)
    check_config(cfg, source)
    cfg.base_dir = base_dir
    cfg.source = source
    return cfg


def redacted(cfg: Config, full: bool = False) -> dict:
    """The config as a dict with secret values masked, for printing and results.

    ``full``: every key, those left at their default too (``drtp config``
    shows what a run will use); otherwise only the keys that differ from it.
    """

    data = _every_key(cfg) if full else msgspec.to_builtins(cfg)
    data.pop("base_dir", None)
    data.pop("source", None)
    if not data.get("namespace"):  # only a repetition's config has one (config.json of its run records it)
        data.pop("namespace", None)
    return _masked(data)


def secret_values(cfg: Config) -> list[str]:
    """The secret values the config holds (tokens, passwords, after ``${VAR}`` expansion): what
    :func:`redacted` masks, so that what must never be shown is told by one rule."""
    found: list[Any] = []
    _masked(msgspec.to_builtins(cfg), found)
    return [v for v in found if isinstance(v, str)]


def _masked(value: Any, found: list[Any] | None = None) -> Any:
    """``value`` with every secret key's value masked (``found``: collects the values masked)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in SECRET_KEYS and v:
                if found is not None:
                    found.append(v)
                out[k] = "***"
            else:
                out[k] = _masked(v, found)
        return out
    if isinstance(value, list):
        return [_masked(v, found) for v in value]
    return value


def _every_key(value: Any) -> Any:
    """A struct as builtins with every field, defaults included (``omit_defaults`` drops them from msgspec's)."""
    if isinstance(value, msgspec.Struct):
        return {name: _every_key(getattr(value, name)) for name in value.__struct_fields__}
    if isinstance(value, dict):
        return {k: _every_key(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_every_key(v) for v in value]
    return msgspec.to_builtins(value)
