"""What drtp's own records say it pushed into each registry: the targets of ``drtp clean``.

``drtp clean`` deletes only what these records name (drtp.master.commands.clean says why): the
warmup maps the config names (a repetition's too, found beside the map), the push ledgers beside
them (drtp.master.run.push_ledger) and the ``requests.csv`` of runs named with ``--run``.  Reading
them is one job — each record checked and turned into one :class:`Pushed` per registry, bad
input named by file and entry — and the registry is never asked anything here; deciding what is
someone else's, deleting and reporting are the command's (drtp.master.commands.clean).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from glob import escape as glob_escape
from pathlib import Path

from drtp.config import Config, RegistryEntry
from drtp.config.upstreams import all_entries, upstreams, write_routes
from drtp.errors import DrtpError
from drtp.master.run.plan import registry_for
from drtp.master.run.push_ledger import LEDGER_INFIX, LedgerRead, ledger_path, pushed_by_rows, read_ledger
from drtp.master.series.repeat import repetition_map
from drtp.registry.auth import auth_for, config_auth
from drtp.registry.manifest import CONFIG_DIGEST
from drtp.registry.names import digest_error, name_error
from drtp.registry.repo_names import RepositoryMap
from drtp.replay.messages import RegistryAuth, registry_base
from drtp.replay.run_dirs import run_dirs_in


@dataclass
class Pushed:
    """What drtp's records say it pushed into one registry."""

    registry: str  # base URL
    name: str  # how the user names it: the entry's id, or the registry: item
    auth: RegistryAuth | None = None  # its credentials and TLS trust (None: anonymous, system CAs)
    entry: RegistryEntry | None = None  # its registries: entry (None: a registry: item), for its delete_repository
    probe_repository: str | None = None  # where the preflight pushed its probe (registries: entries only)
    ledgers: list[LedgerRead] = field(default_factory=list)  # its push ledgers, as read
    # (kind, repository, digest) -> the tags a manifest was pushed under (empty for a blob)
    objects: dict[tuple[str, str, str], set[str]] = field(default_factory=dict)

    def add(self, kind: str, repository: str, digest: str, tag: str = "") -> None:
        tags = self.objects.setdefault((kind, repository, digest), set())
        if tag and not tag.startswith("sha256:"):
            tags.add(tag)

    def repositories(self) -> list[str]:
        return sorted({repo for _, repo, _ in self.objects})


def _entry_of(cfg: Config, base: str) -> RegistryEntry | None:
    return next((e for e in all_entries(cfg) if registry_base(e.url) == base), None)


def given_runs(given: list[Path]) -> list[Path]:
    """The runs of ``--run`` directories: a run, an experiment's registry folder, or a folder of repetitions (each
    ``rep-<k>/`` is a run; one that never started pushed nothing); a path that is not a directory is bad input,
    refused before any registry is asked anything."""
    runs: list[Path] = []
    for run_dir in given:
        if not run_dir.is_dir():
            raise DrtpError(f"--run {run_dir}: not a directory")
        held = run_dirs_in(run_dir)
        runs += [d for d in held if (d / "requests.csv").is_file()] if held != [run_dir] else held
    return runs


def targets(cfg: Config, only: str | None) -> dict[str, Pushed]:
    """The registries to clean (base URL → its record), from both ``registry:`` and ``registries:``."""
    auths = config_auth(cfg)
    names: dict[str, str] = {}
    for e in all_entries(cfg):  # a cache's upstream too: its warmup and pushes went there
        names.setdefault(registry_base(e.url), e.id)
    for r in cfg.registry:
        names.setdefault(registry_base(r), r)
    if not names:
        raise DrtpError(f"{cfg.source}: names no registry (registry: or registries:)")
    if only is not None:
        chosen = {b: n for b, n in names.items() if only in (n, b)}
        if not chosen:
            raise DrtpError(f"--registry {only}: not a registry of {cfg.source} (one of: {', '.join(names.values())})")
        names = chosen
    # a pull-through cache holds nothing drtp pushed (it refuses pushes): its upstream is cleaned in its stead
    for cache, up in upstreams(cfg).items():
        if cache in names:
            del names[cache]
            names.setdefault(up, _entry_of(cfg, up).id)
    out = {}
    for base, name in names.items():
        entry = _entry_of(cfg, base)
        out[base] = Pushed(
            base,
            name,
            auth_for(base, auths),
            entry,
            RepositoryMap.from_entry(entry, cfg.source).probe() if entry else None,
        )
    return out


