"""``drtp clean``: remove from a registry what drtp pushed there, and nothing else.

What drtp pushed is what its own records say (read by drtp.master.commands.clean_records):
the warmup map of each registry
(``warmup.output``; ``<stem>-<id><suffix>`` per entry of ``registries:``; a repetition's
``<stem>[-<id>]-rep<k><suffix>``), the push ledger beside each map (drtp.master.run.push_ledger:
every push a registry accepted from a run of the config — manifest PUTs, blob uploads and
mounts, the helper pushes of the minimal config blob and of a mount's fallback upload —
appended by the master as the results arrive), the ``requests.csv`` of the runs named with
``--run`` (read the same way, for runs kept elsewhere or made before ledgers were kept),
and the preflight's probe blob, which the preflight deletes itself where the registry lets
it.  A repetition's map and ledger are found beside the map without ``--set repeat=N``.
Manifests are deleted by digest (their tags go with them), then the blobs' links in each
repository.  After a clean with ``--yes``, each ledger gets a ``cleared`` line for every
object deleted or found gone, so the next clean does not ask for it again.

Nothing else is touched.  Before deleting, every tag of each repository drtp
pushed to is looked at: a tag drtp has no record of pushing belongs, as far as
drtp can tell, to an image of someone else, and its manifest, the blobs it
references (and an index's manifests and their blobs) are kept.  A repository
holding such a tag never gets the ``delete_repository`` hook.  An image pushed
by digest only (untagged) cannot be found this way: its blobs are safe only
when drtp's records do not name them.

A registry that refuses DELETE (405, or the ``UNSUPPORTED`` error code) gets its
entry's ``delete_repository`` command, once per repository with objects left;
without one, a line says what is left.  A blob DELETE only unlinks the blob
from the repository: the registry frees its bytes at its garbage collection.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from drtp.config import Config
from drtp.config.upstreams import upstreams
from drtp.errors import ConfigError, RunError
from drtp.exit_codes import ExitCode
from drtp.master.commands.clean_records import (
    Pushed,
    given_runs,
    read_ledgers,
    read_maps,
    read_runs,
    targets,
    warmup_maps,
)
from drtp.master.run.push_ledger import mark_cleared
from drtp.registry.calls import DELETED, GONE, REFUSED, REGISTRY_ERRORS, RegistryCalls
from drtp.registry.manifest import ACCEPT
from drtp.registry.repo_hooks import HookError, run_hook
from drtp.registry.transport import DIRECT_USER_AGENT, USER_AGENT

log = logging.getLogger("drtp.clean")

SHOWN_REPOSITORIES = 20  # a line of what is left names this many repositories at most
KINDS = ("manifest", "blob")
PROBE = "probe"  # what is left in the preflight's repository: probe blobs, how many unknown (one per check)


# -- what is someone else's --------------------------------------------------------------------------------------


def foreign(calls: RegistryCalls, repo: str, ours: dict[tuple[str, str, str], set[str]]) -> set[str]:
    """Digests in ``repo`` that an image drtp has no record of pushing references: the tags drtp has no record
    of, their manifests, the blobs those reference and, for an index, its manifests and their blobs."""
    our_tags = {t for (kind, r, _), tags in ours.items() if kind == "manifest" and r == repo for t in tags}
    keep: set[str] = set()
    for tag in calls.tags(repo):
        if tag in our_tags:
            continue
        digest, doc = calls.manifest(repo, tag)
        keep.add(digest)
        for child in doc.get("manifests") or []:  # an index / manifest list
            if isinstance(child, dict) and isinstance(child.get("digest"), str):
                keep.add(child["digest"])
                with contextlib.suppress(*REGISTRY_ERRORS):  # a child gone meanwhile: its digest is kept
                    keep |= _references(calls.manifest(repo, child["digest"])[1])
        keep |= _references(doc)
    return keep


def _references(doc: dict) -> set[str]:
    """The blob digests a manifest names (config and layers)."""
    parts = [doc.get("config"), *(doc.get("layers") or [])]
    found = {p["digest"] for p in parts if isinstance(p, dict) and isinstance(p.get("digest"), str)}
    schema1 = doc.get("fsLayers") or []  # an old schema-1 manifest names its blobs so
    return found | {p["blobSum"] for p in schema1 if isinstance(p, dict) and isinstance(p.get("blobSum"), str)}


# -- deleting ---------------------------------------------------------------------------------------------------


@dataclass
class RegistryCleanup:
    """What became of one registry's objects."""

    done: Counter = field(default_factory=Counter)  # (kind, DELETED | GONE | REFUSED | "error" | "hook") -> n
    kept: int = 0  # objects an image drtp has no record of pushing references
    kept_repositories: set[str] = field(default_factory=set)  # repositories with such images
    present: Counter = field(default_factory=Counter)  # dry run: kind -> objects there
    bytes: Counter = field(default_factory=Counter)  # dry run: kind -> bytes (blobs: each digest once)
    refused: set[str] = field(default_factory=set)  # kinds the registry refuses to delete
    left: dict[str, Counter] = field(default_factory=dict)  # repository -> kind -> objects left
    errors: list[str] = field(default_factory=list)
    removed: set[tuple[str, str, str]] = field(default_factory=set)  # (kind, repository, digest) deleted or gone

    def leave(self, kind: str, repo: str) -> None:
        self.left.setdefault(repo, Counter())[kind] += 1


