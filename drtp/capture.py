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
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import heapq
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import msgspec

from drtp.errors import DrtpError
from drtp.records import format_timestamp, parse_uri
from drtp.trace import RegistryLogLine as LogLine
from drtp.trace import line_chunks, parse_go_duration

_decode_line = msgspec.json.Decoder(LogLine).decode
_datetime = msgspec.json.Decoder(_dt.datetime).decode


class Anonymizer:
    """Keyed hashes (BLAKE2b with the salt as key): same name → same token; other salt → unlinkable."""

    def __init__(self, salt: str) -> None:
        if not salt:
            raise DrtpError("capture needs a salt (--salt or DRTP_CAPTURE_SALT) to anonymize names")
        self.key = hashlib.blake2b(salt.encode(), digest_size=32).digest()

    def token(self, kind: str, value: str, length: int = 8) -> str:
        h = hashlib.blake2b(value.encode(), key=self.key, person=kind.encode()[:16], digest_size=16)
        return h.hexdigest()[:length]

    def name(self, name: str) -> str:
        """``user/repo``: the first component is the user (``library`` for one-part names)."""
        user, _, repo = name.partition("/")
        if not repo:
            user, repo = "library", user
        return f"{self.token('user', user)}/{self.token('repo', repo)}"

    def reference(self, ref: str) -> str:
        """Digests map alike wherever they appear (blob, manifest by digest); tags separately."""
        if ":" in ref:
            return self.token("digest", ref, 16)
        return self.token("tag", ref)

    def client(self, remoteaddr: str) -> str:
        """The client host without its port (one host = one client, as in the IBM traces)."""
        host = remoteaddr.rsplit(":", 1)[0] if remoteaddr.count(":") == 1 else remoteaddr
        if remoteaddr.startswith("["):  # [ipv6]:port
            host = remoteaddr[1:].split("]")[0]
        return self.token("client", host)


class PlainNames(Anonymizer):
    """The same interface without hashing: for converting a log to a trace (``drtp convert``)."""

    def __init__(self) -> None:
        pass

    def token(self, kind: str, value: str, length: int = 8) -> str:
        return value

    def name(self, name: str) -> str:
        return name

    def reference(self, ref: str) -> str:
        return ref


@dataclass
class _Upload:
    offsets: dict[str, int] = field(default_factory=dict)  # request id -> byte offset at its start
    final_offset: int = 0  # offset at the final PUT: bytes sent by PATCHes
    started: _dt.datetime | None = None
    precise: bool = False  # started has sub-second precision
    digest: str = ""
    post_id: str = ""
    repo: str = ""


@dataclass
class CaptureStats:
    lines: int = 0
    requests: int = 0  # records written
    ignored: int = 0  # log lines that are not object requests
    uploads: int = 0
    sizes_from_log: int = 0
    sizes_from_registry: int = 0
    unresolved_sizes: int = 0
    bad_lines: int = 0


def _state(query: dict[str, list[str]]) -> dict | None:
    """The registry's upload state (base64url: 32-byte HMAC, then JSON with Offset, StartedAt)."""
    raw = query.get("_state", [""])[0]
    if not raw:
        return None
    try:
        data = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
        return json.loads(data[32:])  # after the HMAC-SHA256 signature
    except (ValueError, json.JSONDecodeError):
        return None


