"""The trace as columns: the one form that simulation and characterization compute on.

A trace of millions of requests is worked on whole columns at a time, and a
simulation sweep runs the same trace many times, so a trace is converted once:
each request becomes one row of typed numpy columns and every string (object,
repository, client, host) an integer code against a dictionary that grows with
the trace.  Memory then holds a few numbers per request and one copy of each
distinct name, never the records themselves.

Rows come a batch at a time, from :class:`~drtp.trace.records.TraceRecord`
batches (any trace format, through :class:`~drtp.trace.reader.TraceReader`) or
from Arrow record batches of a Parquet trace (:mod:`drtp.trace.parquet`),
which never become records.  Each distinct URI of a batch is split once.

Codes: ``method`` is the index into :data:`~drtp.trace.records.METHODS`
(:data:`GET`, :data:`HEAD`, …); ``kind`` is :data:`MANIFEST`, :data:`BLOB` or
:data:`UPLOAD`.  Object keys: a layer is its digest (content addressed, shared
across repositories); a manifest is ``<repository>:<tag or digest>``; a request
to a blob upload URL is its session, ``uploads/<uuid>``, except the ``PUT`` that
ends a push with ``?digest=…``, which is a request for the blob of that digest.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import parse_qs

import numpy as np
import pandas as pd

from drtp.errors import DrtpError
from drtp.trace.records import METHODS, TraceRecord, parse_uri

if TYPE_CHECKING:
    import pyarrow as pa

GET, HEAD, PUT, PATCH, POST, DELETE = (METHODS.index(m) for m in ("GET", "HEAD", "PUT", "PATCH", "POST", "DELETE"))
MANIFEST, BLOB, UPLOAD = 0, 1, 2  # values of TraceColumns.kind


class ObjectRef(NamedTuple):
    """What a request URI names, as the columns key it."""

    repository: str
    kind: int  # MANIFEST, BLOB or UPLOAD
    key: str  # the object key (module docstring)
    digest: str | None  # of an upload URL with ``?digest=``: the blob a PUT to it completes


@lru_cache(maxsize=1 << 18)
def object_of(uri: str) -> ObjectRef:
    """The repository, kind and object key of an object URI; ValueError for any other shape."""
    parts = parse_uri(uri)
    if parts is None:  # the readers only yield parseable URIs; this is for hand-made records
        raise ValueError(f"unknown URI shape: {uri!r}")
    if parts.kind == "manifest":
        return ObjectRef(parts.repository, MANIFEST, f"{parts.repository}:{parts.reference}", None)
    if parts.reference.startswith("uploads/"):
        query = uri.partition("?")[2]
        digest = parse_qs(query).get("digest") if query else None
        return ObjectRef(parts.repository, UPLOAD, parts.reference, digest[0] if digest else None)
    return ObjectRef(parts.repository, BLOB, parts.reference, None)


class Names:
    """Strings to dense integer codes in order of first appearance: one dictionary for a whole trace."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    def encode(self, values: list[str] | np.ndarray) -> np.ndarray:
        """The int32 code of each value (-1 for a missing one), adding new values to the dictionary."""
        local, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
        table = self.codes
        found = list(map(table.get, uniques))  # most values of a batch are known already: one C-level pass
        if None in found:
            for i, value in enumerate(uniques):
                if found[i] is None:
                    found[i] = table[value] = len(table)
        mapping = np.array(found, dtype=np.int32)
        out = np.full(len(local), -1, dtype=np.int32)
        ok = local >= 0
        out[ok] = mapping[local[ok]]
        return out

    def names(self) -> list[str]:
        """The values, indexed by their codes."""
        return list(self.codes)


@dataclass
class TraceColumns:
    """A time-ordered trace as parallel numpy columns plus the interned names (one row per request)."""

    time: np.ndarray  # float64, seconds since the epoch
    duration: np.ndarray  # float64, seconds (http.request.duration)
    method: np.ndarray  # uint8, index into drtp.trace.records.METHODS
    kind: np.ndarray  # uint8: MANIFEST, BLOB or UPLOAD
    upload: np.ndarray  # bool: the URI is a blob upload URL (also for the PUT that completes a push)
    status: np.ndarray  # int16
    size: np.ndarray  # int64, http.response.written
    obj: np.ndarray  # int32, index into objects
    repo: np.ndarray  # int32, index into repositories
    client: np.ndarray  # int32, index into clients
    host: np.ndarray  # int32, index into hosts
    objects: list[str]
    repositories: list[str]
    clients: list[str]
    hosts: list[str]
    id: np.ndarray | None = None  # object (str): the trace's request ids, when asked for

    @classmethod
    def from_batches(cls, batches: Iterable[list[TraceRecord]], with_ids: bool = False) -> TraceColumns:
        """Columns of time-ordered record batches (``TraceReader.batches()``); ``with_ids`` keeps the ids."""
        builder = ColumnBuilder(with_ids)
        for batch in batches:
            builder.add(batch)
        return builder.build()

    @classmethod
    def from_records(cls, records: Iterable[TraceRecord], with_ids: bool = False) -> TraceColumns:
        """Columns of hand-made records (tests, notebooks); they are sorted by time first."""
        ordered = sorted(records, key=attrgetter("timestamp"))
        return cls.from_batches([ordered] if ordered else [], with_ids)

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


_METHOD_CODE = {m: i for i, m in enumerate(METHODS)}
_epoch = _dt.datetime.timestamp
_get = {
    name: attrgetter(name)
    for name in ("timestamp", "duration", "method", "status", "size", "client", "host", "uri", "id")
}
_DTYPES = {
    "time": np.float64,
    "duration": np.float64,
    "method": np.uint8,
    "kind": np.uint8,
    "upload": bool,
    "status": np.int16,
    "size": np.int64,
    "obj": np.int32,
    "repo": np.int32,
    "client": np.int32,
    "host": np.int32,
}


