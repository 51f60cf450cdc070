"""Workload characterization of a registry trace as numbers, from its columns.

The measures are those of the IBM Cloud registry workload study (Anwar et al.,
"Improving Docker Registry Design based on Production Workload Analysis",
FAST '18), so a trace can be set beside the published numbers; the figure
names (``fig04_request_types`` … ``fig15_arrivals``, drawn by
:mod:`drtp.analysis.trace_figures`) carry that study's figure numbers.

Every function takes the frame of :mod:`drtp.analysis.trace_frame` (time-ordered)
and returns plain JSON-ready dicts; :func:`characterize` gathers them all.
Distributions are stored as CDF points (values at 201 evenly spaced
probabilities) plus a few named percentiles, so figures for any trace length
are drawn from the JSON alone.

Definitions (where the study leaves room, the choice is written here):

* image pull = ``GET`` manifest, image push = ``PUT`` manifest;
* manifest/layer share: pulls count ``GET`` requests, pushes ``PUT`` or
  ``HEAD`` requests, as in the study;
* sizes: successful (2xx) ``GET``/``PUT`` requests with a body (size > 0),
  one value per request;
* popularity: layers and manifests count ``GET`` requests (reads);
  repositories, users and clients count all requests;
* follow-ups: for each ``GET`` manifest, the ``GET`` layer requests of the same
  client to the same repository within the session threshold after it; the
  "after a push" variant keeps the ``GET`` manifests that come within the
  push window after a ``PUT`` (manifest or layer) to that repository;
* active requests: requests in flight (start to start + duration), averaged
  over each bin; active clients: distinct clients sending a request in the
  bin;
* hour-of-day / day-of-week load: requests per hour (day) averaged over the
  traced time, partly covered first/last bins weighted by their coverage;
* idle time: a gap during which no request is in flight;
* data ingress: bytes of successful ``PUT``/``PATCH``/``POST``; egress: bytes of
  successful ``GET``.
"""

from __future__ import annotations

import datetime as _dt

import numpy as np
import pandas as pd

from drtp.errors import DrtpError
from drtp.trace.summary import summarize_frame
from drtp.units import bin_count

CDF_PROBS = np.linspace(0.0, 1.0, 201)
NAMED = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
DEFAULT_SESSION_S = 60.0
DEFAULT_BIN_S = 60.0
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
RESPONSE_GROUPS = (
    ("GET", "blob"),
    ("PUT", "blob"),
    ("PATCH", "blob"),
    ("HEAD", "blob"),
    ("POST", "blob"),
    ("GET", "manifest"),
    ("PUT", "manifest"),
    ("HEAD", "manifest"),
)


def _f(x) -> float | None:
    x = float(x)
    return None if np.isnan(x) else x


