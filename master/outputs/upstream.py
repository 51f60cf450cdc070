"""What reached a cache's upstream during a run, and which request the cache served itself.

A ``registries:`` entry whose ``upstream:`` names an ``access_log`` is a cache or mirror in front of a
registry: the trace goes through the entry's ``url`` and the cache fetches what it lacks from the upstream.
The upstream's access log is the per-object truth of those fetches.  At the run's end this output reads it
over the run's window (Distribution's JSON ``response completed`` lines, or nginx's combined log) with the one
reader of such logs (:mod:`drtp.trace.access_log`), which leaves out drtp's own direct requests, and

* classes each trace request through the cache in requests.csv's ``cache`` column: the cache's own verdict
  where its answer carried one (``X-Cache-Status``, ``X-Cache``), else ``miss`` when the upstream logged a
  fetch (GET) of the request's object while it ran, else ``hit``; a hit whose time overlapped another client's miss
  of its object waited on that fetch (nginx's ``proxy_cache_lock``): ``wait``.  The rows
  reached requests.csv as they came; the file is rewritten once, atomically, with the column filled;
* adds summary.json ``upstream[<registry id>]``: the upstream's ``requests`` and ``bytes`` by kind and method
  (``/v2/`` pings apart), ``amplification`` (upstream requests and bytes per client request, by kind),
  ``hit_ratio`` by kind (by requests and by bytes), ``upstream_gets_per_object`` (upstream GETs of an object
  for each time it was absent when clients asked for it) and the clients' latency by class.
"""

from __future__ import annotations

import csv
import io
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from drtp.config import Config
from drtp.errors import ConfigError
from drtp.master.outputs.output import RunContext, RunOutput
from drtp.registry.repo_names import RepositoryMap
from drtp.replay.messages import registry_base
from drtp.replay.result_row import ResultRow, cells, parse_cells
from drtp.replay.summary import ResultsModel
from drtp.trace.access_log import KINDS, UpstreamRequest, read_upstream_log

HIT, MISS, WAIT = "hit", "miss", "wait"
CLASSES = (HIT, WAIT, MISS)
SETTLE_S = 0.3  # the upstream writes a request's log line just after its answer: wait this long for quiet
SETTLE_MAX_S = 3.0  # and at most this long for the log to stop growing


def settle(path: Path) -> None:
    """Wait until the upstream's log stopped growing for :data:`SETTLE_S` (at most :data:`SETTLE_MAX_S`)."""
    deadline = time.monotonic() + SETTLE_MAX_S
    size = -1
    while time.monotonic() < deadline:
        try:
            now = path.stat().st_size
        except OSError:
            return
        if now == size:
            return
        size = now
        time.sleep(SETTLE_S)


# -- which request hit --------------------------------------------------------------------------------


def object_keys(row: ResultRow, repository: str | None = None) -> tuple:
    """The keys under which an upstream fetch is the fetch of this row's object: a blob by digest, a manifest by
    repository (``repository``: the registry's name of the row's trace repository) and tag, or by its digest."""
    if row.kind == "blob":
        return (("blob", row.digest or row.reference),)
    repo = repository or row.repository
    keys = [("manifest", repo, row.reference)]
    if row.digest and row.digest != row.reference:
        keys.append(("manifest", repo, row.digest))
    return tuple(keys)


def upstream_key(r: UpstreamRequest) -> tuple:
    return ("blob", r.reference) if r.kind == "blob" else ("manifest", r.repository, r.reference)


def fetches_by_object(requests: Iterable[UpstreamRequest]) -> dict[tuple, list[UpstreamRequest]]:
    out: dict[tuple, list[UpstreamRequest]] = {}
    for r in requests:
        if r.fetch:
            out.setdefault(upstream_key(r), []).append(r)
    return out


def verdict(
    row: ResultRow, start_epoch: float, fetches: dict[tuple, list[UpstreamRequest]], repository: str | None = None
) -> str:
    """The cache's verdict where it gave one, else ``miss`` when an upstream fetch (GET) of the row's object ran
    during it, else ``hit`` (``repository``: the registry's name of the row's trace repository)."""
    if row.cache:
        return row.cache
    begin = start_epoch + (row.start_s or 0.0)
    end = begin + (row.latency_s or 0.0)
    keys = object_keys(row, repository)
    during = any(f.start < end and f.end > begin for key in keys for f in fetches.get(key, ()))
    return MISS if during else HIT