def _parallel(fn: Callable, items: list, threads: int) -> list:
    if not items:
        return []
    with ThreadPoolExecutor(max(1, min(threads, len(items)))) as pool:
        return list(pool.map(fn, items))


def clean_registry(target: Pushed, cfg: Config, yes: bool, threads: int) -> RegistryCleanup:
    """Dry run (``yes`` False: look, delete nothing) or delete one registry's objects: manifests, then blobs."""
    direct = target.registry in upstreams(cfg).values()  # a cache's upstream: drtp's requests apart in its log
    calls = RegistryCalls(target.registry, target.auth, timeout=60, agent=DIRECT_USER_AGENT if direct else USER_AGENT)
    out = RegistryCleanup()
    keep: dict[str, set[str]] = {}
    repos = target.repositories()
    for repo, kept in zip(repos, _parallel(lambda r: foreign(calls, r, target.objects), repos, threads), strict=True):
        keep[repo] = kept
        if kept:
            out.kept_repositories.add(repo)
    todo = {k: [] for k in KINDS}
    for kind, repo, digest in sorted(target.objects):
        if digest in keep[repo]:
            out.kept += 1
        else:
            todo[kind].append((repo, digest))
    if not yes:
        _look(calls, todo, out, threads)
        return out
    for kind in KINDS:  # manifests first: a blob a deleted manifest referenced can go after it
        delete = calls.delete_manifest if kind == "manifest" else calls.delete_blob

        def one(item: tuple[str, str], delete=delete, kind=kind) -> str:
            if kind in out.refused:  # the registry said it does not delete: no need to ask again
                return REFUSED
            if kind == "blob" and "manifest" in out.refused:  # drtp's manifests stay: so do the blobs they use
                return REFUSED
            try:
                result = delete(*item)
            except REGISTRY_ERRORS as e:
                if len(out.errors) < 5:
                    out.errors.append(str(e)[:300])
                return "error"
            if result == REFUSED:
                out.refused.add(kind)
            return result

        for (repo, digest), result in zip(todo[kind], _parallel(one, todo[kind], threads), strict=True):
            out.done[(kind, result)] += 1
            if result in (DELETED, GONE):
                out.removed.add((kind, repo, digest))
            else:
                out.leave(kind, repo)
    if out.refused and target.probe_repository:  # the preflight could not delete its probe either
        out.leave(PROBE, target.probe_repository)
    if out.refused and target.entry is not None and target.entry.delete_repository:
        hooked = _run_hooks(target, cfg, out)
        out.removed |= {(kind, repo, digest) for kind in KINDS for repo, digest in todo[kind] if repo in hooked}
    return out


def _look(calls: RegistryCalls, todo: dict[str, list], out: RegistryCleanup, threads: int) -> None:
    """Dry run: which objects are there, and their bytes (a blob's bytes once however many links it has)."""
    seen: set[str] = set()
    for kind in KINDS:

        def size(item: tuple[str, str], kind=kind) -> int | str | None:
            try:
                return calls.stored_size(kind, *item, accept=ACCEPT if kind == "manifest" else None)
            except REGISTRY_ERRORS as e:
                return str(e)[:300]

        for (_, digest), n in zip(todo[kind], _parallel(size, todo[kind], threads), strict=True):
            if n is None:
                out.done[(kind, GONE)] += 1
                continue
            if isinstance(n, str):  # not known whether it is there: said, and the exit code is 1
                if len(out.errors) < 5:
                    out.errors.append(n)
                out.done[(kind, "error")] += 1
                continue
            out.present[kind] += 1
            if kind == "manifest" or digest not in seen:
                out.bytes[kind] += n
                seen.add(digest)


