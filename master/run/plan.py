"""Turns trace records into replay requests, and keeps the digests they address.

The trace's layer references are anonymized; the registry knows the digests
that warmup pushed (the warmup map) and those that layers pushed during the
run got (returned by the client node that pushed them, since a pushed layer's
random content gives it a new digest: every later read of the trace's digest
is remapped to it).  Requests of one object keep the trace's order in both
directions: a request that reads a layer or tag whose push is still in flight
waits for that push's result, and a manifest push waits for the reads of its
tag that the trace has before it (:meth:`Planner.blocked_by`), whichever nodes
run them.  A layer push needs no such wait: its content is new, so it gets a
new digest and cannot change what an earlier read of the layer addresses.
The planner says what a record waits for; the records that wait are kept in drtp.master.run.held.

A cross-repository mount (``POST …/blobs/uploads/?mount=<blob>&from=<repository>``) is
replayed as a mount: its source repository is mapped like any name (``repository_map``), its blob
the real digest the source holds, and it waits for a push of that blob in flight like a
read does.  It counts as a push of the blob into the target repository (reads there wait
for it, and the digest the target ends up with is remembered: the mounted one, or the new
one of the upload the node falls back to when the registry refuses the mount), and a
mounted blob joins the image of (client, target repository) as a pushed layer does.  A
mount needs both repositories on one registry: when the run spreads them over two, the
mount is sent without a source (no repository of the target's registry holds the blob)
and ends as the registry answers it: usually refused, then uploaded.

A manifest PUT stays a PUT, even when the trace also reads that URI (the
original trace player replayed such PUTs as GETs), and carries the blobs of
its image, so the node can push a real manifest that references them rather
than an opaque blob.  An image's blobs are those its trace client pushed,
mounted or found (HEAD 200) in that repository since its last manifest
operation there (:meth:`Planner.image_of`), collected in one place
(``Planner._add_layer``); the last of them is the image's config: docker and
skopeo push (or find) the config blob after every layer and just before the
manifest.  An image of one blob or none has no config of its own: the node
uses the minimal config blob.

Each request carries its span in the trace (``trace_start``, ``trace_end``: arrival and arrival +
duration, seconds after the trace's first request; a registry log's timestamp is the completion, so
its duration is subtracted) and, for the requests of a blob upload, the key of its upload session
(:meth:`Planner.upload_of`): the node overlaps a trace client's requests only as the trace did and never
two requests of one upload session (client/client_gate.py).

A registry with an upstream (a pull-through cache, which refuses pushes) has its trace's writes
(:func:`is_write`) sent to the upstream, under drtp's own User-Agent so the upstream's log tells them from
the cache's fetches, or, with ``upstream_writes: skip``, not sent and counted (:meth:`Planner.skips`).
"""

from __future__ import annotations

import zlib
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator

import msgspec

from drtp.config import Config
from drtp.registry.manifest import placeholder_digest
from drtp.registry.names import is_digest
from drtp.registry.repo_names import RepositoryMap
from drtp.registry.transport import DIRECT_USER_AGENT
from drtp.replay.client_profiles import header_safe
from drtp.replay.messages import Layer, ReplayRequest, ReplayResult, op_for, registry_base
from drtp.trace.records import TraceRecord, Uri

MAX_IMAGE_BLOBS = 128  # blobs kept per image: Docker allows 127 layers, plus the config
MAX_UNPAIRED = 64  # upload opens without an id kept per (client, repository) for the PATCH/PUT that follow
UPLOAD_METHODS = ("POST", "PATCH", "PUT")
WRITE_METHODS = frozenset(("POST", "PATCH", "PUT", "DELETE"))


def upload_id(uri_text: str, uri: Uri) -> str | None:
    """The trace's id of the upload a blob POST/PATCH/PUT belongs to: ``?upload=T`` (captures) or the
    session of an upload URL (``uploads/T``: IBM traces' PATCH and PUT); None when it names none."""
    query = uri_text.partition("?")[2]
    if "upload=" in query:
        for param in query.split("&"):
            key, _, value = param.partition("=")
            if key == "upload" and value:
                return value
    ref = uri.reference
    return ref[8:] if ref.startswith("uploads/") and len(ref) > 8 else None


