"""``drtp analyze cache RUN``: the simulator's hit ratio beside a real cache's, on the run's own requests.

A run through a pull-through cache (Distribution's ``proxy:``, nginx
``proxy_cache``…) says per request whether the cache held the object:
``requests.csv``'s ``cache`` column (``hit``, ``miss``, ``wait``) when the run
wrote it, else the upstream's own access log (Distribution's JSON log), where a
request is a miss when the upstream began a GET of its object while the request
was under way.  The same requests — the trace's GETs and HEADs of manifests and
layers, in the order they were sent, with the trace's statuses — go through the
simulator (:func:`drtp.plugins.cache.predict`: LRU of the given capacity,
``unlimited`` by default, keyed ``repository+digest`` or ``digest``, a HEAD
fetches, manifests are objects).  The table puts both side by side per kind
and per time slice, and counts the causes of a difference it can see:

* ``in_flight``: requests the simulator counts a hit because an earlier miss
  of the same object came first, although the cache was still fetching it when
  the request was sent — an earlier miss of the object (the simulator's, or one
  the cache measured) had not finished, nor had the upstream GETs it started —
  and that the cache did not serve as a hit; a real cache either fetches again
  (a miss) or makes the request wait (nginx's lock: ``wait``, a hit here).  The
  simulator's ratio with these counted as misses is
  ``predicted_hit_ratio_in_flight_as_miss``;
* ``refused``: requests that failed through the cache although the trace's
  answer was a success, or whose object the upstream refused (an answer of
  400 or more other than a 401 challenge) while they were under way;
* ``refetched``: misses of an object the cache had already fetched in this run
  and the simulator still held: the cache dropped it (a TTL expiry, or an
  eviction the simulated policy did not make), or — without the cache's own
  log (``cache_log``) — had not yet stored it;
* ``unexpected_hits``: hits the simulator calls misses (the cache held the
  object before the run, or shared it across keys the simulator keeps apart).

What cannot be counted from outside the cache is said in :data:`UNCOUNTED`.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from drtp.analysis.run_data import RunDataError, load_run
from drtp.errors import DrtpError
from drtp.trace.access_log import KINDS, NGINX, UpstreamRequest, log_time, parse_log_line, read_upstream_log
from drtp.trace.columns import TraceColumns
from drtp.trace.records import TraceRecord
from drtp.trace.registry_log import decode_log_line

CACHE_CLASSES = ("hit", "miss", "wait")
HIT_CLASSES = ("hit", "wait")  # served from the cache (a wait is a hit that waited on another client's fetch)
# an upstream GET that began this long before a request's recorded start still counts as during it: the run's
# clock and the upstream's log are read on one machine here, and a request's start is taken just before it is sent
CLOCK_SLACK_S = 0.002
UNCOUNTED = (
    "nginx's cache manager evicts in the background, when its periodic pass finds the cache past max_size, "
    "not at the request that overfills it as the simulated LRU does: for a while the real cache holds more "
    "than its capacity, then drops several objects at once",
    "nginx stores each object in a file rounded up to the file system's blocks and counts those blocks against "
    "max_size; the simulator counts the object's bytes, so a small-object cache holds fewer objects than predicted",
    "a cache's TTL (Distribution's proxy.ttl, nginx's proxy_cache_valid and inactive) drops objects by age; a drop "
    "shows as 'refetched' only when the object is asked for again in the run",
)


class CacheAnalysisError(DrtpError):
    """A run that cannot be held against the simulator; one line naming the file or option."""


def upstream_requests(path: Path) -> list[UpstreamRequest]:
    """The manifest and blob requests in the upstream's access log at ``path``, without drtp's own.

    Read by the one reader of access logs (:func:`drtp.trace.access_log.read_upstream_log`, as the run's
    ``upstream`` output reads it): drtp's direct requests to the upstream (warmup, preflight, pushes sent
    there) carry their own User-Agent and are left out, so what remains is what the cache fetched (requests
    before the run began match no request of the run).  nginx's combined
    log times requests to the second, too coarse to tell which request a fetch served, and is refused; so
    is a file with lines but no request in either format.
    """
    try:
        requests = read_upstream_log(path)
        lines = [] if requests else [line for line in path.read_bytes().splitlines() if line.strip()]
    except OSError as e:
        raise CacheAnalysisError(f"{path}: cannot read the upstream's access log ({e.strerror or e})") from None
    if any(r.log == NGINX for r in requests):
        raise CacheAnalysisError(
            f"{path}: nginx's combined log times requests to the second, too coarse to tell which request a "
            "fetch served: let the run record requests.csv's cache column instead, or give Distribution's JSON log"
        )
    if lines and not any(parse_log_line(line) for line in lines):
        raise CacheAnalysisError(f"{path}: no request line of Distribution's JSON log in it")
    return [r for r in requests if r.kind in KINDS]


def cache_requests_frame(requests: pd.DataFrame) -> pd.DataFrame:
    """The trace's GETs and HEADs of manifests and layers that were sent, in the order they were sent."""
    sent = requests[
        ~requests["auxiliary"].astype(bool)
        & requests["method"].isin(["GET", "HEAD"])
        & requests["kind"].isin(KINDS)
        & requests["start_s"].notna()
        & ~requests["reference"].astype(str).str.startswith("uploads/")
    ].copy()
    sent["end_s"] = sent["start_s"] + sent["latency_s"].fillna(0.0)
    digest = sent["digest"].fillna("").astype(str)
    reference = sent["reference"].fillna("").astype(str)
    blob = sent["kind"] == "blob"
    sent["object"] = np.where(blob & (digest != ""), digest, reference)
    return sent.sort_values("start_s", kind="stable").reset_index(drop=True)


