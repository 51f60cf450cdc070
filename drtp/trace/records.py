"""The trace record: the one record type of the trace stage.

A :class:`TraceRecord` is decoded straight from the IBM anonymized JSON by
msgspec (typed decoding in C, several times faster than ``json.load`` with
``strptime`` per record; ``bench/bench_reader.py`` measures it): field names map to the
trace's dotted keys, the method is checked against the registry API's verbs,
sizes, durations and statuses must lie in their ranges (below) and the
timestamp must carry a time zone.  The URI is split into (repository, kind,
reference) on demand, through a small cache, because popular objects repeat
and the split is the costliest per-record step; names and references must
follow the Distribution grammar (drtp.registry.names).
"""

from __future__ import annotations

import datetime as _dt
import re
from functools import lru_cache
from typing import Annotated, Literal, NamedTuple
from urllib.parse import unquote

import msgspec

from drtp.registry import names

Method = Literal["GET", "HEAD", "PUT", "PATCH", "POST", "DELETE"]
METHODS: tuple[str, ...] = ("GET", "HEAD", "PUT", "PATCH", "POST", "DELETE")
KINDS: tuple[str, ...] = ("manifest", "blob")

# The ranges a record's numbers must lie in.  They are wide enough for any real
# registry and tight enough that a typo or a hostile value (a 10^30-byte layer,
# a year-9999 timestamp) cannot make a consumer allocate, hash or wait without end.
MAX_SIZE = 1 << 40  # bytes: 1 TiB, far above any image layer
MAX_DURATION_S = 86_400.0  # one day: no HTTP request of a trace takes longer
MIN_STATUS, MAX_STATUS = 100, 599
MIN_TIME = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
MAX_TIME = _dt.datetime(2100, 1, 1, tzinfo=_dt.timezone.utc)

Size = Annotated[int, msgspec.Meta(ge=0, le=MAX_SIZE)]
Duration = Annotated[float, msgspec.Meta(ge=0, le=MAX_DURATION_S)]
Status = Annotated[int, msgspec.Meta(ge=MIN_STATUS, le=MAX_STATUS)]
AwareDatetime = Annotated[_dt.datetime, msgspec.Meta(tz=True)]


class TraceRecord(msgspec.Struct, gc=False, omit_defaults=True):
    """One request of a registry trace, in the format of the anonymized IBM Cloud registry traces.

    ``useragent`` is not decoded: only a run that replays the trace's user agents
    (``client_info.user_agent: trace``) uses it, and decoding it costs time on
    38 M-record traces; such a run reads :class:`AgentRecord` instead.
    """

    host: str = msgspec.field(name="host")
    duration: Duration = msgspec.field(name="http.request.duration")
    method: Method = msgspec.field(name="http.request.method")
    client: str = msgspec.field(name="http.request.remoteaddr")
    uri: str = msgspec.field(name="http.request.uri")
    status: Status = msgspec.field(name="http.response.status")
    size: Size = msgspec.field(name="http.response.written")
    id: str = msgspec.field(name="id")
    timestamp: AwareDatetime = msgspec.field(name="timestamp")

    useragent = None  # not a field: the trace's user agent, only an AgentRecord has it

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
    def mount(self) -> Mount | None:
        """The cross-repository mount a POST asks for (``?mount=<blob>&from=<repository>``), if any."""
        return mount_of(self.uri) if self.method == "POST" else None

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


class AgentRecord(TraceRecord):
    """A trace record with its ``User-Agent`` (empty when the trace has none): what a reader asked for the
    user agents decodes (``TraceReader(user_agent=True)``), so that a replay can send each request's own."""

    useragent: str = msgspec.field(default="", name="http.request.useragent")

    def to_ibm(self) -> dict:
        out = super().to_ibm()
        if self.useragent:
            out["http.request.useragent"] = self.useragent
        return out


class Uri(NamedTuple):
    """A registry API object URI split into its parts."""

    repository: str  # e.g. "ca64kj67/as87d65g" (user/repo in IBM traces)
    kind: str  # "manifest" or "blob"
    reference: str  # tag or digest; "uploads/<uuid>" for blob uploads


