"""Figures of replay runs: latency CDFs and violins, throughput, failures, lateness.

``results`` is ``{run: analyze_run(...)}``; ``frames`` is ``{run: requests frame}``
(the violins need the raw latencies).  Every number written on a figure
(averages, p99, on-time ratio, failure counts) is the results model's, as in
the tables; only the curves' points come from pandas over the rows.  The trace's own recorded latencies,
when given, appear as the run ``ibm-trace-data`` (black, dashed).  Outliers
are clipped only in the violins, and the clipped count is written on the plot.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from drtp.analysis.plotting import cdf_line, clip_note, new_figure, no_data, palette, save
from drtp.analysis.results import TRACE_ROW, failure_table, group_key

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
            cdf_line(ax, r["curves"]["latency"].get(key, {}), run, colors[run], ls="--" if run == TRACE_ROW else "-")
            for run, r in results.items()
        ]
        ax.set_title(_title(key))
        ax.set_xlabel("latency (s, log scale)")
        ax.legend(loc="lower right") if any(drawn) else no_data(ax)
    for ax in axes[len(groups) :]:
        ax.set_visible(False)
    return fig


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
                parts.append(pd.DataFrame({"run": run, "latency_s": v}))
        ax.set_title(_title(key))
        if not parts:
            no_data(ax)
            continue
        data = pd.concat(parts, ignore_index=True)
        limit = float(np.quantile(data["latency_s"], VIOLIN_CLIP_Q))
        clipped = int((data["latency_s"] > limit).sum())
        data["latency_s"] = data["latency_s"].clip(upper=limit)
        sns.violinplot(
            data=data,
            x="run",
            y="latency_s",
            hue="run",
            palette=colors,
            log_scale=True,
            cut=0,
            inner="quartile",
            ax=ax,
            legend=False,
        )
        clip_note(ax, clipped, len(data), limit, "s")
        ax.set_xlabel("")
        ax.set_ylabel("latency (s, log scale)")
        ax.tick_params(axis="x", labelrotation=15)
    for ax in axes[len(groups) :]:
        ax.set_visible(False)
    return fig


def fig_throughput(results: dict[str, dict], frames: dict | None = None) -> Figure:
    fig, (ax,) = new_figure(
        1, 1, width=8.0, height=4.0, title="Throughput over time (completed successful requests per second)"
    )
    colors = _colors(results)
    drawn = False
    for run, r in results.items():
        per_s = r["curves"]["per_second"]
        if run == TRACE_ROW or not per_s:
            continue
        label = f"{run} (avg {r['throughput_rps']:.1f} req/s)"
        if len(per_s) > SMOOTH_ABOVE_S:  # long runs: a 10 s moving average keeps the line readable
            per_s = pd.Series(per_s).rolling(10, min_periods=1).mean().to_numpy()
            label += ", 10 s moving average"
        ax.plot(np.arange(len(per_s)), per_s, color=colors[run], lw=0.9, label=label)
        ax.axhline(r["throughput_rps"], color=colors[run], ls=":", lw=1)
        drawn = True
    ax.set_xlabel("time since the run's first request (s)")
    ax.set_ylabel("requests completed per second")
    ax.legend(loc="upper right") if drawn else no_data(ax)
    return fig


def fig_failures(results: dict[str, dict], frames: dict | None = None) -> Figure:
    fig, (ax,) = new_figure(1, 1, width=7.0, height=4.0, title="Failed trace requests per outcome class")
    table = failure_table(results)
    if table.empty or table.to_numpy().sum() == 0:
        no_data(ax, "no failed requests")
        ax.set_xticks([])
        ax.set_yticks([])
        return fig
    colors = _colors(results)
    table.plot.bar(ax=ax, rot=0, color=[colors[c] for c in table.columns])
    ax.set_xlabel("outcome (drtp.replay.outcome)")
    ax.set_ylabel("failed requests")
    return fig


def fig_lateness(results: dict[str, dict], frames: dict | None = None) -> Figure:
    fig, (ax,) = new_figure(1, 1, width=7.0, height=4.0, title="Lateness in as-is mode (actual − intended start)")
    colors = _colors(results)
    drawn = False
    for run, r in results.items():
        curve = r.get("curves", {}).get("lateness")
        late = r.get("lateness_s")
        if curve and late:
            on_time = f"{r['on_time_ratio']:.0%} within {r['on_time_s'] * 1000:g} ms"
            label = f"{run}: p99 {late['p99'] * 1000:.1f} ms, {on_time}"
            drawn |= cdf_line(ax, curve, label, colors[run], log=False)
    if drawn:
        ax.set_xscale("symlog", linthresh=1e-3)
        ax.set_xlabel("lateness (s, symlog scale; negative = early)")
        ax.legend(loc="lower right")
    else:
        no_data(ax, "no run in as-is mode (no intended_s)")
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    return fig


FIGURES: dict[str, Callable[..., Figure]] = {
    "latency_cdf": fig_latency_cdf,
    "latency_violin": fig_latency_violin,
    "throughput": fig_throughput,
    "failures": fig_failures,
    "lateness": fig_lateness,
}


def draw_all(results: dict[str, dict], frames: dict[str, pd.DataFrame], out: Path) -> dict[str, Path]:
    return {name: save(make(results, frames), out / f"{name}.png") for name, make in FIGURES.items()}
