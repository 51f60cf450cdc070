"""``drtp capture``: a real registry's JSON log → an anonymized trace in the IBM format.

The Distribution registry logs one ``response completed`` line per request.
Capture keeps the registry API's object requests (manifests, blobs, blob
uploads), normalises their URIs to the IBM shapes, turns completion times
into arrival times (``time − duration``), resolves the sizes of uploads that
the log records as ``written: 0`` and anonymizes every name with a keyed hash.

Upload sizes come from, in order: the upload's own requests (the registry's
``_state`` token carries the byte offset, so a PATCH's size is the next
offset minus its own), a ``GET`` of the same digest in the log, or a ``HEAD``
on the live registry (``--registry``).  A pushed manifest's size comes from a
later ``GET`` of it, or the live registry.  What stays unknown is counted.

The requests of one upload share one token: ``POST …/blobs/uploads/?upload=T``,
``PATCH …/blobs/uploads/T``, ``PUT …/blobs/<digest>?upload=T`` (the ``PUT``
names the pushed layer, as the original trace player expects).

A log is input like any trace: a request line whose time, duration, status,
size, method or URI is garbage is left out and counted, and the first such
line is named (``CaptureStats.first_bad``) for the command to report; a log
that yields no request at all is an error, never an empty trace.
"""

from __future__ import annotations

import base64
import datetime as _dt
import heapq
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from itertools import chain
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from drtp.errors import DrtpError
from drtp.trace.anonymize import Anonymizer
from drtp.trace.input_files import MAX_RECORD_BYTES, check_input_file
from drtp.trace.log_requests import (
    CaptureStats,
    arrival_and_duration,
    completion_time,
    parse_request,
    request_lines,
    time_or_none,
)
from drtp.trace.records import MAX_SIZE, format_timestamp, parse_uri, uri_error
from drtp.trace.registry_log import RegistryLogLine as LogLine


@dataclass
class _Upload:
    offsets: dict[str, int] = field(default_factory=dict)  # request id -> byte offset at its start
    final_offset: int = 0  # offset at the final PUT: bytes sent by PATCHes
    started: _dt.datetime | None = None
    precise: bool = False  # started has sub-second precision
    digest: str = ""
    post_id: str = ""
    repo: str = ""


def _state(query: dict[str, list[str]]) -> tuple[int, str] | None:
    """(Offset, StartedAt) of the registry's upload state (base64url: 32-byte HMAC, then JSON);
    None when there is none or it does not hold them as a byte offset and a time text."""
    raw = query.get("_state", [""])[0]
    if not raw:
        return None
    try:
        data = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
        state = json.loads(data[32:])  # after the HMAC-SHA256 signature
    except (ValueError, RecursionError):  # ValueError covers bad base64, JSON and UTF-8
        return None
    if not isinstance(state, dict):
        return None
    offset, started = state.get("Offset", 0), state.get("StartedAt", "")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_SIZE:
        return None
    return offset, started if isinstance(started, str) else ""


MANIFEST_TYPES = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"


def _registry_calls(url: str):
    """The live registry that answers sizes the log does not hold (drtp.registry.calls is imported only then)."""
    from drtp.registry.calls import RegistryCalls

    return RegistryCalls(url.rstrip("/"), timeout=10)


