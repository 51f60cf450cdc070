"""The one YAML config file that holds every parameter of a run, validated on load.

The original trace player's keys are accepted unchanged, so its users' files still load:
``client_info``, ``verbose``, ``trace``, ``registry``, ``warmup``,
``simulate``; drtp's own keys extend those sections.  Validation is done by
msgspec against the structs below, and every error becomes one line naming
the file and the key.  ``${ENV_VAR}`` in any string is replaced by the
variable's value; values of secret keys (token, password) are never printed.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from drtp.config_overrides import Override, apply_overrides, env_overrides, origin_of, with_origin
from drtp.errors import ConfigError
from drtp.registry.names import base_url_error, host_port_error
from drtp.replay.client_profiles import agent_problem
from drtp.replay.failure_budget import parse_max_failed
from drtp.replay.signing import token_error
from drtp.replay.slo import parse_slo
from drtp.schema import convert
from drtp.yamlfile import read_yaml

__all__ = [
    "Config",
    "ConfigError",
    "EffectiveConfig",
    "config_from_dict",
    "effective_config",
    "load_config",
    "read_yaml",
    "redacted",
]

log = logging.getLogger("drtp.config")

SECRET_KEYS = ("token", "password")
WEEK_S = 7 * 86_400.0

# Numbers as the keys need them.  The bounds are what refuses NaN (it fails every comparison) and
# infinity (above every upper bound); msgspec refuses a bool where an int or float is expected.
Port = Annotated[int, msgspec.Meta(ge=1, le=65_535)]
Threads = Annotated[int, msgspec.Meta(ge=1, le=1024)]  # a client node refuses more than 1024
Timeout = Annotated[float, msgspec.Meta(gt=0, le=WEEK_S)]  # seconds: > 0 and finite


class _Section(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    pass


class ClientInfo(_Section):
    """``client_info:``: the client nodes and how they replay.

    ``port`` is the original trace player's key: there, the port of the
    master's own server, on which the client nodes sent their results back.
    drtp has no such callback (results come back on the connection the master
    opened to each node), so the key is accepted, checked as a port, and not
    used: an original config loads and replays unchanged.  Every
    ``client_list`` entry names its node's port itself (``host:port``), as in
    the original's configs.
    """

    client_list: list[str] = []  # host:port of client nodes
    port: Port | None = None  # the original's master callback port: accepted, unused (drtp needs none)
    threads: Threads = 16
    wait: bool = False  # True: replay "as is" (trace timing); False: as fast as possible
    route: bool = False  # True: consistent hash of the client address; False: round-robin
    token: str | None = None  # shared secret between master and client nodes
    # drtp's own keys
    batch: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 200  # requests per batch sent to a node
    inflight: Annotated[int, msgspec.Meta(ge=1, le=10_000_000)] = 2000  # requests out at a node at most (bounds memory)
    timeout: Timeout = 30.0  # read timeout: seconds without progress on an answer before it fails as a timeout
    connect_timeout: Timeout = 5.0  # seconds to open a connection to the registry (TCP and TLS)
    retries: Annotated[int, msgspec.Meta(ge=0, le=10)] = 0  # GET/HEAD re-sent when no answer byte came (opt-in)
    max_failed: int | str = 0  # failed trace requests tolerated for exit code 0: a count, or a percentage "1%"
    speedup: Annotated[float, msgspec.Meta(gt=0, le=1e6)] = 1.0  # as-is mode: replay this many times faster
    # as-is mode: a request started this late still counts as on time
    on_time_ms: Annotated[float, msgspec.Meta(ge=0, le=WEEK_S * 1000)] = 10.0
    # how nodes execute: "auto" = one event loop in stress mode, the thread pool as-is (finer timed waits)
    engine: Literal["auto", "loop", "threads"] = "auto"
    # How many requests of one trace client run at once (drtp.replay.client_profiles): "trace" (None: the default)
    # overlaps them as they overlapped in the trace and orders the rest; N runs up to N at once in trace
    # order; "unlimited" lets any ``threads`` run at once (the original player's behaviour).
    client_concurrency: Literal["trace", "unlimited"] | Threads | None = None
    # how each trace client behaves: connections, idle timeout, parallel downloads/uploads, user agent
    profile: Literal["drtp", "docker", "containerd", "skopeo", "crane"] = "drtp"
    idle_timeout: Timeout | None = None  # seconds a kept connection may idle (None: the profile's)
    user_agent: str | None = None  # "trace": each request's own from the trace; other text: sent as is
    # open-loop: requests start at this many per second whatever the answers (None: closed loop or as is)
    rate: Annotated[float, msgspec.Meta(gt=0, le=1e6)] | None = None
    arrivals: Literal["constant", "poisson"] = "constant"  # how rate-mode starts are spaced
    seed: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None = None  # poisson arrivals: reproducible
    slo: str | None = None  # objectives a run must hold, e.g. "p99<200ms,failed<1%" (drtp.replay.slo)
    # true: a replayer-limited run (summary.json's replayer_limited: a client node short of CPU or late) exits 1
    max_replayer_limited: bool = False


class Limit(_Section):
    type: Literal["seconds", "requests"]
    # a limit of nothing would read nothing; an int stays an int (a count of requests prints as one)
    amount: Annotated[int, msgspec.Meta(ge=1, le=10**15)] | Annotated[float, msgspec.Meta(gt=0, le=1e15)]


class TraceSection(_Section):
    location: str
    traces: list[str]
    limit: Limit | None = None
    output: str | None = None
    format: Literal["auto", "ibm", "jsonl", "registry-log", "parquet"] = "auto"
    skip_bad: bool = False
    # seconds of disorder tolerated while streaming
    reorder_window: Annotated[float, msgspec.Meta(ge=0, le=WEEK_S)] = 60.0
    sort_files: bool = False  # sort each file in memory (for unordered files)


class Warmup(_Section):
    output: str = "warmup-map.json"
    threads: Threads = 8
    random: bool = True


class RegistryEntry(_Section):
    """One registry of an experiment (``registries:``), with how to reach and authenticate to it."""

    id: str
    url: str  # http(s)://host:port
    repository: str = ""  # prefix put before every trace repository (e.g. "myorg/")
    # how a trace repository becomes the registry's: prefix, flatten or a template (drtp/registry/repo_names.py)
    repository_map: str = "prefix"
    # argv run on the master for each repository before warmup pushes to it ({repository} substituted)
    create_repository: list[str] = []
    username: str | None = None
    password: str | None = None  # a literal or ${ENV_VAR}
    password_file: str | None = None  # or a file holding the password (the whole file, trailing newline dropped)
    credential_helper: str | None = None  # or NAME: docker-credential-NAME get, run on the master
    password_command: list[str] | None = None  # or a command (argv, no shell) whose output is the password
    credential_ttl: str | float | None = None  # ask the helper/command again after this ("50m"; default per helper)
    ca_file: str | None = None  # CA bundle (PEM) that signed the registry's certificate
    insecure: bool = False  # allow plain http, or https without certificate verification
    # drtp clean, when the registry refuses DELETE: argv run on the master for each repository drtp pushed to,
    # "{repository}" replaced by its name (no shell; a relative program path is relative to the config's folder)
    delete_repository: Annotated[list[str], msgspec.Meta(min_length=1)] | None = None
    # the registry's own Prometheus metrics: a URL, or one per member behind a load balancer (summed)
    metrics: str | Annotated[list[str], msgspec.Meta(min_length=1)] | None = None


class Simulate(_Section):
    name: str
    args: dict[str, Any] = {}


class Slurm(_Section):
    """``slurm:``: how ``drtp slurm submit`` asks Slurm for the client nodes and the master (docs/cluster.md)."""

    partition: str | None = None
    account: str | None = None
    nodes: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 1  # nodes of the client job
    tasks_per_node: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 1  # drtp client processes per node (own ports)
    cpus_per_task: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 1
    time: str = "01:00:00"  # time limit of each job (sbatch --time)
    master_time: str | None = None  # the master job's limit (default: time)
    master_cpus: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 2
    extra: list[str] = []  # more sbatch options, e.g. "--mem=4G" (or whole "#SBATCH …" lines)
    setup: list[str] = []  # shell lines run first in each job: "module load python", "source venv/bin/activate"
    drtp: str = "drtp"  # how the jobs run drtp, e.g. "python -m drtp.cli"
    client_port: Port = 8081  # task i of the client job listens on client_port + i
    bind: str = "0.0.0.0"  # address the client nodes listen on
    workdir: str = "slurm-jobs"  # shared folder that holds one folder per experiment
    register_timeout: Timeout = 300.0  # seconds the master waits for every client to come up
    poll: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 2.0  # seconds between status polls
    each_registry: bool = False  # one run per registry in registry:, in turn, on the same client nodes


class SshHost(_Section):
    """One SSH endpoint: the deploy target, a jump host, or a client host."""

    host: str
    port: Port = 22
    user: str | None = None
    key_file: str | None = None  # default: the SSH agent and ~/.ssh keys
    password: str | None = None  # use ${ENV_VAR}; never written anywhere


class Deploy(_Section):
    """``deploy:``: where ``drtp deploy`` copies the project and runs the experiment (docs/cluster.md)."""

    host: str
    port: Port = 22
    user: str | None = None
    key_file: str | None = None
    password: str | None = None
    jump: SshHost | None = None  # reach ``host`` through this host (ssh -J)
    known_hosts: str | None = None  # default ~/.ssh/known_hosts
    accept_new_host_keys: bool = True  # False: an unknown host key is an error
    remote_dir: str = "drtp-deploy"  # relative to the remote home
    python: str = "python3"  # the remote interpreter the venv is made from
    venv: str | None = None  # default <remote_dir>/venv
    install: Literal["always", "auto", "never"] = "auto"  # auto: pip install only if drtp is not importable
    system_site_packages: bool = False  # venv --system-site-packages
    pip_args: list[str] = []
    mode: Literal["slurm", "ssh"] = "slurm"  # slurm: drtp slurm submit there; ssh: clients on client_hosts
    client_hosts: list[SshHost] = []  # mode ssh: one drtp client on each (as the master reaches them)
    env: dict[str, str] = {}  # extra environment for remote commands (not secrets: use ${VAR} in the config)


class LiveMetricsSection(_Section):
    """``live_metrics:``: serve the run's figures to Prometheus while it goes (as ``--metrics-port``/``--metrics-host``
    do, which override it), so a batch job that takes no options serves them too (drtp.master.outputs.live_metrics)."""

    port: Port
    host: str = "127.0.0.1"  # the address to listen on: loopback unless another is wanted
    # at the end: wait this long at most for a scrape of the final values (0: none)
    linger: Annotated[float, msgspec.Meta(ge=0, le=3600)] = 15.0


class Config(_Section):
    trace: TraceSection | None = None
    client_info: ClientInfo = msgspec.field(default_factory=ClientInfo)
    verbose: bool = False
    registry: list[str] = []
    registries: list[RegistryEntry] = []  # drtp's own: registries with credentials; one experiment each
    # beside a plain registry: list, each registry's Prometheus metrics: host:port -> a URL or a list of URLs
    registry_metrics: dict[str, str | Annotated[list[str], msgspec.Meta(min_length=1)]] = {}
    warmup: Warmup = msgspec.field(default_factory=Warmup)
    simulate: Simulate | None = None
    results: str = "results"  # where run directories go
    slurm: Slurm | None = None  # drtp slurm (docs/cluster.md)
    deploy: Deploy | None = None  # drtp deploy (docs/cluster.md)
    # drtp run / experiment: replay this many times (interleaved across an experiment's registries), each
    # repetition into rep-<k>/ of the run's directory (drtp/master/series/repeat.py)
    repeat: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 1
    # fresh: each repetition replays into repositories of its own (prefix rep<k>-), warmed up for it;
    # reuse: every repetition replays into the same repositories, as left by the one before
    repeat_state: Literal["fresh", "reuse"] = "fresh"
    live_metrics: LiveMetricsSection | None = (
        None  # a Prometheus endpoint of the run (drtp.master.outputs.live_metrics)
    )

    # where the file was loaded from (errors name it); relative paths are resolved against its folder
    base_dir: str = "."
    source: str = "<config>"
    # set by drtp itself, never by a file: the repository prefix of one repetition (rep<k>-), put after each
    # registry's own prefix by drtp.registry.repo_names
    namespace: str = ""

    def trace_paths(self) -> list[Path]:
        """The trace files, ``trace.location`` joined with each of ``trace.traces``."""
        t = self.require("trace")
        loc = self.path(t.location)
        return [loc / name for name in t.traces]

    def path(self, value: str) -> Path:
        """A path from the config: absolute, or relative to the config file's folder."""
        p = Path(os.path.expanduser(value))
        return p if p.is_absolute() else Path(self.base_dir) / p

    def require(self, key: str) -> Any:
        """The value at a dotted key, or a ConfigError saying it is missing."""
        value: Any = self
        for part in key.split("."):
            value = getattr(value, part, None)
            if value in (None, [], ""):
                raise ConfigError(f"{self.source}: missing key '{key}' (required for this command)")
        return value

    def reader_options(self) -> dict[str, Any]:
        t = self.require("trace")
        opts: dict[str, Any] = {
            "fmt": t.format,
            "skip_bad": t.skip_bad,
            "reorder_window": t.reorder_window,
            "sort_files": t.sort_files,
        }
        if t.limit is not None:
            opts.update(limit_type=t.limit.type, amount=t.limit.amount)
        if self.client_info.user_agent == "trace":  # decoded only when a run sends it
            opts["user_agent"] = True
        return opts


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


