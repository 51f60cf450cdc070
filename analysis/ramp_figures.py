"""The figure of a capacity ramp (``drtp ramp``): what each step offered, what it got, and where it broke.

Three panels over the offered rate of each step: the rate requests started at
(achieved; the diagonal is "as offered"), the p50/p99 latency the objectives
were judged on, and the shares of failed and throttled (429) requests.  Steps
that broke an objective are drawn in red, the knee (the highest rate that held)
as a dashed line.  It draws ramp.json's numbers, it
does not recount them.
"""

from __future__ import annotations

import math

from matplotlib.figure import Figure

from drtp.analysis.plotting import figure, new_figure

HELD, BROKE = "tab:green", "tab:red"


@figure
def fig_ramp(ramp: dict) -> Figure:
    steps = ramp["steps"]
    fig, (rates, latency, shares) = new_figure(1, 3, width=4.6, height=3.8, title="capacity ramp")
    x = [s["rate"] for s in steps]
    colors = [HELD if s["held"] else BROKE for s in steps]
    achieved = [math.nan if s["achieved_rps"] is None else s["achieved_rps"] for s in steps]
    top = max(x + [a for a in achieved if a == a]) * 1.05 if steps else 1.0
    rates.plot([0, top], [0, top], ls=":", color="grey", lw=1, label="as offered")
    rates.plot(x, achieved, color="tab:blue", lw=1, label="achieved")
    rates.scatter(x, achieved, c=colors, zorder=3)
    rates.set_xlabel("offered (requests/s)")
    rates.set_ylabel("achieved (requests started/s)")
    for stat, style in (("p50_ms", "-"), ("p99_ms", "--")):
        points = [(s["rate"], s[stat]) for s in steps if s.get(stat) is not None]
        if points:
            latency.plot(*zip(*points, strict=True), ls=style, color="tab:blue", lw=1, label=stat.replace("_ms", ""))
            latency.scatter(
                *zip(*points, strict=True),
                c=[HELD if s["held"] else BROKE for s in steps if s.get(stat) is not None],
                zorder=3,
            )
    latency.set_xlabel("offered (requests/s)")
    latency.set_ylabel(f"latency (ms, {ramp.get('latency', 'response_s')})")
    for stat, style in (("failed", "-"), ("throttled", "--")):
        shares.plot(x, [100 * s[stat] for s in steps], ls=style, color="tab:blue", lw=1, label=stat)
        shares.scatter(x, [100 * s[stat] for s in steps], c=colors, zorder=3)
    shares.set_xlabel("offered (requests/s)")
    shares.set_ylabel("share of the step's requests (%)")
    shares.set_title("throttled = answered 429", fontsize=9)
    knee = ramp.get("knee_rps")
    for ax in (rates, latency, shares):
        if knee is not None:
            ax.axvline(knee, ls="--", color=HELD, lw=1, label=f"knee {knee:g}/s")
        ax.legend(loc="upper left")
    latency.set_title(f"objectives: {ramp.get('slo', '')}", fontsize=9)
    return fig
