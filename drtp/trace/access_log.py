"""A registry's access log read as the requests it answered: Distribution's JSON lines and nginx's combined log.

One reader for every use of such a log — a run's ``upstream`` block and ``cache`` column (what a cache fetched
from its upstream), ``drtp analyze cache`` (the upstream's log and the cache's own), so that one file gives one
answer.  Times are Unix seconds; Distribution's are RFC 3339 with up to nine fraction digits, trailing zeros
trimmed ("…27.97019Z"), and are read by :func:`log_time` whatever their length.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from dataclasses import dataclass
from pathlib import Path

from drtp.registry.transport import DIRECT_USER_AGENT
from drtp.trace.registry_log import decode_log_line, parse_go_duration

KINDS = ("manifest", "blob")
PING = "ping"  # GET/HEAD /v2/: the version check a cache sends before its fetches
OTHER = "other"  # uploads, tag lists, the catalog
DISTRIBUTION, NGINX = "distribution", "nginx"  # the formats, as UpstreamRequest.log names them

_OBJECT = re.compile(r"^/v2/(?P<repo>.+)/(?P<kind>manifests|blobs)/(?P<ref>[^/?]+)$")
# nginx's combined log, optionally followed by more fields (e.g. $request_time): only the combined part is read
_COMBINED = re.compile(
    r'^\S+ \S+ \S+ \[(?P<time>[^\]]+)\] "(?P<method>[A-Z]+) (?P<uri>\S+)[^"]*" (?P<status>\d{3}) (?P<bytes>\d+|-) '
    r'"[^"]*" "(?P<agent>[^"]*)"(?: (?P<request_time>[0-9.]+))?'
)
_RFC3339 = re.compile(r"^(?P<head>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?(?P<zone>Z|z|[+-]\d\d:\d\d)$")


@dataclass(frozen=True)
class UpstreamRequest:
    """One request a registry answered, as its access log says (times: Unix seconds)."""

    method: str
    kind: str  # manifest, blob, ping or other
    repository: str
    reference: str  # a manifest's tag or digest, a blob's digest ("" for pings and others)
    status: int
    bytes: int
    start: float  # the log's completion time less its duration (the completion time when it has none)
    end: float
    agent: str
    log: str = DISTRIBUTION  # the line's format: DISTRIBUTION (times to the nanosecond) or NGINX (to the second)

    @property
    def fetch(self) -> bool:
        """A GET of a manifest or blob: the cache fetching an object it lacked (or revalidating it whole)."""
        return self.method == "GET" and self.kind in KINDS


def _kind_of(uri: str) -> tuple[str, str, str]:
    path = uri.partition("?")[0]
    if path.rstrip("/") == "/v2":
        return PING, "", ""
    m = _OBJECT.match(path)
    if m is None or m["ref"] == "uploads":
        return OTHER, "", ""
    return ("manifest" if m["kind"] == "manifests" else "blob"), m["repo"], m["ref"]


def log_time(text: str) -> float:
    """An RFC 3339 time as Distribution logs it as Unix seconds: any number of fraction digits (Go trims
    trailing zeros and keeps nanoseconds), ``Z`` or an offset.  ValueError for anything else."""
    m = _RFC3339.match(text)
    if m is None:
        raise ValueError(f"not an RFC 3339 time: {text[:40]!r}")
    zone = "+00:00" if m["zone"] in ("Z", "z") else m["zone"]
    whole = _dt.datetime.fromisoformat(m["head"] + zone).timestamp()
    return whole + (float("0." + m["frac"]) if m["frac"] else 0.0)


def parse_log_line(raw: bytes) -> UpstreamRequest | None:
    """One access-log line (Distribution's JSON or nginx's combined format) as a request; None for any other
    line (Distribution's other messages, a blank or foreign line)."""
    raw = raw.strip()
    if raw.startswith(b"{"):
        line = decode_log_line(raw)
        if isinstance(line, str) or not line.msg.startswith("response completed") or not line.time:
            return None
        try:
            end = log_time(line.time)
            duration = parse_go_duration(line.duration)
        except ValueError:
            return None
        kind, repo, ref = _kind_of(line.uri)
        return UpstreamRequest(
            line.method, kind, repo, ref, line.status, line.written, end - duration, end, line.useragent
        )
    m = _COMBINED.match(raw.decode("utf-8", "replace"))
    if m is None:
        return None
    try:
        end = _dt.datetime.strptime(m["time"], "%d/%b/%Y:%H:%M:%S %z").timestamp()
    except ValueError:
        return None
    took = float(m["request_time"]) if m["request_time"] else 0.0
    kind, repo, ref = _kind_of(m["uri"])
    nbytes = 0 if m["bytes"] == "-" else int(m["bytes"])
    return UpstreamRequest(
        m["method"], kind, repo, ref, int(m["status"]), nbytes, end - took, end, m["agent"], log=NGINX
    )


def read_upstream_log(path: Path, start: float = -math.inf, end: float = math.inf) -> list[UpstreamRequest]:
    """The requests of ``path`` that ran within [start, end] (Unix seconds), drtp's own direct ones (their
    User-Agent carries ``drtp-direct``) left out: what is left is what the cache in front sent.  OSError when
    the file cannot be read."""
    out = []
    with open(path, "rb") as f:
        for raw in f:
            r = parse_log_line(raw)
            if r is None or r.end < start or r.start > end or DIRECT_USER_AGENT in r.agent:
                continue
            out.append(r)
    return out
