"""The one YAML config file that holds every parameter of a run, validated on load.

Three modules, one job each: the schema (drtp.config.schema: one struct per
section, each key's type and range), the checks beyond one key's type
(drtp.config.checks: rules that span keys or need a value's grammar), and
loading (drtp.config.loading: the file, ``${ENV_VAR}`` substitution, the
environment's and ``--set``'s keys, the redacted view).  ``from drtp.config
import …`` gives what commands use from all three.
"""

from drtp.config.checks import SECRET_SOURCES, listen_host_error, metrics_urls
from drtp.config.loading import (
    EffectiveConfig,
    config_from_dict,
    effective_config,
    load_config,
    redacted,
    secret_values,
)
from drtp.config.schema import (
    SECRET_KEYS,
    ClientInfo,
    Config,
    Deploy,
    LiveMetricsSection,
    RegistryEntry,
    Simulate,
    Slurm,
    SshHost,
    TraceSection,
    Warmup,
)
from drtp.errors import ConfigError
from drtp.yamlfile import read_yaml

__all__ = [
    "SECRET_KEYS",
    "SECRET_SOURCES",
    "ClientInfo",
    "Config",
    "ConfigError",
    "Deploy",
    "EffectiveConfig",
    "LiveMetricsSection",
    "RegistryEntry",
    "Simulate",
    "Slurm",
    "SshHost",
    "TraceSection",
    "Warmup",
    "config_from_dict",
    "effective_config",
    "listen_host_error",
    "load_config",
    "metrics_urls",
    "read_yaml",
    "redacted",
    "secret_values",
]
