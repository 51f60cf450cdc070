"""Figures of the studies' views (drtp.analysis.views): latency against object size, mean latency bars.

They draw the tables of :class:`~drtp.analysis.views.Views` and compute nothing: each point, bar and error
bar is a number of ``latency_size.csv`` or ``mean_latency.csv``.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from drtp.analysis.plotting import BYTES, Charts, draw_charts, figure, new_figure, no_data, palette
from drtp.analysis.results_figures import ORDER
from drtp.analysis.views import VIEWS, Views

NO_SIZES = "no successful trace request"
NO_BARS = "no view has a successful request or image operation"


def _title(request: str) -> str:
    return request.replace("blob", "layer")


@figure
def fig_latency_size(views: Views) -> Figure:
    """Mean latency (ms, log) against object size per request type, one line per group (the FAST '18 backend
    figure); x is each bin's mean size, so a line's points sit where its requests' sizes are."""
    table = views.latency_size
    present = set(table["request"]) if not table.empty else set()
    requests = [r for r in ORDER if r in present] + sorted(present - set(ORDER))
    ncols = min(3, max(1, len(requests)))
    fig, axes = new_figure(
        max(1, int(np.ceil(len(requests) / ncols))),
        ncols,
        width=5.0,
        height=3.6,
        title="Mean latency against object size (successful requests; bytes on the wire)",
    )
    colors = palette(views.groups)
    if not requests:
        no_data(axes[0], NO_SIZES)
    for ax, request in zip(axes, requests, strict=False):
        part = table[table["request"] == request]
        for group, rows in part.groupby("group", sort=False):
            rows = rows.sort_values("size_low_bytes")
            x = rows["mean_bytes"].clip(lower=1.0)  # bodiless requests (HEAD, POST) at 1 B on the log axis
            ax.plot(x, rows["mean_ms"], marker="o", color=colors[group], label=f"{group} (n={rows['n'].sum():,})")
        for edge in sorted(set(part["size_low_bytes"]) - {0.0}):
            ax.axvline(edge, color="0.85", lw=0.6, zorder=0)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(BYTES)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlim(left=max(0.5, ax.get_xlim()[0]))
        ax.set_title(_title(request))
        ax.set_xlabel("object size (mean of the bin; grey lines: bin edges)")
        ax.set_ylabel("mean latency (ms, log scale)")
        ax.legend(loc="upper left")
    for ax in axes[max(1, len(requests)) :]:
        ax.set_visible(False)
    return fig


@figure
def fig_mean_bars(views: Views) -> Figure:
    """Mean latency per group and view, with 95 % t intervals over the group's runs (none for one run)."""
    bars = views.bars
    fig, axes = new_figure(
        2, 3, width=4.6, height=3.6, title="Mean latency per group (error bars: 95 % interval over its runs)"
    )
    colors = palette(views.groups)
    for ax, view in zip(axes, VIEWS, strict=True):
        part = bars[(bars["view"] == view) & bars["mean_ms"].notna()] if not bars.empty else bars
        ax.set_title(view)
        if part.empty:
            no_data(ax)
            ax.set_xticks([])
            continue
        x = np.arange(len(part))
        mean = part["mean_ms"].to_numpy(float)
        ax.bar(x, mean, color=[colors[g] for g in part["group"]])
        has = part["ci_low_ms"].notna().to_numpy()  # one run: no interval, no error bar
        if has.any():
            low = mean[has] - part["ci_low_ms"].to_numpy(float)[has]
            high = part["ci_high_ms"].to_numpy(float)[has] - mean[has]
            ax.errorbar(x[has], mean[has], yerr=[low, high], fmt="none", ecolor="0.15", capsize=4)
        for xi, m, runs in zip(x, mean, part["runs"], strict=True):
            ax.annotate(f"{runs} run{'s' if runs != 1 else ''}", (xi, m), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(x, part["group"].tolist(), rotation=15)
        ax.set_ylabel("mean latency (ms)")
        ax.set_ylim(bottom=0)
    return fig


def left_out(views: Views) -> dict[str, str]:
    why = {}
    if views.latency_size.empty:
        why["latency_size"] = NO_SIZES
    if views.bars.empty or views.bars["mean_ms"].isna().all():
        why["mean_latency"] = NO_BARS
    return why


def draw_views(views: Views, out: Path) -> Charts:
    """``latency_size.png`` and ``mean_latency.png`` when they have data; the others named, with the reason."""
    makers = {
        "latency_size": functools.partial(fig_latency_size, views),
        "mean_latency": functools.partial(fig_mean_bars, views),
    }
    return draw_charts(makers, left_out(views), out)