def mark_waits(rows: list[ResultRow]) -> None:
    """A hit whose time overlapped another client's miss of the same object waited on that fetch (nginx's
    ``proxy_cache_lock``: the fetch is the miss's answer, streamed as it arrives; which of the clients that asked
    at the same instant fetches is the cache's choice, not the order they were sent in): ``wait``.  An object
    in the cache is no miss, so a hit beside a miss is one that waited for it."""
    misses: dict[tuple, list[tuple[float, float]]] = {}
    for r in rows:
        if r.cache == MISS and r.start_s is not None:
            misses.setdefault(object_keys(r)[0], []).append((r.start_s, r.start_s + (r.latency_s or 0.0)))
    for r in rows:
        if r.cache == HIT and r.start_s is not None:
            end = r.start_s + (r.latency_s or 0.0)
            if any(s < end and r.start_s < e for s, e in misses.get(object_keys(r)[0], ())):
                r.cache = WAIT


def absences(rows: list[ResultRow]) -> int:
    """How often the object was absent when clients asked: the groups of its miss and wait rows whose times
    overlap (clients asking while it was being fetched share one absence) that hold a miss (a group of waits
    alone waited on a fetch no client of the run caused)."""
    spans = sorted(
        (r.start_s or 0.0, (r.start_s or 0.0) + (r.latency_s or 0.0), r.cache == MISS)
        for r in rows
        if r.cache in (MISS, WAIT)
    )
    groups, reach, missed = 0, None, False
    for begin, end, miss in spans:
        if reach is None or begin > reach:
            groups += missed
            reach, missed = end, miss
        else:
            reach, missed = max(reach, end), missed or miss
    return groups + missed


# -- the figures ------------------------------------------------------------------------------------------


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def upstream_block(rows: list[ResultRow], requests: list[UpstreamRequest], timed: bool, on_time_s: float) -> dict:
    """summary.json's ``upstream[<id>]`` from the registry's classed trace rows and the upstream's requests."""
    counts: dict[str, dict[str, int]] = {}
    nbytes: dict[str, dict[str, int]] = {}
    for r in requests:
        counts.setdefault(r.kind, {}).setdefault(r.method, 0)
        counts[r.kind][r.method] += 1
        nbytes.setdefault(r.kind, {}).setdefault(r.method, 0)
        nbytes[r.kind][r.method] += r.bytes
    amplification, hit_ratio, gets_per_object = {}, {}, {}
    fetches = fetches_by_object(requests)
    for kind in KINDS:
        mine = [r for r in rows if r.kind == kind]
        answered = [r for r in mine if r.status]
        served = [r for r in answered if r.cache in (HIT, WAIT)]
        amplification[kind] = {
            "requests": _ratio(sum(counts.get(kind, {}).values()), len(mine)),
            "bytes": _ratio(sum(nbytes.get(kind, {}).values()), sum(r.bytes for r in mine)),
        }
        hit_ratio[kind] = {
            "requests": _ratio(len(served), len(answered)),
            "bytes": _ratio(sum(r.bytes for r in served), sum(r.bytes for r in answered)),
        }
        by_object: dict[tuple, list[ResultRow]] = {}
        for r in answered:
            by_object.setdefault(object_keys(r)[0], []).append(r)
        gets = absent = 0
        for key, object_rows in by_object.items():
            n = absences(object_rows)
            if n:
                absent += n
                keys = {key} | {k for r in object_rows for k in object_keys(r)}
                gets += sum(len(fetches.get(k, ())) for k in keys)
        gets_per_object[kind] = {"gets": gets, "absences": absent, "per_absence": _ratio(gets, absent)}
    models = {c: ResultsModel(timed, on_time_s) for c in CLASSES}
    for r in rows:
        if r.cache in models:
            models[r.cache].add(r)
    latency = {}
    for c, model in models.items():
        s = model.summary()
        if s["requests"]:
            latency[c] = {"requests": s["requests"], "failed": s["failed"], "latency_s": s["latency_s"]}
    return {
        "requests": counts,
        "bytes": nbytes,
        "client_requests": {k: sum(1 for r in rows if r.kind == k) for k in KINDS},
        "amplification": amplification,
        "hit_ratio": hit_ratio,
        "upstream_gets_per_object": gets_per_object,
        "classes": {c: sum(1 for r in rows if r.cache == c) for c in CLASSES},
        "latency_by_class": latency,
    }


