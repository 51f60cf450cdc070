"""Replay runs as tidy pandas frames, for notebooks: ``drtp.load_run(path)`` and ``drtp.load_runs(paths)``.

A run directory (written by ``drtp run``, ``drtp demo``…) is read through the
same checked reader as ``drtp analyze results`` (drtp.analysis.results): a
cell that is not a number is an error naming its row and column, never a
silent NaN.  ``requests.csv`` keeps seconds (it is machine-facing); the frames
here add milliseconds, the unit people read registry latency in.

The frames of one run (:class:`Run`):

* ``requests`` — one row per request: every ``requests.csv`` column (seconds
  included), plus ``latency_ms, response_ms, start_ms, intended_ms, end_ms``,
  a boolean ``failed`` (outcome anything but ``ok``), ``auxiliary`` (helper
  requests, counted apart from the trace's); method, kind, outcome and node
  are pandas categoricals;
* ``summary`` — one row per slice of ``summary.json``: ``all``, each
  ``method`` + ``kind``, each client ``node``; counts (``throttled``: failed
  with a 429, from ``failed_statuses``), bytes, throughput and
  latency (and, as is, response time and lateness) percentiles in ms;
* ``stats`` — the per-interval stats history (``stats_history.csv``);
* ``config`` — the run's config as the master saved it (``config.json``,
  secrets redacted), ``{}`` when the directory has none.

:func:`load_runs` gives the same frames for several runs, concatenated, with a
``run`` column first (the run's folder name, ``parent/name`` where names repeat).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from drtp.analysis.results import read_run_files, run_labels, run_model
from drtp.analysis.run_stats import read_stats_history, stats_from_requests
from drtp.errors import DrtpError
from drtp.replay.stats_file import STATS_FILE
from drtp.units import MS_PER_S

CONFIG_FILE = "config.json"
MS_COLUMNS = {
    "latency_s": "latency_ms",
    "response_s": "response_ms",
    "start_s": "start_ms",
    "intended_s": "intended_ms",
    "end_s": "end_ms",
}
CATEGORIES = ("method", "kind", "outcome", "node")
SLICES = {"all": None, "method": "per_method", "node": "per_node"}  # summary.json: where each slice's numbers are
COUNT_KEYS = ("requests", "succeeded", "failed", "lost", "bytes")
# offered_rps and achieved_rps (requests started per second: intended, actual) are the whole run's: "all" only
RATE_KEYS = ("duration_s", "throughput_rps", "status_matched", "on_time_ratio", "offered_rps", "achieved_rps")
DISTRIBUTIONS = {"latency_s": "latency", "response_s": "response", "lateness_s": "lateness"}
STATISTICS = ("p50", "p90", "p99", "max", "mean")


class RunDataError(DrtpError):
    """A path that is not a readable run directory; the message is one line naming the path (or file, row, column)."""


@dataclass(frozen=True)
class Run:
    """One run directory's frames (see the module's docstring for what each holds)."""

    path: Path
    label: str  # the run directory's name
    requests: pd.DataFrame
    summary: pd.DataFrame
    stats: pd.DataFrame
    config: dict
    summary_json: dict  # summary.json as written ({} when the directory has none)
    stats_from_file: bool  # False: the directory predates stats_history.csv and ``stats`` was rebuilt from the rows

    def __repr__(self) -> str:
        return f"Run({self.label!r}: {len(self.requests):,} rows, {len(self.stats):,} intervals)"


@dataclass(frozen=True)
class Runs:
    """Several runs: each :class:`Run` (``runs[label]``), and its frames concatenated with a ``run`` column."""

    runs: dict[str, Run] = field(repr=False)
    requests: pd.DataFrame = field(repr=False)
    summary: pd.DataFrame = field(repr=False)
    stats: pd.DataFrame = field(repr=False)
    config: dict[str, dict] = field(repr=False)  # run label → the run's config

    @property
    def labels(self) -> list[str]:
        return list(self.runs)

    def __getitem__(self, label: str) -> Run:
        return self.runs[label]

    def __iter__(self) -> Iterator[Run]:
        return iter(self.runs.values())

    def __len__(self) -> int:
        return len(self.runs)

    def __repr__(self) -> str:
        return f"Runs({', '.join(self.labels)})"


def load_run(path: str | Path, label: str | None = None) -> Run:
    """The frames of one run directory (``requests.csv`` required; ``summary.json``, ``stats_history.csv``,
    ``config.json`` read when present).

    ``summary`` comes from ``summary.json``; without it, from the same results
    model fed with the rows (``drtp analyze results`` does the same).  ``stats``
    comes from ``stats_history.csv``; a run made before the master wrote it gets
    the same columns computed from its rows (drtp.analysis.run_stats.stats_from_requests;
    ``stats_from_file`` is then False).  A missing directory, one without
    ``requests.csv`` or a corrupt file raises :class:`RunDataError`: one line naming it.
    """
    path = Path(path)
    try:
        raw, summary_json = read_run_files(path)
        stats_from_file = (path / STATS_FILE).is_file()
        stats = read_stats_history(path / STATS_FILE) if stats_from_file else stats_from_requests(raw)
        config = _read_config(path / CONFIG_FILE)
    except RunDataError:
        raise
    except DrtpError as e:
        raise RunDataError(str(e)) from None
    try:
        summary = summary_frame(summary_json or run_model(raw).summary())
    except (TypeError, ValueError, AttributeError) as e:  # summary.json's slices are not the model's
        raise RunDataError(f"{path / 'summary.json'}: not a run summary ({str(e).splitlines()[0]})") from None
    return Run(
        path=path,
        label=label or path.resolve().name,
        requests=requests_frame(raw),
        summary=summary,
        stats=stats,
        config=config,
        summary_json=summary_json,
        stats_from_file=stats_from_file,
    )


def load_runs(paths: Iterable[str | Path]) -> Runs:
    """Several run directories: the frames of each, concatenated with a ``run`` column (an ordered categorical)."""
    paths = [Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)]
    if not paths:
        raise RunDataError("load_runs: no run directories given")
    labels = run_labels(paths)
    runs = {label: load_run(p, label) for label, p in zip(labels, paths, strict=True)}
    return Runs(
        runs=runs,
        requests=_with_run(runs, "requests"),
        summary=_with_run(runs, "summary"),
        stats=_with_run(runs, "stats"),
        config={label: r.config for label, r in runs.items()},
    )


def requests_frame(raw: pd.DataFrame) -> pd.DataFrame:
    """The checked rows of ``requests.csv`` (drtp.analysis.results.load_requests) with ms columns and categoricals."""
    frame = raw.copy(deep=False)  # new columns only: the rows themselves are shared, never changed
    for seconds, ms in MS_COLUMNS.items():
        frame[ms] = frame[seconds] * MS_PER_S
    frame["failed"] = ~frame["ok"].to_numpy(dtype=bool)
    frame["auxiliary"] = frame["auxiliary"].astype(bool)
    for col in CATEGORIES:
        frame[col] = frame[col].astype("category")
    return frame


def summary_frame(summary: dict) -> pd.DataFrame:
    """One row per slice of a run summary (``all``, then each method+kind, then each node); latencies in ms."""
    rows = [_slice_row("all", "all", summary)]
    for slice_name, key in SLICES.items():
        if key is None:
            continue
        slices = summary.get(key) or {}
        if not isinstance(slices, dict) or not all(isinstance(v, dict) for v in slices.values()):
            raise ValueError(f"key {key!r}: expected an object of slices, each an object of numbers")
        rows += [_slice_row(slice_name, name, numbers) for name, numbers in slices.items()]
    frame = pd.DataFrame(rows)
    method_kind = frame["key"].where(frame["slice"] == "method").str.split(" ", n=1)
    frame.insert(2, "method", method_kind.str[0].astype("category"))
    frame.insert(3, "kind", method_kind.str[1].astype("category"))
    frame.insert(4, "node", frame["key"].where(frame["slice"] == "node").astype("category"))
    frame["slice"] = pd.Categorical(frame["slice"], categories=list(SLICES), ordered=True)
    return frame


def _slice_row(slice_name: str, key: str, numbers: dict) -> dict:
    row: dict = {"slice": slice_name, "key": key}
    row.update({k: int(numbers.get(k, 0)) for k in COUNT_KEYS})
    statuses = numbers.get("failed_statuses")
    if statuses is not None and not isinstance(statuses, dict):
        raise ValueError(f"slice {key!r}: key 'failed_statuses': expected an object of counts")
    # failed with a 429 (Too Many Requests); NaN in a summary written before drtp counted failures per status
    row["throttled"] = np.nan if statuses is None else int(statuses.get("429", 0))
    row.update({k: np.nan if numbers.get(k) is None else float(numbers[k]) for k in RATE_KEYS})  # null: no rate
    for source, name in DISTRIBUTIONS.items():
        dist = numbers.get(source) or {}
        if not isinstance(dist, dict):
            raise ValueError(f"slice {key!r}: key {source!r}: expected an object of numbers")
        for stat in STATISTICS:
            value = dist.get(stat)
            row[f"{name}_{stat}_ms"] = np.nan if value is None else float(value) * MS_PER_S
    return row


def _read_config(path: Path) -> dict:
    """The run's saved config, ``{}`` when the directory has none; a file that is not a JSON object is an error."""
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as e:
        raise RunDataError(f"{path}: not a saved run config ({str(e).splitlines()[0]})") from None
    except OSError as e:
        raise RunDataError(f"{path}: cannot read ({e.strerror})") from None
    if not isinstance(config, dict):
        raise RunDataError(f"{path}: not a saved run config (a JSON object), got a JSON {type(config).__name__}")
    return config


def _with_run(runs: dict[str, Run], frame_name: str) -> pd.DataFrame:
    """One of the runs' frames, concatenated, with ``run`` first; categorical columns stay categorical."""
    parts = [getattr(r, frame_name) for r in runs.values()]
    frame = pd.concat(parts, keys=list(runs), names=["run", None]).reset_index(level="run").reset_index(drop=True)
    frame["run"] = pd.Categorical(frame["run"], categories=list(runs), ordered=True)
    for col, dtype in parts[0].dtypes.items():
        if isinstance(dtype, pd.CategoricalDtype) and not isinstance(frame[col].dtype, pd.CategoricalDtype):
            frame[col] = frame[col].astype("category")
    return frame