class Mount(NamedTuple):
    """A cross-repository blob mount: the blob (a trace reference) and the repository it comes from."""

    blob: str  # the trace's reference of the blob (a digest, or an anonymized id)
    source: str | None  # the repository to mount from; None: the registry may look for the blob itself


@lru_cache(maxsize=1 << 12)
def mount_of(uri: str) -> Mount | None:
    """The mount an upload-open URI asks for; None when it asks for none (or the URI is invalid)."""
    parts = _split(uri)
    if not isinstance(parts, Uri):
        return None
    mount = _mount_query(uri.partition("?")[2])
    return mount if isinstance(mount, Mount) else None


MOUNT_KEYS = ("mount", "from")


def _mount_query(query: str) -> Mount | str | None:
    """The mount of a query; a reason when its ``mount``/``from`` parameters break the grammar; None: no mount.

    Values may be percent-encoded (registries log the query as clients send it: ``from=team%2Fone``).
    """
    if not query or ("mount" not in query and "from" not in query):
        return None
    found: dict[str, str] = {}
    for param in query.split("&"):
        key, _, value = param.partition("=")
        if key not in MOUNT_KEYS:
            continue
        if key in found:
            return f"mount query repeats {key}="
        found[key] = unquote(value)
    if not found:
        return None
    if "mount" not in found:
        return "mount query has from= without mount="
    blob, source = found["mount"], found.get("from")
    if not (names.TAG.fullmatch(blob) or names.DIGEST.fullmatch(blob)):
        return f"mount= {blob[:80]!r} is neither a digest nor a blob reference"
    if source is not None and (problem := names.name_error(source)) is not None:
        return f"from= {problem}"
    return Mount(blob, source)


@lru_cache(maxsize=1 << 16)
def parse_uri(uri: str) -> Uri | None:
    """Split ``v2/<name>/{manifests|blobs}/<ref>`` (one leading ``/`` and a query allowed).

    Blob upload URLs ``v2/<name>/blobs/uploads/[<uuid>]`` are blobs whose
    reference is ``uploads/<uuid>``. Returns None for any other shape
    (``/v2/``, ``_catalog``, ``tags/list``…) and for names, references or
    queries outside the grammar (:func:`uri_error` says why).
    """
    parts = _split(uri)
    return parts if isinstance(parts, Uri) else None


def uri_error(uri: str) -> str | None:
    """None when ``uri`` is a valid object URI; otherwise what is wrong with it (the slow path's words)."""
    parts = _split(uri)
    if parts is None:
        return f"unknown URI shape {uri[:100]!r} (expected v2/<name>/manifests/<ref> or v2/<name>/blobs/<ref>)"
    return parts if isinstance(parts, str) else None


def is_object_uri(uri: str) -> bool:
    """True when ``uri`` has the shape of an object URI, valid or not (registry logs also hold pings, catalogs)."""
    return _split(uri) is not None


# Query characters: RFC 3986 query characters without '?', '#', spaces or controls. The
# query is informational (upload tokens…) and never sent on, except a mount's ``mount=`` and
# ``from=``: they are checked against the grammar (:func:`mount_of`) and replayed.
_QUERY = re.compile(r"[A-Za-z0-9._~%!$&'()*+,;=:@/-]*")


def split_valid_uri(uri: str) -> Uri | None:
    """The parts of an object URI known to be valid, as :func:`parse_uri` gives them, without its checks.

    For the records a trace reader yields (every URI of them passed :func:`uris_valid` or
    :func:`uri_error`), when many distinct URIs are split at once (``drtp inspect``): the
    grammar's checks are most of :func:`parse_uri`'s cost.  None when ``uri`` has no object
    URI's shape; a URI that breaks the grammar is split all the same (:func:`parse_uri` is None).
    """
    path = uri.partition("?")[0]
    parts = (path[1:] if path.startswith("/") else path).split("/")
    if len(parts) >= 5 and parts[-3] == "blobs" and parts[-2] == "uploads":
        name, kind, ref = parts[1:-3], "blob", "uploads/" + parts[-1]
    elif len(parts) >= 4 and parts[-2] in ("manifests", "blobs") and parts[-1]:
        name, kind, ref = parts[1:-2], "manifest" if parts[-2] == "manifests" else "blob", parts[-1]
    else:
        return None
    if parts[0] != "v2" or not name:
        return None
    return Uri("/".join(name), kind, ref)