class Predicted(NamedTuple):
    """Per row of the frame, the simulator's view; and the capacity it simulated."""

    taken: np.ndarray  # a cache request for the simulator (a success in the trace)
    hit: np.ndarray
    key: np.ndarray  # the object key's dense id (-1: not taken)
    capacity_bytes: int | None  # None: unlimited


def predicted(frame: pd.DataFrame, capacity: int | str, key: str) -> Predicted:
    """The simulator on ``frame``'s requests (:class:`Predicted`)."""
    from drtp.plugins.base import find_plugin, parse_plugin_args
    from drtp.plugins.cache import predict

    t0 = _dt.datetime(2000, 1, 1, tzinfo=_dt.timezone.utc)
    records = [
        TraceRecord(
            host="cache",
            duration=0.0,
            method=r.method,
            client=str(r.client),
            uri=f"v2/{r.repository}/{'manifests' if r.kind == 'manifest' else 'blobs'}/{r.object}",
            status=int(r.expected_status),
            size=int(r.size),
            id=str(i),
            timestamp=t0 + _dt.timedelta(seconds=float(r.start_s)),
        )
        for i, r in enumerate(frame.itertuples(index=False))
    ]
    trace = TraceColumns.from_records(records)
    cls = find_plugin("lru")
    args = parse_plugin_args(
        cls,
        {"capacity": capacity, "key": key, "head": "fetch", "manifests": True, "percent_of": "footprint"},
        "drtp analyze cache",
    )
    out = predict(trace, args)
    taken = np.zeros(len(frame), dtype=bool)
    hit = np.zeros(len(frame), dtype=bool)
    keys = np.full(len(frame), -1, dtype=np.int64)
    taken[out.rows] = True
    hit[out.rows] = out.hit
    keys[out.rows] = out.key
    return Predicted(taken, hit, keys, None if capacity == "unlimited" else out.capacity_bytes)


class LogMeasure(NamedTuple):
    """Per row of the frame, what the upstream's log says of it."""

    classes: np.ndarray  # "miss" when the upstream began a GET of its object during it, else "hit"
    refused: np.ndarray  # the upstream refused its object (an answer ≥ 400 other than 401) during it
    fetch_end_s: np.ndarray  # a miss: when the last upstream GET begun during it ended (the object is stored)


_STORED = re.compile(r"^Adding new scheduler entry for (?P<repo>.+)@(?P<digest>sha256:[0-9a-f]+) ")


