"""A registry's own Prometheus metrics: its witness of what it served during a run, and how long its part took.

Distribution (``http.debug`` with ``prometheus``), Harbor, zot and Quay publish request
counters and duration histograms per handler and method in the Prometheus text format.
A run reads them right before its first request, every stats interval and right after its
last; the difference between the first and the last reading is what the registry did in
the run's window.  Parsing is ``prometheus-client``'s; a registry behind a load balancer
names several endpoints, whose readings are summed series by series.

Only the registry's own series are kept: the Go runtime's, the process's and the metrics
handler's own (``go_*``, ``process_*``, ``promhttp_*``) say nothing about requests.
"""

from __future__ import annotations

import math
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

# a series: its sample name and its labels, sorted
Series = tuple[str, tuple[tuple[str, str], ...]]
Reading = dict[Series, float]

IGNORED_PREFIXES = ("go_", "process_", "promhttp_")
MAX_BYTES = 16 << 20  # a metrics page larger than this is not a registry's
REQUESTS_TOTAL = "registry_http_requests_total"
DURATION = "registry_http_request_duration_seconds"

# drtp's name of a request (method, kind, op) -> the handler Distribution counts it under
HANDLERS = ("base", "blob", "blob_upload", "blob_upload_chunk", "manifest")


class ScrapeError(Exception):
    """A metrics endpoint could not be read or parsed (a warning for the run, never a failure)."""


def parse(text: str) -> Reading:
    """The samples of a Prometheus text page, the registry's own series only; equal series are summed."""
    reading: Reading = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.startswith(IGNORED_PREFIXES):
                    continue
                key = (sample.name, tuple(sorted(sample.labels.items())))
                reading[key] = reading.get(key, 0.0) + float(sample.value)
    except (ValueError, TypeError, IndexError) as e:
        raise ScrapeError(f"not the Prometheus text format: {e}") from None
    return reading


def fetch(url: str, timeout: float) -> str:
    """The text of one metrics endpoint (http or https), at most :data:`MAX_BYTES`."""
    request = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 - a URL the config names
            body = answer.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as e:
        raise ScrapeError(f"{url}: HTTP {e.code}") from None
    except (OSError, ValueError) as e:
        raise ScrapeError(f"{url}: {e}") from None
    if len(body) > MAX_BYTES:
        raise ScrapeError(f"{url}: more than {MAX_BYTES >> 20} MiB of metrics")
    return body.decode("utf-8", "replace")


def scrape(urls: Iterable[str], timeout: float = 5.0) -> Reading:
    """One reading of a registry: every endpoint's series, summed (a registry behind a load balancer)."""
    total: Reading = {}
    for url in urls:
        for key, value in parse(fetch(url, timeout)).items():
            total[key] = total.get(key, 0.0) + value
    return total


def labels_text(labels: tuple[tuple[str, str], ...]) -> str:
    """Labels as one CSV cell: ``handler=blob,method=get`` (label values of registries hold no ``,`` or ``=``)."""
    return ",".join(f"{k}={v}" for k, v in labels)


@dataclass
class Slice:
    """What the registry says it did for one handler and method in a window."""

    requests: float = 0.0  # requests it completed (counter delta)
    duration_sum_s: float = 0.0
    duration_count: float = 0.0
    buckets: dict[float, float] = field(default_factory=dict)  # upper bound (s) -> cumulative count delta

    def mean_ms(self) -> float | None:
        return 1000 * self.duration_sum_s / self.duration_count if self.duration_count > 0 else None

    def quantile_bounds_ms(self, q: float) -> list[float | None] | None:
        """The bucket the ``q`` quantile falls in: [lower bound, upper bound] in ms (upper None: above the
        largest finite bound); None without observations.  Only the bounds are known, never the value."""
        if self.duration_count <= 0 or not self.buckets:
            return None
        rank = q * self.duration_count
        lower = 0.0
        for bound in sorted(self.buckets):
            if self.buckets[bound] >= rank:
                return [1000 * lower, None if math.isinf(bound) else 1000 * bound]
            lower = bound
        return [1000 * lower, None]


def window(first: Mapping[Series, float], last: Mapping[Series, float]) -> dict[tuple[str, str], Slice]:
    """Per (handler, method): what the registry did between two readings of it.

    A counter that went down was reset (the registry restarted): its delta is counted from zero.
    """

    def delta(key: Series, value: float) -> float:
        before = first.get(key, 0.0)
        return value - before if value >= before else value

    slices: dict[tuple[str, str], Slice] = {}
    for (name, labels), value in last.items():
        label = dict(labels)
        handler, method = label.get("handler"), label.get("method")
        if handler is None or method is None:
            continue
        part = slices.setdefault((handler, method.upper()), Slice())
        d = delta((name, labels), value)
        if name == REQUESTS_TOTAL:
            part.requests += d
        elif name == DURATION + "_sum":
            part.duration_sum_s += d
        elif name == DURATION + "_count":
            part.duration_count += d
        elif name == DURATION + "_bucket" and "le" in label:
            bound = float(label["le"])
            part.buckets[bound] = part.buckets.get(bound, 0.0) + d
    for part in slices.values():
        if part.requests == 0 and part.duration_count > 0:  # no counter: the histogram counts the requests
            part.requests = part.duration_count
    return {k: v for k, v in slices.items() if v.requests > 0 or v.duration_count > 0}


def handler_of(method: str, kind: str, reference: str) -> str:
    """The handler a registry counts one of drtp's requests under (Distribution's names): ``reference`` is a
    row's (a trace reference such as ``uploads/<id>``, or what a helper request did, e.g. "upload cancel").

    Distribution routes ``…/blobs/uploads/`` (the POST that opens an upload, or mounts) to ``blob_upload``
    and everything sent to an open upload's URL — PATCH, the PUT that closes it, a GET of its status, the
    DELETE that cancels it — to ``blob_upload_chunk``; reads of blobs are ``blob``.
    """
    if kind == "manifest":
        return "manifest"
    if method == "POST":
        return "blob_upload"
    if method in ("PATCH", "PUT") or reference.startswith("uploads/") or reference == "upload cancel":
        return "blob_upload_chunk"
    return "blob"
