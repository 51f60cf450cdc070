"""The trace as compact numpy columns: the one input record of the simulation stage.

Simulations run the same trace many times (a sweep runs it once per grid
point), so the trace is converted once: every string (object, repository,
client, host) is interned to a small integer, and each request becomes one
row of typed numpy columns.  Policy loops then work on plain ints, which is
what makes a Python LRU run at millions of requests per second.

Object keys: a layer is its digest (content addressed, shared across
repositories); a manifest is ``<repository>:<tag or digest>``; an upload
session without a digest is ``uploads/<uuid>`` (a ``PUT …/uploads/<uuid>?digest=…``
is keyed by that digest).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import parse_qs

import numpy as np

from drtp.trace.records import METHODS, TraceRecord, parse_uri

GET, HEAD, PUT, PATCH, POST, DELETE = (METHODS.index(m) for m in ("GET", "HEAD", "PUT", "PATCH", "POST", "DELETE"))
MANIFEST, BLOB, UPLOAD = 0, 1, 2  # values of CompactTrace.kind


@dataclass
class CompactTrace:
    """A time-ordered trace as parallel numpy columns plus the interned names."""

    time: np.ndarray  # float64, seconds since the epoch
    method: np.ndarray  # uint8, index into drtp.trace.records.METHODS
    kind: np.ndarray  # uint8: MANIFEST, BLOB or UPLOAD
    status: np.ndarray  # int16
    size: np.ndarray  # int64, http.response.written
    obj: np.ndarray  # int32, index into objects
    repo: np.ndarray  # int32, index into repositories
    client: np.ndarray  # int32, index into clients
    host: np.ndarray  # int32, index into hosts
    objects: list[str] = field(default_factory=list)
    repositories: list[str] = field(default_factory=list)
    clients: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.time)

    @property
    def span_s(self) -> float:
        return float(self.time[-1] - self.time[0]) if len(self) else 0.0

    def layer_gets(self) -> np.ndarray:
        """Indices of the requests a layer cache sees: successful (status < 400) GETs of blobs."""
        return np.flatnonzero((self.method == GET) & (self.kind == BLOB) & (self.status < 400))

    def ingress_bytes(self) -> int:
        """Data ingress: bytes of layer uploads (PUT and PATCH requests on blob URIs).

        A monolithic push carries the layer in its PUT; a chunked push carries it
        in PATCHes and ends with an empty PUT, so summing both counts each byte
        pushed once.  Manifests are not counted (they are not data).
        """
        mask = ((self.method == PUT) | (self.method == PATCH)) & (self.kind != MANIFEST) & (self.status < 400)
        return int(self.size[mask].sum())

    def object_sizes(self, indices: np.ndarray) -> np.ndarray:
        """Size of every object (indexed by object id) as the largest bytes written for it in ``indices``.

        Using one size per object keeps every policy on the same footing (a partial
        transfer does not shrink a cached layer).
        """
        sizes = np.zeros(len(self.objects), dtype=np.int64)
        np.maximum.at(sizes, self.obj[indices], self.size[indices])
        return sizes


def _object_key(method: str, uri: str) -> tuple[str, str, int]:
    """(repository, object key, kind code) of a request URI."""
    parts = parse_uri(uri)
    if parts is None:
        raise ValueError(f"unknown URI shape: {uri!r}")
    if parts.kind == "manifest":
        return parts.repository, f"{parts.repository}:{parts.reference}", MANIFEST
    if parts.reference.startswith("uploads/"):
        query = uri.partition("?")[2]
        digest = parse_qs(query).get("digest") if query else None
        if digest and method == "PUT":
            return parts.repository, digest[0], BLOB
        return parts.repository, parts.reference, UPLOAD
    return parts.repository, parts.reference, BLOB


def compact(batches: Iterable[list[TraceRecord]]) -> CompactTrace:
    """Convert time-ordered record batches (``TraceReader.batches()``) into a CompactTrace."""
    interned: list[dict[str, int]] = [{}, {}, {}, {}]  # objects, repositories, clients, hosts
    objs, repos, clients, hosts = interned
    method_code = {m: i for i, m in enumerate(METHODS)}
    cols: dict[str, list] = {
        k: [] for k in ("time", "method", "kind", "status", "size", "obj", "repo", "client", "host")
    }
    keys: dict[tuple[str, str], tuple[int, int, int]] = {}  # (method, uri) -> (repo id, obj id, kind), uploads aside

    def new_key(key: tuple[str, str]) -> tuple[int, int, int]:
        repo, obj, kind = _object_key(*key)
        ids = (repos.setdefault(repo, len(repos)), objs.setdefault(obj, len(objs)), kind)
        if kind != UPLOAD:  # upload URLs are one-off: remembering them would only cost memory
            keys[key] = ids
        return ids

    for batch in batches:
        n = len(batch)
        cols["time"].append(np.fromiter((r.timestamp.timestamp() for r in batch), np.float64, n))
        cols["status"].append(np.fromiter((r.status for r in batch), np.int16, n))
        cols["size"].append(np.fromiter((r.size for r in batch), np.int64, n))
        methods = [r.method for r in batch]
        ids = [keys.get(k) or new_key(k) for k in zip(methods, [r.uri for r in batch], strict=True)]
        per_request = np.array(ids, dtype=np.int64).reshape(n, 3)
        cols["repo"].append(per_request[:, 0].astype(np.int32))
        cols["obj"].append(per_request[:, 1].astype(np.int32))
        cols["kind"].append(per_request[:, 2].astype(np.uint8))
        cols["method"].append(np.fromiter((method_code[m] for m in methods), np.uint8, n))
        cols["client"].append(np.fromiter((clients.setdefault(r.client, len(clients)) for r in batch), np.int32, n))
        cols["host"].append(np.fromiter((hosts.setdefault(r.host, len(hosts)) for r in batch), np.int32, n))
    dtypes = {"time": np.float64, "method": np.uint8, "kind": np.uint8, "status": np.int16, "size": np.int64}
    arrays = {
        name: (np.concatenate(parts) if parts else np.zeros(0, dtype=dtypes.get(name, np.int32)))
        for name, parts in cols.items()
    }
    return CompactTrace(
        **arrays,
        objects=list(objs),
        repositories=list(repos),
        clients=list(clients),
        hosts=list(hosts),
    )