def warmup_maps(cfg: Config, chosen: Iterable[str]) -> dict[Path, set[str]]:
    """Each warmup map the config names → the registries (base URLs) that write into it."""
    # here, not at the top: drtp.master.series.experiment brings the whole replay, which every ``drtp`` process
    # would load
    from drtp.master.series.experiment import registry_config, run_name

    maps: dict[Path, set[str]] = defaultdict(set)
    plain = {registry_base(r) for r in cfg.registry}
    # slurm.each_registry: the master job replayed each address as an experiment entry of its own
    each: dict[str, RegistryEntry] = {}
    if cfg.slurm is not None and cfg.slurm.each_registry and len(cfg.registry) >= 2:
        for i, r in enumerate(cfg.registry, 1):
            each[registry_base(r)] = RegistryEntry(run_name(i, r), registry_base(r))
    for base in chosen:
        if base in each:
            maps[cfg.path(registry_config(cfg, each[base]).warmup.output)].add(base)
            continue
        if base in plain:
            maps[cfg.path(cfg.warmup.output)].add(base)
        for e in cfg.registries:
            # a cache's upstream was written into by the cache's warmup and runs: its records lie beside that map
            if base in (registry_base(e.url), registry_base(e.upstream.url) if e.upstream else None):
                maps[cfg.path(registry_config(cfg, e).warmup.output)].add(base)
    configured = range(1, cfg.repeat + 1) if cfg.repeat > 1 and cfg.repeat_state == "fresh" else ()
    out: dict[Path, set[str]] = {}
    for path, bases in maps.items():
        # each repetition warmed repositories of its own: those the config says, and those found beside the map
        reps = sorted(set(configured) | _repetitions_beside(path))
        recorded = path.is_file() or any(ledger_path(path, b).is_file() for b in bases)
        if not configured and (recorded or not reps):  # the map itself: unless only repetitions were run
            out[path] = bases
        for k in reps:
            out[repetition_map(path, k)] = bases
    return out


def _repetitions_beside(path: Path) -> set[int]:
    """The repetitions (k) whose warmup map or push ledger lies beside ``path`` (``<stem>-rep<k>…``)."""
    found = set()
    head = f"{path.stem}-rep"
    if not path.parent.is_dir():
        return found
    for p in path.parent.glob(glob_escape(head) + "*"):
        rest = p.name[len(head) :]
        k, dot, tail = rest.partition(".")
        if k.isdigit() and (dot + tail == path.suffix or (dot + tail).startswith(LEDGER_INFIX)):
            found.add(int(k))
    return found


def read_ledgers(maps: dict[Path, set[str]], pushed: dict[str, Pushed]) -> tuple[int, set[str]]:
    """Add the push ledgers' objects (one per warmup map and registry, where there is one): (entries, runs)."""
    n, runs = 0, set()
    for path, bases in maps.items():
        for base in sorted(bases):
            ledger = ledger_path(path, base)
            if not ledger.is_file():
                continue
            read = read_ledger(ledger)
            pushed[base].ledgers.append(read)
            for p in read.pushes:
                if registry_base(p.registry) == base:
                    pushed[base].add(p.kind, p.repository, p.digest, p.tag if p.kind == "manifest" else "")
                    n += 1
                    runs.add(p.run)
    return n, runs