class Capture:
    """Two passes over the log (``observe`` then ``records``), or one delayed pass when following."""

    def __init__(self, anonymizer: Anonymizer, registry_url: str | None = None) -> None:
        self.anon = anonymizer
        self.registry = _registry_calls(registry_url) if registry_url else None
        self.stats = CaptureStats()
        self.uploads: dict[str, _Upload] = {}
        self.blob_sizes: dict[str, int] = {}
        self.manifest_sizes: dict[tuple[str, str], int] = {}
        self.posts: list[tuple[_dt.datetime, _dt.datetime, str, str]] = []  # arrival, done, repo, id
        self.post_upload: dict[str, str] = {}  # POST request id -> upload uuid

    # -- pass 1: learn sizes and uploads ---------------------------------------------

    def observe(self, line: LogLine) -> None:
        parts = parse_uri(line.uri)
        query = parse_qs(urlsplit(line.uri).query)
        if parts.kind == "manifest":
            if line.method == "GET" and line.status == 200:
                self.manifest_sizes[(parts.repository, parts.reference)] = line.written
            return
        if not parts.reference.startswith("uploads/"):
            if line.method == "GET" and line.status == 200 and line.written:
                self.blob_sizes.setdefault(parts.reference, line.written)
            return
        uuid = parts.reference[len("uploads/") :]
        if line.method == "POST":
            arrival, duration = arrival_and_duration(line)
            self.posts.append((arrival, arrival + _dt.timedelta(seconds=duration), parts.repository, line.request_id))
            return
        if not uuid:
            return
        up = self.uploads.setdefault(uuid, _Upload(repo=parts.repository))
        state = _state(query)
        if state is not None:
            up.offsets[line.request_id], started = state
            precise = "." in started
            when = time_or_none(started) if started else None
            if when is not None and (up.started is None or (precise and not up.precise)):
                up.started, up.precise = when, precise
        if line.method == "PUT":
            up.digest = query.get("digest", [""])[0]
            up.final_offset = up.offsets.get(line.request_id, 0)
            if up.digest and up.final_offset and line.status in (201, 204):
                self.blob_sizes.setdefault(up.digest, up.final_offset)

    def match_posts(self) -> None:
        """Give each upload the POST that opened it: same repository, StartedAt within the POST."""
        slack = _dt.timedelta(seconds=1)
        by_repo: dict[str, list[tuple[_dt.datetime, _dt.datetime, str]]] = {}
        for arrival, done, repo, rid in self.posts:
            by_repo.setdefault(repo, []).append((arrival, done, rid))
        taken: set[str] = set()
        for up in self.uploads.values():
            if up.started is None or up.post_id:
                continue
            tol = _dt.timedelta(milliseconds=5) if up.precise else slack
            best = None
            for arrival, done, rid in by_repo.get(up.repo, ()):
                if rid in taken or not (arrival - tol <= up.started <= done + tol):
                    continue
                gap = abs((up.started - arrival).total_seconds())
                if best is None or gap < best[0]:
                    best = (gap, rid)
            if best:
                up.post_id = best[1]
                taken.add(best[1])
        self.post_upload = {up.post_id: uuid for uuid, up in self.uploads.items() if up.post_id}

    # -- pass 2: write records ----------------------------------------------------------

    def record(self, line: LogLine) -> dict | None:
        """The trace record of a parsed line; None when the URI it gets is outside the grammar
        (a mount source or pushed digest of the query that is not a name or a digest)."""
        parts = parse_uri(line.uri)
        arrival, duration = arrival_and_duration(line)
        repo = self.anon.name(parts.repository)
        written = line.written
        query = parse_qs(urlsplit(line.uri).query)
        if parts.kind == "manifest":
            uri = f"v2/{repo}/manifests/{self.anon.reference(parts.reference)}"
            if line.method == "PUT":
                written = self.manifest_size(parts.repository, parts.reference)
        elif not parts.reference.startswith("uploads/"):
            uri = f"v2/{repo}/blobs/{self.anon.reference(parts.reference)}"
        else:
            uuid = parts.reference[len("uploads/") :]
            if line.method == "POST":
                uri = f"v2/{repo}/blobs/uploads/"
                tags = []
                owner = self.post_upload.get(line.request_id)
                if owner:
                    tags.append(f"upload={self.anon.token('upload', owner)}")
                if "mount" in query:
                    tags.append(f"mount={self.anon.reference(query['mount'][0])}")
                    if "from" in query:
                        tags.append(f"from={self.anon.name(query['from'][0])}")
                if tags:
                    uri += "?" + "&".join(tags)
            else:
                self.stats.uploads += line.method == "PUT"
                up = self.uploads.get(uuid, _Upload())
                token = self.anon.token("upload", uuid)
                if line.method == "PATCH":
                    uri = f"v2/{repo}/blobs/uploads/{token}"
                    written = self.patch_size(uuid, up, line.request_id)
                else:  # the PUT that completes the upload names the pushed blob
                    digest = up.digest or query.get("digest", [""])[0]
                    uri = f"v2/{repo}/blobs/{self.anon.reference(digest)}?upload={token}"
                    written = max(0, self.blob_size(parts.repository, digest) - up.final_offset)
        if uri_error(uri) is not None:
            return None
        return {
            "host": self.anon.token("host", line.host),
            "http.request.duration": round(duration, 9),
            "http.request.method": line.method,
            "http.request.remoteaddr": self.anon.client(line.client),
            "http.request.uri": uri,
            "http.request.useragent": line.useragent,
            "http.response.status": line.status,
            "http.response.written": written,
            "id": self.anon.token("id", line.request_id, 10),
            "timestamp": format_timestamp(arrival),
        }

    def patch_size(self, uuid: str, up: _Upload, request_id: str) -> int:
        start = up.offsets.get(request_id)
        if start is None:
            return 0
        later = [o for o in up.offsets.values() if o > start]  # the next request's offset ends this one
        return min(later) - start if later else 0

    def blob_size(self, repo: str, digest: str) -> int:
        if digest in self.blob_sizes:
            self.stats.sizes_from_log += 1
            return self.blob_sizes[digest]
        size = self._ask_registry("blob", repo, digest)
        if size is not None:
            self.blob_sizes[digest] = size
            return size
        self.stats.unresolved_sizes += 1
        return 0

    def manifest_size(self, repo: str, ref: str) -> int:
        if (repo, ref) in self.manifest_sizes:
            self.stats.sizes_from_log += 1
            return self.manifest_sizes[(repo, ref)]
        size = self._ask_registry("manifest", repo, ref, accept=MANIFEST_TYPES)
        if size is not None:
            self.manifest_sizes[(repo, ref)] = size
            return size
        self.stats.unresolved_sizes += 1
        return 0

    def _ask_registry(self, kind: str, repo: str, ref: str, accept: str | None = None) -> int | None:
        """Content-Length of a HEAD on the live registry, when one was given."""
        if self.registry is None:
            return None
        size = self.registry.size(kind, repo, ref, accept=accept)
        if size is not None:
            self.stats.sizes_from_registry += 1
        return size