def config_from_dict(data: Any, source: str = "<config>", base_dir: str = ".") -> Config:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the config must be a mapping of keys, not {type(data).__name__}")
    for internal in ("base_dir", "source", "namespace"):
        if internal in data:
            raise ConfigError(f"{source}: unknown key '{internal}'")
    data = _expand(data, source, "")
    if isinstance(data.get("registry"), str):  # the original allowed a single host:port
        data["registry"] = [data["registry"]]
    cfg = convert(data, Config, source)
    if cfg.client_info.engine == "loop" and cfg.client_info.wait:
        raise ConfigError(
            f"{source}: key 'client_info.engine': loop replays as fast as possible; as-is (wait: true) "
            "needs 'threads' or 'auto'"
        )
    if cfg.client_info.engine == "loop" and cfg.client_info.rate is not None:
        raise ConfigError(
            f"{source}: key 'client_info.engine': loop replays as fast as possible; rate mode (client_info.rate) "
            "needs 'threads' or 'auto'"
        )
    try:
        parse_max_failed(cfg.client_info.max_failed)
    except ValueError as e:
        raise ConfigError(f"{source}: key 'client_info.max_failed': {e}") from None
    if cfg.client_info.slo is not None:
        try:
            parse_slo(cfg.client_info.slo)
        except ValueError as e:
            raise ConfigError(f"{source}: key 'client_info.slo': {e}") from None
    if cfg.client_info.token is not None and (why := token_error(cfg.client_info.token)):
        raise ConfigError(f"{source}: key 'client_info.token': {why}")
    _check_combinations(cfg, source)
    cfg.base_dir = base_dir
    cfg.source = source
    return cfg


