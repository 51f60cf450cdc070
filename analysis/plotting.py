"""Shared plotting helpers: figures without pyplot's global state, one style, plain tick labels, PNG output.

Figures are built as :class:`matplotlib.figure.Figure` objects (Agg canvas),
so drawing many of them in a long run leaks nothing and needs no display;
notebooks show the same objects inline.  Every figure function is wrapped in
:func:`figure`, which gives its numeric axes plain tick labels (``0.5``, ``10``,
``1,000``): people read latency in milliseconds, not as ``10^2`` or ``1e-3``
with an offset in the corner.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import (
    EngFormatter,
    FuncFormatter,
    LogFormatter,
    NullFormatter,
    PercentFormatter,
    ScalarFormatter,
)

STYLE = {"axes.grid": True, "grid.alpha": 0.35, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 8}
BYTES = EngFormatter(unit="B", places=0, sep="")


def plain_number(x: float, pos: int | None = None) -> str:
    """A tick value as people write it: ``0.001``, ``0.5``, ``10``, ``1,000`` (no exponent, no offset)."""
    if x == 0:
        return "0"
    if abs(x) >= 1000 and float(x).is_integer():
        return f"{x:,.0f}"
    text = np.format_float_positional(float(x), precision=6, unique=True, fractional=False, trim="-")
    return text[:-1] if text.endswith(".") else text


class PlainLogFormatter(LogFormatter):
    """Log-axis labels as plain numbers; which ticks get a label is matplotlib's usual choice
    (decades, and 2/5 or every minor tick when the axis spans less than a decade or so)."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        return plain_number(x) if super().__call__(x, pos) else ""


def plain_ticks(ax) -> None:
    """Plain tick labels on the axes' numeric axes (linear, log, symlog).

    Axes with a formatter of their own (bytes, percent, dates, categories) keep
    it; only matplotlib's default number formatters are replaced.
    """
    for axis in (ax.xaxis, ax.yaxis):
        current = axis.get_major_formatter()
        if isinstance(current, EngFormatter) or not isinstance(current, (ScalarFormatter, LogFormatter)):
            continue
        if axis.get_scale() == "log":
            axis.set_major_formatter(PlainLogFormatter(labelOnlyBase=False))
            axis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.4)))
        else:
            axis.set_major_formatter(FuncFormatter(plain_number))
            axis.set_minor_formatter(NullFormatter())


def figure(make: Callable[..., Figure]) -> Callable[..., Figure]:
    """Decorator of every figure function: the figure it returns gets plain tick labels on every axes."""

    @functools.wraps(make)
    def drawn(*args, **kwargs) -> Figure:
        fig = make(*args, **kwargs)
        for ax in fig.axes:
            plain_ticks(ax)
        return fig

    return drawn


@dataclass
class Charts:
    """What a ``draw_all`` wrote: name → PNG path, and name → why a chart was left out (it had no data)."""

    written: dict[str, Path] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)

    def note(self) -> str:
        """One line for the console: the charts written and those left out, with the reason."""
        text = "charts: " + (", ".join(p.name for p in self.written.values()) or "none")
        if self.left_out:
            text += "; left out (no data): " + "; ".join(f"{name} ({why})" for name, why in self.left_out.items())
        return text


def draw_charts(makers: dict[str, Callable[[], Figure]], left_out: dict[str, str], out: Path) -> Charts:
    """Draw and save each chart not in ``left_out``; a left-out chart's PNG from an earlier analysis is removed
    so the directory never shows a chart this analysis did not draw."""
    charts = Charts(left_out={name: why for name, why in left_out.items() if name in makers})
    for name, make in makers.items():
        path = out / f"{name}.png"
        if name in charts.left_out:
            path.unlink(missing_ok=True)
        else:
            charts.written[name] = save(make(), path)
    return charts


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


def cdf_line(ax, dist: dict, label: str, color=None, log: bool = True, scale: float = 1.0, **kw) -> bool:
    """Draw a distribution's stored CDF points, x multiplied by ``scale`` (e.g. seconds → ms); False when empty."""
    cdf = dist.get("cdf") if dist else None
    if not cdf:
        return False
    x = np.asarray(cdf["x"], dtype=float) * scale
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