def read_cache_log(path: Path, start_epoch: float) -> dict[tuple[str, str], list[float]]:
    """When Distribution's proxy stored each (repository, digest), on the run's clock, from the cache's own log.

    The proxy logs "Adding new scheduler entry for <repository>@<digest>"
    (the object's TTL starts) once it has stored the object: from then on it
    serves the object itself.  The upstream GET that stored it ends a little
    before, so this is the moment a request stops being in flight.
    """
    try:
        lines = path.read_bytes().splitlines()
    except OSError as e:
        raise CacheAnalysisError(f"{path}: cannot read the cache's log ({e.strerror})") from None
    out: dict[tuple[str, str], list[float]] = {}
    for n, raw in enumerate(lines, start=1):
        if not raw.startswith(b"{"):
            continue
        line = decode_log_line(raw)
        if isinstance(line, str):
            continue
        m = _STORED.match(line.msg)
        if not m:
            continue
        try:
            t = log_time(line.time)
        except ValueError as e:
            raise CacheAnalysisError(f"{path}: line {n}: not a Distribution log line ({e})") from None
        out.setdefault((m["repo"], m["digest"]), []).append(t - start_epoch)
    return out


def stored_after_miss(frame: pd.DataFrame, stored: dict[tuple[str, str], list[float]], miss: np.ndarray) -> np.ndarray:
    """Per measured miss of a layer: when the cache next stored it (from its start on); NaN if never or not a miss."""
    out = np.full(len(frame), np.nan)
    for i, r in enumerate(frame.itertuples(index=False)):
        if miss[i] and r.kind == "blob":
            times = [t for t in stored.get((str(r.repository), str(r.object)), ()) if t >= float(r.start_s)]
            if times:
                out[i] = min(times)
    return out


def measured_from_log(frame: pd.DataFrame, requests: list[UpstreamRequest], start_epoch: float) -> LogMeasure:
    """Each row's class, refusal and fetch end from the upstream's requests (:class:`LogMeasure`; the requests'
    times are Unix seconds, the frame's are on the run's clock, from ``start_epoch``)."""
    by_object: dict[tuple[str, str, str], list[tuple[float, float, str, int]]] = {}
    for f in requests:
        by_object.setdefault((f.kind, f.repository, f.reference), []).append(
            (f.start - start_epoch, f.end - start_epoch, f.method, f.status)
        )
    classes = np.empty(len(frame), dtype=object)
    refused = np.zeros(len(frame), dtype=bool)
    fetch_end = np.full(len(frame), np.nan)
    for i, r in enumerate(frame.itertuples(index=False)):
        names = {str(r.object), str(r.reference), str(r.digest)} - {"", "nan"}
        low, high = float(r.start_s) - CLOCK_SLACK_S, float(r.end_s)
        during = [
            (end, method, status)
            for name in names
            for start, end, method, status in by_object.get((r.kind, r.repository, name), ())
            if low <= start <= high
        ]
        gets = [end for end, method, status in during if method == "GET" and status < 400]
        classes[i] = "miss" if gets else "hit"
        if gets:
            fetch_end[i] = max(gets)
        refused[i] = any(status >= 400 and status != 401 for _, _, status in during)
    return LogMeasure(classes, refused, fetch_end)


def in_flight(
    frame: pd.DataFrame, taken: np.ndarray, hit: np.ndarray, keys: np.ndarray, measured_miss: np.ndarray
) -> np.ndarray:
    """Predicted hits sent while an earlier miss of their object (predicted or measured) had not finished.

    A miss finishes when its client has the object and, where the logs show
    it (``fetch_end_s``), when the cache's own fetches of it ended or it
    stored the object: Distribution's proxy stores a blob by a second upstream
    GET that may outlast the client's, and commits it a moment after.
    """
    out = np.zeros(len(frame), dtype=bool)
    miss_end: dict[int, float] = {}
    starts = frame["start_s"].to_numpy(float)
    ends = np.fmax(frame["end_s"].to_numpy(float), frame["fetch_end_s"].to_numpy(float))
    for i in np.flatnonzero(taken):
        k = int(keys[i])
        if hit[i] and miss_end.get(k, -math.inf) > starts[i]:
            out[i] = True
        if not hit[i] or measured_miss[i]:
            miss_end[k] = max(miss_end.get(k, -math.inf), ends[i])
    return out


