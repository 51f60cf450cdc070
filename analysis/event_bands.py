"""A run's maintenance events on its time figures: each event's windows as named bands.

A run with ``events.csv`` (drtp.replay.event_log) ran maintenance on its clock; the figures over time of
``drtp analyze results`` and its report draw each event's windows (drtp.replay.windows: ``before``,
``during``, ``after``, the event's length either side) as shaded bands, each labelled with its event and
window (``gc during``), so a change in throughput or latency is read against what ran then.  The windows
are the ones summary.json's ``events[]`` counts, on requests.csv's ``start_s`` scale; a figure whose axis
starts elsewhere (the run's first request) gives its origin.
"""

from __future__ import annotations

from pathlib import Path

from drtp.replay.event_log import EVENTS_CSV, read_events
from drtp.replay.windows import event_windows

# the windows' colours: the before window a neutral reference, during the event's own, after the recovery's
COLORS = {"before": "#9e9e9e", "during": "#d62728", "after": "#2ca02c"}
ALPHA = 0.15


def run_bands(run_dir: Path) -> list[dict]:
    """The bands of a run directory's events (none without events.csv): ``{event, window, from_s, to_s}``
    on the ``start_s`` scale; an event still running at the run's end has no after window (its during
    window, with no known end, is not drawn either)."""
    bands = []
    for event in read_events(Path(run_dir) / EVENTS_CSV):
        for w in event_windows(event):
            bands.append({"event": event.name, "window": w.name, "from_s": w.from_s, "to_s": w.to_s})
    return bands


def draw_bands(ax, bands: list[dict], origin_s: float = 0.0, run: str | None = None) -> int:
    """Draw ``bands`` on ``ax`` (x: seconds since ``origin_s`` of the run's clock) as labelled spans, the
    event's name written over its during window; ``run`` prefixes the labels when several runs share the
    axes.  Returns how many were drawn."""
    prefix = f"{run}: " if run else ""
    for band in bands:
        low, high = band["from_s"] - origin_s, band["to_s"] - origin_s
        label = f"{prefix}{band['event']} {band['window']}"
        ax.axvspan(low, high, color=COLORS[band["window"]], alpha=ALPHA, lw=0, label=label, gid=label)
        if band["window"] == "during":
            ax.text(
                (low + high) / 2,
                0.98,
                f"{prefix}{band['event']}",
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="top",
                fontsize=8,
            )
    return len(bands)