def _split(uri: str) -> Uri | str | None:
    """The URI's parts; a reason when it has an object URI's shape but breaks the grammar; None otherwise."""
    shape = split_valid_uri(uri)
    if shape is None:
        return None
    repository, _, ref = shape
    mark, query = uri.partition("?")[1:]
    problem = names.name_error(repository) or names.reference_error(ref)
    if problem is None and mark and _QUERY.fullmatch(query) is None:
        problem = f"query {query[:80]!r} holds characters outside a URL query"
    if problem is None and mark and (mount := _mount_query(query)) is not None:
        if isinstance(mount, str):
            problem = mount
        elif ref != "uploads/":
            problem = "a mount query belongs on an upload open (v2/<name>/blobs/uploads/)"
    if problem is not None:
        return f"URI {uri[:100]!r}: {problem}"
    return shape


# Fast whole-chunk pre-checks, never more lenient than parse_uri: the URIs of a
# chunk are joined one per line and matched at once; when a pattern matches,
# every URI in the chunk parses; when both fail, parse_uri decides record by
# record.  The pieces are drtp.registry.names' grammar, written with possessive
# quantifiers (the same languages, without backtracking):
_C = r"[a-z0-9]++(?:(?:[._]|__|-++)[a-z0-9]++)*+"  # a name component (names.COMPONENT)
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}+"  # names.TAG
_REF = rf"(?:{_TAG}|[A-Za-z][A-Za-z0-9]*+(?:[-_+.][A-Za-z][A-Za-z0-9]*+)*+:[0-9a-fA-F]{{32,}}+)"  # or names.DIGEST
_UP = r"uploads/(?:[A-Za-z0-9_=-][A-Za-z0-9_.=-]*+)?"  # names.UPLOAD
# A query without mount parameters (those are checked by parse_uri, one record at a time).
_PARAM = r"(?!(?:mount|from)[=&\n])[A-Za-z0-9._~%!$'()*+,;=:@/-]*+"
_PLAIN_QUERY = rf"\?{_PARAM}(?:&{_PARAM})*+"
_TAIL = rf"(?:manifests/{_REF}|blobs/(?:{_UP}|{_REF}))(?:{_PLAIN_QUERY})?\n"
# The common case first, twice as fast: IBM traces' two-part names (user/repo) of plain
# lowercase letters and digits, up to 127 each (so within names.MAX_NAME), and tags.
IBM_URI_LINES = re.compile(
    rf"(?:v2/[a-z0-9]{{1,127}}+/[a-z0-9]{{1,127}}+/(?:blobs/(?:{_UP}|{_TAG})|manifests/{_TAG})"
    rf"(?:{_PLAIN_QUERY})?\n)*+"
)
# Any number of parts; a line of at most 258 characters keeps the name within names.MAX_NAME.
URI_LINES = re.compile(rf"(?:(?=[^\n]{{1,258}}+\n)/?v2/{_C}(?:/{_C})*/{_TAIL})*+")


def uris_valid(uris: list[str]) -> bool:
    """True when every URI of the list is valid, checked at once (both patterns accept only what
    parse_uri accepts); False means some may not be, and :func:`uri_error` decides one by one.

    The URIs are matched one per line, so a URI that itself holds a line break
    would pass as two valid lines: the count of line breaks rules that out.
    """
    text = "\n".join(uris) + "\n"
    if text.count("\n") != len(uris):
        return False
    return IBM_URI_LINES.fullmatch(text) is not None or URI_LINES.fullmatch(text) is not None


def time_problem(ts: _dt.datetime) -> str | None:
    """None when ``ts`` is an aware time between MIN_TIME and MAX_TIME; otherwise what is wrong."""
    if not isinstance(ts, _dt.datetime) or ts.tzinfo is None:
        return f"timestamp {ts!r} has no time zone"
    if not MIN_TIME <= ts < MAX_TIME:
        return f"timestamp {ts.isoformat()} outside {MIN_TIME.year}..{MAX_TIME.year - 1}"
    return None


def format_timestamp(ts: _dt.datetime) -> str:
    """Format like the IBM traces: ``2017-07-01T01:39:37.098Z`` (UTC, milliseconds)."""
    ts = ts.astimezone(_dt.timezone.utc)
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"