def refetched(frame: pd.DataFrame, taken: np.ndarray, pred_hit: np.ndarray, keys: np.ndarray, miss: np.ndarray):
    """Measured misses, predicted hits, of an object the cache had already missed (fetched) earlier in the run."""
    out = np.zeros(len(frame), dtype=bool)
    seen: set[int] = set()
    for i in np.flatnonzero(taken):
        k = int(keys[i])
        if miss[i] and pred_hit[i] and k in seen:
            out[i] = True
        if miss[i]:
            seen.add(k)
    return out


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def _points(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(100 * (a - b), 2)


def table_row(part: pd.DataFrame, slice_start: float | None, slice_end: float | None, kind: str) -> dict:
    """One line of the table: a slice of the run (None: all of it), one kind or both."""
    n = len(part)
    size = part["size"].to_numpy(np.int64)
    pred, meas = part["predicted_hit"].to_numpy(bool), part["measured_hit"].to_numpy(bool)
    flying = part["in_flight"].to_numpy(bool)
    pred_ratio = _ratio(int(pred.sum()), n)
    adjusted = _ratio(int((pred & ~flying).sum()), n)
    meas_ratio = _ratio(int(meas.sum()), n)
    return {
        "slice_start_s": slice_start,
        "slice_end_s": slice_end,
        "kind": kind,
        "requests": n,
        "predicted_hits": int(pred.sum()),
        "predicted_hit_ratio": pred_ratio,
        "in_flight": int(flying.sum()),
        "predicted_hit_ratio_in_flight_as_miss": adjusted,
        "measured_hits": int((part["measured"] == "hit").sum()),
        "measured_waits": int((part["measured"] == "wait").sum()),
        "measured_misses": int((part["measured"] == "miss").sum()),
        "failed": int(part["failed"].sum()),
        "measured_hit_ratio": meas_ratio,
        "difference_points": _points(meas_ratio, adjusted),
        "refused": int(part["refused"].sum()),
        "refetched": int(part["refetched"].sum()),
        "unexpected_hits": int((meas & ~pred).sum()),
        "predicted_byte_hit_ratio": _ratio(int(size[pred].sum()), int(size.sum())),
        "measured_byte_hit_ratio": _ratio(int(size[meas].sum()), int(size.sum())),
    }


@dataclass
class CacheComparison:
    """What ``drtp analyze cache`` found: settings, the table, and the source of the measured side."""

    run: Path
    measured_from: str  # "requests.csv cache column" or the upstream log's path
    capacity: int | str
    capacity_bytes: int | None  # None: unlimited
    key: str
    slice_s: float
    table: pd.DataFrame
    requests: int
    left_out: int  # rows of the trace's GETs/HEADs the simulator does not take (failures in the trace)

    def overall(self, kind: str = "all") -> dict:
        """The table's line for the whole run and ``kind`` ("all", "manifest" or "blob"), NaN as None."""
        rows = self.table[(self.table["slice_start_s"].isna()) & (self.table["kind"] == kind)]
        return {k: _plain(v) for k, v in rows.iloc[0].to_dict().items()}


def _upstream_log_path(config: dict, registry: str | None) -> Path | None:
    """The upstream access log named in config.json's ``registries:`` entry (``--registry`` picks one)."""
    entries = [e for e in config.get("registries") or [] if isinstance(e, dict) and e.get("upstream")]
    if registry is not None:
        entries = [e for e in entries if e.get("id") == registry]
        if not entries:
            raise CacheAnalysisError(f"--registry {registry}: no registries entry with an upstream in config.json")
    if len(entries) > 1:
        ids = ", ".join(str(e.get("id")) for e in entries)
        raise CacheAnalysisError(f"config.json: several registries with an upstream ({ids}): pick one with --registry")
    if not entries:
        return None
    log = entries[0]["upstream"].get("access_log")
    return Path(log) if log else None


def compare_cache(
    run_dir: Path,
    capacity: int | str = "unlimited",
    key: str = "repository+digest",
    slice_s: float | None = None,
    upstream_log: Path | None = None,
    registry: str | None = None,
    cache_log: Path | None = None,
) -> CacheComparison:
    """Hold the simulator against the cache a run went through (the module docstring says how)."""
    try:
        run = load_run(run_dir)
    except RunDataError as e:
        raise CacheAnalysisError(str(e)) from None
    frame = cache_requests_frame(run.requests)
    if frame.empty:
        raise CacheAnalysisError(f"{run_dir}: the run sent no GET or HEAD of a manifest or layer")
    classes = frame["cache"].fillna("").astype(str) if "cache" in frame.columns else None
    if classes is not None and (classes != "").any():
        bad = sorted(set(classes) - set(CACHE_CLASSES) - {""})
        if bad:
            raise CacheAnalysisError(f"{run_dir / 'requests.csv'}: column cache: unknown class {bad[0]!r}")
        measured_from = "requests.csv cache column"
        frame["measured"] = classes.to_numpy()
        frame["refused"] = False
        frame["fetch_end_s"] = np.nan
    else:
        log = upstream_log or _upstream_log_path(run.config, registry)
        if log is None:
            raise CacheAnalysisError(
                f"{run_dir}: nothing measured the cache (requests.csv has no cache column and config.json names no "
                "upstream access_log): give --upstream-log"
            )
        start_epoch = run.summary_json.get("start_epoch")
        if not isinstance(start_epoch, (int, float)):
            raise CacheAnalysisError(f"{run_dir / 'summary.json'}: no start_epoch to line the upstream's log up with")
        measured_from = str(log)
        seen = measured_from_log(frame, upstream_requests(log), float(start_epoch))
        frame["measured"], frame["refused"], frame["fetch_end_s"] = seen.classes, seen.refused, seen.fetch_end_s
        if cache_log is not None:
            stored = read_cache_log(cache_log, float(start_epoch))
            stored_at = stored_after_miss(frame, stored, seen.classes == "miss")
            frame["fetch_end_s"] = np.fmax(frame["fetch_end_s"].to_numpy(float), stored_at)
    frame["failed"] = (frame["status"] >= 400) & (frame["expected_status"] < 400)
    frame.loc[frame["failed"], "measured"] = "failed"
    frame["refused"] = frame["refused"] | frame["failed"]
    prediction = predicted(frame, capacity, key)
    taken, pred_hit, keys = prediction.taken, prediction.hit, prediction.key
    left_out = int((~taken).sum())
    frame["predicted_hit"] = pred_hit
    frame["measured_hit"] = frame["measured"].isin(HIT_CLASSES)
    measured_miss = (frame["measured"] == "miss").to_numpy()
    frame["in_flight"] = in_flight(frame, taken, pred_hit, keys, measured_miss) & ~frame["measured_hit"].to_numpy()
    frame["refetched"] = (
        refetched(frame, taken, pred_hit, keys, (frame["measured"] == "miss").to_numpy())
        & ~frame["in_flight"].to_numpy()
    )
    sim = frame[taken].reset_index(drop=True)
    span = float(sim["start_s"].max()) if len(sim) else 0.0
    width = slice_s if slice_s else max(span / 10, 1e-3)
    rows = []
    slices = [(None, None, sim)]
    index = np.floor(sim["start_s"].to_numpy(float) / width).astype(np.int64)
    for b in sorted(set(index.tolist())):
        slices.append((round(b * width, 6), round((b + 1) * width, 6), sim[index == b]))
    for start, end, part in slices:
        rows.append(table_row(part, start, end, "all"))
        for kind in KINDS:
            rows.append(table_row(part[part["kind"] == kind], start, end, kind))
    return CacheComparison(
        Path(run_dir),
        measured_from,
        capacity,
        prediction.capacity_bytes,
        key,
        width,
        pd.DataFrame(rows),
        len(sim),
        left_out,
    )


# -- output -------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def format_comparison(c: CacheComparison) -> str:
    """The console's table: per kind over the run, then per slice, then the causes and what was not counted."""
    cap = "unlimited" if c.capacity == "unlimited" else f"{c.capacity} ({c.capacity_bytes:,} bytes)"
    lines = [
        f"cache vs simulator: {c.run} — {c.requests:,} requests, LRU capacity {cap}, key {c.key}, "
        f"measured from {c.measured_from}",
        f"{'slice':<20}{'kind':<10}{'requests':>9}{'predicted':>11}{'in flight':>10}{'pred.-in fl.':>13}"
        f"{'measured':>10}{'waits':>7}{'diff pts':>9}",
    ]
    for r in c.table.to_dict("records"):
        where = "all" if r["slice_start_s"] is None or pd.isna(r["slice_start_s"]) else (
            f"{r['slice_start_s']:.4g}–{r['slice_end_s']:.4g} s"
        )  # fmt: skip
        if not r["requests"]:
            continue
        diff = (
            "-"
            if r["difference_points"] is None or pd.isna(r["difference_points"])
            else f"{r['difference_points']:+.1f}"
        )
        lines.append(
            f"{where:<20}{r['kind']:<10}{r['requests']:>9,}{_pct(r['predicted_hit_ratio']):>11}{r['in_flight']:>10,}"
            f"{_pct(r['predicted_hit_ratio_in_flight_as_miss']):>13}{_pct(r['measured_hit_ratio']):>10}"
            f"{r['measured_waits']:>7,}{diff:>9}"
        )
    all_ = c.overall()
    lines.append(
        f"counted causes: {all_['in_flight']:,} requests in flight (a hit in the simulator, the object's first miss "
        f"not finished when they were sent), {all_['refused']:,} refused or failed through the cache, "
        f"{all_['refetched']:,} refetched (the cache had dropped the object, or had not stored it yet), "
        f"{all_['unexpected_hits']:,} hits the simulator calls misses"
    )
    if c.left_out:
        lines.append(f"left out: {c.left_out:,} requests the trace itself answered with a failure (not cache requests)")
    lines += [f"not counted: {why}" for why in UNCOUNTED]
    return "\n".join(lines)


def write_comparison(c: CacheComparison, out: Path) -> list[Path]:
    """cache_vs_sim.csv, cache_vs_sim.json and cache_vs_sim.png in ``out``."""
    from drtp.analysis.plotting import new_figure, save

    out.mkdir(parents=True, exist_ok=True)
    c.table.to_csv(out / "cache_vs_sim.csv", index=False)
    doc = {
        "run": str(c.run),
        "measured_from": c.measured_from,
        "capacity": c.capacity,
        "capacity_bytes": c.capacity_bytes,
        "key": c.key,
        "slice_s": c.slice_s,
        "requests": c.requests,
        "left_out": c.left_out,
        "overall": {k: c.overall(k) for k in ("all", *KINDS)},
        "not_counted": list(UNCOUNTED),
    }
    (out / "cache_vs_sim.json").write_text(json.dumps(doc, indent=2))
    fig, (ax,) = new_figure(width=8.0, title="hit ratio per time slice: simulator vs cache")
    per_slice = c.table[c.table["slice_start_s"].notna() & (c.table["requests"] > 0)]
    for kind, style in (("manifest", ":"), ("blob", "-"), ("all", "--")):
        part = per_slice[per_slice["kind"] == kind]
        if part.empty:
            continue
        x = part["slice_start_s"].astype(float) + c.slice_s / 2
        ax.plot(x, part["predicted_hit_ratio_in_flight_as_miss"].astype(float), style, marker="o",
                color="tab:blue", label=f"{kind}: simulator (in flight as miss)")  # fmt: skip
        ax.plot(x, part["measured_hit_ratio"].astype(float), style, marker="s", color="tab:orange",
                label=f"{kind}: cache")  # fmt: skip
    ax.set_xlabel("seconds from the run's start")
    ax.set_ylabel("hit ratio (by requests)")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize="small")
    return [out / "cache_vs_sim.csv", out / "cache_vs_sim.json", save(fig, out / "cache_vs_sim.png")]


def _plain(x):
    """A table cell as JSON takes it: numpy numbers as Python's, NaN (an empty slice's ratio) as None."""
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return None if math.isnan(x) else float(x)
    return x
