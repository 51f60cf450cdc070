"""The views the registry studies drew, computed once from runs' rows: size bins, image pulls and pushes, bars.

The FAST '18 study compared storage backends by latency against layer size; the CReB thesis compared
registries by per-request latency of "all GET" and "total push", by image pull and push latency, and by bar
charts of mean latency grouped by region or provider.  This module makes those numbers from the rows of
``requests.csv`` (frames of :func:`drtp.analysis.results.load_requests`); ``drtp analyze results`` writes
them and its figures and report only draw them.

Definitions (each a choice where the studies leave room; docs/analysis.md says the same):

* Only the trace's requests count (helper requests are apart, as in every number of a run); latency is over
  succeeded requests, in the units of the rows (seconds) until a table turns it into ms.
* **Latency against size**: a request's size is ``bytes`` (measured on the wire), binned by
  :data:`SIZE_EDGES` (decades from 1 kB; the first bin holds bodiless requests); per group, request type
  and bin the pooled count, mean and nearest-rank percentiles.
* **Image pull** (a span, not a sum: a client downloads layers in parallel): a GET manifest of a client and
  repository starts a pull; the GET blobs of the same client and repository that start after it, and before
  the next GET manifest of that client and repository, are its layers, as long as each starts within
  :data:`GAP_S` of the end of the pull's requests so far.  Its latency is from the manifest GET's start to
  the last end of its requests.  ``sum_s`` (the sum of their latencies) is kept too: the thesis summed layer
  latencies into an image's, which equals the span only when layers go one after another.
* **Image push**: a PUT manifest of a client and repository ends a push; its upload requests (POST, PATCH,
  PUT blob) are those of that client and repository after the previous PUT manifest, in one stretch with
  no gap over :data:`GAP_S` before the manifest PUT.  Its latency is the span from the first upload's start
  to the manifest PUT's end.
* **all GET**: every GET (layers and manifests), per request — the thesis's "total GET latency".
* **total push**: every PUT (layer and manifest), per request — the thesis's "total push latency", the
  latency of its file push operations (its replayer sent each layer push as one PUT); the image push above
  is what a user waits for.
* Image views count pulls and pushes that moved at least one layer; those without (a manifest GET the
  client needed no layer for, a push of layers the registry had) are counted apart.  A pull or push with a
  failed request is failed and out of the latency numbers.
* Rows without a start (lost, never sent) cannot be placed in time: they are in no pull or push.
* **Bars across runs**: per group and view, the mean over the group's runs of each run's mean latency, with
  a 95 % t interval over those run means (``scipy.stats.t``); one run gives no interval (requests of one run
  are not independent draws, so they make none).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scistats

from drtp.analysis.results import group_key
from drtp.errors import DrtpError
from drtp.units import MS_PER_S

# size bin edges in bytes: below 1 kB, then decades up to 10 GB, then everything above
SIZE_EDGES: tuple[float, ...] = (0.0, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, math.inf)
GAP_S = 60.0  # the study's client session: requests further apart than this belong to separate operations
LEVEL = 0.95  # the error bars' interval
UPLOADS = ("POST", "PATCH", "PUT")
VIEWS = ("all GET", "GET layer", "GET manifest", "total push", "image pull", "image push")
STATS = ("mean", "p50", "p90", "p99", "max")


@dataclass(frozen=True)
class Selection:
    """Which rows every number is made of: a window on ``start_s`` and a latency cut (None: no limit)."""

    window: tuple[float, float] | None = None  # [from, to) seconds from the run's start
    max_latency_s: float | None = None

    def options(self) -> str:
        """The options that made this selection, as given on the command line (for a refusal)."""
        given = []
        if self.window:
            given.append(f"--window {self.window[0]:g}:{self.window[1]:g}s")
        if self.max_latency_s is not None:
            given.append(f"--max-latency {self.max_latency_s:g}s")
        return " ".join(given) or "the selection"

    def describe(self) -> str:
        parts = []
        if self.window:
            parts.append(f"requests started in [{self.window[0]:g} s, {self.window[1]:g} s) of each run")
        if self.max_latency_s is not None:
            parts.append(f"latency ≤ {self.max_latency_s * MS_PER_S:g} ms")
        return "; ".join(parts) or "all rows"


def select(df: pd.DataFrame, selection: Selection) -> tuple[pd.DataFrame, dict]:
    """The rows inside ``selection``, and how many were left out and why (trace requests and helpers alike).

    A row without a start (lost, never sent) is in no window; a row without a latency passes the cut.
    """
    keep = pd.Series(True, index=df.index)
    left_out = {"outside_window": 0, "over_max_latency": 0, "over_max_latency_failed": 0}
    if selection.window:
        low, high = selection.window
        inside = df["start_s"].ge(low) & df["start_s"].lt(high)
        left_out["outside_window"] = int((~inside).sum())
        keep &= inside
    if selection.max_latency_s is not None:
        over = keep & df["latency_s"].gt(selection.max_latency_s)
        left_out["over_max_latency"] = int(over.sum())
        left_out["over_max_latency_failed"] = int((over & ~df["ok"]).sum())
        keep &= ~over
    return df[keep], left_out


# -- groups of runs ----------------------------------------------------------------------------------------


def parse_group(text: str) -> str:
    """``NAME=RUN`` (the first word of ``--group``): the name before ``=``, a RUN after it."""
    name, eq, run = text.partition("=")
    if not eq or not name.strip() or not run.strip():
        raise ValueError(f"expected NAME=RUN… (a name, '=', then run directories), got {text!r}")
    return name.strip()


def expand_run(path: Path) -> list[Path]:
    """A run directory, or a folder of ``rep-<k>/`` run directories (repetitions of one run), in k order."""
    if not path.is_dir() or (path / "requests.csv").is_file():
        return [path]
    reps = [p for p in path.glob("rep-*") if (p / "requests.csv").is_file()]
    if not reps:
        return [path]  # the reader says what is missing
    return sorted(reps, key=lambda p: (int(p.name[4:]) if p.name[4:].isdigit() else math.inf, p.name))


@dataclass
class RunGroups:
    """The run directories to read (each once, in order) and the groups they form: name → indexes of ``dirs``."""

    dirs: list[Path] = field(default_factory=list)
    groups: dict[str, list[int]] = field(default_factory=dict)

    def _index(self, path: Path) -> int:
        resolved = [d.resolve() for d in self.dirs]
        if path.resolve() in resolved:
            return resolved.index(path.resolve())
        self.dirs.append(path)
        return len(self.dirs) - 1


def run_groups(runs: list[str], groups: list[list[str]] | None) -> RunGroups:
    """Groups from positional runs (each its own group; a folder of ``rep-*/`` one group of its repetitions)
    and ``--group NAME=RUN RUN…`` lists; a run listed twice is read once."""
    out = RunGroups()
    named: dict[str, list[int]] = {}
    for words in groups or []:
        try:
            name = parse_group(words[0])
        except ValueError as e:
            raise DrtpError(f"--group: {e}") from None
        if name in named:
            raise DrtpError(f"--group: the name {name!r} is given twice")
        paths = [words[0].partition("=")[2].strip(), *words[1:]]
        named[name] = [out._index(p) for arg in paths for p in expand_run(Path(arg))]
    for arg in runs:
        path = Path(arg)
        name = path.name or str(path)
        members = [out._index(p) for p in expand_run(path)]
        if name in named or name in out.groups:
            name = str(path)
        out.groups[name] = members
    out.groups.update(named)
    if not out.dirs:
        raise DrtpError("no runs: give run directories (RUN_DIR…) or --group NAME=RUN…")
    return out


# -- requests: what each view is made of --------------------------------------------------------------------


def trace_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[~df["auxiliary"].to_numpy(dtype=bool)]


def _sessions(rows: pd.DataFrame, keys: list[str], gap_s: float) -> pd.Series:
    """Per group of ``keys`` (rows sorted by start within it): 0, 1, … a new one after a pause over ``gap_s``
    between a start and the latest end of the group's rows before it."""
    by = [rows[k] for k in keys]
    latest = rows["end_s"].groupby(by, sort=False).cummax().groupby(by, sort=False).shift()
    pause = (rows["start_s"] > latest + gap_s).astype(np.int64)
    return pause.groupby(by, sort=False).cumsum()


