"""``drtp warmup``: make every object the trace reads exist in the registry before the run.

One streaming pass over the trace finds the objects read before (or without)
being pushed by the trace itself — blobs read with a non-error status, and
manifests read with a non-error status — with the largest size the trace saw
for each.  Objects the trace first pushes are left to the run; reads the trace
saw fail (e.g. a pull of a tag never pushed: 404) are not warmed, so the run
sees the same 404.  A blob the trace mounts into a repository is, there, an
object the trace creates (the run mounts it); the mount reads its source
repository, which is warmed when the trace has not pushed the blob there first.

Then, with ``warmup.threads`` threads and drtp.registry.calls, in three phases: each blob
is pushed once (random or zero bytes of its size, per ``warmup.random``) and cross-repo
mounted into the other repositories that read it; the minimal config blob is pushed once
into each repository that gets manifests, or whose manifest PUTs in the run will name it
(an image of fewer than two blobs: drtp.master.run.plan), one job per repository; then each manifest is
pushed as a real schema-2 manifest over layers of its repository and that config, padded
to exactly the trace's size.  A blob is never written into a repository by two threads at
once (drtp.registry.keyed_lock says why): a manifest PUT that checked a blob while another
push rewrote it would be refused as naming an unknown blob.  Every object done
is appended at once to the warmup map (``warmup.output``, JSON lines:
registry, repository, kind, reference, digest, size), so an interrupted warmup resumes where it stopped
and a finished one does nothing the second time.  Each warmup checks the config blob is in those
repositories (a HEAD each) and pushes it where it is missing; the map has one line of kind
``config`` per repository it is in (for ``drtp clean``; the run's planner learns only blobs).

A registry with an ``upstream:`` (a pull-through cache, which refuses pushes) is warmed through its upstream,
with drtp's own User-Agent for direct requests: its map lines name the upstream, where ``drtp clean`` deletes.

With ``warmup.shape: images`` (the default) the trace's manifests of a repository take its blobs
:data:`MANIFEST_LAYERS` at a time and the blobs left over go into images of their own, tagged
``drtp-image-…`` (:func:`image_shapes`): every warmed blob is a layer of a tagged manifest of its
repository, so a garbage collector keeps what the trace reads.  ``loose`` is the older shape: each
manifest over its repository's first blobs, most blobs referenced by no manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from drtp.config import Config
from drtp.config.upstreams import upstreams, write_target
from drtp.errors import RunError
from drtp.master.run.plan import Planner, registry_for, with_names
from drtp.master.run.preflight import preflight_all
from drtp.progress import progress
from drtp.registry.auth import auth_for, config_auth, registry_names
from drtp.registry.calls import REGISTRY_ERRORS, RegistryCalls
from drtp.registry.content import STREAM_ABOVE, chunks, new_seed
from drtp.registry.content import digest as stream_digest
from drtp.registry.credentials import config_sources
from drtp.registry.keyed_lock import KeyedLock
from drtp.registry.manifest import CONFIG_BLOB, CONFIG_DIGEST, build_manifest, digest_of
from drtp.registry.names import is_digest
from drtp.registry.repo_hooks import create_repositories
from drtp.registry.repo_names import RepositoryMap
from drtp.registry.transport import DIRECT_USER_AGENT, USER_AGENT
from drtp.replay.messages import registry_base
from drtp.trace.reader import TraceReader
from drtp.trace.records import Mount

# the map's kind of the minimal config blob a warmup wrote into a repository: a blob, but no layer of a warmed
# manifest and no object of the trace (the run's planner learns only kind "blob"); drtp clean deletes it
CONFIG_KIND = "config"
DEFAULT_BLOB_SIZE = 1024  # a blob only ever HEADed: the trace has no size for it
MANIFEST_LAYERS = 3  # layers of a warmed manifest of the trace (its size is the trace's)
IMAGE_TAG_PREFIX = "drtp-image-"  # the tag of such an image: the prefix, then a hash of its layers
IMAGE_LAYERS = 10  # layers of an image warmup adds for blobs the trace's manifests leave out (warmup.shape: images)


@dataclass
class WarmupPlan:
    # (registry, blob ref) -> [size, repositories in order of first read]
    blobs: dict[tuple[str, str], list] = field(default_factory=dict)
    # (registry, repository, tag) -> size
    manifests: dict[tuple[str, str, str], int] = field(default_factory=dict)
    # (registry, repository) where the run PUTs a manifest naming the minimal config blob
    run_configs: set[tuple[str, str]] = field(default_factory=set)
    records: int = 0


def plan_warmup(reader: TraceReader, registries: list[str], names: RepositoryMap | None = None) -> WarmupPlan:
    plan = WarmupPlan()
    pushed: set[tuple[str, str, str]] = set()  # (repository, kind, ref) the trace PUT or mounted
    names = names or RepositoryMap()
    ns = names.namespace  # a repetition's prefix: the spread over registries goes by the trace's names
    images = Planner(registries, namespace=ns)  # the run planner's image bookkeeping, ahead of the run
    for records in with_names(reader.batches(), names):
        plan.records += len(records)
        for rec in records:
            uri = rec.parts
            repo, kind, ref = uri
            if images.needs_minimal_config(rec, uri):
                plan.run_configs.add((registry_for(repo, registries, ns), repo))
            if kind == "blob" and ref.startswith("uploads"):
                if rec.status == 201 and (mount := rec.mount) is not None:
                    _plan_mount(plan, pushed, registries, repo, mount, ns)
                continue
            key = (repo, kind, ref)
            if rec.method == "PUT":
                pushed.add(key)
                continue
            if rec.method not in ("GET", "HEAD") or rec.status >= 400:
                continue
            reg = registry_for(repo, registries, ns)
            if key in pushed:  # the trace made it here; a warmed copy elsewhere (a mount's source) takes its size
                if kind == "blob" and (entry := plan.blobs.get((reg, ref))) is not None:
                    entry[0] = max(entry[0], rec.size)
                continue
            if kind == "blob":
                _want_blob(plan, reg, ref, rec.size, repo)
            else:
                mkey = (reg, repo, ref)
                plan.manifests[mkey] = max(plan.manifests.get(mkey, 0), rec.size)
    return plan


def _plan_mount(
    plan: WarmupPlan, pushed: set, registries: list[str], target: str, mount: Mount, namespace: str = ""
) -> None:
    """A mount the trace's registry did (201) creates the blob in the target repository, so warmup
    does not; its source must hold the blob, unless the trace pushed it there first (or the source
    lies on another registry, which the replay cannot mount from)."""
    pushed.add((target, "blob", mount.blob))
    source = mount.source
    if source is None or (source, "blob", mount.blob) in pushed:
        return
    reg = registry_for(target, registries, namespace)
    if registry_for(source, registries, namespace) == reg:
        _want_blob(plan, reg, mount.blob, 0, source)


def _want_blob(plan: WarmupPlan, reg: str, ref: str, size: int, repo: str) -> None:
    """Warm blob ``ref`` into ``repo``, at the largest size the trace shows for it."""
    entry = plan.blobs.get((reg, ref))
    if entry is None:
        plan.blobs[(reg, ref)] = [size, [repo]]
    else:
        entry[0] = max(entry[0], size)
        if repo not in entry[1]:
            entry[1].append(repo)


def image_shapes(
    done: dict[tuple[str, str, str, str], dict], manifests: dict[tuple[str, str, str], int], shape: str
) -> list[tuple[str, str, str, int, list[tuple[str, int]]]]:
    """The manifests to warm, (registry, repository, tag, size, layers), over the blobs warmed so far (``done``).

    ``images``: each repository's blobs, in the order of their trace references, are cut into groups of
    :data:`MANIFEST_LAYERS`; the trace's manifests take one group each (in tag order; when they outnumber the
    groups, the groups again from the first), and the groups left over become images of their own,
    :data:`IMAGE_LAYERS` layers each, tagged ``drtp-image-<hash of their layers>`` (the same layers get the same
    tag, so a resumed warmup finds them). Every blob is then a layer of a tagged manifest of its repository, as in a
    registry of real images: a garbage collector keeps what the trace will read. ``loose``: the trace's manifests
    only, each over the repository's first :data:`MANIFEST_LAYERS` blobs; the others are referenced by no manifest
    (a collector deletes them)."""
    blobs: dict[tuple[str, str], dict[str, int]] = {}  # (registry, repository) -> digest -> size
    for (reg, repo, kind, _ref), e in sorted(done.items()):
        if kind == "blob":
            blobs.setdefault((reg, repo), {}).setdefault(e["digest"], e["size"])
    tags: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for (reg, repo, tag), size in manifests.items():
        tags.setdefault((reg, repo), []).append((tag, size))
    out = []
    for key in sorted(blobs.keys() | tags.keys()):
        reg, repo = key
        layers = list(blobs.get(key, {}).items())  # in the order of their trace references, as before
        wanted = sorted(tags.get(key, []))
        if shape == "loose":
            out += [(reg, repo, tag, size, layers[:MANIFEST_LAYERS]) for tag, size in wanted]
            continue
        groups = [layers[i : i + MANIFEST_LAYERS] for i in range(0, len(layers), MANIFEST_LAYERS)]
        for i, (tag, size) in enumerate(wanted):
            out.append((reg, repo, tag, size, groups[i % len(groups)] if groups else []))
        rest = [layer for group in groups[len(wanted) :] for layer in group]
        for i in range(0, len(rest), IMAGE_LAYERS):
            image = rest[i : i + IMAGE_LAYERS]
            tag = IMAGE_TAG_PREFIX + hashlib.sha256(" ".join(d for d, _ in image).encode()).hexdigest()[:16]
            out.append((reg, repo, tag, 0, image))
    return out


def load_map(path: Path) -> Iterator[dict]:
    """Entries of a warmup map; a torn last line (interrupted write) is ignored."""
    with open(path) as f:
        for line in f:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and {"registry", "repository", "kind", "reference", "digest"} <= entry.keys():
                yield entry


@dataclass
class WarmupStats:
    blobs_pushed: int = 0
    blobs_mounted: int = 0
    configs_pushed: int = 0  # the minimal config blob, into repositories that lacked it
    configs_recorded: int = 0  # map lines of the minimal config blob (one per repository it is in; drtp clean)
    manifests: int = 0
    already: int = 0
    failed: int = 0
    bytes: int = 0
    errors: list[str] = field(default_factory=list)


class Warmup:
    def __init__(self, cfg: Config, quiet: bool = False) -> None:
        self.cfg = cfg
        self.quiet = quiet
        # a pull-through cache refuses pushes: its upstream is warmed (the run reads through the cache)
        self.upstreams = upstreams(cfg)
        self.registries = [write_target(r, self.upstreams) for r in cfg.require("registry")]
        self.map_path = cfg.path(cfg.warmup.output)
        self.sources = config_sources(cfg)  # a helper's secret is asked for again as it nears its TTL
        self.auths = config_auth(cfg, self.sources)
        self.stats = WarmupStats()
        self.done: dict[tuple[str, str, str, str], dict] = {}  # (registry, repository, kind, ref) -> entry
        self.calls: dict[str, RegistryCalls] = {}  # registry -> its calls object (a map may name another registry)
        self.writing = KeyedLock()  # (registry, repository, digest) of a blob being pushed or mounted
        self.written: set[tuple[str, str, str]] = set()  # (registry, repository, digest) this warmup pushed or mounted
        self.configs: set[tuple[str, str]] = set()  # (registry, repository) holding the minimal config blob

    def _calls(self, registry: str) -> RegistryCalls:
        calls = self.calls.get(registry)
        if calls is None:
            direct = registry_base(registry) in self.upstreams.values()  # drtp's own requests, apart in its log
            agent = DIRECT_USER_AGENT if direct else USER_AGENT
            calls = RegistryCalls(registry, auth_for(registry, self.auths), timeout=60, agent=agent)
            self.calls[registry] = calls
            for auth, source in zip(self.auths, self.sources, strict=True):
                calls.use_source(auth.registry, source)
        return calls

    def _content(self, size: int) -> bytes:
        return random.randbytes(size) if self.cfg.warmup.random else bytes(size)

    # -- resuming ------------------------------------------------------------------------------

    def _load_done(self) -> None:
        if not self.map_path.exists():
            return
        data = self.map_path.read_bytes()
        if data and not data.endswith(b"\n"):  # a line torn by an interruption: drop it
            with open(self.map_path, "r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
        entries = list(load_map(self.map_path))
        sample = random.Random(0).sample(entries, min(3, len(entries)))
        for e in sample:  # a map made for another (or a wiped) registry is not trusted
            if not self._exists(e):
                if not self.quiet:
                    print(f"warmup map {self.map_path} does not match the registry: starting over")
                self.map_path.unlink()
                return
        for e in entries:
            self.done[(e["registry"], e["repository"], e["kind"], e["reference"])] = e

    def _exists(self, e: dict) -> bool:
        kind = "manifest" if e["kind"] == "manifest" else "blob"
        return self._calls(e["registry"]).exists(kind, e["repository"], e["digest"])

    # -- work items ---------------------------------------------------------------------------

    def _blob(self, registry: str, ref: str, size: int, repos: list[str]) -> list[dict]:
        """Push one blob into the first repository that lacks it, mount it into the others."""
        out = []
        have = [self.done.get((registry, r, "blob", ref)) for r in repos]
        source = next((e for e in have if e), None)
        for repo, entry in zip(repos, have, strict=False):
            if entry:
                continue
            calls = self._calls(registry)
            if source is not None:
                try:
                    src, digest = source["repository"], source["digest"]
                    wrote = self._write_once(registry, repo, digest, partial(calls.mount_blob, repo, src, digest), src)
                    how = "mounted" if wrote else "present"
                    out.append(self._entry(registry, repo, "blob", ref, digest, source["size"], how))
                    continue
                except REGISTRY_ERRORS:
                    pass  # e.g. the registry does not mount: push instead
            size = max(size, 1)
            if size <= STREAM_ABOVE:
                data = self._content(size)
                digest = digest_of(data)
            else:  # large: hash one pass, stream the same bytes in a second
                seed, randomized = new_seed(), self.cfg.warmup.random
                digest = stream_digest(seed, size, randomized)
                data = chunks(seed, size, randomized)
            wrote = self._write_once(registry, repo, digest, partial(calls.push_blob, repo, data, digest, size))
            entry = self._entry(registry, repo, "blob", ref, digest, size, "pushed" if wrote else "present")
            out.append(entry)
            source = source or entry
        return out

    def _write_once(
        self, registry: str, repo: str, digest: str, write: Callable[[], object], source: str | None = None
    ) -> bool:
        """Push or mount (``write``) blob ``digest`` into ``repo`` unless this warmup has written it there: with
        ``warmup.random: false`` blobs of one size share a digest.  One thread at a time per repository and
        digest, and for a mount also its ``source``, whose link the mount reads.  False when it was there."""
        keys = sorted({(registry, r, digest) for r in (repo, source) if r is not None})  # one order: no deadlock
        with ExitStack() as stack:
            for key in keys:
                stack.enter_context(self.writing.hold(key))
            if (registry, repo, digest) in self.written:
                return False
            write()
            self.written.add((registry, repo, digest))
            return True

    def _config(self, registry: str, repo: str) -> list[dict]:
        """Make sure ``repo`` holds the minimal config blob its warmed manifests name: the only job that
        writes it there, run before any of their PUTs."""
        with self.writing.hold((registry, repo, CONFIG_DIGEST)):
            pushed = self._calls(registry).push_blob(repo, CONFIG_BLOB, CONFIG_DIGEST)
        how = "config pushed" if pushed else "config found"
        return [self._entry(registry, repo, CONFIG_KIND, CONFIG_DIGEST, CONFIG_DIGEST, len(CONFIG_BLOB), how)]

    def _manifest(self, registry: str, repo: str, tag: str, size: int, layers: list[tuple[str, int]]) -> list[dict]:
        """Push one warmed manifest; its config blob is in the repository already (:meth:`_config`).

        A trace that reads a manifest by digest (containerd and kubelets do, after a HEAD of the tag) names
        a digest of content the warmup cannot rebuild: the registry refuses a PUT under a digest that is not
        its body's.  Such a manifest is pushed under its own digest, and the map line's reference is the
        trace's digest, so the run's reads of it address the pushed one (drtp.master.run.plan)."""
        calls = self._calls(registry)
        body = build_manifest(layers, size)
        digest = digest_of(body)
        calls.put_manifest(repo, digest if is_digest(tag) else tag, body)
        return [self._entry(registry, repo, "manifest", tag, digest, len(body), "manifest")]

    @staticmethod
    def _entry(registry, repo, kind, ref, digest, size, how) -> dict:
        return {
            "registry": registry,
            "repository": repo,
            "kind": kind,
            "reference": ref,
            "digest": digest,
            "size": size,
            "how": how,
        }

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> WarmupStats:
        reader = TraceReader(self.cfg.trace_paths(), **self.cfg.reader_options())
        t0 = time.perf_counter()
        # the whole trace is read (and checked) first: a bad record is refused before the registry sees anything
        names = RepositoryMap.for_config(self.cfg)
        plan = plan_warmup(reader, self.registries, names)
        planned = time.perf_counter()
        probe = names.probe()
        create_repositories(self.cfg, names.repositories(), self.map_path, quiet=self.quiet)
        preflight_all(self.registries, self.auths, registry_names(self.cfg), probe, self.upstreams)
        t0 += time.perf_counter() - planned  # the preflight is not warmup time
        self._load_done()
        blob_jobs = []
        for (reg, ref), (size, repos) in plan.blobs.items():
            if all((reg, r, "blob", ref) in self.done for r in repos):
                self.stats.already += len(repos)
            else:
                blob_jobs.append((reg, ref, size or DEFAULT_BLOB_SIZE, repos))
        total = sum(len(j[3]) for j in blob_jobs) + len(plan.manifests)
        self.map_path.parent.mkdir(parents=True, exist_ok=True)
        with (
            open(self.map_path, "a") as out,
            progress(total=total, desc="warmup", unit="obj", final_line=True, quiet=self.quiet) as bar,
        ):
            bar.set_failed(self.stats.failed)
            self._pool_run(self._blob, blob_jobs, out, bar, weights=[len(j[3]) for j in blob_jobs])
            manifest_jobs = []
            for reg, repo, tag, size, layers in image_shapes(self.done, plan.manifests, self.cfg.warmup.shape):
                if (reg, repo, "manifest", tag) in self.done:
                    self.stats.already += 1
                    bar.update(0)
                else:
                    manifest_jobs.append((reg, repo, tag, size, layers))
            # the config blob first, once per repository: manifests of one repository PUT at once while
            # one of them pushed the config would find its link being rewritten.  Also where the run's
            # manifest PUTs name it: its nodes then find it, and none pushes it while another PUTs there
            config_jobs = sorted({(job[0], job[1]) for job in manifest_jobs} | plan.run_configs)
            self._pool_run(self._config, config_jobs, out, bar, weights=[0] * len(config_jobs))
            missing = [job for job in manifest_jobs if (job[0], job[1]) not in self.configs]
            for job in missing:
                self._failed(job, f"the config blob {CONFIG_DIGEST} could not be pushed to the repository", bar, 1)
            ready = [job for job in manifest_jobs if (job[0], job[1]) in self.configs]
            # an image warmup adds is not an object of the trace: not in the bar's total
            weights = [int((job[0], job[1], job[2]) in plan.manifests) for job in ready]
            self._pool_run(self._manifest, ready, out, bar, weights=weights)
        self.elapsed = time.perf_counter() - t0
        self.plan = plan
        return self.stats

    def _pool_run(self, fn, jobs: list[tuple], out, bar, weights: list[int]) -> None:
        threads = max(1, self.cfg.warmup.threads)
        with ThreadPoolExecutor(threads) as pool:
            futures = {}
            it = iter(zip(jobs, weights, strict=False))
            try:
                for job, weight in it:  # keep the queue short: memory stays bounded
                    futures[pool.submit(fn, *job)] = (job, weight)
                    if len(futures) >= 4 * threads:
                        self._collect(futures, out, bar)
                while futures:
                    self._collect(futures, out, bar)
            except KeyboardInterrupt:
                for f in futures:
                    f.cancel()
                raise

    def _collect(self, futures: dict, out, bar) -> None:
        finished, _ = wait(list(futures), return_when=FIRST_COMPLETED)
        for f in finished:
            job, weight = futures.pop(f)
            try:
                entries = f.result()
            except (*REGISTRY_ERRORS, OSError) as e:
                self._failed(job, f"{type(e).__name__}: {e}", bar, weight)
                continue
            for e in entries:
                how = e.pop("how", "")
                if how.startswith("config"):
                    self.configs.add((e["registry"], e["repository"]))
                    self.stats.configs_pushed += how == "config pushed"
                    key = (e["registry"], e["repository"], CONFIG_KIND, e["reference"])
                    if key not in self.done:  # one line per repository, for drtp clean
                        out.write(json.dumps(e) + "\n")
                        self.done[key] = e
                        self.stats.configs_recorded += 1
                    continue
                out.write(json.dumps(e) + "\n")
                self.done[(e["registry"], e["repository"], e["kind"], e["reference"])] = e
                if how == "pushed":
                    self.stats.blobs_pushed += 1
                    self.stats.bytes += e["size"]
                elif how == "mounted":
                    self.stats.blobs_mounted += 1
                elif how == "present":  # another blob of the same content, written there by this warmup
                    self.stats.already += 1
                else:
                    self.stats.manifests += 1
            out.flush()
            os.fsync(out.fileno())
            bar.update(weight)

    def _failed(self, job: tuple, why: str, bar, weight: int) -> None:
        self.stats.failed += 1
        if len(self.stats.errors) < 20:
            self.stats.errors.append(f"{job[:3]}: {why}"[:300])
        bar.set_failed(self.stats.failed)
        bar.update(weight)


def run_warmup(cfg: Config, quiet: bool = False) -> WarmupStats:
    w = Warmup(cfg, quiet=quiet)
    stats = w.run()
    if not quiet:
        print(
            f"warmup: {w.plan.records:,} trace requests; pushed {stats.blobs_pushed:,} blobs "
            f"({stats.bytes / 1e6:.1f} MB), mounted {stats.blobs_mounted:,}, {stats.manifests:,} manifests "
            f"(config blob pushed into {stats.configs_pushed:,} repositories); "
            f"{stats.already:,} already there; {stats.failed:,} failed; {w.elapsed:.1f} s → {w.map_path}"
        )
        for err in stats.errors[:5]:
            print(f"  failed: {err}")
    if stats.failed:
        raise RunError(f"warmup: {stats.failed} objects failed (run it again to retry them)")
    return stats
