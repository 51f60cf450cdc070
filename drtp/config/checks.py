"""The config's checks beyond each key's own type: rules that span keys or need a value's grammar.

:func:`check_config` runs on every config once msgspec has converted it
(drtp.config.loading), so a file, an environment variable and ``--set`` meet
the same rules.  A value's grammar lives with what uses the value — the failure
budget, the objectives, the control plane's token, a client profile's user
agent (drtp.replay), registry addresses and names (drtp.registry.names and
name_maps) — and each error is one line naming the file and the key.
"""

from __future__ import annotations

import re

from drtp.config.schema import Config, RegistryEntry, UpstreamEntry
from drtp.config.upstreams import UPSTREAM_SUFFIX
from drtp.errors import ConfigError
from drtp.registry.names import base_url_error, host_port_error
from drtp.replay.client_profiles import agent_problem
from drtp.replay.failure_budget import parse_max_failed
from drtp.replay.signing import token_error
from drtp.replay.slo import parse_slo


def check_config(cfg: Config, source: str) -> None:
    """Every rule a converted config must still pass; raises a ConfigError naming ``source`` and the key."""
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
    _check_upstreams(cfg, source)
    _check_events(cfg, source)
    s = cfg.slurm
    if s is not None and s.client_port + s.tasks_per_node - 1 > 65_535:
        raise ConfigError(
            f"{source}: key 'slurm.client_port': {s.client_port} + {s.tasks_per_node} tasks per node "
            "runs past port 65535"
        )


SECRET_SOURCES = ("password", "password_file", "credential_helper", "password_command")


def _check_secret_sources(cfg: Config, source: str) -> None:
    """One place a registry's secret comes from, and a TTL only where a secret can be asked for again."""
    for i, entry in enumerate(cfg.registries):
        _check_secret(entry, entry.id, f"{source}: key 'registries[{i}]")
        if entry.upstream is not None:
            _check_secret(entry.upstream, f"{entry.id}'s upstream", f"{source}: key 'registries[{i}].upstream")


def _check_secret(entry: RegistryEntry | UpstreamEntry, who: str, where: str) -> None:
    """The secret rules of one entry, or of its ``upstream:`` (``where``: the file and the key's start)."""
    from drtp.units import parse_duration

    given = [k for k in SECRET_SOURCES if getattr(entry, k) not in (None, "", [])]
    if len(given) > 1:
        raise ConfigError(
            f"{where}.{given[1]}': {who} already has {given[0]}; "
            "give one of password, password_file, credential_helper, password_command"
        )
    helper = entry.credential_helper
    if helper is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", helper):
        raise ConfigError(
            f"{where}.credential_helper': {helper[:60]!r} is not a helper name "
            "(the part after docker-credential-, e.g. ecr-login)"
        )
    if entry.password_command is not None and (not entry.password_command or not entry.password_command[0]):
        raise ConfigError(f"{where}.password_command': an empty command")
    if entry.credential_ttl is not None:
        if helper is None and entry.password_command is None:
            raise ConfigError(
                f"{where}.credential_ttl': only a credential_helper or password_command secret is asked for again"
            )
        try:
            ttl = parse_duration(entry.credential_ttl)
        except ValueError as e:
            raise ConfigError(f"{where}.credential_ttl': {e}") from None
        if ttl <= 0:
            raise ConfigError(f"{where}.credential_ttl': must be more than 0")


def _check_upstreams(cfg: Config, source: str) -> None:
    """An ``upstream:`` is an address like an entry's, under the entry's own repository names (a cache asks its
    upstream for the names it is asked for), and ``upstream_writes`` says where pushes go only beside one."""
    from drtp.replay.messages import registry_base

    for i, entry in enumerate(cfg.registries):
        where = f"{source}: key 'registries[{i}]"
        up = entry.upstream
        if up is None:
            if entry.upstream_writes != "upstream":  # the default: a file cannot be told apart from it
                raise ConfigError(
                    f"{where}.upstream_writes': {entry.id} has no upstream: (it says where pushes go beside one)"
                )
            continue
        if why := base_url_error(registry_base(up.url)):
            raise ConfigError(f"{where}.upstream.url': {why}")
        if any(other.id == entry.id + UPSTREAM_SUFFIX for other in cfg.registries):
            raise ConfigError(
                f"{where}.upstream': its upstream is named {entry.id}{UPSTREAM_SUFFIX}, another entry's id: "
                "rename that one"
            )
        if registry_base(up.url) == registry_base(entry.url):
            raise ConfigError(f"{where}.upstream.url': {entry.id}'s upstream is the registry itself ({entry.url})")
        for key, default in (("repository", ""), ("repository_map", "prefix")):
            if getattr(up, key) not in (getattr(entry, key), default):
                raise ConfigError(
                    f"{where}.upstream.{key}': the cache asks its upstream for the names it is asked for: "
                    f"give {key} in {entry.id}'s entry, not in upstream:"
                )
        for url in metrics_urls(up.metrics):
            if why := _metrics_url_error(url):
                raise ConfigError(f"{where}.upstream.metrics': {why}")