def _operations(members: pd.DataFrame, keys: list[str], layer: pd.Series) -> pd.DataFrame:
    """One row per operation (the groups of ``keys``): its start, end, span, summed latency, layers, bytes, ok."""
    grouped = members.assign(layer=layer.astype(np.int64)).groupby(keys, sort=False)
    ops = grouped.agg(
        start_s=("start_s", "min"),
        end_s=("end_s", "max"),
        sum_s=("latency_s", "sum"),
        requests=("start_s", "size"),
        layers=("layer", "sum"),
        bytes=("bytes", "sum"),
        ok=("ok", "all"),
    ).reset_index()
    ops.insert(ops.columns.get_loc("start_s") + 2, "span_s", ops["end_s"] - ops["start_s"])
    return ops.sort_values("start_s", kind="stable").reset_index(drop=True)


OP_COLUMNS = ["client", "repository", "start_s", "end_s", "span_s", "sum_s", "requests", "layers", "bytes", "ok"]


def image_pulls(df: pd.DataFrame, gap_s: float = GAP_S) -> pd.DataFrame:
    """One row per image pull (see the module's docstring): client, repository, start_s, end_s, span_s, sum_s,
    requests, layers (its GET blobs), bytes, ok."""
    rows = trace_rows(df)
    rows = rows[rows["start_s"].notna() & (rows["method"] == "GET")]
    rows = rows.assign(_manifest=(rows["kind"] == "manifest").astype(np.int64))
    # at one start, the manifest first: a layer GET cannot come before its pull's manifest
    rows = rows.sort_values(["client", "repository", "start_s", "_manifest"], ascending=[True, True, True, False])
    keys = ["client", "repository", "_pull"]
    rows["_pull"] = rows.groupby(["client", "repository"], sort=False)["_manifest"].cumsum()
    rows = rows[rows["_pull"] > 0]  # layer GETs before any manifest GET of their client and repository
    rows = rows[_sessions(rows, keys, gap_s) == 0]
    if rows.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in OP_COLUMNS})
    return _operations(rows, keys, rows["_manifest"] == 0)[OP_COLUMNS]