class ColumnBuilder:
    """Accumulates batches as column chunks; :meth:`build` joins them into a :class:`TraceColumns`."""

    def __init__(self, with_ids: bool = False) -> None:
        self.with_ids = with_ids
        self.objects = Names()
        self.repositories = Names()
        self.clients = Names()
        self.hosts = Names()
        self.chunks: list[dict[str, np.ndarray]] = []

    def add(self, batch: list[TraceRecord]) -> None:
        """Add a batch of records (any trace format, through TraceReader)."""
        n = len(batch)

        def numbers(name: str, dtype: type) -> np.ndarray:
            return np.fromiter(map(_get[name], batch), dtype=dtype, count=n)

        def strings(name: str) -> np.ndarray:
            return np.array(list(map(_get[name], batch)), dtype=object)

        methods = np.fromiter(map(_METHOD_CODE.__getitem__, map(_get["method"], batch)), np.uint8, count=n)
        chunk = {
            "time": np.fromiter(map(_epoch, map(_get["timestamp"], batch)), dtype=np.float64, count=n),
            "duration": numbers("duration", np.float64),
            "method": methods,
            "status": numbers("status", np.int16),
            "size": numbers("size", np.int64),
            "client": self.clients.encode(strings("client")),
            "host": self.hosts.encode(strings("host")),
        }
        if self.with_ids:
            chunk["id"] = strings("id")
        chunk.update(self._object_columns(strings("uri"), methods))
        self.chunks.append(chunk)

    def add_arrow(self, batch: pa.RecordBatch, uris: list[str] | None = None) -> None:
        """Add a record batch of a Parquet trace: columns in, no records built.

        ``uris``, when the caller already holds the batch's URIs as strings (the
        Parquet checks do), saves converting that column a second time.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        def text(name: str) -> np.ndarray:
            column = batch.column(name)
            if pa.types.is_dictionary(column.type):
                column = column.dictionary_decode()
            return column.to_numpy(zero_copy_only=False)

        def numbers(name: str, dtype: pa.DataType) -> np.ndarray:
            return pc.cast(batch.column(name), dtype).to_numpy()

        names = text("method")
        methods = pd.Categorical(names, categories=list(METHODS))
        if (methods.codes < 0).any():
            raise DrtpError(f"unknown HTTP method in Parquet trace: {sorted(set(names) - set(METHODS))}")
        method_codes = methods.codes.astype(np.uint8)
        stamps = batch.column("timestamp").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        chunk = {
            "time": stamps.to_numpy() / 1e6,
            "duration": numbers("duration", pa.float64()),
            "method": method_codes,
            "status": numbers("status", pa.int16()),
            "size": numbers("size", pa.int64()),
            "client": self.clients.encode(text("client")),
            "host": self.hosts.encode(text("host")),
        }
        if self.with_ids:
            chunk["id"] = text("id").astype(object)
        uri_values = np.array(uris, dtype=object) if uris is not None else text("uri").astype(object)
        chunk.update(self._object_columns(uri_values, method_codes))
        self.chunks.append(chunk)

    def _object_columns(self, uris: np.ndarray, methods: np.ndarray) -> dict[str, np.ndarray]:
        """repo, kind, obj and upload of each request; each distinct (URI, completes a push) is split once.

        A PUT to an upload URL carrying ``?digest=`` is keyed apart from the other
        requests to that URL (it is the pushed blob), so such pairs are told apart
        before the keys are interned, and names keep the order they first appear in.
        """
        rows, uniques = pd.factorize(uris)
        if not len(uniques):
            return {name: np.empty(0, dtype=_DTYPES[name]) for name in ("repo", "kind", "obj", "upload")}
        refs = list(map(object_of, uniques))
        repositories, kinds, keys, digests = zip(*refs, strict=True)
        kind = np.array(kinds, dtype=np.uint8)
        upload = kind == UPLOAD
        if digests.count(None) != len(digests):
            completes = np.array([d is not None for d in digests])[rows] & (methods == PUT)
            if completes.any():  # the pushed blob: another key and kind for those rows, as a pair of their own
                rows, pairs = pd.factorize(rows.astype(np.int64) * 2 + completes)
                uri_of, push = pairs >> 1, (pairs & 1).astype(bool)
                repositories = [repositories[i] for i in uri_of.tolist()]
                keys = [digests[i] if p else keys[i] for i, p in zip(uri_of.tolist(), push.tolist(), strict=True)]
                kind, upload = np.where(push, BLOB, kind[uri_of]).astype(np.uint8), upload[uri_of]
        return {
            "repo": self.repositories.encode(repositories)[rows],
            "kind": kind[rows],
            "obj": self.objects.encode(keys)[rows],
            "upload": upload[rows],
        }

    def build(self) -> TraceColumns:
        """The whole trace; each column's chunks are released as it is joined (peak ≈ one copy)."""

        def column(name: str, dtype: type) -> np.ndarray:
            if not self.chunks:
                return np.empty(0, dtype=dtype)
            return np.concatenate([c.pop(name) for c in self.chunks])

        joined = {name: column(name, dtype) for name, dtype in _DTYPES.items()}
        ids = column("id", object) if self.with_ids else None
        self.chunks = []
        return TraceColumns(
            **joined,
            objects=self.objects.names(),
            repositories=self.repositories.names(),
            clients=self.clients.names(),
            hosts=self.hosts.names(),
            id=ids,
        )