def distribution(values) -> dict:
    """A distribution as JSON: n, mean, max, named percentiles and CDF points."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return {"n": 0}
    q = np.quantile(v, CDF_PROBS)
    out = {"n": int(v.size), "mean": float(v.mean()), "min": float(v.min()), "max": float(v.max())}
    out.update({k: float(np.quantile(v, p)) for k, p in NAMED.items()})
    out["cdf"] = {"p": [round(float(p), 4) for p in CDF_PROBS], "x": [float(x) for x in q]}
    return out


def share_below(values, limits: dict[str, float]) -> dict[str, float | None]:
    v = np.asarray(values)
    return {k: (float((v < lim).mean()) if v.size else None) for k, lim in limits.items()}


# -- request types, manifest vs layer --------------------------------------------------


def request_types(df: pd.DataFrame) -> dict:
    """Requests per method, image pulls vs pushes, and per method+kind."""
    n = len(df)
    by_method = df["method"].value_counts()
    get_m = int(((df["method"] == "GET") & (df["kind"] == "manifest")).sum())
    put_m = int(((df["method"] == "PUT") & (df["kind"] == "manifest")).sum())
    ops = get_m + put_m
    mk = df.groupby(["method", "kind"], observed=True).size()
    put, patch = int(by_method.get("PUT", 0)), int(by_method.get("PATCH", 0))
    return {
        "requests": n,
        "by_method": {m: int(c) for m, c in by_method.items() if c},
        "method_share": {m: c / n for m, c in by_method.items() if c} if n else {},
        "by_method_kind": {f"{m} {k}": int(c) for (m, k), c in mk.items() if c},
        "image_pulls": get_m,
        "image_pushes": put_m,
        "pull_ratio": get_m / ops if ops else None,
        "push_ratio": put_m / ops if ops else None,
        "pull_push_ratio": get_m / put_m if put_m else None,
        "put_per_patch": put / patch if patch else None,
    }


def manifest_layer_share(df: pd.DataFrame) -> dict:
    """Share of manifest vs layer requests among pulls (GET) and pushes (PUT or HEAD)."""
    out = {}
    for name, methods in (("pull", ["GET"]), ("push", ["PUT", "HEAD"])):
        sel = df["kind"][df["method"].isin(methods)]
        total = len(sel)
        manifests = int((sel == "manifest").sum())
        out[name] = {
            "requests": total,
            "manifest": manifests / total if total else None,
            "layer": (total - manifests) / total if total else None,
        }
    return out


# -- sizes and response times ----------------------------------------------------------


def sizes(df: pd.DataFrame) -> dict:
    """Size distributions of successful GET/PUT requests with a body, per kind."""
    ok = (df["status"] >= 200) & (df["status"] < 300) & (df["size"] > 0)
    out = {}
    for method in ("GET", "PUT"):
        for kind in ("blob", "manifest"):
            v = df["size"][ok & (df["method"] == method) & (df["kind"] == kind)].to_numpy()
            d = distribution(v)
            d["share_below"] = share_below(v, {"1KB": 1e3, "10KB": 1e4, "1MB": 1e6, "10MB": 1e7, "100MB": 1e8})
            out[f"{method} {kind}"] = d
    return out


def response_times(df: pd.DataFrame) -> dict:
    """Response-time distributions (s) per method and kind."""
    out = {}
    for method, kind in RESPONSE_GROUPS:
        v = df["duration"][(df["method"] == method) & (df["kind"] == kind)].to_numpy()
        if v.size:
            d = distribution(v)
            d["share_above"] = {"1s": float((v > 1).mean()), "10s": float((v > 10).mean())}
            out[f"{method} {kind}"] = d
    return out


def response_vs_size(df: pd.DataFrame) -> dict:
    """GET layer response time by layer size, in quarter-decade size bins."""
    sel = (df["method"] == "GET") & (df["kind"] == "blob") & (df["size"] > 0) & (df["status"] < 300)
    size = df["size"][sel].to_numpy(np.float64)
    dur = df["duration"][sel].to_numpy()
    if size.size == 0:
        return {"bins": []}
    b = np.floor(np.log10(size) * 4).astype(int)
    frame = pd.DataFrame({"b": b, "d": dur, "s": size})
    g = frame.groupby("b")
    stats = g["d"].agg(["count", "mean", "median"]).join(g["d"].quantile(0.25).rename("p25"))
    stats = stats.join(g["d"].quantile(0.75).rename("p75"))
    bins = []
    for k, row in stats.iterrows():
        bins.append(
            {
                "size_from": 10 ** (k / 4),
                "size_to": 10 ** ((k + 1) / 4),
                "size_mid": 10 ** ((k + 0.5) / 4),
                "count": int(row["count"]),
                "mean_s": float(row["mean"]),
                "median_s": float(row["median"]),
                "p25_s": float(row["p25"]),
                "p75_s": float(row["p75"]),
            }
        )
    corr = np.corrcoef(size, dur)[0, 1] if size.size > 1 and dur.std() > 0 else np.nan
    return {"bins": bins, "pearson_size_duration": _f(corr)}


# -- load over time: per minute, concurrency, rhythm, arrivals -------------------------


def per_bin_counts(times: np.ndarray, bin_s: float, origin: float | None = None) -> np.ndarray:
    """Number of requests in each bin of ``bin_s`` seconds from the first request (empty bins included)."""
    if times.size == 0:
        return np.zeros(0, dtype=np.int64)
    t0 = times[0] if origin is None else origin
    return np.bincount(((times - t0) // bin_s).astype(np.int64))


def requests_per_minute(df: pd.DataFrame) -> dict:
    """Requests received per minute over the whole trace, idle minutes included."""
    counts = per_bin_counts(df["time"].to_numpy(), 60.0)
    d = distribution(counts)
    if counts.size:
        d["share_zero"] = float((counts == 0).mean())
        d["share_at_least_100"] = float((counts >= 100).mean())
    d["minutes"] = int(counts.size)
    return d


def _occupancy(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Time-averaged number of intervals [start, end) covering each bin between ``edges``.

    Uses F(e) = Σ clip(e − s, 0, e_i − s_i): integrated coverage up to e, from
    sorted starts and ends and their prefix sums; one searchsorted per edge.
    """
    s = np.sort(starts)
    e = np.sort(ends)
    cs = np.concatenate([[0.0], np.cumsum(s)])
    ce = np.concatenate([[0.0], np.cumsum(e)])
    ns = np.searchsorted(s, edges, side="left")
    ne = np.searchsorted(e, edges, side="left")
    covered = (ns * edges - cs[ns]) - (ne * edges - ce[ne])
    return np.diff(covered) / np.diff(edges)


