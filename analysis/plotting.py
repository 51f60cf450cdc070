"""Shared plotting helpers: figures without pyplot's global state, one style, PNG output.

Figures are built as :class:`matplotlib.figure.Figure` objects (Agg canvas),
so drawing many of them in a long run leaks nothing and needs no display;
notebooks show the same objects inline.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, NullFormatter, PercentFormatter

STYLE = {"axes.grid": True, "grid.alpha": 0.35, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 8}
BYTES = EngFormatter(unit="B", places=0, sep="")


def new_figure(nrows: int = 1, ncols: int = 1, width: float = 6.0, height: float = 4.0, title: str | None = None):
    """A figure and its axes (always a flat list), styled like every drtp figure."""
    sns.set_theme(style="whitegrid", context="notebook", rc=STYLE)
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel().tolist()
    if title:
        fig.suptitle(title, fontsize=13, fontweight="bold")
    return fig, axes


def palette(labels) -> dict[str, tuple]:
    """One fixed colour per label, in the given order."""
    labels = list(labels)
    return dict(zip(labels, sns.color_palette("tab10", max(1, len(labels))), strict=False))


def save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def cdf_line(ax, dist: dict, label: str, color=None, log: bool = True, **kw) -> bool:
    """Draw a distribution's stored CDF points; False when it is empty."""
    cdf = dist.get("cdf") if dist else None
    if not cdf:
        return False
    x = np.asarray(cdf["x"], dtype=float)
    p = np.asarray(cdf["p"], dtype=float)
    text = f"{label} (n={dist['n']:,})"
    if log:
        positive = x > 0
        if not positive.any():
            return False
        if not positive.all():  # a log axis has no 0: those values sit at the left edge, and the legend says so
            zero_share = p[~positive].max()
            text = f"{label} (n={dist['n']:,}; {zero_share:.0%} ≤ 0 drawn at the left edge)"
        x = np.where(positive, x, x[positive].min())
    ax.step(x, p, where="post", label=text, color=color, **kw)
    if log:
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("CDF (share of values ≤ x)")
    return True


def no_data(ax, what: str = "no data") -> None:
    ax.text(0.5, 0.5, what, ha="center", va="center", transform=ax.transAxes, color="0.4")


def clip_note(ax, clipped: int, total: int, limit: float, unit: str) -> None:
    """Label a plot whose values above ``limit`` were clipped for display (data unchanged)."""
    if clipped:
        ax.text(
            0.99,
            0.98,
            f"{clipped:,} of {total:,} values > {limit:.3g} {unit} clipped in the plot",
            ha="right",
            va="top",
            transform=ax.transAxes,
            fontsize=7,
            color="firebrick",
        )


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes (for notebooks: ``IPython.display.Image(png_bytes(fig))``)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return buf.getvalue()
