"""The trace record: the one record type of the trace stage.

A :class:`TraceRecord` is decoded straight from the IBM anonymized JSON by
msgspec (typed decoding in C, see REFERENCE §7): field names map to the
trace's dotted keys, the method is checked against the registry API's verbs,
sizes and durations must be non-negative and the timestamp must carry a time
zone.  The URI is split into (repository, kind, reference) on demand, through
a small cache, because popular objects repeat and the split is the costliest
per-record step.
"""

from __future__ import annotations

import datetime as _dt
import re
from functools import lru_cache
from typing import Annotated, Literal, NamedTuple

import msgspec

Method = Literal["GET", "HEAD", "PUT", "PATCH", "POST", "DELETE"]
METHODS: tuple[str, ...] = ("GET", "HEAD", "PUT", "PATCH", "POST", "DELETE")
KINDS: tuple[str, ...] = ("manifest", "blob")

NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
NonNegFloat = Annotated[float, msgspec.Meta(ge=0)]
AwareDatetime = Annotated[_dt.datetime, msgspec.Meta(tz=True)]


class TraceRecord(msgspec.Struct, gc=False, omit_defaults=True):
    """One request of a registry trace (IBM format, paper Fig. 2).

    ``useragent`` is not kept: nothing downstream uses it and decoding it
    costs time on 38 M-record traces.
    """

    host: str = msgspec.field(name="host")
    duration: NonNegFloat = msgspec.field(name="http.request.duration")
    method: Method = msgspec.field(name="http.request.method")
    client: str = msgspec.field(name="http.request.remoteaddr")
    uri: str = msgspec.field(name="http.request.uri")
    status: int = msgspec.field(name="http.response.status")
    size: NonNegInt = msgspec.field(name="http.response.written")
    id: str = msgspec.field(name="id")
    timestamp: AwareDatetime = msgspec.field(name="timestamp")

    @property
    def time(self) -> float:
        """Arrival time in seconds since the epoch."""
        return self.timestamp.timestamp()

    @property
    def parts(self) -> Uri:
        parts = parse_uri(self.uri)
        if parts is None:  # the reader validates URIs; this is for hand-made records
            raise ValueError(f"unknown URI shape: {self.uri!r}")
        return parts

    @property
    def repository(self) -> str:
        return self.parts.repository

    @property
    def kind(self) -> str:
        return self.parts.kind

    @property
    def reference(self) -> str:
        return self.parts.reference

    @property
    def is_upload(self) -> bool:
        """True for blob upload URLs (``blobs/uploads/…``): POST, PATCH, PUT of a push."""
        return self.parts.reference.startswith("uploads/")

    def to_ibm(self) -> dict:
        """The record as an IBM-format dict (for writers and the original plugin contract)."""
        return {
            "host": self.host,
            "http.request.duration": self.duration,
            "http.request.method": self.method,
            "http.request.remoteaddr": self.client,
            "http.request.uri": self.uri,
            "http.response.status": self.status,
            "http.response.written": self.size,
            "id": self.id,
            "timestamp": format_timestamp(self.timestamp),
        }


class Uri(NamedTuple):
    """A registry API object URI split into its parts."""

    repository: str  # e.g. "ca64kj67/as87d65g" (user/repo in IBM traces)
    kind: str  # "manifest" or "blob"
    reference: str  # tag or digest; "uploads/<uuid>" for blob uploads


@lru_cache(maxsize=1 << 16)
def parse_uri(uri: str) -> Uri | None:
    """Split ``v2/<name>/{manifests|blobs}/<ref>`` (leading ``/`` and query allowed).

    Blob upload URLs ``v2/<name>/blobs/uploads/[<uuid>]`` are blobs whose
    reference is ``uploads/<uuid>``. Returns None for any other shape
    (``/v2/``, ``_catalog``, ``tags/list``…).
    """
    parts = uri.partition("?")[0].lstrip("/").split("/")
    if len(parts) >= 5 and parts[-3] == "blobs" and parts[-2] == "uploads":
        name, kind, ref = parts[1:-3], "blob", "uploads/" + parts[-1]
    elif len(parts) >= 4 and parts[-2] in ("manifests", "blobs") and parts[-1]:
        name, kind, ref = parts[1:-2], "manifest" if parts[-2] == "manifests" else "blob", parts[-1]
    else:
        return None
    if parts[0] != "v2" or not all(name):
        return None
    return Uri("/".join(name), kind, ref)


# A fast whole-chunk pre-check, never more lenient than parse_uri: when it
# matches, every URI in the chunk parses; when it fails, parse_uri decides.
# The common case, IBM traces' two-part names (user/repo), checked first because it is twice as fast.
IBM_URI_LINES = re.compile(
    r"(?:v2/[^\n/?]++/[^\n/?]++/(?:blobs/(?:uploads/[^\n/?]*+|[^\n/?]++)|manifests/[^\n/?]++)(?:\?[^\n]*+)?\n)*+"
)
_SEG = r"[^\n/?]++/"  # a non-empty path segment and its slash, never given back
_NAMELESS = r"(?!(?:manifests/|blobs/(?:uploads/)?)[^\n/?]*+(?:\?|\n))"
URI_LINES = re.compile(
    rf"(?:/?v2/{_NAMELESS}(?:{_SEG})++"
    r"(?:(?<=/manifests/|..../blobs/)[^\n/?]++|(?<=/blobs/uploads/)[^\n/?]*+)"
    r"(?:\?[^\n]*+)?\n)*+"
)


def format_timestamp(ts: _dt.datetime) -> str:
    """Format like the IBM traces: ``2017-07-01T01:39:37.098Z`` (UTC, milliseconds)."""
    ts = ts.astimezone(_dt.timezone.utc)
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"
