"""Synthetic registry traces in the IBM format, shaped like the published workload.

The published workload is the IBM Cloud registry traces as characterized by
Anwar et al. (FAST '18); the defaults below are set from its numbers.
The generator simulates image pulls and pushes by a skewed
population of clients against a skewed population of repositories:

* pulls: ``GET manifest``, then, for a minority of pulls (the published
  follow-up rate), ``GET`` of the layers the client lacks, sometimes preceded
  by a ``HEAD``; a pull soon after a push to the same repository fetches
  layers far more often;
* pushes: per layer ``HEAD`` (404 when new), ``POST`` upload, an optional
  ``PATCH`` (chunked upload of larger layers), ``PUT`` of the layer, then
  ``PUT`` of the manifest;
* layer sizes are lognormal (≈65 % below 1 MB), manifests ≈1–10 KB;
* popularity of repositories, base layers and clients is Zipf-like;
* arrivals are Poisson with a diurnal and weekly rhythm.

Events are generated in time order and their requests pass through a small
heap, so memory stays bounded however many requests are asked for.
Calibration to each availability zone's figures is a later step.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import hashlib
import heapq
import itertools
import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import msgspec

from drtp.trace.records import TraceRecord, format_timestamp

USER_AGENTS = ("docker/17.04.0-ce go/go1.7.5", "docker/1.12.1 go/go1.6.3", "docker/17.06.0-ce go/go1.8.3")


@dataclass
class GenerateOptions:
    requests: int = 10_000
    seed: int = 1
    span_s: float = 86_400.0
    start: _dt.datetime = _dt.datetime(2017, 8, 1, tzinfo=_dt.timezone.utc)
    clients: int = 200
    repositories: int = 300
    hosts: int = 4
    push_ratio: float = 0.07  # share of image operations that are pushes (pulls 90–95 %)
    follow_rate: float = 0.2  # pulls that fetch layers (published: 4–27 %)
    follow_after_push: float = 0.8  # the same, within an hour after a push to the repo
    follow_rank: int = 1  # clients ranked below this (the busiest) fetch layers proportionally less often
    layer_median: float = 400e3  # bytes; lognormal median
    layer_sigma: float = 2.3
    max_layer_size: int = 256 << 20
    min_layer_size: int = 64
    manifest_median: float = 1000.0  # bytes; lognormal median of manifest sizes
    manifest_sigma: float = 1.0
    head_check_rate: float = 0.3  # pulls without layer fetches that HEAD a layer
    repo_skew: float = 1.1  # Zipf exponents of popularity (0 = uniform)
    layer_skew: float = 1.2  # popularity of shared base layers
    client_skew: float = 0.9
    old_image_rate: float = 0.3  # pulls of an older image of the repository instead of the latest
    day_amplitude: float = 0.4  # day/night swing of the arrival rate (0 = flat)
    weekend_factor: float = 0.7  # arrival rate on Saturdays and Sundays relative to weekdays
    idle_rate: float = 0.0  # share of gaps between operations that are idle periods
    idle_mean_s: float = 60.0  # mean length of an idle period
    base_layers: int = 0  # shared base layers (0: one per ten repositories)
    image_layers: int = 4  # at most this many own layers in a repository's first image
    retag_rate: float = 0.0  # pushes that re-push an existing image under a new tag (layers all present)


class _Zipf:
    """Draws ranks 0..n-1 with probability ∝ 1/(rank+1)^s."""

    def __init__(self, n: int, s: float, rng: random.Random) -> None:
        weights = [1.0 / (k + 1) ** s for k in range(n)]
        self.cum = list(itertools.accumulate(weights))
        self.rng = rng

    def draw(self) -> int:
        return bisect.bisect_left(self.cum, self.rng.random() * self.cum[-1])


class _Image:
    __slots__ = ("tag", "layers", "manifest_size", "pushed_at")

    def __init__(self, tag: str, layers: list[tuple[str, int]], manifest_size: int, pushed_at: float):
        self.tag = tag
        self.layers = layers
        self.manifest_size = manifest_size
        self.pushed_at = pushed_at


class TraceGenerator:
    """Yields IBM-format record dicts in time order."""

    def __init__(self, opts: GenerateOptions) -> None:
        self.o = opts
        self.rng = random.Random(opts.seed)
        self.salt = str(opts.seed).encode()
        self.counter = itertools.count()
        self.users = [self.token("user", i) for i in range(max(1, opts.repositories // 3))]
        self.repos = [f"{self.rng.choice(self.users)}/{self.token('repo', i)}" for i in range(opts.repositories)]
        self.clients = [self.token("client", i) for i in range(opts.clients)]
        self.hosts = [self.token("host", i) for i in range(opts.hosts)]
        self.repo_pick = _Zipf(len(self.repos), opts.repo_skew, self.rng)
        self.client_pick = _Zipf(len(self.clients), opts.client_skew, self.rng)
        n_base = opts.base_layers or max(4, opts.repositories // 10)
        self.base_layers = [self.new_layer() for _ in range(n_base)]
        self.base_pick = _Zipf(len(self.base_layers), opts.layer_skew, self.rng)
        self.images: dict[str, list[_Image]] = {}

    # -- entities --------------------------------------------------------------

    def token(self, kind: str, n: int) -> str:
        h = hashlib.blake2b(f"{kind}:{n}".encode(), digest_size=5, key=self.salt)
        return h.hexdigest()[: 10 if kind == "layer" else 8]

    def new_layer(self) -> tuple[str, int]:
        o = self.o
        size = int(self.rng.lognormvariate(math.log(o.layer_median), o.layer_sigma))
        return self.token("layer", next(self.counter)), max(o.min_layer_size, min(o.max_layer_size, size))

    def new_image(self, repo: str, now: float) -> _Image:
        previous = self.images.get(repo)
        if previous:  # a rebuild: the lower layers stay, the top one or two change
            keep = previous[-1].layers
            layers = keep[: max(1, len(keep) - self.rng.randint(1, 2))]
            layers += [self.new_layer() for _ in range(self.rng.randint(1, 2))]
        else:
            layers = [self.base_layers[self.base_pick.draw()] for _ in range(self.rng.randint(1, 2))]
            layers += [self.new_layer() for _ in range(self.rng.randint(1, max(1, self.o.image_layers)))]
        layers = list(dict.fromkeys(layers))
        tag = self.token("tag", next(self.counter))
        o = self.o
        size = int(
            min(
                200_000,
                300 + 100 * len(layers) + self.rng.lognormvariate(math.log(o.manifest_median), o.manifest_sigma),
            )
        )
        return _Image(tag, layers, size, now)

    def image_of(self, repo: str, now: float) -> _Image:
        imgs = self.images.get(repo)
        if not imgs:  # a repository pushed before the trace starts
            imgs = self.images[repo] = [self.new_image(repo, -math.inf)]
        if len(imgs) > 1 and self.rng.random() < self.o.old_image_rate:
            return self.rng.choice(imgs)
        return imgs[-1]

    # -- arrivals --------------------------------------------------------------

    def rate_factor(self, t: float) -> float:
        """Diurnal and weekly rhythm (fewer requests at night and weekends)."""
        when = self.o.start + _dt.timedelta(seconds=t)
        hour = when.hour + when.minute / 60
        a = self.o.day_amplitude
        day = 1 - a + a * math.sin(math.pi * (hour - 6) / 12) if 6 <= hour <= 18 else 1 - a
        return day * (self.o.weekend_factor if when.weekday() >= 5 else 1.0)

    def arrivals(self, mean_gap: list[float]) -> Iterator[float]:
        """Operation start times; ``mean_gap[0]`` may be adjusted while iterating."""
        t = 0.0
        while True:
            # thinning: a Poisson process modulated by rate_factor (≤ 1)
            t += self.rng.expovariate(1.0 / mean_gap[0])
            if self.o.idle_rate and self.rng.random() < self.o.idle_rate:
                t += self.rng.expovariate(1.0 / self.o.idle_mean_s)
            if self.rng.random() <= self.rate_factor(t):
                yield t

    # -- requests --------------------------------------------------------------

    def pull(self, t: float, client: int, repo: str) -> list[tuple]:
        img = self.image_of(repo, t)
        host = self.rng.choice(self.hosts)
        out = []
        if self.rng.random() < 0.02:  # a pull of a tag that does not exist
            out.append((t, "GET", client, host, f"v2/{repo}/manifests/{self.token('tag', next(self.counter))}", 404, 0))
            return out
        out.append((t, "GET", client, host, f"v2/{repo}/manifests/{img.tag}", 200, img.manifest_size))
        recent = t - img.pushed_at < 3600
        # busy clients (CI systems polling tags) rarely fetch layers; people and deployers do
        damp = min(1.0, (client + 1) / self.o.follow_rank)
        if self.rng.random() < damp * (self.o.follow_after_push if recent else self.o.follow_rate):
            for layer, size in img.layers:
                if self.rng.random() < 0.7:
                    t += self.rng.uniform(0.005, 0.3)
                    if self.rng.random() < 0.15:
                        out.append((t, "HEAD", client, host, f"v2/{repo}/blobs/{layer}", 200, 0))
                        t += self.rng.uniform(0.002, 0.05)
                    out.append((t, "GET", client, host, f"v2/{repo}/blobs/{layer}", 200, size))
        elif self.rng.random() < self.o.head_check_rate:  # a client checking layers it already has
            layer, _ = self.rng.choice(img.layers)
            out.append((t + 0.01, "HEAD", client, host, f"v2/{repo}/blobs/{layer}", 200, 0))
        return out

    def push(self, t: float, client: int, repo: str) -> list[tuple]:
        previous = self.images.get(repo)
        if previous and self.rng.random() < self.o.retag_rate:  # e.g. CI promoting a build to a new tag
            old = previous[-1]
            img = _Image(self.token("tag", next(self.counter)), old.layers, old.manifest_size, t)
        else:
            img = self.new_image(repo, t)
        known = {layer for im in self.images.get(repo, ()) for layer in im.layers}
        host = self.rng.choice(self.hosts)
        out = []
        for layer, size in img.layers:
            out.append((t, "HEAD", client, host, f"v2/{repo}/blobs/{layer}", 200 if (layer, size) in known else 404, 0))
            t += self.rng.uniform(0.002, 0.05)
            if (layer, size) in known:
                continue
            upload = self.token("upload", next(self.counter))
            out.append((t, "POST", client, host, f"v2/{repo}/blobs/uploads/", 202, 0))
            t += self.rng.uniform(0.002, 0.05)
            if self.rng.random() < 0.5:  # chunked upload (Docker: POST, PATCH, PUT)
                out.append((t, "PATCH", client, host, f"v2/{repo}/blobs/uploads/{upload}", 202, size))
                t += size / 50e6 + self.rng.uniform(0.002, 0.05)
                out.append((t, "PUT", client, host, f"v2/{repo}/blobs/{layer}", 201, 0))
            else:
                out.append((t, "PUT", client, host, f"v2/{repo}/blobs/{layer}", 201, size))
                t += size / 50e6
            t += self.rng.uniform(0.005, 0.1)
        out.append((t, "PUT", client, host, f"v2/{repo}/manifests/{img.tag}", 201, img.manifest_size))
        img.pushed_at = t
        self.images.setdefault(repo, []).append(img)
        return out

    def records(self) -> Iterator[dict]:
        o = self.o
        if o.requests <= 0:
            return
        # pace operations so that the trace spans about span_s: the clock advances by
        # (gap + idle) / acceptance per operation, and an operation makes `per_op` requests
        per_request = o.span_s / o.requests
        accept = sum(self.rate_factor(o.span_s * k / 500) for k in range(500)) / 500
        idle = o.idle_rate * o.idle_mean_s
        per_op = 2.2
        gap = [max(per_request * 1e-3, per_request * per_op * accept - idle)]
        heap: list[tuple] = []
        seq = itertools.count()
        emitted = made = ops = 0
        for t in self.arrivals(gap):
            client = self.client_pick.draw()
            repo = self.repos[self.repo_pick.draw()]
            op = self.push if self.rng.random() < o.push_ratio else self.pull
            reqs = op(t, client, repo)
            ops += 1
            made += len(reqs)
            if ops % 256 == 0:  # learn how many requests an operation makes
                gap[0] = max(per_request * 1e-3, per_request * made / ops * accept - idle)
            for req in reqs:
                heapq.heappush(heap, (req[0], next(seq), req))
            # requests of one operation span at most minutes: release what is safely ordered
            while heap and heap[0][0] < t - 600:
                yield self.record(heapq.heappop(heap)[2])
                emitted += 1
                if emitted >= o.requests:
                    return
            if len(heap) > 4 * o.requests + 1000:
                break
        while heap and emitted < o.requests:
            yield self.record(heapq.heappop(heap)[2])
            emitted += 1

    def record(self, req: tuple) -> dict:
        t, method, rank, host, uri, status, size = req
        client = self.clients[rank]
        duration = 0.002 + size / 80e6 * self.rng.uniform(0.5, 2.0) + self.rng.expovariate(200)
        return {
            "host": host,
            "http.request.duration": round(duration, 6),
            "http.request.method": method,
            "http.request.remoteaddr": client,
            "http.request.uri": uri,
            "http.request.useragent": USER_AGENTS[int(client[:2], 16) % len(USER_AGENTS)],
            "http.response.status": status,
            "http.response.written": size,
            "id": self.token("id", next(self.counter)),
            "timestamp": format_timestamp(self.o.start + _dt.timedelta(seconds=t)),
        }


_SHARE = (0.0, 1.0)
_SKEW = (0.0, 10.0)
_COUNT = (1, 1_000_000)  # populations are kept as lists: a million is already a large trace
_BYTES = (1, 1 << 50)
# the values each option may take (inclusive); an option whose default is an int takes whole numbers only
OPTION_RANGES: dict[str, tuple[float, float]] = {
    "requests": (1, 10**12),
    "span_s": (1e-3, 100 * 365 * 86_400.0),
    "clients": _COUNT,
    "repositories": _COUNT,
    "hosts": (1, 10_000),
    "push_ratio": _SHARE,
    "follow_rate": _SHARE,
    "follow_after_push": _SHARE,
    "follow_rank": _COUNT,
    "layer_median": _BYTES,
    "layer_sigma": _SKEW,
    "max_layer_size": _BYTES,
    "min_layer_size": _BYTES,
    "manifest_median": (1, 1 << 20),
    "manifest_sigma": _SKEW,
    "head_check_rate": _SHARE,
    "repo_skew": _SKEW,
    "layer_skew": _SKEW,
    "client_skew": _SKEW,
    "old_image_rate": _SHARE,
    "day_amplitude": _SHARE,
    "weekend_factor": (1e-3, 1000.0),  # 0 would leave weekends without a single arrival
    "idle_rate": _SHARE,
    "idle_mean_s": (1e-3, 7 * 86_400.0),
    "base_layers": (0, 1_000_000),  # 0: one per ten repositories
    "image_layers": (1, 100),
    "retag_rate": _SHARE,
}


def _plain(x: float) -> str:
    """1000000 as '1,000,000', 0.001 as '0.001': bounds as a person reads them."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def option_problem(name: str, value: object) -> str | None:
    """What is wrong with ``value`` for the GenerateOptions field ``name`` (None: nothing).

    The generator divides by spans and means and takes logarithms of medians, so
    a zero, a negative, NaN or infinity would end in a traceback or an endless
    loop far from the option that caused it.
    """
    lo, hi = OPTION_RANGES[name]
    whole = isinstance(getattr(GenerateOptions, name), int)
    kind = "an integer" if whole else "a number"
    if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
        return f"expected {kind}, got {value!r}"
    if not lo <= value <= hi:  # also refuses NaN, which fails every comparison
        return f"expected {kind} from {_plain(lo)} to {_plain(hi)}, got {value!r}"
    return None


