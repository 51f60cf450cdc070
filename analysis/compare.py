"""``drtp analyze compare``: whether a candidate's runs differ from a baseline's, with an interval and a test.

A study ends in a sentence such as "registry B's layer pulls are 12 % slower than A's".
One run a side cannot carry it: runs of one setup differ (the machine, the network, the
registry's caches), so the unit of evidence is the run.  For each slice (``all`` and each
method + kind) and each statistic, this module takes one value per run — read from the
run's ``summary.json``, the numbers the master computed once — and compares the sides as
the Go team's benchstat does:

* the median over runs per side, and the relative change of the candidate's median from
  the baseline's (for the failed share: the difference of the shares, in points);
* a 95 % interval of that change, by bootstrap over runs (``scipy.stats.bootstrap``,
  percentile method: at 4 runs a side it covers ~91 % of the time, from 6 runs ~95 %);
* the Mann-Whitney U test over the runs' values (``scipy.stats.mannwhitneyu``, two-sided);
* a verdict: ``inconclusive`` with fewer than :data:`MIN_RUNS` runs on a side (there is
  not enough to tell, whatever the numbers), ``same`` when p ≥ α or the change is under the
  noise threshold, else ``better`` or ``worse`` (lower latency and failed share, higher
  throughput are better);
* runs whose value lies more than 3 MADs from their side's median are flagged.

Latency is the one each run is judged on by its own summary and ``--slo``
(drtp.replay.slo.judged_latency): ``response_s`` for rate-mode runs — from each
request's intended start, so a registry that stalls cannot hide it by slowing the
sender — and ``latency_s`` otherwise; runs of both kinds are not compared.  A run
whose summary says it did not complete (a repetition interrupted) is left out, named.

One run against one run: its requests are not independent draws, so the interval comes
from the run cut into :data:`BLOCKS` consecutive time blocks, each block's figures made by
the same results model as the run's summary; the verdict stays ``inconclusive``.

A part of each run instead of the whole: ``--window FROM:TO`` takes every run's trace requests that
started in ``[FROM, TO)`` (as ``drtp analyze results --window``), and ``--event NAME`` compares, run by
run, the requests that started during the run's event ``NAME`` (its events.csv; the candidate) with
those that started in the same length of time before it (the baseline) — the windows of summary.json's
``events[]`` (drtp.replay.windows).  A part's figures are the results model fed its rows, as the whole
run's summary is.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from drtp.analysis.results import read_run_files, run_model
from drtp.analysis.views import Selection, select
from drtp.errors import DrtpError
from drtp.replay.event_log import EVENTS_CSV, read_events
from drtp.replay.run_dirs import run_dirs_in
from drtp.replay.slo import judged_latency
from drtp.replay.summary import ResultsModel
from drtp.replay.windows import event_windows

STATS = ("p50", "p90", "p99", "mean", "throughput", "failed")
LOWER_IS_BETTER = {"p50": True, "p90": True, "p99": True, "mean": True, "throughput": False, "failed": True}
UNITS = {"p50": "ms", "p90": "ms", "p99": "ms", "mean": "ms", "throughput": "req/s", "failed": "%"}
MIN_RUNS = 4  # runs a side for a verdict other than inconclusive
ALPHA = 0.05
NOISE = 0.02  # a relative change (or, for the failed share, a difference) under this is "same"
MAD_LIMIT = 3.0  # runs further than this many MADs from their side's median are flagged
BLOCKS = 10  # one run against one: time blocks its requests are cut into
RESAMPLES = 2000
ALL = "all"


@dataclass
class Side:
    """One side of a comparison: run labels and, per (slice, stat), one value per run (NaN: none)."""

    labels: list[str]
    values: dict[tuple[str, str], list[float]] = field(default_factory=dict)


@dataclass
class Row:
    """One line of the comparison (compare.json's ``rows``, compare.csv's lines)."""

    slice: str
    stat: str
    unit: str
    baseline: float | None  # median over the baseline's runs
    candidate: float | None
    change: float | None  # relative change (failed: difference of shares)
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    verdict: str  # better, worse, same, inconclusive
    baseline_runs: int
    candidate_runs: int
    outliers: list[str]  # labels of runs > MAD_LIMIT MADs from their side's median
    note: str = ""


def slice_values(part: dict, latency_key: str = "latency_s") -> dict[str, float]:
    """The statistics of one summary slice (``summary.json``'s top level or a ``per_method`` entry);
    ``latency_key``: the latency the run is judged on (:func:`drtp.replay.slo.judged_latency`)."""
    latency = part.get(latency_key) or {}
    requests = part.get("requests") or 0

    def ms(key: str) -> float:
        v = latency.get(key)
        return float("nan") if v is None else 1000.0 * v

    return {
        "p50": ms("p50"),
        "p90": ms("p90"),
        "p99": ms("p99"),
        "mean": ms("mean"),
        "throughput": float(part.get("throughput_rps", float("nan"))),
        "failed": 100.0 * part.get("failed", 0) / requests if requests else float("nan"),
    }


def summary_values(summary: dict, latency_key: str | None = None) -> dict[tuple[str, str], float]:
    """(slice, stat) -> value of one run, from its summary; latency as the run's summary and ``--slo`` judge it
    (``response_s`` in rate mode: from each request's intended start), unless ``latency_key`` says which."""
    key = latency_key or judged_latency(summary)
    out = {(ALL, s): v for s, v in slice_values(summary, key).items()}
    for name, part in (summary.get("per_method") or {}).items():
        out.update({(name, s): v for s, v in slice_values(part, key).items()})
    return out


def block_summaries(df: pd.DataFrame, summary: dict, blocks: int = BLOCKS) -> list[dict]:
    """The run's trace requests cut into ``blocks`` consecutive time blocks (by start), each summarized by
    the run's results model (so a block's p50 means what the run's p50 means)."""
    main = df[~df.auxiliary & df.start_s.notna()]
    if main.empty:
        return []
    edges = np.linspace(main.start_s.min(), main.start_s.max(), blocks + 1)
    index = np.clip(np.searchsorted(edges, main.start_s.to_numpy(), side="right") - 1, 0, blocks - 1)
    out = []
    for b in range(blocks):
        part = main[index == b]
        if not part.empty:
            model: ResultsModel = run_model(part, summary)
            out.append(model.summary())
    return out


def run_dirs(arg: str) -> list[Path]:
    """The runs an argument names: a run directory (requests.csv), or a folder of repetitions
    (``rep-<k>/`` run directories, as ``--repeat`` writes them)."""
    runs = [d for d in run_dirs_in(Path(arg)) if (d / "requests.csv").is_file()]  # a repetition never started
    if runs:
        return runs
    raise DrtpError(f"{arg}: not a run directory (no requests.csv) nor a folder of rep-*/ runs")


def load_side(args: list[str], option: str, left_out: list[str] | None = None) -> tuple[list[Path], list[dict]]:
    """A side's run directories and summaries.  A run whose summary says it did not complete (interrupted, a
    node lost, a write failed: its figures cover part of the trace), or that has no summary at all (the
    replayer was killed before it could write one), is left out, named in ``left_out``: a repetition cut
    short keeps the finished ones comparable."""
    dirs, summaries = [], []
    for d in (d for a in args for d in run_dirs(a)):
        if not (d / "summary.json").is_file():  # killed hard (SIGKILL, out of memory): its rows cover part of it
            if left_out is not None:
                left_out.append(f"{d}: did not finish: no summary.json")
            continue
        df, summary = read_run_files(d)
        if summary.get("complete") is False:
            if left_out is not None:
                left_out.append(f"{d}: {summary.get('incomplete_reason') or 'incomplete'}")
            continue
        if "per_method" not in summary:  # an older summary.json: the same model, fed from requests.csv
            summary = {**run_model(df, summary).summary(), "mode": summary.get("mode")}
        dirs.append(d)
        summaries.append(summary)
    if not dirs:
        raise DrtpError(f"{option} {' '.join(args)}: no complete run (each lacks summary.json or says complete: false)")
    return dirs, summaries


def latency_measure(bdirs: list[Path], bsum: list[dict], cdirs: list[Path], csum: list[dict]) -> str:
    """The latency both sides are judged on: ``latency_s``, or ``response_s`` when the runs are in rate mode,
    as their summaries and ``--slo`` judge them; runs of both kinds measure different things: refused."""
    kinds = {d: judged_latency(s) for d, s in zip(bdirs + cdirs, bsum + csum, strict=True)}
    if len(set(kinds.values())) > 1:
        rate = next(d for d, k in kinds.items() if k == "response_s")
        other = next(d for d, k in kinds.items() if k != "response_s")
        raise DrtpError(
            f"{rate}: a rate-mode run (latency from each request's intended start, response_s) cannot be compared "
            f"with {other} (latency from the actual start, latency_s): compare runs of one mode"
        )
    return next(iter(kinds.values()))


def side_of(labels: list[str], summaries: list[dict]) -> Side:
    side = Side(labels)
    per_run = [summary_values(s) for s in summaries]
    keys = {k for values in per_run for k in values}
    for key in keys:
        side.values[key] = [values.get(key, float("nan")) for values in per_run]
    return side


def outliers(labels: list[str], values: list[float]) -> list[str]:
    """Runs more than :data:`MAD_LIMIT` median absolute deviations from their side's median."""
    x = np.asarray(values, dtype=float)
    ok = ~np.isnan(x)
    if ok.sum() < 3:
        return []
    med = np.median(x[ok])
    mad = np.median(np.abs(x[ok] - med))
    if mad == 0:
        return []
    return [label for label, v in zip(labels, x, strict=True) if not math.isnan(v) and abs(v - med) > MAD_LIMIT * mad]


def _change(stat: str, base: float, cand: float) -> float | None:
    if stat == "failed":
        return (cand - base) / 100.0  # a difference of shares (values are percentages)
    if base == 0:
        return 0.0 if cand == 0 else None
    return cand / base - 1.0


def _change_statistic(stat: str):
    def statistic(b, c, axis=-1):
        mb, mc = np.median(b, axis=axis), np.median(c, axis=axis)
        if stat == "failed":
            return (mc - mb) / 100.0
        with np.errstate(divide="ignore", invalid="ignore"):
            return mc / mb - 1.0

    return statistic


def compare_values(
    stat: str,
    base: list[float],
    cand: list[float],
    *,
    alpha: float = ALPHA,
    noise: float = NOISE,
    min_runs: int = MIN_RUNS,
    rng: np.random.Generator | None = None,
) -> tuple[float | None, float | None, float | None, float | None, float | None, float | None, str]:
    """(baseline median, candidate median, change, ci_low, ci_high, p_value, verdict) of one statistic."""
    from scipy import stats

    b = np.asarray([v for v in base if not math.isnan(v)], dtype=float)
    c = np.asarray([v for v in cand if not math.isnan(v)], dtype=float)
    if len(b) == 0 or len(c) == 0:
        return None, None, None, None, None, None, "inconclusive"
    mb, mc = float(np.median(b)), float(np.median(c))
    change = _change(stat, mb, mc)
    lo = hi = None
    if len(b) >= 2 and len(c) >= 2 and change is not None:
        if np.all(b == b[0]) and np.all(c == c[0]):
            lo = hi = change
        else:
            res = stats.bootstrap(
                (b, c),
                _change_statistic(stat),
                vectorized=True,
                paired=False,
                n_resamples=RESAMPLES,
                method="percentile",
                confidence_level=1 - alpha,
                random_state=rng if rng is not None else np.random.default_rng(0),
            )
            lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
            if math.isnan(lo) or math.isnan(hi):
                lo = hi = None
    p = float(stats.mannwhitneyu(b, c, alternative="two-sided").pvalue)
    if len(b) < min_runs or len(c) < min_runs:
        verdict = "inconclusive"
    elif change is None:  # from zero to something: no ratio, but the test still decides
        verdict = "same" if p >= alpha else "worse" if LOWER_IS_BETTER[stat] else "better"
    elif p >= alpha or abs(change) < noise:
        verdict = "same"
    else:
        verdict = "worse" if (change > 0) == LOWER_IS_BETTER[stat] else "better"
    return mb, mc, change, lo, hi, p, verdict


def compare_sides(
    baseline: Side, candidate: Side, *, alpha: float = ALPHA, noise: float = NOISE, min_runs: int = MIN_RUNS, note=""
) -> list[Row]:
    rng = np.random.default_rng(20261126)  # a comparison reads the same twice
    slices = sorted({s for s, _ in baseline.values} | {s for s, _ in candidate.values}, key=lambda s: (s != ALL, s))
    rows = []
    for sl in slices:
        for stat in STATS:
            bv = baseline.values.get((sl, stat), [])
            cv = candidate.values.get((sl, stat), [])
            mb, mc, change, lo, hi, p, verdict = compare_values(
                stat, bv, cv, alpha=alpha, noise=noise, min_runs=min_runs, rng=rng
            )
            flagged = outliers(baseline.labels, bv) + outliers(candidate.labels, cv) if bv and cv else []
            rows.append(
                Row(
                    sl,
                    stat,
                    UNITS[stat],
                    mb,
                    mc,
                    change,
                    lo,
                    hi,
                    p,
                    verdict,
                    sum(not math.isnan(v) for v in bv),
                    sum(not math.isnan(v) for v in cv),
                    flagged,
                    note,
                )
            )
    return rows


@dataclass
class Comparison:
    rows: list[Row]
    meta: dict  # what was compared, and how
    baseline: Side
    candidate: Side


@dataclass
class Part:
    """The rows of one run a side compares (the whole run, a window of it, or an event's window) and their
    figures: its summary.json, or the results model fed the part's rows."""

    run_dir: Path
    rows: pd.DataFrame | None  # None: the whole run, read when needed (one run a side)
    summary: dict


def window_part(run_dir: Path, summary: dict, low: float, high: float, what: str) -> Part:
    """The trace requests of ``run_dir`` that started in ``[low, high)``, with their own figures; ``what``
    names the window in a refusal."""
    df, _ = read_run_files(run_dir)
    part, _ = select(df, Selection(window=(low, high)))
    if part["auxiliary"].all():
        raise DrtpError(f"{run_dir}: no trace request started in {what} [{low:g} s, {high:g} s)")
    figures = run_model(part, summary).summary()
    figures["mode"] = summary.get("mode")  # judged as its run is
    return Part(run_dir, part, figures)


def event_part(run_dir: Path, summary: dict, name: str, window: str) -> Part:
    """``window`` (before, during) of the event ``name`` of the run, from its events.csv."""
    events = read_events(run_dir / EVENTS_CSV)
    event = next((e for e in events if e.name == name), None)
    if event is None:
        known = ", ".join(e.name for e in events) or "none"
        raise DrtpError(f"--event {name}: {run_dir} has no such event in {EVENTS_CSV} (its events: {known})")
    df, _ = read_run_files(run_dir)
    ends = (df["start_s"] + df["latency_s"].fillna(0.0)).dropna()
    windows = {w.name: w for w in event_windows(event, float(ends.max()) if len(ends) else None)}
    if window not in windows:
        raise DrtpError(f"--event {name}: the event never started in {run_dir} (no {window} window)")
    w = windows[window]
    return window_part(run_dir, summary, w.from_s, w.to_s, f"the {window} window of event {name}")


def compare_runs(
    baseline_args: list[str],
    candidate_args: list[str] | None,
    *,
    alpha: float = ALPHA,
    noise: float = NOISE,
    window: tuple[float, float] | None = None,
    event: str | None = None,
) -> Comparison:
    """The comparison of two sets of runs (run directories, or folders of rep-*/ runs).

    ``window``: each run's requests started in ``[from, to)`` only; ``event``: each run's requests during
    its event of that name (the candidate) against those before it (the baseline), for the runs of both
    arguments (``candidate_args`` may then be empty)."""
    left_out: list[str] = []
    if event is not None:
        dirs, sums = load_side(baseline_args + list(candidate_args or []), "--baseline", left_out)
        labels = _labels(dirs)
        bparts = [event_part(d, s, event, "before") for d, s in zip(dirs, sums, strict=True)]
        cparts = [event_part(d, s, event, "during") for d, s in zip(dirs, sums, strict=True)]
        blabels, clabels = [f"{x} before" for x in labels], [f"{x} during" for x in labels]
    else:
        if not candidate_args:
            raise DrtpError("--candidate: required unless --event compares each run's windows")
        bdirs, bsum = load_side(baseline_args, "--baseline", left_out)
        cdirs, csum = load_side(candidate_args, "--candidate", left_out)
        labels = _labels(bdirs + cdirs)
        blabels, clabels = labels[: len(bdirs)], labels[len(bdirs) :]
        if window is not None:
            what = "the window"
            bparts = [window_part(d, s, *window, what) for d, s in zip(bdirs, bsum, strict=True)]
            cparts = [window_part(d, s, *window, what) for d, s in zip(cdirs, csum, strict=True)]
        else:
            bparts = [Part(d, None, s) for d, s in zip(bdirs, bsum, strict=True)]
            cparts = [Part(d, None, s) for d, s in zip(cdirs, csum, strict=True)]
    bdirs, bsum = [p.run_dir for p in bparts], [p.summary for p in bparts]
    cdirs, csum = [p.run_dir for p in cparts], [p.summary for p in cparts]
    meta = {
        "baseline": [str(d) for d in bdirs],
        "candidate": [str(d) for d in cdirs],
        "alpha": alpha,
        "noise": noise,
        "min_runs": MIN_RUNS,
        "latency": latency_measure(bdirs, bsum, cdirs, csum),
        "left_out": left_out,
    }
    if window is not None:
        meta["window"] = list(window)
    if event is not None:
        meta["event"] = event
        meta["sides"] = "baseline: each run's requests before the event; candidate: during it"
    if len(bparts) == 1 and len(cparts) == 1:
        bblocks = block_summaries(*_rows(bparts[0]))
        cblocks = block_summaries(*_rows(cparts[0]))
        for blocks, whole in ((bblocks, bsum[0]), (cblocks, csum[0])):
            for block in blocks:  # a block's summary has no mode: it is judged as its run is
                block["mode"] = whole.get("mode")
        note = f"1 run a side: interval from {BLOCKS} time blocks of each run; a verdict needs {MIN_RUNS} runs a side"
        meta["method"] = "time blocks"
        bside = side_of([f"{blabels[0]}#{i}" for i in range(len(bblocks))], bblocks)
        cside = side_of([f"{clabels[0]}#{i}" for i in range(len(cblocks))], cblocks)
        rows = compare_sides(
            bside,
            cside,
            alpha=alpha,
            noise=noise,
            min_runs=math.inf,
            note=note,
        )
        # the medians shown are the runs' own figures, not the blocks' medians
        whole_b, whole_c = summary_values(bsum[0]), summary_values(csum[0])
        for row in rows:
            b, c = whole_b.get((row.slice, row.stat)), whole_c.get((row.slice, row.stat))
            row.baseline = None if b is None or math.isnan(b) else b
            row.candidate = None if c is None or math.isnan(c) else c
            row.change = None if row.baseline is None or row.candidate is None else _change(row.stat, b, c)
            row.baseline_runs = row.candidate_runs = 1
        return Comparison(rows, meta, bside, cside)
    meta["method"] = "runs"
    bside, cside = side_of(blabels, bsum), side_of(clabels, csum)
    return Comparison(compare_sides(bside, cside, alpha=alpha, noise=noise), meta, bside, cside)


def _rows(part: Part) -> tuple[pd.DataFrame, dict]:
    """A part's rows and figures for its time blocks (the whole run read from its directory)."""
    if part.rows is not None:
        return part.rows, part.summary
    return read_run_files(part.run_dir)


def _labels(dirs: list[Path]) -> list[str]:
    names = [d.resolve().name for d in dirs]
    if len(set(names)) == len(names):
        return names
    return [f"{d.resolve().parent.name}/{d.resolve().name}" for d in dirs]


def _num(v: float | None, stat: str) -> str:
    if v is None:
        return "-"
    if stat == "failed":
        return f"{v:.2f}%"
    return f"{v:.3g} {UNITS[stat]}" if abs(v) < 1000 else f"{v:,.0f} {UNITS[stat]}"


def _pct(v: float | None, stat: str) -> str:
    if v is None:
        return "?"
    return f"{100 * v:+.2f}pt" if stat == "failed" else f"{100 * v:+.1f}%"


LATENCY_NOTES = {
    "latency_s": "latency: from each request's actual start (latency_s)",
    "response_s": "latency: from each request's intended start (response_s: rate mode, as --slo judges it)",
}


def format_rows(rows: list[Row], meta: dict | None = None) -> str:
    """A console table in benchstat's manner: medians, change with its interval, p, verdict ("~": same);
    ``meta`` (the comparison's) adds which latency was compared and the runs left out."""
    head = ("slice", "stat", "baseline", "candidate", "change [95% interval]", "p", "verdict")
    lines = [head]
    for r in rows:
        change = _pct(r.change, r.stat)
        if r.ci_low is not None and r.ci_high is not None:
            change += f" [{_pct(r.ci_low, r.stat)}, {_pct(r.ci_high, r.stat)}]"
        p = "-" if r.p_value is None else f"{r.p_value:.3f}"
        verdict = "~" if r.verdict == "same" else r.verdict
        if r.outliers:
            verdict += f" (outliers: {', '.join(r.outliers)})"
        lines.append((r.slice, r.stat, _num(r.baseline, r.stat), _num(r.candidate, r.stat), change, p, verdict))
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    text = ["  ".join(str(v).ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in lines]
    notes = {r.note for r in rows if r.note}
    few = {
        (r.baseline_runs, r.candidate_runs)
        for r in rows
        if r.verdict == "inconclusive" and not r.note and min(r.baseline_runs, r.candidate_runs) < MIN_RUNS
    }
    for b, c in sorted(few):
        notes.add(f"warning: {b} baseline and {c} candidate runs: a verdict needs {MIN_RUNS} runs a side")
    meta = meta or {}
    extra = [LATENCY_NOTES[meta["latency"]]] if meta.get("latency") in LATENCY_NOTES else []
    extra += [f"left out (not complete): {why}" for why in meta.get("left_out", [])]
    return "\n".join(text + sorted(notes) + extra)


def write_outputs(comparison: Comparison, out: Path) -> list[Path]:
    """compare.json (``rows`` + what was compared), compare.csv and a figure per slice; the figures' paths."""
    import json

    records = [asdict(r) for r in comparison.rows]
    (out / "compare.json").write_text(json.dumps({**comparison.meta, "rows": records}, indent=2, allow_nan=False))
    frame = pd.DataFrame(records)
    frame["outliers"] = frame["outliers"].map(lambda x: ";".join(x))
    frame.to_csv(out / "compare.csv", index=False)
    return [slice_figure(comparison, sl, out) for sl in dict.fromkeys(r.slice for r in comparison.rows)]


def figure_name(sl: str) -> str:
    return "compare-" + "".join(ch if ch.isalnum() else "-" for ch in sl.lower()) + ".png"


def slice_figure(comparison: Comparison, sl: str, out: Path) -> Path:
    """One slice: per statistic, each side's runs as dots and their median as a bar; the change and its
    interval in the panel's title."""
    from drtp.analysis.plotting import new_figure, save

    rows = {r.stat: r for r in comparison.rows if r.slice == sl}
    fig, axes = new_figure(2, 3, width=3.6, height=3.0, title=f"{sl}: baseline vs candidate")
    rng = np.random.default_rng(0)
    for ax, stat in zip(axes, STATS, strict=True):
        for x, side in enumerate((comparison.baseline, comparison.candidate)):
            values = np.asarray([v for v in side.values.get((sl, stat), []) if not math.isnan(v)])
            if len(values):
                ax.scatter(x + rng.uniform(-0.08, 0.08, len(values)), values, s=18, alpha=0.7)
                ax.hlines(np.median(values), x - 0.25, x + 0.25, colors="black", linewidth=2)
        ax.set_xticks([0, 1], ["baseline", "candidate"])
        ax.set_xlim(-0.6, 1.6)
        ax.set_ylabel(UNITS[stat])
        r = rows.get(stat)
        title = stat
        if r is not None:
            title += f": {_pct(r.change, stat)}"
            if r.ci_low is not None and r.ci_high is not None:
                title += f" [{_pct(r.ci_low, stat)}, {_pct(r.ci_high, stat)}]"
            title += f" {'~' if r.verdict == 'same' else r.verdict}"
        ax.set_title(title, fontsize=9)
    return save(fig, out / figure_name(sl))