def image_pushes(df: pd.DataFrame, gap_s: float = GAP_S) -> pd.DataFrame:
    """One row per image push (see the module's docstring), with the columns of :func:`image_pulls`
    (layers: its PUT blobs, one per layer uploaded)."""
    rows = trace_rows(df)
    upload = rows["method"].isin(UPLOADS) & (rows["kind"] == "blob")
    manifest = (rows["method"] == "PUT") & (rows["kind"] == "manifest")
    rows = rows[rows["start_s"].notna() & (upload | manifest)]
    rows = rows.assign(_manifest=((rows["method"] == "PUT") & (rows["kind"] == "manifest")).astype(np.int64))
    # at one start, the manifest last: it closes the push its layers belong to
    rows = rows.sort_values(["client", "repository", "start_s", "_manifest"])
    keys = ["client", "repository", "_push"]
    closed = rows.groupby(["client", "repository"], sort=False)["_manifest"].cumsum()
    rows["_push"] = closed - rows["_manifest"]  # PUT manifests before this row: the manifest is its push's last
    has_manifest = rows.groupby(keys, sort=False)["_manifest"].transform("max") == 1
    rows = rows[has_manifest]  # uploads after a client's last manifest PUT in a repository close no image
    session = _sessions(rows, keys, gap_s)
    rows = rows[session == session.groupby([rows[k] for k in keys], sort=False).transform("max")]
    if rows.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in OP_COLUMNS})
    layer = (rows["method"] == "PUT") & (rows["kind"] == "blob")
    return _operations(rows, keys, layer)[OP_COLUMNS]