def _sorted_by_arrival(records: Iterator[tuple[_dt.datetime, dict]], window_s: float = 300.0) -> Iterator[dict]:
    """Log lines come in completion order; arrival = completion − duration: reorder with a heap."""
    heap: list[tuple[_dt.datetime, int, dict]] = []
    window = _dt.timedelta(seconds=window_s)
    for n, (done, rec) in enumerate(records):
        heapq.heappush(heap, (done - _dt.timedelta(seconds=rec["http.request.duration"]), n, rec))
        while heap and heap[0][0] < done - window:
            yield heapq.heappop(heap)[2]
    while heap:
        yield heapq.heappop(heap)[2]


def capture_files(paths: list[Path], anonymizer: Anonymizer, registry_url: str | None = None):
    """Capture finished log files; returns (Capture, iterator of IBM record dicts in time order).

    The first pass learns sizes and uploads (and refuses a log without requests),
    the second writes records.
    """
    for p in paths:
        check_input_file(p, "log file")
    cap = Capture(anonymizer, registry_url)
    for p in paths:
        found = 0
        seen = replace(cap.stats)
        for _, line in request_lines(p, cap.stats):
            cap.observe(line)
            found += 1
        if not found:
            raise DrtpError(f"no registry requests in {p}{_why_none(seen, cap.stats)}")
    cap.match_posts()
    cap.stats = CaptureStats()

    def completed() -> Iterator[tuple[_dt.datetime, dict]]:
        for p in paths:
            for where, line in request_lines(p, cap.stats):
                rec = cap.record(line)
                if rec is None:
                    cap.stats.bad(where, f"URI {line.uri[:100]!r} does not make a valid trace URI")
                else:
                    yield completion_time(line), rec

    records = _sorted_by_arrival(completed())
    first = next(records, None)
    if first is None:  # every request turned out unusable: an error, not an empty trace
        raise DrtpError(
            f"no registry requests in {', '.join(map(str, paths))} make trace records"
            + (f" ({cap.stats.warning()})" if cap.stats.warning() else "")
        )
    return cap, _counted(cap, chain([first], records))


def _why_none(before: CaptureStats, after: CaptureStats) -> str:
    """What a log without requests held instead, from the counts before and after reading it."""
    why = []
    if after.bad_lines > before.bad_lines:
        first = after.first_bad if not before.first_bad else "see the warning"
        why.append(f"{after.bad_lines - before.bad_lines:,} bad line(s), the first: {first}")
    if after.ignored > before.ignored:
        why.append(f"{after.ignored - before.ignored:,} logged request(s) not for a manifest or blob")
    return f" ({'; '.join(why)})" if why else ""


def _counted(cap: Capture, records: Iterator[dict]) -> Iterator[dict]:
    for rec in records:
        cap.stats.requests += 1
        yield rec


def follow_file(
    path: Path, anonymizer: Anonymizer, registry_url: str | None, delay: float, stop_after: float | None = None
) -> tuple[Capture, Iterator[dict]]:
    """Follow a growing log: a request is written ``delay`` seconds after it is logged, once the
    rest of its upload has been seen (sizes then come from the log, or from the live registry)."""
    check_input_file(path, "log file")
    cap = Capture(anonymizer, registry_url)

    def completed() -> Iterator[tuple[_dt.datetime, dict]]:
        started = time.monotonic()
        pending: list[tuple[float, str, LogLine]] = []
        buf = b""
        number = 0
        with open(path, "rb") as f:
            while True:
                chunk = f.read(1 << 20)
                *lines, buf = (buf + chunk).split(b"\n")
                if len(buf) > MAX_RECORD_BYTES:  # a line that never ends is not a log line
                    cap.stats.bad(f"{path} line {number + len(lines) + 1}", "line longer than 8 MiB")
                    buf = b""
                now = time.monotonic()
                for raw in lines:
                    number += 1
                    where = f"{path} line {number}"
                    line = parse_request(raw, where, cap.stats) if raw.strip() else None
                    if line is not None:
                        cap.observe(line)
                        pending.append((now, where, line))
                finished = stop_after is not None and now - started >= stop_after
                ready = len(pending) if finished else sum(1 for seen, _, _ in pending if now - seen >= delay)
                if ready:
                    cap.match_posts()
                    for _, where, line in pending[:ready]:
                        rec = cap.record(line)
                        if rec is None:
                            cap.stats.bad(where, f"URI {line.uri[:100]!r} does not make a valid trace URI")
                        else:
                            yield completion_time(line), rec
                    del pending[:ready]
                if finished:
                    return
                if not chunk:
                    time.sleep(0.2)

    return cap, _counted(cap, _sorted_by_arrival(completed(), window_s=max(delay, 1.0)))