def registry_for(repository: str, registries: list[str], namespace: str = "") -> str:
    """The registry a repository lives on when a run spreads over several (stable across runs).

    The spread goes by the trace's name: a repetition's ``namespace`` (``rep<k>-``, drtp.master.series.repeat) is
    taken off first, so every repetition puts each trace repository on the same registry and the
    repetitions measure the same split of the load.
    """
    if len(registries) == 1:
        return registries[0]
    if namespace and repository.startswith(namespace):
        repository = repository[len(namespace) :]
    return registries[zlib.crc32(repository.encode()) % len(registries)]


def with_names(batches: Iterable[list[TraceRecord]], names: RepositoryMap) -> Iterator[list[TraceRecord]]:
    """The trace's batches with every repository, a mount's source too, as the registry names it (``names``).

    Reading a whole trace through here maps every name it holds, so a mapping that
    gives two trace repositories one name is refused (ConfigError) before the caller
    sends anything.
    """
    if names.identity:
        yield from batches
        return
    for records in batches:
        yield [msgspec.structs.replace(r, uri=names.map_uri(r.uri)) for r in records]


def op_of(rec: TraceRecord, uri: Uri | None = None) -> str:
    return op_for(rec.method, (uri or rec.parts).kind)


def is_write(method: str, kind: str, reference: str) -> bool:
    """Whether a trace request writes, or belongs to a write: a push's requests (an upload's POST, PATCH, PUT
    and status GET, a manifest PUT) and a DELETE — what a pull-through cache refuses."""
    return method in WRITE_METHODS or (kind == "blob" and reference.startswith("uploads"))


def write_targets(routes: dict[str, str | None]) -> list[str]:
    """The upstreams a run's writes go to (:attr:`Planner.routes`): registries its nodes must be allowed to reach."""
    return sorted({t for t in routes.values() if t is not None})


def upstream_writes(summary: dict, cfg: Config, skipped: dict[str, int]) -> None:
    """summary.json's ``upstream[<registry id>]["writes"]`` for each registry with an upstream: where the trace's
    writes went (``to``: ``upstream`` or ``skip``) and how many were not sent (``skipped``).  The other keys of
    ``upstream[<id>]`` (what reached the upstream) are another output's, in the same dict."""
    for e in cfg.registries:
        if e.upstream is None or registry_base(e.url) not in {registry_base(r) for r in cfg.registry}:
            continue
        block = summary.setdefault("upstream", {}).setdefault(e.id, {})
        block["writes"] = {"to": e.upstream_writes, "skipped": skipped.get(registry_base(e.url), 0)}