class Capture:
    """Two passes over the log (``observe`` then ``records``), or one delayed pass when following."""

    def __init__(self, anonymizer: Anonymizer, registry_url: str | None = None) -> None:
        self.anon = anonymizer
        self.registry_url = registry_url.rstrip("/") if registry_url else None
        self.stats = CaptureStats()
        self.uploads: dict[str, _Upload] = {}
        self.blob_sizes: dict[str, int] = {}
        self.manifest_sizes: dict[tuple[str, str], int] = {}
        self.posts: list[tuple[_dt.datetime, _dt.datetime, str, str]] = []  # arrival, done, repo, id
        self.post_upload: dict[str, str] = {}  # POST request id -> upload uuid

    # -- parsing -------------------------------------------------------------------

    def parse(self, raw: bytes) -> LogLine | None:
        try:
            line = _decode_line(raw)
        except msgspec.DecodeError:
            self.stats.bad_lines += 1
            return None
        if not line.msg.startswith("response completed"):
            return None
        self.stats.lines += 1
        if parse_uri(line.uri) is None:
            self.stats.ignored += 1
            return None
        return line

    @staticmethod
    def times(line: LogLine) -> tuple[_dt.datetime, float]:
        done = _datetime(msgspec.json.encode(line.time))
        duration = parse_go_duration(line.duration)
        return done - _dt.timedelta(seconds=duration), duration

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
            arrival, duration = self.times(line)
            self.posts.append((arrival, arrival + _dt.timedelta(seconds=duration), parts.repository, line.request_id))
            return
        if not uuid:
            return
        up = self.uploads.setdefault(uuid, _Upload(repo=parts.repository))
        state = _state(query)
        if state is not None:
            up.offsets[line.request_id] = int(state.get("Offset", 0))
            started = state.get("StartedAt", "")
            precise = "." in started
            if started and (up.started is None or (precise and not up.precise)):
                up.started, up.precise = _datetime(msgspec.json.encode(started)), precise
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

    def record(self, line: LogLine) -> dict:
        parts = parse_uri(line.uri)
        arrival, duration = self.times(line)
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
        size = self._ask_registry(f"/v2/{repo}/blobs/{digest}")
        if size is not None:
            self.blob_sizes[digest] = size
            return size
        self.stats.unresolved_sizes += 1
        return 0

    def manifest_size(self, repo: str, ref: str) -> int:
        if (repo, ref) in self.manifest_sizes:
            self.stats.sizes_from_log += 1
            return self.manifest_sizes[(repo, ref)]
        size = self._ask_registry(
            f"/v2/{repo}/manifests/{ref}",
            accept="application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json",
        )
        if size is not None:
            self.manifest_sizes[(repo, ref)] = size
            return size
        self.stats.unresolved_sizes += 1
        return 0

    def _ask_registry(self, path: str, accept: str | None = None) -> int | None:
        """Content-Length of a HEAD on the live registry, when one was given."""
        if not self.registry_url:
            return None
        import requests

        try:
            r = requests.head(self.registry_url + path, timeout=10, headers={"Accept": accept} if accept else {})
        except requests.RequestException:
            return None
        if r.status_code != 200 or "Content-Length" not in r.headers:
            return None
        self.stats.sizes_from_registry += 1
        return int(r.headers["Content-Length"])


def _lines(path: Path, capture: Capture) -> Iterator[LogLine]:
    for _, body in line_chunks(path, 1 << 20):
        for raw in body.split(b"\n"):
            if raw.strip():
                line = capture.parse(raw)
                if line is not None:
                    yield line


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

    The first pass learns sizes and uploads, the second writes records.
    """
    for p in paths:
        if not p.is_file():
            raise DrtpError(f"{p}: log file not found")
    cap = Capture(anonymizer, registry_url)
    for p in paths:
        for line in _lines(p, cap):
            cap.observe(line)
    cap.match_posts()
    cap.stats = CaptureStats()

    def completed() -> Iterator[tuple[_dt.datetime, dict]]:
        for p in paths:
            for line in _lines(p, cap):
                yield _datetime(msgspec.json.encode(line.time)), cap.record(line)

    return cap, _counted(cap, _sorted_by_arrival(completed()))


def _counted(cap: Capture, records: Iterator[dict]) -> Iterator[dict]:
    for rec in records:
        cap.stats.requests += 1
        yield rec


def follow_file(
    path: Path, anonymizer: Anonymizer, registry_url: str | None, delay: float, stop_after: float | None = None
) -> tuple[Capture, Iterator[dict]]:
    """Follow a growing log: a request is written ``delay`` seconds after it is logged, once the
    rest of its upload has been seen (sizes then come from the log, or from the live registry)."""
    if not path.is_file():
        raise DrtpError(f"{path}: log file not found")
    cap = Capture(anonymizer, registry_url)

    def completed() -> Iterator[tuple[_dt.datetime, dict]]:
        started = time.monotonic()
        pending: list[tuple[float, LogLine]] = []
        buf = b""
        with open(path, "rb") as f:
            while True:
                chunk = f.read(1 << 20)
                *lines, buf = (buf + chunk).split(b"\n")
                now = time.monotonic()
                for raw in lines:
                    line = cap.parse(raw) if raw.strip() else None
                    if line is not None:
                        cap.observe(line)
                        pending.append((now, line))
                finished = stop_after is not None and now - started >= stop_after
                ready = len(pending) if finished else sum(1 for seen, _ in pending if now - seen >= delay)
                if ready:
                    cap.match_posts()
                    for _, line in pending[:ready]:
                        yield _datetime(msgspec.json.encode(line.time)), cap.record(line)
                    del pending[:ready]
                if finished:
                    return
                if not chunk:
                    time.sleep(0.2)

    return cap, _counted(cap, _sorted_by_arrival(completed(), window_s=max(delay, 1.0)))


def salt_from(value: str | None) -> str:
    salt = value or os.environ.get("DRTP_CAPTURE_SALT", "")
    if not salt:
        raise DrtpError("capture needs a salt: --salt SECRET or the environment variable DRTP_CAPTURE_SALT")
    return salt