def _run_hooks(target: Pushed, cfg: Config, out: RegistryCleanup) -> set[str]:
    """``delete_repository`` once per repository with objects left, unless an image of someone else is there;
    the repositories it removed."""
    entry = target.entry
    hooked = set()
    for repo in sorted(out.left):
        if entry is None or not entry.delete_repository or repo in out.kept_repositories:
            continue
        try:
            run_hook(cfg, entry, "delete_repository", entry.delete_repository, repo)
        except (HookError, ConfigError) as e:
            out.errors.append(str(e))
            continue
        log.info("delete_repository for %s: done", repo)  # never its argv: it may hold secrets
        hooked.add(repo)
        for kind, n in out.left.pop(repo).items():
            out.done[(kind, "hook")] += n
    return hooked


# -- the report -------------------------------------------------------------------------------------------------


def _count(n: int, one: str, many: str = "") -> str:
    """``1 manifest``, ``2 manifests``: a number and its noun."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"


def _hooked(d: Counter) -> str:
    n_manifests, n_blobs = d[("manifest", "hook")], d[("blob", "hook")]
    if not n_manifests + n_blobs:
        return ""
    return f"; removed with delete_repository: {n_manifests} manifests, {n_blobs} blob links"


def report(target: Pushed, out: RegistryCleanup, yes: bool) -> list[str]:
    """The console lines of one registry."""
    head = f"registry {target.name}" + ("" if target.registry.endswith("//" + target.name) else f" ({target.registry})")
    d = out.done
    lines = []
    if not yes:
        lines.append(
            f"{head}: would delete {_count(out.present['manifest'], 'manifest')} ({_mb(out.bytes['manifest'])}) "
            f"and {_count(out.present['blob'], 'blob link')} ({_mb(out.bytes['blob'])} in distinct blobs) in "
            f"{_count(len(target.repositories()), 'repository', 'repositories')}; "
            f"{d[('manifest', GONE)] + d[('blob', GONE)]} already gone"
        )
    else:
        lines.append(
            f"{head}: deleted {_count(d[('manifest', DELETED)], 'manifest')} and "
            f"{_count(d[('blob', DELETED)], 'blob link')}; "
            f"{d[('manifest', GONE)] + d[('blob', GONE)]} already gone" + _hooked(d)
        )
    if out.kept:
        lines.append(
            f"{head}: kept {_count(out.kept, 'object')} that images drtp has no record of pushing reference "
            f"(in {', '.join(sorted(out.kept_repositories)[:SHOWN_REPOSITORIES])})"
        )
    if out.refused:
        refused = " and ".join(f"{k}s" for k in KINDS if k in out.refused)
        lines.append(f"{head}: the registry refuses to DELETE {refused} (405/UNSUPPORTED)")
    for err in out.errors:
        lines.append(f"{head}: {err}")
    if out.left:
        parts = []
        for repo in sorted(out.left)[:SHOWN_REPOSITORIES]:
            c = out.left[repo]
            what = ", ".join(
                [_count(c[k], k) for k in KINDS if c[k]]
                + (["the preflight's probe blobs"] if c[PROBE] else [])
                + (
                    ["holds images drtp has no record of pushing: no delete_repository"]
                    if repo in out.kept_repositories
                    else []
                )
            )
            parts.append(f"{repo} ({what})")
        more = len(out.left) - SHOWN_REPOSITORIES
        n_left = sum(c[k] for c in out.left.values() for k in KINDS)
        where = _count(len(out.left), "repository", "repositories")
        tail = f"; and {more} more" if more > 0 else ""
        lines.append(f"{head}: left {_count(n_left, 'object')} in {where}: " + "; ".join(parts) + tail)
    return lines


def run_clean(cfg: Config, runs: list[Path], registry: str | None, yes: bool, threads: int = 8) -> int:
    """Clean (or, without ``yes``, list) what drtp pushed; the exit code: 0 nothing left, 1 something left."""
    pushed = targets(cfg, registry)
    runs = given_runs(runs)
    maps = warmup_maps(cfg, pushed)
    n_ledger, ledger_runs = read_ledgers(maps, pushed)
    n_map, missing = read_maps(cfg, pushed, maps, required=not runs)
    n_rows, notes = read_runs(cfg, runs, pushed, registry)
    print(
        f"drtp clean: {_count(n_map, 'warmup map entry', 'warmup map entries')}, "
        f"{_count(n_ledger, 'push ledger entry', 'push ledger entries')} of {_count(len(ledger_runs), 'run')}, "
        f"{_count(n_rows, 'push', 'pushes')} in the requests.csv of {_count(len(runs), 'run')} given with --run"
        + ("" if yes else "; dry run: nothing is deleted (--yes deletes)")
    )
    for path in missing:
        print(f"drtp clean: no warmup map {path}: only the runs' pushes there")
    for target in pushed.values():
        if not target.ledgers:
            print(
                f"drtp clean: registry {target.name}: no push ledger beside its warmup map: no run of this config "
                "recorded there (a run kept elsewhere, or made by a drtp without ledgers: give it with --run)"
            )
    for note in notes:
        print(f"drtp clean: {note}")
    code = ExitCode.OK
    for target in pushed.values():
        try:
            out = clean_registry(target, cfg, yes, threads)
        except REGISTRY_ERRORS as e:
            raise RunError(f"registry {target.name}: {e}") from None
        for line in report(target, out, yes):
            print(line, flush=True)
        if yes:
            _clear_ledgers(target, out)
        if out.left or out.errors:
            code = ExitCode.TOO_MANY_FAILED  # something drtp pushed is still there, or could not be looked at
    return int(code)


def _clear_ledgers(target: Pushed, out: RegistryCleanup) -> None:
    """Mark in each ledger the objects of its reading that are gone now, so the next clean skips them."""
    for read in target.ledgers:
        try:
            mark_cleared(read.path, target.registry, sorted(read.objects() & out.removed), read.end)
        except OSError as e:  # the registry is clean all the same: the next clean finds them gone
            print(f"drtp clean: could not mark the cleaned objects in {read.path} ({e.strerror or e})")


# -- the command ------------------------------------------------------------------------------------------------


def cmd_clean(args: argparse.Namespace) -> int:
    from drtp.cli_options import config_from_args

    cfg = config_from_args(args)
    return run_clean(cfg, [Path(d) for d in args.run or []], args.registry, args.yes, args.threads)


def register(sub) -> None:
    from drtp.cli_options import add_config_options, positive_int

    p = sub.add_parser(
        "clean",
        help="delete from the registries what warmup, runs and the preflight pushed (dry run without --yes)",
        description="Delete from each registry of the config what drtp pushed there, as its records say: the "
        "warmup map's manifests and blobs (warmup.output; <stem>-<id><suffix> per registries: entry; a "
        "repetition's -rep<k>), the push ledger beside each map (every push a registry accepted from the config's "
        "runs, wherever their results went), those of the runs given with --run (their requests.csv), and the "
        "preflight's probe. Manifests are deleted by digest (their tags go with them), then blobs; a tag drtp has "
        "no record of pushing, and every object its image references, is kept. After --yes, the ledgers mark "
        "what is gone, so the next clean does not ask for it again. Without --yes, nothing is deleted: the "
        "objects that would be, with counts and bytes per registry. A registry that refuses DELETE "
        "(405/UNSUPPORTED) gets the entry's delete_repository command "
        "per repository, else one line says what is left. A blob DELETE unlinks the blob: the registry frees "
        "its bytes at its garbage collection (Distribution: 'registry garbage-collect', and storage.delete.enabled "
        "must be true). Exit codes: 0 everything asked is deleted or was gone; 1 something is left; 2 bad input "
        "(config, map, ledger, requests.csv, --registry); 3 a registry could not be reached.",
    )
    add_config_options(p)
    p.add_argument(
        "--registry", metavar="ID", help="clean only this registry: an id of registries:, or an item of registry:"
    )
    p.add_argument(
        "--run",
        nargs="+",
        metavar="DIR",
        action="extend",
        help="run directories whose pushes (requests.csv) are deleted too, for runs the ledgers do not hold "
        "(an experiment's: EXP/<id>; a folder of repetitions: each rep-<k>/)",
    )
    p.add_argument("--yes", action="store_true", help="delete (without it: list what would be deleted)")
    p.add_argument("--threads", type=positive_int, default=8, help="DELETE requests at once (default 8)")
    p.set_defaults(func=cmd_clean)