class Planner:
    def __init__(
        self,
        registries: list[str],
        completion_stamped: bool = False,
        namespace: str = "",
        writes: dict[str, str | None] | None = None,
    ) -> None:
        """``writes`` (drtp.config.upstreams.write_routes): the base URL of each registry with an upstream →
        the upstream's base URL, where its trace's writes are sent (with drtp's own User-Agent for direct
        requests), or None: its writes are skipped (:meth:`skips`), counted in :attr:`skipped`."""
        self.registries = registries
        writes = writes or {}
        # per address of ``registries``: the target of its writes (None: skipped); empty without an upstream
        self.routes = {r: writes[registry_base(r)] for r in registries if registry_base(r) in writes}
        self.skipped: dict[str, int] = defaultdict(int)  # base URL of a registry -> its trace writes not sent
        self.namespace = namespace  # a repetition's repository prefix: not part of the spread (registry_for)
        # the trace's timestamps are completions (a registry log): a request arrived its duration earlier
        self.completion_stamped = completion_stamped
        self.origin: float | None = None  # the trace's first timestamp: trace_start counts from it
        # upload sessions (upload_of): the session key of a trace upload id, per (client, repository, id);
        # the opens without an id waiting for the PATCH/PUT that names theirs, and each (client,
        # repository)'s last session, for the PATCH/PUT that name none
        self.upload_keys: dict[tuple[str, str, str], str] = {}
        self.named_of: dict[str, tuple[str, str, str]] = {}  # session key -> the trace id that named it
        self.unpaired: dict[tuple[str, str], deque[str]] = {}
        self.last_upload: dict[tuple[str, str], str] = {}
        self.blobs: dict[tuple[str, str], Layer] = {}  # (repository, trace ref) -> real layer
        self.blob_any: dict[str, Layer] = {}  # trace ref -> the latest real layer in any repository
        # (repository, a trace's manifest digest) -> the digest of the manifest warmup pushed for it
        self.manifest_digests: dict[tuple[str, str], str] = {}
        # pushes in flight: ("blob", ref) or ("manifest", repository, tag) -> how many
        self.pending: dict[tuple, int] = defaultdict(int)
        self.reading: dict[tuple, int] = {}  # manifest reads in flight: ("manifest", repository, tag) -> how many
        self.image: dict[tuple[str, str], list[str]] = {}  # (client, repository) -> blob refs of the image
        self.mounting: dict[int, str] = {}  # seq of a mount in flight -> the trace reference of its blob
        self.releases = 0  # how often a request that others may wait for finished: held records look again
        self.freed: list[tuple] = []  # the objects of those requests, until the held records take them

    # -- the warmup map ----------------------------------------------------------------------

    def learn(self, repository: str, kind: str, reference: str, digest: str, size: int) -> None:
        if kind == "blob":
            layer = Layer(digest, size)
            self.blobs[(repository, reference)] = layer
            self.blob_any[reference] = layer
        elif kind == "manifest" and is_digest(reference):  # warmed under its own digest: reads go there
            self.manifest_digests[(repository, reference)] = digest

    # -- planning ----------------------------------------------------------------------------------

    def blocked_by(self, rec: TraceRecord, uri: Uri | None = None) -> list[tuple]:
        """Requests in flight that this record must wait for: pushes of what it reads or references,
        reads of the tag it pushes.  ``uri``: the record's URI parts, when the caller split it already
        (the master splits each record's URI once; every look at ``rec.kind`` would split it again)."""
        uri = uri or rec.parts
        if uri.kind == "blob":
            if rec.method == "POST":  # an upload open waits for nothing; a mount for a push of its blob
                mount = rec.mount
                key = ("blob", mount.blob) if mount is not None else None
                return [key] if key is not None and self.pending.get(key) else []
            key = ("blob", uri.reference)
            return [key] if rec.method != "PUT" and self.pending.get(key) else []
        key = ("manifest", uri.repository, uri.reference)
        if rec.method == "PUT":
            keys = [
                k
                for k in (("blob", r) for r in self.image.get((rec.client, uri.repository), ()))
                if self.pending.get(k)
            ]
            return keys + [key] if self.reading.get(key) else keys
        return [key] if self.pending.get(key) else []

    def resolve(self, repository: str, ref: str) -> Layer | None:
        return self.blobs.get((repository, ref)) or self.blob_any.get(ref)

    def upload_of(self, rec: TraceRecord, uri: Uri, seq: int) -> str | None:
        """The key of the upload session a blob POST, PATCH or PUT belongs to (None for any other request);
        call once per record, in trace order.

        A capture names the upload on all three (``?upload=T``, ``uploads/T``): T is the key.  An IBM
        trace names the registry's session on PATCH and PUT but not on the POST that opened it: the POST
        gets a key of its own (``#<seq>``), which the first PATCH/PUT of that client and repository with
        an id not seen before takes over.  A PATCH or PUT that names no session (a generated trace's
        closing PUT) continues the client's last session in that repository: uploads that name nothing
        cannot be told apart, so they follow each other.
        """
        if uri.kind != "blob" or rec.method not in UPLOAD_METHODS:
            return None
        where = (rec.client, uri.repository)
        trace_id = upload_id(rec.uri, uri)
        if rec.method == "POST":
            key = trace_id if trace_id is not None else f"#{seq}"
            if rec.status == 202:  # it opened a session (a mount that the registry refused, too)
                if trace_id is None:
                    waiting = self.unpaired.get(where)
                    if waiting is None:
                        waiting = self.unpaired[where] = deque(maxlen=MAX_UNPAIRED)
                    waiting.append(key)
                self.last_upload[where] = key
            return key
        if trace_id is None:
            key = self.last_upload.get(where)
            waiting = self.unpaired.get(where)
            if key is not None and waiting and key in waiting:  # that open is taken: no PATCH/PUT pairs with it
                waiting.remove(key)
                if not waiting:
                    del self.unpaired[where]
        else:
            named = (rec.client, uri.repository, trace_id)
            key = self.upload_keys.get(named)
            if key is None:
                waiting = self.unpaired.get(where)
                key = waiting.popleft() if waiting else trace_id
                if waiting is not None and not waiting:
                    del self.unpaired[where]
                if rec.method == "PATCH":
                    self.upload_keys[named] = key
                    self.named_of[key] = named
            elif rec.method == "PUT":
                del self.upload_keys[named]
                self.named_of.pop(key, None)
        if rec.method == "PUT":  # the session ends: nothing of it is kept (a PUT may name no id, or a digest)
            if key is not None and self.last_upload.get(where) == key:
                del self.last_upload[where]
            if key is not None and (named_by := self.named_of.pop(key, None)) is not None:
                self.upload_keys.pop(named_by, None)
        elif key is not None:
            self.last_upload[where] = key
        return key

    def plan(
        self, rec: TraceRecord, seq: int, at: float | None, uri: Uri | None = None, upload: str | None = None
    ) -> ReplayRequest:
        """The request a node sends for ``rec`` (``uri``: its URI parts, if split already; ``upload``: its
        upload session's key, :meth:`upload_of`)."""
        uri = uri or rec.parts
        kind = uri.kind
        op = op_for(rec.method, kind)
        repo, ref = uri.repository, uri.reference
        digest = None
        object_size = None
        layers: list[Layer] = []
        mount = mount_from = None
        config = None
        key = (rec.client, repo)
        registry = registry_for(repo, self.registries, self.namespace)
        if op == "upload-open" and (wanted := rec.mount) is not None:
            source = wanted.source
            layer = self.resolve(source, wanted.blob) if source else self.blob_any.get(wanted.blob)
            mount = layer.digest if layer else placeholder_digest(wanted.blob)
            object_size = (layer.size or None) if layer else None  # what the node uploads if the mount is refused
            if source and registry_for(source, self.registries, self.namespace) == registry:
                mount_from = source
            self.pending[("blob", wanted.blob)] += 1
            self.mounting[seq] = wanted.blob
            if rec.status == 201:  # mounted in the trace: a layer of the image being pushed
                self._add_layer(key, wanted.blob)
        elif op == "get" and kind == "blob" and not ref.startswith("uploads"):
            layer = self.resolve(repo, ref)
            digest = layer.digest if layer else placeholder_digest(ref)
            if layer is not None and rec.method == "GET":
                object_size = layer.size or None
            if rec.method == "HEAD" and rec.status < 400 and layer is not None:
                self._add_layer(key, ref)
        elif op == "get" and kind == "manifest":
            digest = self.manifest_digests.get((repo, ref)) if self.manifest_digests else None
            if rec.method == "GET":
                self.image.pop(key, None)  # a pull starts: forget what an earlier push looked at
            self._count_read(("manifest", repo, ref))
        elif op == "upload-close" and not ref.startswith("uploads"):
            self.pending[("blob", ref)] += 1
            self._add_layer(key, ref)
        elif op == "manifest-put":
            self.pending[("manifest", repo, ref)] += 1
            layers, config = self.image_of(key)
        start = rec.time
        if self.origin is None:
            self.origin = start
        duration = rec.duration
        start -= self.origin + (duration if self.completion_stamped else 0.0)
        agent = rec.useragent  # an AgentRecord's (user_agent: trace); a plain TraceRecord has none
        if self.routes and (target := self.routes.get(registry)) is not None and is_write(rec.method, kind, ref):
            registry, agent = target, DIRECT_USER_AGENT  # a cache's upstream takes the push, apart in its log
        # positional, in ReplayRequest's field order: its 22 keywords were packed into a dict and matched by name
        # for every request, some 8 % of the master's instructions per request (tests/test_replay_plan.py
        # checks that each value lands in its field)
        return ReplayRequest(
            seq,  # seq
            rec.id,  # trace_id
            rec.client,  # client
            rec.method,  # method
            kind,  # kind
            op,  # op
            registry,  # registry
            repo,  # repository
            ref,  # reference
            rec.size,  # size
            rec.status,  # expected_status
            digest,  # digest
            object_size,  # object_size
            at,  # at
            layers,  # layers
            mount,  # mount
            mount_from,  # mount_from
            config,  # config
            start,  # trace_start
            start + duration,  # trace_end
            upload,  # upload
            header_safe(agent) if agent else None,  # user_agent
        )

    def skips(self, rec: TraceRecord, uri: Uri) -> bool:
        """Whether ``rec`` is a write of a registry whose upstream takes no writes (``upstream_writes: skip``):
        not sent, counted in :attr:`skipped`; later reads of what it would have pushed find nothing."""
        registry = registry_for(uri.repository, self.registries, self.namespace)
        if registry not in self.routes or self.routes[registry] is not None:
            return False
        if not is_write(rec.method, uri.kind, uri.reference):
            return False
        self.skipped[registry_base(registry)] += 1
        return True

    def replayed(self, rec: TraceRecord, uri: Uri | None = None, assume_found: bool = False) -> None:
        """A record an interrupted run already completed (resume): keep the image bookkeeping only.

        ``uri``: the record's URI parts, if split already.  ``assume_found``: a blob the trace found (HEAD 200)
        counts as one the registry holds, as it will once warmup and the pushes before it have run
        (:meth:`needs_minimal_config`, before any digest is known).
        """
        uri = uri or rec.parts
        op = op_of(rec, uri)
        key, ref = (rec.client, uri.repository), uri.reference
        if op == "get" and uri.kind == "blob" and rec.method == "HEAD" and rec.status < 400:
            if (assume_found and not ref.startswith("uploads")) or self.resolve(uri.repository, ref) is not None:
                self._add_layer(key, ref)
        elif (op == "get" and uri.kind == "manifest" and rec.method == "GET") or op == "manifest-put":
            self.image.pop(key, None)
        elif op == "upload-close" and not ref.startswith("uploads"):
            self._add_layer(key, ref)
        elif op == "upload-open" and rec.status == 201 and (mount := rec.mount) is not None:
            self._add_layer(key, mount.blob)

    def needs_minimal_config(self, rec: TraceRecord, uri: Uri | None = None) -> bool:
        """Warmup's look ahead, on a planner of its own fed every record of the trace in order: whether ``rec``
        is a manifest PUT whose image will have fewer than two blobs, so that the node names the minimal config
        blob (:meth:`image_of`), when the pushes before it succeed.  Warmup puts that blob into those
        repositories, so that no node of the run has to push it while another node PUTs a manifest there.
        ``uri``: the record's URI parts, if split already."""
        uri = uri or rec.parts
        if rec.method == "GET" and uri.kind == "blob":  # most of a trace: no part of an image being pushed
            return False
        if op_of(rec, uri) == "manifest-put":
            return len(self.image.pop((rec.client, uri.repository), ())) < 2
        self.replayed(rec, uri, assume_found=True)
        return False

    def image_of(self, key: tuple[str, str]) -> tuple[list[Layer], Layer | None]:
        """The layers and config of the image a client pushes to a repository now (``key``: client, repository);
        its blobs are forgotten, so the next image starts empty.  Blobs with no real digest are left out."""
        repo = key[1]
        blobs = [layer for r in self.image.pop(key, ()) if (layer := self.resolve(repo, r)) is not None]
        if len(blobs) < 2:
            return blobs, None
        return blobs[:-1], blobs[-1]

    def _add_layer(self, key: tuple[str, str], ref: str) -> None:
        """A blob of the image the client pushes to the repository (``key``), in the order the trace shows them."""
        refs = self.image.setdefault(key, [])
        if ref not in refs:
            refs.append(ref)
            del refs[:-MAX_IMAGE_BLOBS]

    # -- results -------------------------------------------------------------------------------------

    def done(self, req: ReplayRequest, result: ReplayResult | None) -> None:
        """A request finished (result) or was lost (None): record the digest a push got."""
        if req.op == "get":
            if req.kind == "manifest":
                self._release_read(("manifest", req.repository, req.reference))
            return
        if req.op == "manifest-put":
            self._release(("manifest", req.repository, req.reference))
            return
        if req.op == "upload-open":
            blob = self.mounting.pop(req.seq, None)
            if blob is not None:  # a mount: the target now holds the mounted blob, or the upload's fallback
                self._release(("blob", blob))
                if result is not None and result.digest:  # the node names a digest only when the target holds it
                    self.learn(req.repository, "blob", blob, result.digest, result.size or req.object_size or 0)
            return
        if req.op != "upload-close" or req.reference.startswith("uploads"):
            return
        ref = req.reference
        self._release(("blob", ref))
        if result is not None and result.ok and result.digest:
            self.learn(req.repository, "blob", ref, result.digest, result.size or req.size)

    def _count_read(self, key: tuple) -> None:
        self.reading[key] = self.reading.get(key, 0) + 1

    def _release_read(self, key: tuple) -> None:
        self.releases += 1
        self.freed.append(key)
        _decrement(self.reading, key)

    def _release(self, key: tuple) -> None:
        self.releases += 1
        self.freed.append(key)
        _decrement(self.pending, key)

    def take_freed(self) -> list[tuple]:
        """The objects whose requests finished since the last call (what held records may wait for)."""
        freed, self.freed = self.freed, []
        return freed


def _decrement(counts: dict[tuple, int], key: tuple) -> None:
    """One fewer in flight for ``key``; at zero the key goes, so an empty table means nothing in flight."""
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
