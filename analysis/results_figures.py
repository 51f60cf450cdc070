"""Figures of replay runs: latency CDFs and violins, throughput, failures, lateness; p99 over time with events.

``results`` is ``{run: analyze_run(...)}``; ``frames`` is ``{run: requests frame}``
(the violins need the raw latencies).  Every number written on a figure
(averages, p99, on-time ratio, failure counts) is the results model's, as in
the tables; only the curves' points come from pandas over the rows.  The trace's own recorded latencies,
when given, appear as the run ``ibm-trace-data`` (black, dashed).  Outliers
are clipped only in the violins, and the clipped count is written on the plot.
Latency and lateness are drawn in milliseconds (the results hold seconds).

A chart with nothing to draw (lateness of stress runs, failures when none
failed…) is named by :func:`left_out` with the reason, and :func:`draw_all`
leaves it out; called directly, a figure function still returns a figure that
says "no data".

A run with maintenance events (events.csv) gets its events' windows as named bands on every figure over
time (drtp.analysis.event_bands), and one more figure, the p99 latency per interval over time
(``event_latency``): the curve its ``recovery_s`` is read from.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from drtp.analysis.event_bands import draw_bands
from drtp.analysis.plotting import Charts, cdf_line, clip_note, draw_charts, figure, new_figure, no_data, palette
from drtp.analysis.registry_side import fig_registry_side, registry_blocks
from drtp.analysis.results import TRACE_ROW, failure_table, group_key
from drtp.units import MS_PER_S

VIOLIN_SAMPLE = 20_000  # rows per run and panel drawn in a violin (all rows count in the numbers)
SMOOTH_ABOVE_S = 600  # runs longer than this are plotted as a 10 s moving average
VIOLIN_CLIP_Q = 0.995  # violins clip latencies above this quantile of the panel, and say so
ORDER = [
    "GET blob",
    "GET manifest",
    "HEAD blob",
    "HEAD manifest",
    "PUT blob",
    "PUT manifest",
    "PATCH blob",
    "POST blob",
]


def _groups(results: dict[str, dict]) -> list[str]:
    keys = {k for r in results.values() for k, g in r["per_method"].items() if g["latency_s"]}
    return [k for k in ORDER if k in keys] + sorted(keys - set(ORDER))


def _colors(results: dict[str, dict]) -> dict:
    runs = [r for r in results if r != TRACE_ROW]
    colors = palette(runs)
    colors[TRACE_ROW] = (0.1, 0.1, 0.1)
    return colors


def _title(key: str) -> str:
    return key.replace("blob", "layer")


@figure
def fig_latency_cdf(results: dict[str, dict], frames: dict | None = None) -> Figure:
    groups = _groups(results) or ["all"]
    ncols = min(3, len(groups))
    fig, axes = new_figure(
        int(np.ceil(len(groups) / ncols)),
        ncols,
        width=5.0,
        height=3.6,
        title="Latency per request type (successful requests)",
    )
    colors = _colors(results)
    for ax, key in zip(axes, groups, strict=False):
        drawn = [
            cdf_line(
                ax,
                r["curves"]["latency"].get(key, {}),
                run,
                colors[run],
                scale=MS_PER_S,
                ls="--" if run == TRACE_ROW else "-",
            )
            for run, r in results.items()
        ]
        ax.set_title(_title(key))
        ax.set_xlabel("latency (ms, log scale)")
        ax.legend(loc="lower right") if any(drawn) else no_data(ax)
    for ax in axes[len(groups) :]:
        ax.set_visible(False)
    return fig


@figure
def fig_latency_violin(results: dict[str, dict], frames: dict[str, pd.DataFrame]) -> Figure:
    groups = _groups(results) or ["all"]
    ncols = min(3, len(groups))
    fig, axes = new_figure(
        int(np.ceil(len(groups) / ncols)),
        ncols,
        width=5.0,
        height=3.8,
        title="Latency distribution per run (violins; log scale)",
    )
    colors = _colors(results)
    rng = np.random.default_rng(0)
    for ax, key in zip(axes, groups, strict=False):
        parts = []
        for run, df in frames.items():
            ok = df[df["ok"] & ~df["auxiliary"]]
            v = (
                ok["latency_s"][group_key(ok) == key].dropna().to_numpy()
                if key != "all"
                else ok["latency_s"].dropna().to_numpy()
            )
            v = v[v > 0]
            if v.size > VIOLIN_SAMPLE:
                v = rng.choice(v, VIOLIN_SAMPLE, replace=False)
            if v.size:
                parts.append(pd.DataFrame({"run": run, "latency_ms": v * MS_PER_S}))
        ax.set_title(_title(key))
        if not parts:
            no_data(ax)
            continue
        data = pd.concat(parts, ignore_index=True)
        limit = float(np.quantile(data["latency_ms"], VIOLIN_CLIP_Q))
        clipped = int((data["latency_ms"] > limit).sum())
        data["latency_ms"] = data["latency_ms"].clip(upper=limit)
        sns.violinplot(
            data=data,
            x="run",
            y="latency_ms",
            hue="run",
            palette=colors,
            log_scale=True,
            cut=0,
            inner="quartile",
            ax=ax,
            legend=False,
        )
        clip_note(ax, clipped, len(data), limit, "ms")
        ax.set_xlabel("")
        ax.set_ylabel("latency (ms, log scale)")
        ax.tick_params(axis="x", labelrotation=15)
    for ax in axes[len(groups) :]:
        ax.set_visible(False)
    return fig


@figure
def fig_throughput(results: dict[str, dict], frames: dict | None = None) -> Figure:
    """Successful requests completed per second of each run, in whole bins (drtp.analysis.results.throughput_bins).

    Bins are 1 s wide (narrower for runs under 10 s, said in the legend).  A
    run's last bin, cut short by its end, is not drawn (its requests count in
    the average and every number): a count over a fraction of a bin would read
    as a drop in throughput.  The first bin starts at the run's first request,
    so it is always whole.
    """
    fig, (ax,) = new_figure(
        1, 1, width=8.0, height=4.0, title="Throughput over time (completed successful requests per second)"
    )
    colors = _colors(results)
    drawn = False
    for run, r in results.items():
        bins = r["curves"]["throughput"]
        if run == TRACE_ROW or not bins["counts"]:
            continue
        rate = np.asarray(bins["counts"], dtype=float) / bins["bin_s"]
        label = f"{run} (avg {r['throughput_rps']:.1f} req/s"
        label += f"; {bins['bin_s'] * MS_PER_S:g} ms bins)" if bins["bin_s"] < 1 else ")"
        if len(rate) > SMOOTH_ABOVE_S:  # long runs: a 10 s moving average keeps the line readable
            rate = pd.Series(rate).rolling(10, min_periods=1).mean().to_numpy()
            label += ", 10 s moving average"
        ax.stairs(rate, np.arange(len(rate) + 1) * bins["bin_s"], color=colors[run], lw=0.9, label=label)
        ax.axhline(r["throughput_rps"], color=colors[run], ls=":", lw=1)
        drawn = True
    _bands(ax, results, lambda r: r["curves"]["throughput"].get("origin_s", 0.0))
    ax.set_xlabel("time since the run's first request (s)")
    ax.set_ylabel("requests completed per second")
    if drawn:
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper right")
    else:
        no_data(ax)
    return fig


@figure
def fig_failures(results: dict[str, dict], frames: dict | None = None) -> Figure:
    fig, (ax,) = new_figure(1, 1, width=7.0, height=4.0, title="Failed trace requests per outcome class")
    table = failure_table(results)
    if table.empty or table.to_numpy().sum() == 0:
        no_data(ax, NO_FAILURES)
        ax.set_xticks([])
        ax.set_yticks([])
        return fig
    colors = _colors(results)
    table.plot.bar(ax=ax, rot=0, color=[colors[c] for c in table.columns])
    ax.set_xlabel("outcome (drtp.replay.outcome)")
    ax.set_ylabel("failed requests")
    return fig


@figure
def fig_lateness(results: dict[str, dict], frames: dict | None = None) -> Figure:
    fig, (ax,) = new_figure(1, 1, width=7.0, height=4.0, title="Lateness in as-is mode (actual − intended start)")
    colors = _colors(results)
    drawn = False
    for run, r in results.items():
        curve = r.get("curves", {}).get("lateness")
        late = r.get("lateness_s")
        if curve and late:
            on_time = f"{r['on_time_ratio']:.0%} within {r['on_time_s'] * MS_PER_S:g} ms"
            label = f"{run}: p99 {late['p99'] * MS_PER_S:.1f} ms, {on_time}"
            drawn |= cdf_line(ax, curve, label, colors[run], log=False, scale=MS_PER_S)
    if drawn:
        ax.set_xscale("symlog", linthresh=1.0)
        if all(r["curves"]["lateness"]["min"] >= 0 for r in results.values() if r.get("curves", {}).get("lateness")):
            ax.set_xlim(left=0)  # nothing early: no empty negative half
        ax.set_xlabel("lateness (ms, symlog scale: linear within ±1 ms; negative = early)")
        ax.legend(loc="lower right")
    else:
        no_data(ax, NO_LATENESS)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    return fig


def _bands(ax, results: dict[str, dict], origin) -> None:
    """Each run's event windows on ``ax`` (x: seconds since ``origin(result)`` of its clock), named by run
    when more than one run has events."""
    with_events = {run: r for run, r in results.items() if r.get("event_bands")}
    for run, r in with_events.items():
        draw_bands(ax, r["event_bands"], origin(r), run if len(with_events) > 1 else None)


@figure
def fig_event_latency(results: dict[str, dict], frames: dict[str, pd.DataFrame]) -> Figure:
    """The p99 latency of each run's succeeded trace requests per 1 s interval over the run (the intervals
    of stats_history.csv, rebuilt from the rows shown), with its events' windows as bands."""
    from drtp.analysis.run_stats import stats_from_requests

    fig, (ax,) = new_figure(1, 1, width=8.0, height=4.0, title="p99 latency over time, with the events' windows")
    colors = _colors(results)
    drawn = False
    for run in results:
        if run == TRACE_ROW or run not in frames:
            continue
        stats = stats_from_requests(frames[run])
        if stats["p99_ms"].notna().any():
            ax.step(stats["elapsed_s"], stats["p99_ms"], where="post", color=colors[run], lw=0.9, label=run)
            drawn = True
    _bands(ax, results, lambda r: 0.0)
    ax.set_xlabel("time since the run's start (s)")
    ax.set_ylabel("p99 latency per interval (ms)")
    if drawn:
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper right", fontsize=7)
    else:
        no_data(ax)
    return fig


