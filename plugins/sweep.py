"""Parameter sweeps: every list in ``simulate.args`` is a grid dimension.

``capacity: [2%, 4%, 6%, 8%, 10%]`` with ``ssd_multiplier: [10, 15, 20]`` is the
cache grid of the IBM Cloud registry workload study (Anwar et al., FAST '18);
``lm_thresh: [1h, 12h, 1d]`` with ``ml_thresh: [1h, 12h, 1d]`` its prefetch
grid.  The trace is converted once in the parent; grid points run in
worker processes forked from it (the trace's columns are shared copy-on-write,
never pickled), each returning its summary as one row of ``sweep.csv``.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pandas as pd

from drtp.plugins.base import SimPlugin, parse_plugin_args
from drtp.trace.columns import TraceColumns

_TRACE: TraceColumns | None = None  # set in the parent before forking workers
_PLUGIN: type[SimPlugin] | None = None


def sweep_keys(args: dict[str, Any]) -> list[str]:
    """The arguments whose values are lists: the grid's dimensions."""
    return [k for k, v in args.items() if isinstance(v, list)]


MAX_POINTS = 10_000  # a grid is run point by point: more than this is a typo, not an experiment


def grid(args: dict[str, Any], source: str = "") -> list[dict[str, Any]]:
    """Every combination of the list-valued arguments (other arguments fixed), in order."""
    from drtp.errors import ConfigError

    where = f"{source}: " if source else ""
    keys = sweep_keys(args)
    if not keys:
        return [dict(args)]
    for k in keys:
        if not args[k]:
            raise ConfigError(f"{where}simulate.args.{k}: an empty list leaves nothing to sweep")
    if math.prod(len(args[k]) for k in keys) > MAX_POINTS:
        sizes = " × ".join(f"{len(args[k])} {k}" for k in keys)
        raise ConfigError(f"{where}simulate.args: a sweep of {sizes} is more than {MAX_POINTS:,} points")
    points = []
    for values in itertools.product(*(args[k] for k in keys)):
        point = dict(args)
        point.update(zip(keys, values, strict=True))
        points.append(point)
    return points


def _run_point(point: dict[str, Any]) -> dict[str, Any]:
    assert _TRACE is not None and _PLUGIN is not None
    plugin = _PLUGIN(parse_plugin_args(_PLUGIN, point))
    return plugin.run(_TRACE).summary


def worker_count(jobs: int | None, points: int) -> int:
    """Processes a sweep uses: ``jobs`` (default: the CPU count), at most one per grid point."""
    return max(1, min(jobs or os.cpu_count() or 1, points))


def run_sweep(
    plugin: type[SimPlugin], args: dict[str, Any], trace: TraceColumns, jobs: int | None = None
) -> pd.DataFrame:
    """Run the plugin at every grid point; one row per point (the swept values, then the summary)."""
    global _TRACE, _PLUGIN
    points = grid(args)
    for point in points:  # refuse bad values before starting anything
        parse_plugin_args(plugin, point)
    keys = sweep_keys(args)
    jobs = worker_count(jobs, len(points))
    _TRACE, _PLUGIN = trace, plugin
    try:
        if jobs == 1:
            summaries = [_run_point(p) for p in points]
        else:
            with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("fork")) as pool:
                summaries = list(pool.map(_run_point, points))
    finally:
        _TRACE = _PLUGIN = None
    rows = []
    for point, summary in zip(points, summaries, strict=True):
        row = {f"arg_{k}": _label(point[k]) for k in keys}
        row.update({k: v for k, v in summary.items() if not isinstance(v, (dict, list))})
        rows.append(row)
    return pd.DataFrame(rows)


def _label(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)