def check_access_logs(cfg: Config) -> None:
    """Each upstream's ``access_log`` can be read now (the upstream runs before the run starts, so its log is
    there); a ConfigError naming the entry otherwise.  Checked when a run starts, not when the file loads:
    ``drtp clean`` or a submit host need no access to it."""
    for i, entry in enumerate(cfg.registries):
        log = entry.upstream.access_log if entry.upstream is not None else None
        if log is None:
            continue
        path = cfg.path(log)
        try:
            with open(path, "rb") as f:
                f.read(1)
        except OSError as e:
            raise ConfigError(
                f"{cfg.source}: key 'registries[{i}].upstream.access_log': {entry.id}'s upstream log {path} "
                f"cannot be read ({e.strerror or e})"
            ) from None


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
    from drtp.registry.name_maps import mapping_error

    if why := mapping_error(entry.repository_map, entry.repository):
        key = "repository_map" if entry.repository_map != "prefix" else "repository"
        raise ConfigError(f"{where}.{key}': {why}")
    hook = entry.create_repository
    if hook and (not hook[0] or not any("{repository}" in arg for arg in hook)):
        raise ConfigError(
            f"{where}.create_repository': an argv list with {{repository}} in an argument, e.g. "
            "[my-create-repo, '{repository}']"
        )


EVENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # a file name too: events/<name>.log


def event_at_s(at: str | float) -> float:
    """Seconds of an event's ``at`` (a duration from the run's first request); ValueError when it is none."""
    from drtp.units import parse_duration

    return parse_duration(at)


def event_until_s(until: str | float) -> float:
    """Seconds of an event's ``until`` duration (more than 0); ValueError when it is none."""
    from drtp.units import parse_duration

    seconds = parse_duration(until)
    if seconds <= 0:
        raise ValueError(f"must be more than 0, got {until!r}")
    return seconds


def _check_events(cfg: Config, source: str) -> None:
    """Each event: a name of its own (a file name), exactly one of ``at``/``after``, a command, a valid ``until``.

    Whether the commands exist and fit in the trace is checked where the run starts (drtp.master.outputs.events):
    a Slurm or deploy job runs them on another machine, from another folder."""
    seen: set[str] = set()
    for i, event in enumerate(cfg.events):

        def where(key: str = "", event_name: str = event.name, index: int = i) -> str:
            return f"{source}: key 'events[{index}]{key}' (event {event_name[:64]!r})"

        if not EVENT_NAME.fullmatch(event.name):
            raise ConfigError(
                f"{source}: key 'events[{i}].name': {event.name[:64]!r} is not a name of letters, digits, '.', '_' "
                "and '-' (at most 64; it names the event's log file)"
            )
        if event.name in seen:
            raise ConfigError(f"{where()}: two events named {event.name!r}: give each a name of its own")
        seen.add(event.name)
        if (event.at is None) == (event.after is None):
            raise ConfigError(
                f"{where()}: give exactly one of 'at' (a duration from the run's first request, e.g. 30s) "
                "and 'after' (a count of answered trace requests)"
            )
        if event.at is not None:
            try:
                event_at_s(event.at)
            except ValueError as e:
                raise ConfigError(f"{where('.at')}: {e}") from None
        if not event.run or not event.run[0]:
            raise ConfigError(f"{where('.run')}: an empty command (an argv list, e.g. [docker-registry, serve, FILE])")
        if isinstance(event.until, list):
            if not event.until or not event.until[0]:
                raise ConfigError(f"{where('.until')}: an empty command")
        elif event.until is not None:
            try:
                event_until_s(event.until)
            except ValueError as e:
                raise ConfigError(f"{where('.until')}: {e}") from None