def _check_combinations(cfg: Config, source: str) -> None:
    """Rules that span keys or depend on another key's value (each key's own range is in its type)."""
    if cfg.client_info.idle_timeout is not None and cfg.client_info.profile == "drtp":
        raise ConfigError(
            f"{source}: key 'client_info.idle_timeout': profile drtp keeps a connection per slot for the whole run; "
            "idle timeouts apply to a client profile's connections (profile: docker, containerd, skopeo or crane)"
        )
    agent = cfg.client_info.user_agent
    if agent is not None and agent != "trace" and (why := agent_problem(agent)):
        raise ConfigError(f"{source}: key 'client_info.user_agent': {why}")
    limit = cfg.trace.limit if cfg.trace else None
    if limit is not None and limit.type == "requests" and limit.amount != int(limit.amount):
        raise ConfigError(
            f"{source}: key 'trace.limit.amount': a number of requests must be whole, got {limit.amount!r}"
        )
    _check_addresses(cfg, source)
    _check_secret_sources(cfg, source)
    s = cfg.slurm
    if s is not None and s.client_port + s.tasks_per_node - 1 > 65_535:
        raise ConfigError(
            f"{source}: key 'slurm.client_port': {s.client_port} + {s.tasks_per_node} tasks per node "
            "runs past port 65535"
        )