def concurrency(df: pd.DataFrame, bin_s: float = DEFAULT_BIN_S) -> dict:
    """Active requests and clients per bin, as distributions and time series."""
    t = df["time"].to_numpy()
    if t.size == 0:
        return {"bin_s": bin_s, "active_requests": {"n": 0}, "active_clients": {"n": 0}, "series": {}}
    t0 = t[0]
    rel = t - t0
    nbins = int(rel[-1] // bin_s) + 1
    edges = np.arange(nbins + 1, dtype=np.float64) * bin_s
    active_req = _occupancy(rel, rel + df["duration"].to_numpy(), edges)
    b = (rel // bin_s).astype(np.int64)
    clients = df["client"].cat.codes.to_numpy().astype(np.int64)
    width = int(clients.max(initial=0)) + 1
    active_cli = np.bincount(np.unique(b * width + clients) // width, minlength=nbins)  # distinct (bin, client)
    req_per_bin = np.bincount(b, minlength=nbins)
    series_step = max(1, nbins // 2000)  # keep at most ~2000 points in the JSON time series
    idx = np.arange(0, nbins, series_step)
    return {
        "bin_s": bin_s,
        "active_requests": distribution(active_req),
        "active_clients": distribution(active_cli),
        "series": {
            "every_s": bin_s * series_step,
            "start": t0,
            "t_s": [float(x) for x in edges[idx]],
            "requests_per_bin": [int(x) for x in np.add.reduceat(req_per_bin, idx)],
            "active_clients": [float(x) for x in _reduce_mean(active_cli, idx)],
            "active_requests": [float(x) for x in _reduce_mean(active_req, idx)],
        },
    }


def _reduce_mean(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    sums = np.add.reduceat(values.astype(np.float64), idx)
    lengths = np.diff(np.append(idx, values.size))
    return sums / lengths


def _rate_by(t: np.ndarray, width: float, key) -> pd.Series:
    """Requests per ``width`` seconds for each value of ``key(bin starts)``, over the traced time only.

    Bins are calendar hours/days (UTC); a bin only partly inside the trace
    (its first and last) counts as the fraction it covers, so a trace that
    starts or ends mid-day does not drag that weekday's average down.
    """
    origin = np.floor(t[0] / width) * width
    counts = per_bin_counts(t, width, origin=origin)
    starts = origin + np.arange(counts.size) * width
    covered = (np.minimum(starts + width, t[-1]) - np.maximum(starts, t[0])) / width
    covered = np.clip(covered, 0.0, 1.0) if t[-1] > t[0] else np.ones(counts.size)
    keys = key(pd.to_datetime(starts, unit="s", utc=True))
    frame = pd.DataFrame({"k": keys, "n": counts, "c": covered})
    sums = frame.groupby("k")[["n", "c"]].sum()
    return sums["n"] / sums["c"].where(sums["c"] > 0)


def daily_rhythm(df: pd.DataFrame) -> dict:
    """Average requests per hour of day and per day of week over the traced time, UTC."""
    t = df["time"].to_numpy()
    if t.size == 0:
        return {"hour_of_day": {}, "day_of_week": {}}
    by_hour = _rate_by(t, 3600.0, lambda idx: idx.hour)
    by_day = _rate_by(t, 86400.0, lambda idx: idx.day_of_week)
    return {
        "hour_of_day": {int(h): _f(v) for h, v in by_hour.items()},
        "day_of_week": {WEEKDAYS[d]: _f(v) for d, v in by_day.items()},
        "traced_hours": float((t[-1] - t[0]) / 3600),
    }


def arrivals(df: pd.DataFrame) -> dict:
    """Inter-arrival times and idle periods (no request in flight), seconds."""
    t = df["time"].to_numpy()
    inter = np.diff(t)
    if t.size:
        busy_until = np.maximum.accumulate(t + df["duration"].to_numpy())
        gaps = t[1:] - busy_until[:-1]
        idle = gaps[gaps > 0]
    else:
        idle = np.empty(0)
    return {
        "inter_arrival": distribution(inter),
        "idle": distribution(idle),
        "idle_periods": int(idle.size),
        "idle_total_s": float(idle.sum()),
    }


# -- popularity ------------------------------------------------------------------------


def popularity_of(counts: np.ndarray, top: int = 10) -> dict:
    """Skew of access counts: top-N shares, top-1 % share and the cumulative-share curve."""
    c = np.sort(np.asarray(counts, dtype=np.int64)[np.asarray(counts) > 0])[::-1]
    total = int(c.sum())
    if total == 0:
        return {"items": 0, "accesses": 0}
    cum = np.cumsum(c) / total
    k1 = max(1, int(np.ceil(c.size * 0.01)))
    ranks = np.unique(np.geomspace(1, c.size, num=min(c.size, 200)).round().astype(int))
    return {
        "items": int(c.size),
        "accesses": total,
        "top_shares": [float(x) / total for x in c[:top]],
        "top10_share": float(cum[min(top, c.size) - 1]),
        "top1pct_share": float(cum[k1 - 1]),
        "accesses_per_item": distribution(c),
        "curve": {"item_share": [float(r / c.size) for r in ranks], "access_share": [float(cum[r - 1]) for r in ranks]},
    }


def popularity(df: pd.DataFrame) -> dict:
    """Access skew of layers and manifests (GET requests) and of repositories, users, clients (all)."""
    get = df["method"] == "GET"
    out = {}
    for name, kind in (("layers", "blob"), ("manifests", "manifest")):
        codes = df["object"].cat.codes[get & (df["kind"] == kind)].to_numpy()
        codes = codes[codes >= 0]
        out[name] = popularity_of(np.bincount(codes) if codes.size else np.zeros(0, np.int64))
    for name, col in (("repositories", "repository"), ("users", "user"), ("clients", "client")):
        codes = df[col].cat.codes.to_numpy()
        codes = codes[codes >= 0]
        out[name] = popularity_of(np.bincount(codes) if codes.size else np.zeros(0, np.int64))
    return out


# -- follow-ups ------------------------------------------------------------------------


def _code(column: pd.Series, value: str) -> int:
    """The categorical code of ``value`` in ``column`` (-2, matching nothing, when absent)."""
    cats = column.cat.categories
    return int(cats.get_loc(value)) if value in cats else -2


def _keyed_ms(group: np.ndarray, t_ms: np.ndarray, stride: int) -> np.ndarray:
    """Times made comparable only within a group: group·stride + time (int64 ms)."""
    return group.astype(np.int64) * stride + t_ms


def follow_ups(df: pd.DataFrame, session_s: float = DEFAULT_SESSION_S, push_window_s: float | None = None) -> dict:
    """GET layer requests that follow each GET manifest of the same client and repository
    within ``session_s``; and the same for GET manifests that come within
    ``push_window_s`` (default: the session) after a PUT to that repository."""
    push_window_s = session_s if push_window_s is None else push_window_s
    t = df["time"].to_numpy()
    if t.size == 0:
        return {"session_s": session_s, "push_window_s": push_window_s, "all": {"manifests": 0}}
    sess_ms = int(round(session_s * 1000))
    push_ms = int(round(push_window_s * 1000))
    method = df["method"].cat.codes.to_numpy()
    kind = df["kind"].cat.codes.to_numpy()
    get, put = _code(df["method"], "GET"), _code(df["method"], "PUT")
    is_manifest = kind == _code(df["kind"], "manifest")
    man = (method == get) & is_manifest
    lay = (method == get) & ~is_manifest
    is_put = method == put
    used = man | lay | is_put  # only these rows take part: keep the big temporaries small
    t_ms = np.round((t[used] - t[0]) * 1000).astype(np.int64)
    man, lay, is_put = man[used], lay[used], is_put[used]
    repo = df["repository"].cat.codes.to_numpy()[used].astype(np.int64)
    client = df["client"].cat.codes.to_numpy()[used].astype(np.int64)
    pair = pd.factorize(repo * (int(client.max(initial=0)) + 1) + client)[0].astype(np.int64)  # dense (repo, client)
    stride = int(round((t[-1] - t[0]) * 1000)) + max(sess_ms, push_ms) + 1

    layers = np.sort(_keyed_ms(pair[lay], t_ms[lay], stride))
    m_key = _keyed_ms(pair[man], t_ms[man], stride)
    follows = np.searchsorted(layers, m_key + sess_ms, side="right") - np.searchsorted(layers, m_key, side="right")

    puts = np.sort(_keyed_ms(repo[is_put], t_ms[is_put], stride))
    m_repo_key = _keyed_ms(repo[man], t_ms[man], stride)
    after_put = np.searchsorted(puts, m_repo_key, side="right") > np.searchsorted(
        puts, m_repo_key - push_ms, side="left"
    )
    return {
        "session_s": session_s,
        "push_window_s": push_window_s,
        "all": _follow_stats(follows),
        "after_push": _follow_stats(follows[after_put]),
    }


def _follow_stats(follows: np.ndarray) -> dict:
    n = int(follows.size)
    if n == 0:
        return {"manifests": 0}
    top = int(min(follows.max(), 50))
    counts = np.bincount(np.minimum(follows, top), minlength=top + 1)
    return {
        "manifests": n,
        "not_followed": float((follows == 0).mean()),
        "followed": float((follows > 0).mean()),
        "mean_layers": float(follows.mean()),
        "cdf": {"layers": list(range(top + 1)), "share": [float(x) for x in np.cumsum(counts) / n]},
    }


# -- data volume -----------------------------------------------------------------------


def data_volume(df: pd.DataFrame) -> dict:
    """Data ingress (successful PUT/PATCH/POST bytes) and egress (successful GET bytes)."""
    ok = df["status"] < 400
    method = df["method"]
    ingress = int(df["size"][ok & method.isin(["PUT", "PATCH", "POST"])].sum())
    egress = int(df["size"][ok & (method == "GET")].sum())
    layers_in = int(df["size"][ok & method.isin(["PUT", "PATCH"]) & (df["kind"] == "blob")].sum())
    return {"ingress_bytes": ingress, "egress_bytes": egress, "layer_ingress_bytes": layers_in}


# -- all -------------------------------------------------------------------------------


def characterize(
    df: pd.DataFrame,
    *,
    session_s: float = DEFAULT_SESSION_S,
    push_window_s: float | None = None,
    bin_s: float = DEFAULT_BIN_S,
) -> dict:
    """Every characterization number of one trace (one label).

    The per-minute and per-bin histograms are sized by the trace's span, so
    their bin counts are checked first (drtp.units.MAX_BINS): a trace spanning
    decades is refused with a message instead of an allocation of gigabytes.
    """
    if not 0 < bin_s < float("inf"):
        raise DrtpError(f"--bin {bin_s!r}: the concurrency bin width must be a duration > 0")
    if len(df):
        span = float(df["time"].iloc[-1] - df["time"].iloc[0])
        bin_count(span, 60.0, "one-minute bins")
        bin_count(span, bin_s, f"{bin_s:g}-second concurrency bins", "raise --bin or ")
    summary = summarize_frame(df)
    return {
        "summary": summary,
        "data": data_volume(df),
        "request_types": request_types(df),
        "manifest_layer_share": manifest_layer_share(df),
        "sizes": sizes(df),
        "requests_per_minute": requests_per_minute(df),
        "response_times": response_times(df),
        "response_vs_size": response_vs_size(df),
        "popularity": popularity(df),
        "follow_ups": follow_ups(df, session_s, push_window_s),
        "concurrency": concurrency(df, bin_s),
        "rhythm": daily_rhythm(df),
        "arrivals": arrivals(df),
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