def generate(opts: GenerateOptions) -> Iterator[dict]:
    """IBM-format record dicts, sorted by timestamp, exactly ``opts.requests`` of them."""
    return TraceGenerator(opts).records()


# -- cold-pull storms -------------------------------------------------------------

STORM_IMAGES = 5  # images a generated storm pulls, one after the other
STORM_GAP_S = 10.0  # seconds between two images' storms when no span is given
STORM_STEP_S = 0.001  # seconds between the requests of one pull (manifest, then each layer)
MAX_STORM = 10_000  # clients in one storm: more is a load test of the client nodes, not of the cache


def storm_problem(clients: object, images: object) -> str | None:
    """What is wrong with a storm's sizes (None: nothing): both whole numbers of at least 1."""
    for name, value, hi in (("--storm", clients, MAX_STORM), ("--storm-images", images, 1_000_000)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= hi:
            return f"{name}: expected an integer from 1 to {_plain(hi)}, got {value!r}"
    return None


def storm(opts: GenerateOptions, clients: int, images: int, gap_s: float = STORM_GAP_S) -> Iterator[dict]:
    """A cold-pull storm: for each of ``images`` images, ``clients`` trace clients pull it at the same instant.

    A pull is what a client sends for an image it lacks: ``GET`` of the
    manifest, then ``GET`` of each layer.  Every client's j-th request of a
    pull has the same timestamp as every other client's, so a replay sends
    them at once and a cache in front of the registry sees ``clients``
    requests for each object it does not hold yet; whether its upstream then
    sees one fetch per object or one per client is what the storm shows.
    Images follow each other ``gap_s`` seconds apart, each from its own
    repository, so every storm is cold.  The images, layers and sizes come from
    the same generator as :func:`generate` (seeded by ``opts.seed``).
    """
    gen = TraceGenerator(
        GenerateOptions(
            **{**opts.__dict__, "clients": max(opts.clients, clients), "repositories": max(opts.repositories, images)}
        )
    )
    host = gen.hosts[0]
    out = []
    for i in range(images):
        repo = gen.repos[i]
        img = gen.image_of(repo, 0.0)
        t0 = i * gap_s
        steps = [(f"v2/{repo}/manifests/{img.tag}", img.manifest_size)]
        steps += [(f"v2/{repo}/blobs/{layer}", size) for layer, size in img.layers]
        for rank in range(clients):
            for j, (uri, size) in enumerate(steps):
                out.append((t0 + j * STORM_STEP_S, "GET", rank, host, uri, 200, size))
    out.sort(key=lambda req: req[0])  # stable: clients in order within one instant
    for req in out:
        yield gen.record(req)


def storm_copies(records: Iterable[TraceRecord], clients: int) -> Iterator[TraceRecord]:
    """Any trace made a storm: each pull request (GET or HEAD of a manifest or blob) sent by ``clients`` clients.

    The first copy is the record itself; copy k (from 1) has client
    ``<client>~k`` and id ``<id>~k``, at the same timestamp, so each image pull
    of the trace becomes ``clients`` pulls of the same objects at the same
    instant.  Pushes and deletes stay single (a storm is of readers).
    """
    for rec in records:
        yield rec
        if rec.method not in ("GET", "HEAD") or "/blobs/uploads/" in rec.uri:
            continue
        for k in range(1, clients):
            yield msgspec.structs.replace(rec, client=f"{rec.client}~{k}", id=f"{rec.id}~{k}")