SECRET_SOURCES = ("password", "password_file", "credential_helper", "password_command")


def _check_secret_sources(cfg: Config, source: str) -> None:
    """One place a registry's secret comes from, and a TTL only where a secret can be asked for again."""
    from drtp.units import parse_duration

    for i, entry in enumerate(cfg.registries):
        given = [k for k in SECRET_SOURCES if getattr(entry, k) not in (None, "", [])]
        if len(given) > 1:
            raise ConfigError(
                f"{source}: key 'registries[{i}].{given[1]}': {entry.id} already has {given[0]}; "
                "give one of password, password_file, credential_helper, password_command"
            )
        helper = entry.credential_helper
        if helper is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", helper):
            raise ConfigError(
                f"{source}: key 'registries[{i}].credential_helper': {helper[:60]!r} is not a helper name "
                "(the part after docker-credential-, e.g. ecr-login)"
            )
        if entry.password_command is not None and (not entry.password_command or not entry.password_command[0]):
            raise ConfigError(f"{source}: key 'registries[{i}].password_command': an empty command")
        if entry.credential_ttl is not None:
            if helper is None and entry.password_command is None:
                raise ConfigError(
                    f"{source}: key 'registries[{i}].credential_ttl': only a credential_helper or "
                    "password_command secret is asked for again"
                )
            try:
                ttl = parse_duration(entry.credential_ttl)
            except ValueError as e:
                raise ConfigError(f"{source}: key 'registries[{i}].credential_ttl': {e}") from None
            if ttl <= 0:
                raise ConfigError(f"{source}: key 'registries[{i}].credential_ttl': must be more than 0")


