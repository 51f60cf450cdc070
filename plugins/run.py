"""Running a simulation from a config and writing its results directory.

``simulate.name`` picks the plugin (a built-in, ``libcachesim:<policy>`` or a
path to an original-contract ``.py`` file); ``simulate.args`` are its
arguments — a list value makes the run a sweep over that argument.  Results:
``summary.json``, one CSV per table (or ``sweep.csv``), PNG figures.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import time
from pathlib import Path
from typing import Any

import pandas as pd

from drtp.config import Config, redacted
from drtp.errors import ConfigError
from drtp.plugins import figures
from drtp.plugins.base import SimResult, find_plugin, parse_plugin_args
from drtp.plugins.legacy import is_plugin_path, load_module, run_legacy, user_plugin_class
from drtp.plugins.sweep import grid, run_sweep, sweep_keys, worker_count
from drtp.trace.columns import TraceColumns
from drtp.trace.reader import TraceReader


def default_out_dir(cfg: Config, name: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = Path(name).stem if is_plugin_path(name) else name.replace(":", "-")
    return cfg.path(cfg.results) / f"simulate-{safe}-{stamp}"


def load_trace(cfg: Config) -> TraceColumns:
    reader = TraceReader(cfg.trace_paths(), **cfg.reader_options())
    return TraceColumns.from_batches(reader.batches())


def simulate(cfg: Config, out: Path, jobs: int | None = None) -> dict[str, Any]:
    """Run ``cfg.simulate`` and write results to ``out``; returns the summary written."""
    sim = cfg.simulate
    if sim is None:
        raise ConfigError(f"{cfg.source}: missing key 'simulate' (required for this command)")
    t0 = time.perf_counter()
    if is_plugin_path(sim.name):
        path = cfg.path(sim.name)
        module = load_module(path)
        plugin = user_plugin_class(module)
        if plugin is None:
            reader = TraceReader(cfg.trace_paths(), **cfg.reader_options())
            result = run_legacy(module, path, reader, sim.args)
            return _write(result, out, cfg, time.perf_counter() - t0)
    else:
        plugin = find_plugin(sim.name)
    keys = sweep_keys(sim.args)
    if not keys:
        args = parse_plugin_args(plugin, sim.args, cfg.source)  # bad args fail before the trace is read
        trace = load_trace(cfg)
        t1 = time.perf_counter()
        result = plugin(args).run(trace)
        result.summary["load_s"] = round(t1 - t0, 3)
        return _write(result, out, cfg, time.perf_counter() - t0)

    for point in grid(sim.args, cfg.source):  # every grid point's arguments are checked before the trace is read
        parse_plugin_args(plugin, point, cfg.source)
    trace = load_trace(cfg)
    t1 = time.perf_counter()
    table = run_sweep(plugin, sim.args, trace, jobs)
    elapsed = time.perf_counter() - t1
    summary = {
        "plugin": sim.name,
        "sweep": keys,
        "points": len(table),
        "jobs": worker_count(jobs, len(table)),
        "load_s": round(t1 - t0, 3),
        "sweep_s": round(elapsed, 3),
    }
    return _write_sweep(table, summary, out, cfg)


def _clean(value: Any) -> Any:
    """JSON-safe: numpy scalars to Python, NaN to null."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _write(result: SimResult, out: Path, cfg: Config, elapsed: float) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    summary = _clean(dict(result.summary))
    summary["elapsed_s"] = round(elapsed, 3)
    summary["trace"] = [str(p) for p in cfg.trace_paths()]
    files = []
    for name, df in result.tables.items():
        df.to_csv(out / f"{name}.csv", index=False)
        files.append(f"{name}.csv")
    if result.kind == "cache" and "timeline" in result.tables and len(result.tables["timeline"]):
        figures.hit_ratio_timeline(result.tables["timeline"], out / "hit_ratio_timeline.png")
        files.append("hit_ratio_timeline.png")
    summary["files"] = files
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "config.json").write_text(json.dumps(_clean(redacted(cfg)), indent=2) + "\n")
    return summary


def _write_sweep(table: pd.DataFrame, summary: dict, out: Path, cfg: Config) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "sweep.csv", index=False)
    files = ["sweep.csv"]
    if "arg_capacity" in table.columns and "hit_ratio" in table.columns:
        figures.hit_ratio_vs_size(table, out / "fig17_hit_ratio_vs_size.png")
        files.append("fig17_hit_ratio_vs_size.png")
    if "hits_per_prefetch" in table.columns and ({"arg_lm_thresh", "arg_ml_thresh"} & set(table.columns)):
        figures.hits_per_prefetch(table, out / "fig18_hits_per_prefetch.png")
        files.append("fig18_hits_per_prefetch.png")
    summary["files"] = files
    summary["trace"] = [str(p) for p in cfg.trace_paths()]
    summary = _clean(summary)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "config.json").write_text(json.dumps(_clean(redacted(cfg)), indent=2) + "\n")
    return summary


# -- console tables ---------------------------------------------------------------------


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "-" if value is None else str(value)


def format_summary(summary: dict[str, Any]) -> str:
    rows = [(k, _fmt(v)) for k, v in summary.items() if not isinstance(v, (dict, list))]
    if isinstance(summary.get("result"), dict):
        rows += [(f"result.{k}", _fmt(v)) for k, v in summary["result"].items()]
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


SWEEP_COLUMNS = (
    "requests",
    "hit_ratio",
    "hit_ratio_warm",
    "hit_ratio_memory",
    "hit_ratio_ssd",
    "capacity_bytes",
    "prefetches",
    "prefetch_hits",
    "hits_per_prefetch",
    "peak_memory_bytes",
    "simulate_s",
)


def format_sweep(table: pd.DataFrame) -> str:
    cols = [c for c in table.columns if c.startswith("arg_")] + [c for c in SWEEP_COLUMNS if c in table.columns]
    shown = table[cols].rename(columns=lambda c: c[4:] if c.startswith("arg_") else c)
    return shown.to_string(index=False, float_format=lambda x: f"{x:.4f}")