@dataclass
class Watched:
    """A registry of the run with an upstream whose access log the run reads."""

    id: str
    base: str  # the entry's url as the rows' registry names it (registry_base)
    log: Path


def watched_registries(cfg: Config) -> list[Watched]:
    return [
        Watched(e.id, registry_base(e.url), Path(e.upstream.access_log))
        for e in cfg.registries
        if e.upstream is not None and e.upstream.access_log
    ]


class UpstreamOutput(RunOutput):
    """summary.json's ``upstream`` block and requests.csv's ``cache`` column, made at the run's end."""

    name = "upstream"

    def __init__(self, run: RunContext, watched: list[Watched]) -> None:
        self.run = run
        self.watched = watched
        self.end_epoch: float | None = None

    @classmethod
    def open(cls, run: RunContext) -> UpstreamOutput | None:
        watched = watched_registries(run.cfg)
        return cls(run, watched) if watched else None

    def stop(self) -> None:
        self.end_epoch = time.time()  # after the last answer

    def finish(self, summary: dict) -> None:
        run = self.run
        end = self.end_epoch or time.time()
        results = run.results
        bases = {w.base: w for w in self.watched}
        logs: dict[str, list[UpstreamRequest] | str] = {}
        for w in self.watched:
            settle(w.log)
            try:
                logs[w.id] = read_upstream_log(w.log, run.start_epoch, end)
            except OSError as e:
                logs[w.id] = f"could not read {w.log}: {e.strerror or e}"
        fetches = {i: fetches_by_object(v) for i, v in logs.items() if not isinstance(v, str)}
        mine: dict[str, list[ResultRow]] = {w.id: [] for w in self.watched}
        try:
            names = RepositoryMap.for_config(run.cfg).map
        except ConfigError:  # several registries, each with names of its own: the run itself refuses that
            names = str
        lines = this_run(results.path, results.run_offset)
        for row in lines:
            if not isinstance(row, ResultRow) or row.auxiliary or row.start_s is None:
                continue
            w = bases.get(registry_base(run.registry_of(row.repository)))
            if w is None:
                continue
            if w.id in fetches:
                row.cache = verdict(row, run.start_epoch, fetches[w.id], names(row.repository))
            mine[w.id].append(row)
        for rows in mine.values():
            mark_waits(rows)
        rewrite(results.path, results.run_offset, lines)
        block = summary.setdefault("upstream", {})
        for w in self.watched:
            entry = block.setdefault(w.id, {})
            got = logs[w.id]
            if isinstance(got, str):
                entry["error"] = got
                continue
            entry["access_log"] = str(w.log)
            entry.update(upstream_block(mine[w.id], got, run.timed, results.model.on_time_s))


def this_run(path: Path, offset: int) -> list[ResultRow | list[str]]:
    """requests.csv's lines after byte ``offset`` (this run's): rows, and the cells of lines that are not whole
    rows (torn by an interruption) as they are."""
    out: list[ResultRow | list[str]] = []
    with open(path, "rb") as f:
        f.seek(offset)
        for values in csv.reader(io.TextIOWrapper(f, encoding="utf-8", newline="")):
            try:
                out.append(parse_cells(values))
            except ValueError:
                out.append(values)
    return out


def rewrite(path: Path, offset: int, lines: list[ResultRow | list[str]]) -> None:
    """requests.csv with its lines after byte ``offset`` replaced by ``lines``, written to a temporary file and
    renamed over it: a reader sees the old file or the new one, never half of each."""
    tmp = path.with_name(path.name + ".tmp")
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        dst.write(src.read(offset))
        out = io.TextIOWrapper(dst, encoding="utf-8", newline="")
        writer = csv.writer(out)  # the csv module's default dialect, as requests.csv is written
        for line in lines:
            writer.writerow(cells(line) if isinstance(line, ResultRow) else line)
        out.flush()
        os.fsync(dst.fileno())
    os.replace(tmp, path)
