"""A registry with an upstream: the upstream as a ``registries:`` entry of its own, and where each request goes.

A pull-through cache or mirror (the entry's ``url``) refuses pushes, so what drtp writes — warmup, the
preflight's probe and, with ``upstream_writes: upstream``, the trace's pushes — goes to the registry behind
it, the entry's ``upstream:``.  :func:`upstream_entry` makes that a :class:`RegistryEntry` (id
``<id>-upstream``), so credentials, TLS trust, repository maps, ``drtp clean`` and metrics take it as they
take any entry.  The cache passes repository names to its upstream unchanged, so the upstream's names are
the entry's own (``repository``/``repository_map`` of ``upstream:`` may only repeat them: drtp.config.checks).
"""

from __future__ import annotations

from drtp.config.schema import Config, RegistryEntry
from drtp.replay.messages import registry_base

UPSTREAM_SUFFIX = "-upstream"  # the upstream entry's id: the cache entry's id and this


def upstream_entry(entry: RegistryEntry) -> RegistryEntry | None:
    """The upstream of ``entry`` as an entry of its own (None: ``entry`` has no upstream)."""
    up = entry.upstream
    if up is None:
        return None
    return RegistryEntry(
        id=entry.id + UPSTREAM_SUFFIX,
        url=up.url,
        repository=entry.repository,  # the cache asks its upstream for the names it was asked for
        repository_map=entry.repository_map,
        create_repository=up.create_repository,
        username=up.username,
        password=up.password,
        password_file=up.password_file,
        credential_helper=up.credential_helper,
        password_command=up.password_command,
        credential_ttl=up.credential_ttl,
        ca_file=up.ca_file,
        insecure=up.insecure,
        delete_repository=up.delete_repository,
        metrics=up.metrics,
    )


def all_entries(cfg: Config) -> list[RegistryEntry]:
    """Every registry drtp may talk to: each ``registries:`` entry, then each entry's upstream (in order)."""
    ups = [u for u in map(upstream_entry, cfg.registries) if u is not None]
    return [*cfg.registries, *ups]


def upstreams(cfg: Config) -> dict[str, str]:
    """Base URL of each entry with an upstream → its upstream's base URL."""
    return {registry_base(e.url): registry_base(e.upstream.url) for e in cfg.registries if e.upstream is not None}


def write_target(registry: str, ups: dict[str, str]) -> str:
    """Where drtp writes what a run reads from ``registry`` (an address of ``registry:``): its upstream, or itself."""
    return ups.get(registry_base(registry), registry)


def write_routes(cfg: Config) -> dict[str, str | None]:
    """The trace's pushes of each registry with an upstream: base URL → the upstream's base URL
    (``upstream_writes: upstream``) or None (``skip``: not sent, counted)."""
    return {
        registry_base(e.url): registry_base(e.upstream.url) if e.upstream_writes == "upstream" else None
        for e in cfg.registries
        if e.upstream is not None
    }


def upstream_ids(cfg: Config) -> dict[str, str]:
    """Base URL of a registry with an upstream → its entry's id (summary.json's ``upstream`` keys)."""
    return {registry_base(e.url): e.id for e in cfg.registries if e.upstream is not None}
