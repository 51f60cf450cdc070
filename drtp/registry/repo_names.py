"""The repository a registry gets for each repository name of a trace: ``repository:`` and ``repository_map:``.

A trace's repositories are the anonymized ``user/repo`` of the IBM traces (two
levels), sometimes one level (``name``) or more.  Hosted registries accept
fewer shapes than Distribution: Docker Hub takes only ``namespace/name``,
Harbor wants a project first, and putting a namespace before a two-level name
(``myorg/`` + ``user/repo``) makes a three-level one they refuse.  A
``registries:`` entry therefore says how names are mapped:

* ``prefix`` (the default): ``<prefix><name>``, the trace's name unchanged
  after the entry's ``repository:`` prefix.
* ``flatten``: ``<prefix><user>-<repo>``: the levels of the trace's name
  joined by ``-`` into one, so ``myorg/`` + ``user/repo`` stays two levels
  (``myorg/user-repo``).
* a template with ``{prefix}``, ``{user}``, ``{repo}`` and ``{name}``, e.g.
  ``"{prefix}{user}_{repo}"``: ``{user}`` is the first level of the trace's
  name, ``{repo}`` the levels after it joined by ``-`` (for ``user/repo``
  simply ``repo``), ``{name}`` the whole name with its slashes.

Under every mode a one-level name is ``<prefix><name>``: it has no user part
to join or to put in a template, and it is already a shape every registry
takes.  The preflight's probe repository (``drtp-preflight``) is such a name.

A repetition's namespace (``rep<k>-``, drtp.master.series.repeat) goes after the
entry's prefix (``{prefix}`` is ``<repository:><namespace>``), and for a
template without ``{prefix}`` before the last path part of what it makes
(``{user}_{repo}`` → ``rep2-user_repo``, ``org/{repo}`` → ``org/rep2-repo``):
whatever the template, each repetition gets repositories of its own.

:class:`RepositoryMap` is the one place where a name is mapped: the warmup,
the run's plan (mount sources included), the preflight and ``drtp bench``
all ask it.  It remembers every name it mapped, which makes two checks cheap:
each result is a valid Distribution name (checked once per name), and no two
trace names share a repository (a collision would merge two repositories'
tags and layers, so it is refused with both names, before anything is pushed:
warmup and run read the whole trace through the map before they touch the
registry).  The names it remembered are the repositories that
``create_repository`` hooks create.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import unquote

from drtp.errors import ConfigError
from drtp.registry.name_maps import map_name
from drtp.registry.names import name_error

if TYPE_CHECKING:
    from drtp.config import Config, RegistryEntry

PROBE = "drtp-preflight"  # the preflight's repository, before mapping


class RepositoryMap:
    """Trace repository name → the registry's repository name, for one ``registries:`` entry."""

    def __init__(
        self, mode: str = "prefix", prefix: str = "", where: str = "", collect: bool = False, namespace: str = ""
    ) -> None:
        self.mode = mode
        self.prefix = prefix
        self.namespace = namespace  # a repetition's ``rep<k>-``: every name gets it, whatever ``mode``
        self.where = where  # "<config>: registries[<id>]", for errors
        # nothing to change and no names wanted (``collect``: the hooks need them): the trace passes untouched
        self.identity = mode == "prefix" and not prefix and not namespace and not collect
        self._to: dict[str, str] = {}  # trace name -> registry name
        self._from: dict[str, str] = {}  # registry name -> trace name

    @classmethod
    def from_entry(cls, entry: RegistryEntry, source: str = "<config>", namespace: str = "") -> RepositoryMap:
        """The entry's names; ``namespace`` (a repetition's ``rep<k>-``) goes after the entry's own prefix, so a
        name keeps the shape the entry's registry takes (``myorg/`` + ``rep2-`` + ``user-repo``); with a
        template that has no ``{prefix}``, before the last path part of the name it makes."""
        where = f"{source}: registries[{entry.id}]"
        collect = bool(entry.create_repository)
        return cls(entry.repository_map, entry.repository, where, collect=collect, namespace=namespace)

    @classmethod
    def for_config(cls, cfg: Config) -> RepositoryMap:
        """The map of a single-registry config (an experiment's per-registry config); none otherwise.

        A config with several ``registries:`` entries replays them one at a time
        (``drtp experiment``), each through its own single-entry config.  A repetition's config
        (``cfg.namespace``, drtp.master.series.repeat) puts its prefix before every name, whatever the registries.
        """
        if len(cfg.registries) == 1:
            return cls.from_entry(cfg.registries[0], cfg.source, cfg.namespace)
        named = next((e for e in cfg.registries if e.repository or e.repository_map != "prefix"), None)
        if named is not None:  # one run spreads the trace over the registries: no entry's names could be kept
            raise ConfigError(
                f"{cfg.source}: registries[{named.id}]: its repository names ('repository', 'repository_map') hold "
                f"only when it is replayed on its own: run 'drtp experiment' (one registry after another)"
            )
        if cfg.namespace:
            return cls("prefix", "", f"{cfg.source}: repetition {cfg.namespace!r}", namespace=cfg.namespace)
        return cls()

    def map(self, name: str) -> str:
        """The registry's repository for trace repository ``name``; ConfigError if invalid or taken."""
        mapped = self._to.get(name)
        if mapped is not None:
            return mapped
        if self.identity:
            return name
        mapped = map_name(self.mode, self.prefix, name, self.namespace)
        if why := name_error(mapped):
            raise ConfigError(
                f"{self.where}: key 'repository_map' ({self.mode}) maps trace repository {name!r} "
                f"to {mapped[:100]!r}: {why}"
            )
        other = self._from.setdefault(mapped, name)
        if other != name:
            raise ConfigError(
                f"{self.where}: key 'repository_map' ({self.mode}) maps trace repositories {other!r} and "
                f"{name!r} to one repository {mapped!r}: choose a template that keeps them apart"
            )
        self._to[name] = mapped
        return mapped

    def probe(self) -> str:
        """The preflight's repository: ``drtp-preflight`` mapped like a trace name (``<prefix>drtp-preflight``)."""
        return self.map(PROBE)

    def repositories(self) -> list[str]:
        """Every registry repository mapped so far, in the order first seen (empty for the identity map)."""
        return list(self._from)

    def map_uri(self, uri: str) -> str:
        """An object URI of a trace record (checked by the reader) with its repository, and a mount's
        ``from=`` repository, mapped.

        The repository is what lies between ``v2/`` and the last ``/blobs/`` or ``/manifests/`` of the
        path (a reference or an upload id never holds either): found by two string searches, since a
        parse per record would cost more than the rest of the mapping (the URIs rarely repeat).
        """
        if self.identity:
            return uri
        query_at = uri.find("?")
        path = uri if query_at < 0 else uri[:query_at]
        start = 4 if uri[:1] == "/" else 3  # after "/v2/" or "v2/"
        end = path.rfind("/blobs/")
        end = max(end, path.rfind("/manifests/", end + 1))  # a manifest's, if after the last "/blobs/"
        if end <= start or not uri.startswith("v2/", start - 3):
            return uri  # not an object URI: nothing to map
        repo = uri[start:end]
        out = uri[:start] + (self._to.get(repo) or self.map(repo)) + uri[end:]
        if query_at < 0 or "from=" not in uri:
            return out
        path, _, query = out.partition("?")
        return path + "?" + "&".join(self._mapped_param(p) for p in query.split("&"))

    def _mapped_param(self, param: str) -> str:
        key, eq, value = param.partition("=")
        if key != "from" or not eq:
            return param
        return "from=" + self.map(unquote(value))  # a mapped name needs no escaping in a query
