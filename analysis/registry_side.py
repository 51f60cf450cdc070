"""The registry's own witness beside drtp's: client-side and registry-side figures per handler and method.

A run that read its registry's metrics keeps, in ``summary.json``'s ``registry_side`` (made by
drtp.master.outputs.registry_metrics), each slice's two counts and two means: what drtp sent and how long
it waited (the client side: network, TLS, its own queueing and the registry's time), and what the
registry completed and how long its handler took (its own duration histogram).  This module only
lays those numbers out for the report — a table and a figure — and recounts nothing.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from drtp.analysis.plotting import figure, new_figure, no_data, palette

NO_REGISTRY_SIDE = "no run read its registry's metrics (registries[].metrics or registry_metrics)"
CLIENT = "drtp (client side)"
REGISTRY = "registry (its own histogram)"
TABLE_COLUMNS = [
    "run",
    "registry",
    "handler",
    "method",
    "drtp_requests",
    "registry_requests",
    "drtp_mean_ms",
    "registry_mean_ms",
    "registry_p50_bucket_ms",
    "registry_p99_bucket_ms",
]


def _slice(s) -> bool:
    """A slice as drtp writes it (a summary.json edited by hand or by another tool may hold anything)."""
    return isinstance(s, dict) and isinstance(s.get("handler"), str) and isinstance(s.get("method"), str)


def registry_blocks(results: dict[str, dict]) -> dict[str, dict[str, dict]]:
    """Per run, its summary's ``registry_side`` entries that hold slices (runs without any left out)."""
    out = {}
    for run, r in results.items():
        block = (r.get("replayer_summary") or {}).get("registry_side")
        entries = {}
        for registry, entry in block.items() if isinstance(block, dict) else ():
            slices = entry.get("slices") if isinstance(entry, dict) else None
            if isinstance(slices, list) and any(_slice(s) for s in slices):
                entries[registry] = {**entry, "slices": [s for s in slices if _slice(s)]}
        if entries:
            out[run] = entries
    return out


def bucket_text(bounds: list | None) -> str:
    """A quantile's bucket as text: ``5–10`` (ms), ``> 250`` above the largest finite bound, empty when unknown."""
    if not isinstance(bounds, list) or len(bounds) != 2 or not isinstance(bounds[0], (int, float)):
        return ""
    low, high = bounds
    if not isinstance(high, (int, float, type(None))):
        return ""
    return f"> {low:g}" if high is None else f"{low:g}–{high:g}"


def registry_side_table(results: dict[str, dict]) -> pd.DataFrame:
    """One row per run, registry and slice: both counts, both means (ms), the registry's p50/p99 buckets."""
    rows = []
    for run, entries in registry_blocks(results).items():
        for registry, entry in entries.items():
            for s in entry["slices"]:
                rows.append(
                    {
                        **{k: s.get(k) for k in TABLE_COLUMNS[2:8]},
                        "run": run,
                        "registry": registry,
                        "registry_p50_bucket_ms": bucket_text(s.get("registry_p50_bucket_ms")),
                        "registry_p99_bucket_ms": bucket_text(s.get("registry_p99_bucket_ms")),
                    }
                )
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def _mean(value) -> float:
    """A mean as drawn: NaN (no bar) where the slice has none."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else np.nan


@figure
def fig_registry_side(results: dict[str, dict], frames: dict | None = None) -> Figure:
    """Per run, each slice's mean latency as drtp measured it and as the registry timed its own handler."""
    blocks = registry_blocks(results)
    panels = max(1, len(blocks))
    labels_of = {
        run: [
            (f"{s['handler']} {s['method']}" + (f" ({registry})" if len(entries) > 1 else ""), s)
            for registry, entry in entries.items()
            for s in entry["slices"]
        ]
        for run, entries in blocks.items()
    }
    tallest = max((len(v) for v in labels_of.values()), default=1)
    fig, axes = new_figure(
        panels,
        1,
        width=8.0,
        height=max(2.6, 0.5 * tallest + 1.4),
        title="Mean latency per handler and method: drtp (client side) and the registry's own",
    )
    if not blocks:
        no_data(axes[0], NO_REGISTRY_SIDE)
        return fig
    colors = palette([CLIENT, REGISTRY])
    for ax, (run, labelled) in zip(axes, labels_of.items(), strict=True):
        y = np.arange(len(labelled))
        client = [_mean(s.get("drtp_mean_ms")) for _, s in labelled]
        registry = [_mean(s.get("registry_mean_ms")) for _, s in labelled]
        ax.barh(y - 0.2, client, height=0.4, color=colors[CLIENT], label=CLIENT)
        ax.barh(y + 0.2, registry, height=0.4, color=colors[REGISTRY], label=REGISTRY)
        ax.set_yticks(y, [label for label, _ in labelled])
        ax.invert_yaxis()
        ax.set_xlabel("mean latency (ms)")
        if len(blocks) > 1:
            ax.set_title(run)
        ax.legend(loc="lower right")
    return fig