def _stats_ms(seconds: np.ndarray) -> dict[str, float]:
    """Mean and nearest-rank percentiles (as the master's stats history) in ms; NaN when empty."""
    if not seconds.size:
        return {s: math.nan for s in STATS}
    ms = seconds * MS_PER_S
    out = {"mean": float(ms.mean())}
    for q in (50, 90, 99):
        out[f"p{q}"] = float(np.percentile(ms, q, method="inverted_cdf"))
    out["max"] = float(ms.max())
    return out


def view_values(df: pd.DataFrame, pulls: pd.DataFrame, pushes: pd.DataFrame) -> dict[str, tuple[np.ndarray, int, int]]:
    """Per view: (latencies in s of its succeeded members, how many failed, how many moved no layer)."""
    rows = trace_rows(df)
    key = group_key(rows)
    requests = {
        "all GET": rows["method"] == "GET",
        "GET layer": key == "GET blob",
        "GET manifest": key == "GET manifest",
        "total push": rows["method"] == "PUT",
    }
    out = {}
    for view, mask in requests.items():
        part = rows[mask.to_numpy(dtype=bool)]
        out[view] = (part.loc[part["ok"], "latency_s"].dropna().to_numpy(float), int((~part["ok"]).sum()), 0)
    for view, ops in (("image pull", pulls), ("image push", pushes)):
        moved = ops[ops["layers"] > 0] if not ops.empty else ops
        ok = moved["ok"].to_numpy(dtype=bool)
        out[view] = (moved["span_s"].to_numpy(float)[ok], int((~ok).sum()), len(ops) - len(moved))
    return out


# -- the views of several runs --------------------------------------------------------------------------------