def _check_addresses(cfg: Config, source: str) -> None:
    """Registries and client nodes are addresses, nothing more: a path or a bad port is refused here."""
    from drtp.replay.messages import registry_base

    for i, entry in enumerate(cfg.registry):
        if why := base_url_error(registry_base(entry)):
            raise ConfigError(f"{source}: key 'registry[{i}]': {why}")
    for i, entry in enumerate(cfg.registries):
        if why := base_url_error(registry_base(entry.url)):
            raise ConfigError(f"{source}: key 'registries[{i}].url': {why}")
        _check_repository_names(entry, f"{source}: key 'registries[{i}]")
    _check_metrics(cfg, source)
    if cfg.live_metrics is not None and (why := listen_host_error(cfg.live_metrics.host)):
        raise ConfigError(f"{source}: key 'live_metrics.host': {why}")
    for i, node in enumerate(cfg.client_info.client_list):
        if why := host_port_error(node):
            if ":" not in node:  # the original's configs always name the port; client_info.port is not it
                why += " (name each client node's port: client_info.port is not a default port for them)"
            raise ConfigError(f"{source}: key 'client_info.client_list[{i}]': {why}")


def listen_host_error(host: str) -> str | None:
    """None when ``host`` can be an address to listen on (a name, IPv4 or IPv6 literal); else what is wrong."""
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,253}|[0-9A-Fa-f:.]{2,45}", host):
        return f"{host[:200]!r} is not a host name or IP address to listen on (e.g. 127.0.0.1, 0.0.0.0)"
    return None