NO_LATENCY = "no successful trace request"
NO_THROUGHPUT = "no successful trace request completed in a whole bin of any run"
NO_FAILURES = "no failed trace request"
NO_LATENESS = "no run in as-is mode: stress runs have no intended start times"

FIGURES: dict[str, Callable[..., Figure]] = {
    "latency_cdf": fig_latency_cdf,
    "latency_violin": fig_latency_violin,
    "throughput": fig_throughput,
    "failures": fig_failures,
    "lateness": fig_lateness,
}
# drawn only when a run has their data, and otherwise not named at all: they show what a run opted into
# (a registry's own metrics), which most runs have not
OPT_IN_FIGURES: dict[str, Callable[..., Figure]] = {
    "registry_side": fig_registry_side,
    "event_latency": fig_event_latency,
}


def left_out(results: dict[str, dict]) -> dict[str, str]:
    """The charts with nothing to draw, name → why; from the results alone, before anything is drawn."""
    why: dict[str, str] = {}
    if not any(r["curves"]["latency"]["all"].get("n") for r in results.values()):
        why["latency_cdf"] = why["latency_violin"] = NO_LATENCY
    runs = {run: r for run, r in results.items() if run != TRACE_ROW}
    if not any(any(r["curves"]["throughput"]["counts"]) for r in runs.values()):
        why["throughput"] = NO_THROUGHPUT
    if not any(r["failed"] for r in runs.values()):
        why["failures"] = NO_FAILURES
    if not any(r["curves"].get("lateness") and r.get("lateness_s") for r in runs.values()):
        why["lateness"] = NO_LATENESS
    return why


def draw_all(results: dict[str, dict], frames: dict[str, pd.DataFrame], out: Path) -> Charts:
    """Every chart that has data as ``out/<name>.png``; the others named, with the reason, in ``left_out``."""
    makers = {name: functools.partial(make, results, frames) for name, make in FIGURES.items()}
    if registry_blocks(results):
        makers["registry_side"] = functools.partial(OPT_IN_FIGURES["registry_side"], results, frames)
    else:  # an earlier analysis's chart must not pass for this one's
        (out / "registry_side.png").unlink(missing_ok=True)
    if any(r.get("event_bands") for r in results.values()):
        makers["event_latency"] = functools.partial(OPT_IN_FIGURES["event_latency"], results, frames)
    else:
        (out / "event_latency.png").unlink(missing_ok=True)
    return draw_charts(makers, left_out(results), out)