@dataclass
class Views:
    """Every number of the views, as tables (latency in ms); ``drtp analyze results`` writes and draws them."""

    groups: dict[str, list[str]]  # group → run labels
    latency_size: pd.DataFrame  # group × request type × size bin: n, mean/p50/p90/p99/max ms
    per_run: pd.DataFrame  # run × view: n, failed, without_layers, mean/p50/p90/p99/max ms
    bars: pd.DataFrame  # group × view: runs, n, mean_ms (of run means), sd_ms, ci_low_ms, ci_high_ms
    operations: pd.DataFrame  # every image pull and push: run, op, then image_pulls' columns
    selection: Selection
    left_out: dict[str, dict]  # run → rows left out by the selection, by reason

    def to_json(self) -> dict:
        """views.json: the same tables as records (NaN as null) and the definitions' constants."""

        def records(frame: pd.DataFrame) -> list[dict]:
            return [
                {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                for r in frame.to_dict("records")
            ]

        return {
            "groups": self.groups,
            "selection": {
                "window_s": list(self.selection.window) if self.selection.window else None,
                "max_latency_s": self.selection.max_latency_s,
                "left_out": self.left_out,
            },
            "size_edges_bytes": [e if math.isfinite(e) else None for e in SIZE_EDGES],
            "gap_s": GAP_S,
            "interval": LEVEL,
            "latency_size": records(self.latency_size),
            "per_run": records(self.per_run),
            "bars": records(self.bars),
        }


def size_label(low: float, high: float) -> str:
    def fmt(b: float) -> str:
        for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
            if b >= scale:
                return f"{b / scale:g} {unit}"
        return f"{b:g} B"

    return f"≥ {fmt(low)}" if math.isinf(high) else f"{fmt(low)}–{fmt(high)}"


def latency_by_size(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The succeeded trace requests of ``frames`` pooled, per request type and size bin (bins with requests)."""
    rows = pd.concat([trace_rows(df) for df in frames]) if frames else pd.DataFrame()
    if rows.empty:
        return pd.DataFrame()
    rows = rows[rows["ok"] & rows["latency_s"].notna()]
    edges = np.asarray(SIZE_EDGES)
    index = np.searchsorted(edges, rows["bytes"].to_numpy(float), side="right") - 1
    out = []
    for (request, b), part in rows.groupby([group_key(rows).to_numpy(), index], sort=True):
        low, high = float(edges[b]), float(edges[b + 1])
        numbers = _stats_ms(part["latency_s"].to_numpy(float))
        out.append(
            {
                "request": request,
                "size_bin": size_label(low, high),
                "size_low_bytes": low,
                "size_high_bytes": high,
                "n": len(part),
                "mean_bytes": float(part["bytes"].mean()),
                **{f"{s}_ms": v for s, v in numbers.items()},
            }
        )
    return pd.DataFrame(out)


def bar_row(group: str, view: str, run_means: list[float], n: int) -> dict:
    """One bar: the mean of the runs' means and a :data:`LEVEL` t interval over them (NaN for one run)."""
    x = np.asarray([m for m in run_means if not math.isnan(m)], dtype=float)
    row = {"group": group, "view": view, "runs": len(x), "n": n, "mean_ms": math.nan}
    row.update(sd_ms=math.nan, ci_low_ms=math.nan, ci_high_ms=math.nan)
    if len(x):
        row["mean_ms"] = float(x.mean())
    if len(x) >= 2:
        row["sd_ms"] = float(x.std(ddof=1))
        low, high = scistats.t.interval(LEVEL, len(x) - 1, loc=x.mean(), scale=scistats.sem(x))
        # equal run means: a zero-width interval (scipy gives NaN for a zero scale)
        row["ci_low_ms"], row["ci_high_ms"] = (float(low), float(high)) if row["sd_ms"] > 0 else (x[0], x[0])
    return row


def seed_views(frames: dict[str, pd.DataFrame], groups: dict[str, list[str]], selection: Selection) -> Views:
    """The views of runs (``frames``: run label → rows, already inside ``selection``) and their groups."""
    per_run, ops, values = [], [], {}
    for run, df in frames.items():
        pulls, pushes = image_pulls(df), image_pushes(df)
        ops += [pulls.assign(run=run, op="pull"), pushes.assign(run=run, op="push")]
        values[run] = view_values(df, pulls, pushes)
        for view, (lat, failed, without) in values[run].items():
            numbers = _stats_ms(lat)
            per_run.append(
                {"run": run, "view": view, "n": len(lat), "failed": failed, "without_layers": without}
                | {f"{s}_ms": v for s, v in numbers.items()}
            )
    per_run_frame = pd.DataFrame(per_run)
    size_parts, bars = [], []
    for group, runs in groups.items():
        part = latency_by_size([frames[r] for r in runs])
        if not part.empty:
            size_parts.append(part.assign(group=group))
        for view in VIEWS:
            means = [_stats_ms(values[r][view][0])["mean"] for r in runs]
            bars.append(bar_row(group, view, means, sum(len(values[r][view][0]) for r in runs)))
    size_frame = pd.concat(size_parts, ignore_index=True) if size_parts else pd.DataFrame()
    if not size_frame.empty:
        size_frame = size_frame[["group", *[c for c in size_frame.columns if c != "group"]]]
    op_frame = pd.concat([o for o in ops if not o.empty], ignore_index=True) if any(not o.empty for o in ops) else None
    if op_frame is None:
        op_frame = pd.DataFrame(columns=["run", "op", *OP_COLUMNS])
    op_frame = op_frame[["run", "op", *OP_COLUMNS]]
    return Views(
        groups=groups,
        latency_size=size_frame,
        per_run=per_run_frame,
        bars=pd.DataFrame(bars),
        operations=op_frame,
        selection=selection,
        left_out={},
    )
