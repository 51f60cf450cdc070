"""Figures of a trace's workload characterization, drawn from ``characterization.json``.

Each figure repeats one of the IBM Cloud registry workload study (Anwar et al.,
"Improving Docker Registry Design based on Production Workload Analysis",
FAST '18) for the traces at hand; its title ("FAST '18 Fig. 4") and file name
(``fig04_…``) carry that study's figure number, so the two can be set side by side.

Every function takes ``{label: characterization}`` (see
:func:`drtp.analysis.characterize.characterize`) and returns a Figure, so a
notebook can redraw any figure from the JSON alone; several traces (e.g. one
per availability zone) appear side by side, one colour per label.  Response
times are drawn in milliseconds (the JSON holds seconds).  A figure with
nothing to draw for any trace (e.g. sizes of a trace without a body) is named
by :func:`left_out` with the reason and left out by :func:`draw_all`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, PercentFormatter

from drtp.analysis.plotting import BYTES, Charts, cdf_line, draw_charts, figure, new_figure, no_data, palette
from drtp.units import MS_PER_S

Chars = dict[str, dict]


def _stacked_shares(ax, shares: pd.DataFrame, title: str, ylabel: str = "share of requests") -> None:
    """100 % stacked bars, one per label, with the share written on each part."""
    bottom = np.zeros(len(shares))
    colors = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860"]
    for i, col in enumerate(shares.columns):
        vals = pd.to_numeric(shares[col], errors="coerce").fillna(0).to_numpy(dtype=float)
        ax.bar(shares.index, vals, bottom=bottom, label=col, color=colors[i % len(colors)])
        for x, (v, b) in enumerate(zip(vals, bottom, strict=True)):
            if v >= 0.04:
                ax.text(x, b + v / 2, f"{v:.0%}", ha="center", va="center", fontsize=8, color="white")
        bottom += vals
    ax.set_ylim(0, 1)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))


@figure
def fig_request_types(chars: Chars) -> Figure:
    """Image pulls vs pushes, and requests per HTTP method."""
    fig, (a, b) = new_figure(1, 2, width=5.5, title="Request types (FAST '18 Fig. 4)")
    pp = pd.DataFrame(
        {
            lab: {
                "pulls (GET manifest)": c["request_types"]["pull_ratio"],
                "pushes (PUT manifest)": c["request_types"]["push_ratio"],
            }
            for lab, c in chars.items()
        }
    ).T
    _stacked_shares(a, pp, "(a) image pulls vs pushes", "share of image operations")
    methods = pd.DataFrame({lab: c["request_types"]["method_share"] for lab, c in chars.items()}).T.fillna(0)
    _stacked_shares(b, methods, "(b) requests by HTTP method")
    return fig


@figure
def fig_manifest_layer(chars: Chars) -> Figure:
    """Manifest vs layer share of pulls (GET) and pushes (PUT or HEAD)."""
    fig, axes = new_figure(1, 2, width=5.0, title="Manifest vs layer requests (FAST '18 Fig. 5)")
    for ax, (op, title) in zip(
        axes, (("pull", "(a) pulls: GET requests"), ("push", "(b) pushes: PUT or HEAD requests")), strict=True
    ):
        frame = pd.DataFrame(
            {
                lab: {
                    "manifest": c["manifest_layer_share"][op]["manifest"],
                    "layer": c["manifest_layer_share"][op]["layer"],
                }
                for lab, c in chars.items()
            }
        ).T
        _stacked_shares(ax, frame, title)
    return fig


def _cdf_panels(
    chars: Chars,
    section: str,
    keys: list[tuple[str, str]],
    title: str,
    xlabel: str,
    formatter=None,
    ncols: int = 2,
    scale: float = 1.0,
) -> Figure:
    nrows = int(np.ceil(len(keys) / ncols))
    fig, axes = new_figure(nrows, ncols, width=5.0, height=3.6, title=title)
    colors = palette(chars)
    for ax, (key, sub) in zip(axes, keys, strict=False):
        drawn = [cdf_line(ax, c[section].get(key, {}), lab, colors[lab], scale=scale) for lab, c in chars.items()]
        ax.set_title(sub)
        ax.set_xlabel(xlabel)
        if formatter is not None:
            ax.xaxis.set_major_formatter(formatter)
        if any(drawn):
            ax.legend(loc="lower right")
        else:
            no_data(ax)
    for ax in axes[len(keys) :]:
        ax.set_visible(False)
    return fig


@figure
def fig_sizes(chars: Chars) -> Figure:
    """Sizes of layers and manifests for GET and PUT requests."""
    keys = [
        ("GET blob", "(a) GET layer"),
        ("GET manifest", "(b) GET manifest"),
        ("PUT blob", "(c) PUT layer"),
        ("PUT manifest", "(d) PUT manifest"),
    ]
    return _cdf_panels(
        chars, "sizes", keys, "Request sizes (FAST '18 Fig. 6)", "size (bytes written, log scale)", BYTES
    )


@figure
def fig_requests_per_minute(chars: Chars) -> Figure:
    """Requests received per minute."""
    fig, (ax,) = new_figure(1, 1, width=6.5, title="Load: requests per minute (FAST '18 Fig. 7)")
    colors = palette(chars)
    drawn = [cdf_line(ax, c["requests_per_minute"], lab, colors[lab], log=False) for lab, c in chars.items()]
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("requests per minute (symlog scale; idle minutes count as 0)")
    ax.legend(loc="lower right") if any(drawn) else no_data(ax)
    return fig


@figure
def fig_response_times(chars: Chars) -> Figure:
    """Response times per method and kind."""
    present = []
    for c in chars.values():
        present += [k for k in c["response_times"] if k not in present]
    order = [
        "GET blob",
        "PUT blob",
        "PATCH blob",
        "GET manifest",
        "PUT manifest",
        "HEAD blob",
        "HEAD manifest",
        "POST blob",
    ]
    keys = [(k, f"{k.replace('blob', 'layer')}") for k in order if k in present]
    if not keys:
        keys = [("GET blob", "GET layer")]
    return _cdf_panels(
        chars,
        "response_times",
        keys,
        "Response time (FAST '18 Fig. 8)",
        "response time (ms, log scale)",
        ncols=3,
        scale=MS_PER_S,
    )


@figure
def fig_response_vs_size(chars: Chars) -> Figure:
    """GET layer response time by layer size (median, interquartile band)."""
    fig, (ax,) = new_figure(1, 1, width=6.5, title="Response time vs layer size, GET layer (FAST '18 Fig. 9)")
    colors = palette(chars)
    drawn = False
    for lab, c in chars.items():
        bins = c["response_vs_size"]["bins"]
        if not bins:
            continue
        x = [b["size_mid"] for b in bins]
        ax.plot(x, [b["median_s"] * MS_PER_S for b in bins], marker="o", ms=3, color=colors[lab], label=f"{lab} median")
        ax.fill_between(
            x,
            [b["p25_s"] * MS_PER_S for b in bins],
            [b["p75_s"] * MS_PER_S for b in bins],
            color=colors[lab],
            alpha=0.2,
            label=f"{lab} 25–75th pct",
        )
        drawn = True
    if drawn:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(BYTES)
        ax.legend(loc="upper left")
    else:
        no_data(ax)
    ax.set_xlabel("layer size (bytes, log scale; quarter-decade bins)")
    ax.set_ylabel("response time (ms, log scale)")
    return fig


POPULARITY = (
    ("layers", "layers (GET)"),
    ("manifests", "manifests (GET)"),
    ("repositories", "repositories"),
    ("users", "users"),
    ("clients", "clients"),
)


@figure
def fig_popularity(chars: Chars) -> Figure:
    """Cumulative share of accesses taken by the most popular items."""
    fig, axes = new_figure(2, 3, width=4.3, height=3.5, title="Popularity skew (FAST '18 Fig. 10)")
    colors = palette(chars)
    for ax, (key, name) in zip(axes, POPULARITY, strict=False):
        drawn = False
        for lab, c in chars.items():
            p = c["popularity"][key]
            if p.get("accesses"):
                ax.plot(
                    p["curve"]["item_share"],
                    p["curve"]["access_share"],
                    color=colors[lab],
                    label=f"{lab} ({p['items']:,} items)",
                )
                drawn = True
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x * 100:g}%"))
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylim(0, 1.02)
        ax.set_title(name)
        ax.set_xlabel("most accessed items (share of all, log scale)")
        ax.set_ylabel("share of accesses")
        ax.legend(loc="lower right") if drawn else no_data(ax)
    axes[-1].set_visible(False)
    return fig


@figure
def fig_top10(chars: Chars) -> Figure:
    """Share of accesses of each of the ten most popular items."""
    fig, axes = new_figure(1, 5, width=3.4, height=3.6, title="Top-10 popularity (FAST '18 Fig. 11)")
    colors = palette(chars)
    n = len(chars)
    width = 0.8 / max(1, n)
    for ax, (key, name) in zip(axes, POPULARITY, strict=True):
        for i, (lab, c) in enumerate(chars.items()):
            shares = c["popularity"][key].get("top_shares", [])
            if shares:
                ranks = np.arange(1, len(shares) + 1) + (i - (n - 1) / 2) * width
                total = c["popularity"][key]["top10_share"]
                ax.bar(ranks, shares, width=width, color=colors[lab], label=f"{lab} (top 10: {total:.1%})")
        ax.set_xticks(range(1, 11))
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_title(name)
        ax.set_xlabel("popularity rank")
        ax.set_ylabel("share of accesses")
        ax.legend(loc="upper right") if ax.containers else no_data(ax)
    return fig


@figure
def fig_follow_ups(chars: Chars) -> Figure:
    """GET layer requests following a GET manifest within a client session."""
    any_c = next(iter(chars.values()))
    s = any_c["follow_ups"]["session_s"]
    w = any_c["follow_ups"]["push_window_s"]
    fig, axes = new_figure(
        1, 2, width=5.5, title=f"GET manifest → GET layer follow-ups, session {s:g} s (FAST '18 Fig. 12)"
    )
    colors = palette(chars)
    titles = {"all": "(a) all GET manifest requests", "after_push": f"(b) within {w:g} s after a PUT to the repository"}
    for ax, key in zip(axes, ("all", "after_push"), strict=True):
        drawn = False
        for lab, c in chars.items():
            st = c["follow_ups"].get(key, {})
            if st.get("manifests"):
                ax.step(
                    st["cdf"]["layers"],
                    st["cdf"]["share"],
                    where="post",
                    color=colors[lab],
                    label=f"{lab}: {st['not_followed']:.0%} not followed (n={st['manifests']:,})",
                )
                drawn = True
        ax.set_title(titles[key])
        ax.set_xlabel("GET layer requests in the session after the manifest")
        ax.set_ylabel("CDF (share of GET manifests)")
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylim(0, 1.02)
        ax.legend(loc="lower right") if drawn else no_data(ax)
    return fig


@figure
def fig_concurrency(chars: Chars) -> Figure:
    """Active clients and requests, as CDFs and over time."""
    bin_s = next(iter(chars.values()))["concurrency"]["bin_s"]
    fig, axes = new_figure(
        2, 2, width=5.5, height=3.6, title=f"Client and request concurrency, {bin_s:g} s bins (FAST '18 Fig. 13)"
    )
    colors = palette(chars)
    for ax, key, name in (
        (axes[0], "active_clients", "(a) active clients (distinct clients sending in a bin)"),
        (axes[1], "active_requests", "(b) active requests (average in flight per bin)"),
    ):
        drawn = [cdf_line(ax, c["concurrency"][key], lab, colors[lab], log=False) for lab, c in chars.items()]
        if key == "active_clients":
            ax.set_xscale("symlog", linthresh=1)
        ax.set_xlabel(key.replace("_", " ") + (" (symlog scale)" if key == "active_clients" else ""))
        ax.set_title(name)
        ax.legend(loc="lower right") if any(drawn) else no_data(ax)
    for ax, key, ylabel in (
        (axes[2], "active_clients", "active clients"),
        (axes[3], "requests_per_bin", f"requests per {bin_s:g} s"),
    ):
        for lab, c in chars.items():
            ser = c["concurrency"]["series"]
            if ser:
                t = pd.to_datetime(np.asarray(ser["t_s"]) + ser["start"], unit="s", utc=True)
                vals = np.asarray(ser[key], dtype=float)
                if key == "requests_per_bin":
                    vals = vals * bin_s / ser["every_s"]  # per bin, averaged over a plotted point
                ax.plot(t, vals, color=colors[lab], lw=0.8, label=lab)
        ax.set_xlabel("time (UTC)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{ylabel} over time")
        locator = AutoDateLocator()
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
        ax.legend(loc="upper right")
    return fig


@figure
def fig_rhythm(chars: Chars) -> Figure:
    """Average requests per hour of day and per day of week (UTC)."""
    fig, (a, b) = new_figure(1, 2, width=5.5, title="Daily and weekly rhythm (FAST '18 Fig. 14)")
    colors = palette(chars)
    for lab, c in chars.items():
        h = c["rhythm"]["hour_of_day"]
        if h:
            a.plot([int(k) for k in h], list(h.values()), marker="o", ms=3, color=colors[lab], label=lab)
    a.set_xticks(range(0, 24, 3))
    a.set_xlabel("hour of day (UTC)")
    a.set_ylabel("requests per hour (average)")
    a.set_title("(a) by hour of day")
    a.set_ylim(bottom=0)
    a.legend()
    days = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
    n = len(chars)
    width = 0.8 / max(1, n)
    for i, (lab, c) in enumerate(chars.items()):
        d = c["rhythm"]["day_of_week"]
        x = np.arange(7) + (i - (n - 1) / 2) * width
        b.bar(x, [d.get(k, np.nan) for k in days], width=width, color=colors[lab], label=lab)
    b.set_xticks(range(7), days)
    b.set_xlabel("day of week (UTC)")
    b.set_ylabel("average requests per day")
    b.set_title("(b) by day of week")
    b.legend()
    return fig


@figure
def fig_arrivals(chars: Chars) -> Figure:
    """Request inter-arrival times and idle periods."""
    keys = [("inter_arrival", "(a) inter-arrival time"), ("idle", "(b) idle periods (no request in flight)")]
    return _cdf_panels(
        chars, "arrivals", keys, "Inter-arrival and idle times (FAST '18 Fig. 15)", "seconds (log scale)"
    )


@figure
def fig_data_volume(chars: Chars) -> Figure:
    """Data ingress and egress per trace."""
    fig, (ax,) = new_figure(1, 1, width=6.0, title="Data ingress and egress per trace")
    frame = pd.DataFrame(
        {
            lab: {"ingress (PUT/PATCH/POST)": c["data"]["ingress_bytes"], "egress (GET)": c["data"]["egress_bytes"]}
            for lab, c in chars.items()
        }
    ).T
    frame.plot.bar(ax=ax, rot=0, color=["#DD8452", "#4C72B0"])
    ax.yaxis.set_major_formatter(BYTES)
    ax.set_ylabel("bytes transferred")
    ax.set_xlabel("trace")
    return fig


FIGURES: dict[str, Callable[[Chars], Figure]] = {
    "fig04_request_types": fig_request_types,
    "fig05_manifest_layer": fig_manifest_layer,
    "fig06_sizes": fig_sizes,
    "fig07_requests_per_minute": fig_requests_per_minute,
    "fig08_response_times": fig_response_times,
    "fig09_response_vs_size": fig_response_vs_size,
    "fig10_popularity": fig_popularity,
    "fig11_top10": fig_top10,
    "fig12_follow_ups": fig_follow_ups,
    "fig13_concurrency": fig_concurrency,
    "fig14_rhythm": fig_rhythm,
    "fig15_arrivals": fig_arrivals,
    "data_volume": fig_data_volume,
}


def _none_has(chars: Chars, has) -> bool:
    return not any(has(c) for c in chars.values())


def left_out(chars: Chars) -> dict[str, str]:
    """The figures with nothing to draw for any trace, name → why (figures with some data keep their
    empty panels, each marked "no data")."""
    why: dict[str, str] = {}
    if _none_has(chars, lambda c: any(c["manifest_layer_share"][op]["requests"] for op in ("pull", "push"))):
        why["fig05_manifest_layer"] = "no GET, PUT or HEAD request"
    if _none_has(chars, lambda c: any(d.get("n") for d in c["sizes"].values())):
        why["fig06_sizes"] = "no successful GET or PUT request with a body"
    if _none_has(chars, lambda c: any(d.get("n") for d in c["response_times"].values())):
        why["fig08_response_times"] = "no response times"
    if _none_has(chars, lambda c: c["response_vs_size"]["bins"]):
        why["fig09_response_vs_size"] = "no successful GET layer request with a size"
    if _none_has(chars, lambda c: c["follow_ups"].get("all", {}).get("manifests")):
        why["fig12_follow_ups"] = "no GET manifest request"
    if _none_has(chars, lambda c: c["arrivals"]["inter_arrival"].get("n")):
        why["fig15_arrivals"] = "fewer than two requests"
    if _none_has(chars, lambda c: c["data"]["ingress_bytes"] or c["data"]["egress_bytes"]):
        why["data_volume"] = "no bytes transferred"
    return why


def draw_all(chars: Chars, out: Path) -> Charts:
    """Every figure that has data as ``out/<name>.png``; the others named, with the reason, in ``left_out``."""
    makers = {name: functools.partial(make, chars) for name, make in FIGURES.items()}
    return draw_charts(makers, left_out(chars), out)