def metrics_urls(value: str | list[str] | None) -> list[str]:
    """A ``metrics`` value as a list of URLs."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _metrics_url_error(url: str) -> str | None:
    from urllib.parse import urlsplit

    try:
        u = urlsplit(url)
        u.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as e:
        return f"{url[:200]!r} is not a URL: {e}"
    if u.scheme not in ("http", "https") or not u.hostname:
        return f"{url[:200]!r} is not an http(s) URL of a metrics page (e.g. http://registry:5001/metrics)"
    return None


def _check_metrics(cfg: Config, source: str) -> None:
    """Metrics endpoints are http(s) URLs, and ``registry_metrics`` names only registries of ``registry:``."""
    from drtp.replay.messages import registry_base

    for i, entry in enumerate(cfg.registries):
        for url in metrics_urls(entry.metrics):
            if why := _metrics_url_error(url):
                raise ConfigError(f"{source}: key 'registries[{i}].metrics': {why}")
    known = {registry_base(r) for r in cfg.registry}
    for host, value in cfg.registry_metrics.items():
        if registry_base(host) not in known:
            raise ConfigError(
                f"{source}: key 'registry_metrics.{host[:200]}': not a registry of 'registry:' "
                f"({', '.join(cfg.registry) or 'none listed'})"
            )
        for url in metrics_urls(value):
            if why := _metrics_url_error(url):
                raise ConfigError(f"{source}: key 'registry_metrics.{host[:200]}': {why}")


def _check_repository_names(entry: RegistryEntry, where: str) -> None:
    """``repository_map`` must give valid names; ``create_repository`` must be told which repository."""
    from drtp.registry.repo_names import mapping_error

    if why := mapping_error(entry.repository_map, entry.repository):
        key = "repository_map" if entry.repository_map != "prefix" else "repository"
        raise ConfigError(f"{where}.{key}': {why}")
    hook = entry.create_repository
    if hook and (not hook[0] or not any("{repository}" in arg for arg in hook)):
        raise ConfigError(
            f"{where}.create_repository': an argv list with {{repository}} in an argument, e.g. "
            "[my-create-repo, '{repository}']"
        )


def redacted(cfg: Config, full: bool = False) -> dict:
    """The config as a dict with secret values masked, for printing and results.

    ``full``: every key, those left at their default too (``drtp config``
    shows what a run will use); otherwise only the keys that differ from it.
    """

    def mask(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: ("***" if k in SECRET_KEYS and v else mask(v)) for k, v in value.items()}
        if isinstance(value, list):
            return [mask(v) for v in value]
        return value

    data = _every_key(cfg) if full else msgspec.to_builtins(cfg)
    data.pop("base_dir", None)
    data.pop("source", None)
    if not data.get("namespace"):  # only a repetition's config has one (config.json of its run records it)
        data.pop("namespace", None)
    return mask(data)


def _every_key(value: Any) -> Any:
    """A struct as builtins with every field, defaults included (``omit_defaults`` drops them from msgspec's)."""
    if isinstance(value, msgspec.Struct):
        return {name: _every_key(getattr(value, name)) for name in value.__struct_fields__}
    if isinstance(value, dict):
        return {k: _every_key(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_every_key(v) for v in value]
    return msgspec.to_builtins(value)