def read_maps(
    cfg: Config, pushed: dict[str, Pushed], maps: dict[Path, set[str]], required: bool
) -> tuple[int, list[Path]]:
    """Add the warmup maps' objects: (entries read, maps not found).

    A registry without any map or ledger is bad input when ``required`` (no runs given: nothing would be cleaned
    there).
    """
    from drtp.master.run.warmup import load_map  # here: it brings the replay's modules (see warmup_maps)

    found = {base for path, bases in maps.items() if path.is_file() for base in bases}
    found |= {base for base, target in pushed.items() if target.ledgers}
    n, missing = 0, []
    for path, bases in maps.items():
        if not path.is_file():
            if required and bases - found:
                who = ", ".join(pushed[b].name for b in sorted(bases - found))
                hint = "; --registry ID cleans another one" if len(pushed) > 1 else ""
                raise DrtpError(
                    f"{path}: warmup map of registry {who} not found, nor a push ledger beside it "
                    f"(nothing recorded to clean{hint})"
                )
            missing.append(path)
            continue
        try:
            for i, e in enumerate(load_map(path), 1):
                fields = [e["registry"], e["repository"], e["reference"], e["digest"]]
                why = "not text" if not all(isinstance(f, str) for f in fields) else _object_error(e)
                if why:
                    raise DrtpError(f"{path}: entry {i}: {why}")
                base = registry_base(e["registry"])
                if base not in pushed:
                    continue
                kind = "manifest" if e["kind"] == "manifest" else "blob"
                pushed[base].add(kind, e["repository"], e["digest"], e["reference"] if kind == "manifest" else "")
                if kind == "manifest":  # warmup pushes the minimal config blob with every manifest
                    pushed[base].add("blob", e["repository"], CONFIG_DIGEST)
                n += 1
        except (OSError, UnicodeDecodeError) as e:
            raise DrtpError(f"{path}: cannot read the warmup map ({getattr(e, 'strerror', None) or e})") from None
    return n, missing


def _object_error(e: dict) -> str | None:
    """What is wrong with the repository or digest of a record (None: a name and digest to send a DELETE for)."""
    return name_error(e["repository"]) or digest_error(e["digest"])


def read_runs(cfg: Config, run_dirs: list[Path], pushed: dict[str, Pushed], only: str | None) -> tuple[int, list[str]]:
    """Add what each run's requests.csv says it pushed (read by drtp.analysis.results, as the analyses read it):
    (pushes found, notes on runs of another registry than ``--registry``)."""
    from drtp.analysis.results import read_run_files, rows

    n, notes = 0, []
    # a cache's pushes went to its upstream (upstream_writes: upstream): its rows' pushes are the upstream's
    routes = {cache: up for cache, up in write_routes(cfg).items() if up is not None}
    for run_dir in run_dirs:
        df, summary = read_run_files(run_dir)
        ran = summary.get("registries")
        if not isinstance(ran, list) or not ran or not all(isinstance(r, str) for r in ran):
            if only is None and len(pushed) != 1:
                raise DrtpError(f"{run_dir}: summary.json does not say which registry the run used: give --registry ID")
            ran = list(pushed)
        bases = [registry_base(r) for r in ran]
        namespace = summary.get("namespace")  # a repetition's: the spread went by the trace's names
        namespace = namespace if isinstance(namespace, str) else ""
        unknown = [b for b in bases if b not in pushed and only is None]
        if unknown:
            raise DrtpError(f"{run_dir}: ran against {', '.join(unknown)}, which {cfg.source} does not name")
        if not any(b in pushed or routes.get(b) in pushed for b in bases):
            notes.append(f"{run_dir} ran against {', '.join(ran)}, not --registry {only}: left out")
            continue
        for kind, repo, digest, tag in pushed_by_rows(rows(df)):
            if why := _object_error({"repository": repo, "digest": digest}):
                raise DrtpError(f"{run_dir / 'requests.csv'}: a {kind} pushed: {why}")
            base = registry_base(registry_for(repo, ran, namespace)) if len(ran) > 1 else bases[0]
            base = routes.get(base, base)
            if base in pushed:
                pushed[base].add(kind, repo, digest, tag)
                n += 1
    return n, notes
