"""Replay results as numbers and tables: run directories read back into the run's results model.

A run directory (written by ``drtp run``) holds ``requests.csv`` — one
:class:`~drtp.replay.result_row.ResultRow` per line — and ``summary.json``.  The
rows are loaded with pandas in one call, then fed to the same
:class:`~drtp.replay.summary.ResultsModel` the master kept while the run went
on, so every count, failure class, byte total, percentile and throughput here
is the one in ``summary.json``.  pandas is used beyond that only for what the
figures draw (CDF points, requests per second).  The tables are for people:
latency and lateness in milliseconds, in ``_ms`` columns; the frames and the
model keep seconds, as requests.csv and summary.json do.

Files from elsewhere are tolerated: extra columns are ignored; of the
columns only ``method, kind, start_s, latency_s, status`` are required, the
others are filled in (``outcome`` from ``ok``, ``ok`` from the status as drtp.replay.outcome defines it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from drtp.analysis.characterize import distribution
from drtp.errors import DrtpError
from drtp.replay.outcome import OK, status_outcome
from drtp.replay.result_row import COLUMNS, ResultRow, unclassified_outcome
from drtp.replay.summary import ResultsModel
from drtp.units import to_ms

REQUIRED = ("method", "kind", "start_s", "latency_s", "status")
TIMES = ("intended_s", "start_s", "latency_s", "response_s", "retry_after_s")
COUNTS = ("size", "bytes", "status", "expected_status", "attempts", "challenges")
TEXTS = ("client", "node", "trace_id", "repository", "reference", "digest", "error", "cache")
TRACE_ROW = "ibm-trace-data"  # the run name under which the trace's own recorded latencies are shown
MAX_RUN_S = 366 * 86_400.0  # times in a run are seconds from its start: a year bounds any replay
MAX_COUNT = 2**62  # sizes, byte counts and statuses go into int64 columns
# the range of each time column, seconds: times in the run from its start, durations from 0 (a registry may
# ask a throttled client to come back later than any run lasts)
TIME_RANGES = {
    "intended_s": (-MAX_RUN_S, MAX_RUN_S),
    "start_s": (-MAX_RUN_S, MAX_RUN_S),
    "latency_s": (0.0, MAX_RUN_S),
    "response_s": (-MAX_RUN_S, MAX_RUN_S),
    "retry_after_s": (0.0, float(MAX_COUNT)),
}
ON_TIME_S = 0.010  # drtp run's default (client_info.on_time_ms) when summary.json does not say
# each time must parse to the very float the master counted: before pandas 3.1 only the round-trip
# converter guarantees that (the default may be 1 ulp off); from 3.1 every converter does, and the option is deprecated
EXACT_FLOATS = (
    {} if tuple(int(x) for x in pd.__version__.split(".")[:2]) >= (3, 1) else {"float_precision": "round_trip"}
)


def load_requests(path: Path) -> pd.DataFrame:
    """``requests.csv`` as a frame with every column of :data:`COLUMNS`, typed (plus ``end_s``)."""
    try:
        df = pd.read_csv(path, low_memory=False, keep_default_na=False, na_values=[""], **EXACT_FLOATS)
    except FileNotFoundError:
        raise DrtpError(f"{path}: not found (a run directory must hold requests.csv)") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise DrtpError(f"{path}: not a readable CSV ({str(e).splitlines()[0]})") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise DrtpError(f"{path}: missing column(s) {', '.join(missing)}")
    check_numbers(df, path)
    return typed(df)


def _first_bad(raw: pd.Series, bad: pd.Series, path: Path, col: str, what: str) -> None:
    """Raise naming the first row of ``raw`` marked ``bad`` (rows count from 1 after the header)."""
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise DrtpError(f"{path}: row {row + 1}: column {col}: {what}, got {str(raw.iloc[row])[:40]!r}")


def check_numbers(df: pd.DataFrame, path: Path) -> None:
    """Times and counts that are numbers, finite and in range; an empty cell stays allowed.

    Without this a cell of ``abc`` would silently read as missing, and ``inf``
    or ``1e308`` would end as an overflow deep in the figures, or as a histogram
    of 10^300 one-second bins.  One vectorised check per column.
    """
    for col in TIMES + COUNTS:
        if col not in df.columns:
            continue
        raw = df[col]
        num = pd.to_numeric(raw, errors="coerce")
        given = raw.notna()
        if raw.dtype == object:  # text cells: only these can be blank or not numbers (numeric columns are parsed)
            given &= raw.astype(str).str.strip() != ""
        _first_bad(raw, given & num.isna(), path, col, "not a number")
        if col in TIMES:
            low, high = TIME_RANGES[col]
            _first_bad(raw, given & ~num.between(low, high), path, col, f"not a time from {low:,.0f} to {high:,.0f} s")
        else:
            whole = num.between(0, MAX_COUNT) & (num.fillna(0) % 1 == 0)
            _first_bad(raw, given & ~whole, path, col, "not a whole number ≥ 0")


def typed(df: pd.DataFrame) -> pd.DataFrame:
    """Every column a :class:`ResultRow` has, with its type; absent optional columns filled in."""
    n = len(df)
    for col in TIMES:
        df[col] = pd.to_numeric(df[col], errors="coerce") if col in df.columns else np.full(n, np.nan)
    for col in COUNTS:
        default = 1 if col == "attempts" else 0
        values = pd.to_numeric(df[col], errors="coerce") if col in df.columns else pd.Series(default, index=df.index)
        df[col] = values.fillna(default).astype(np.int64)
    for col in TEXTS:
        df[col] = df[col].astype(object).where(df[col].notna(), "").astype(str) if col in df.columns else ""
    df["method"] = df["method"].astype(str).str.upper()
    df["kind"] = df["kind"].astype(str).str.lower().replace({"layer": "blob"})
    df["auxiliary"] = df["auxiliary"].map(_truthy).astype(bool) if "auxiliary" in df.columns else False
    if "outcome" in df.columns:
        df["outcome"] = df["outcome"].astype(object).where(df["outcome"].notna(), "").astype(str)
    else:  # no outcome classes: success from its ok column (or the outcome rule), failures unclassified
        if "ok" in df.columns:
            ok = df["ok"].map(_truthy)
        else:
            pairs = zip(df["status"], df["expected_status"], strict=True)
            ok = pd.Series([status_outcome(s, e) == OK for s, e in pairs], index=df.index, dtype=bool)
        unclassified = [unclassified_outcome(s, e) for s, e in zip(df["status"], df["error"], strict=True)]
        df["outcome"] = np.where(ok.astype(bool), OK, np.array(unclassified, dtype=object))
    df["ok"] = df["outcome"] == OK  # the one definition of success (drtp.replay.outcome)
    df["end_s"] = df["start_s"] + df["latency_s"].fillna(0)
    return df


def _truthy(v) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes", "ok")
    try:
        return bool(v) and not (isinstance(v, float) and np.isnan(v))
    except (TypeError, ValueError):
        return False


def rows(df: pd.DataFrame) -> Iterator[ResultRow]:
    """The frame's rows as the rows the master wrote (a frame from :func:`typed`)."""
    columns = []
    for col in COLUMNS:
        values = df[col].tolist()
        if col in TIMES:
            values = [None if v != v else v for v in values]  # NaN: an empty cell
        columns.append(values)
    for values in zip(*columns, strict=True):
        yield ResultRow(*values)  # COLUMNS is ResultRow's own field order


def run_model(df: pd.DataFrame, summary: dict | None = None) -> ResultsModel:
    """The run's results model, fed from its rows as the master fed it from results."""
    summary = summary or {}
    timed = "lateness_s" in summary or bool(df["intended_s"].notna().any())
    model = ResultsModel(timed, summary.get("on_time_s", ON_TIME_S))
    for row in rows(df):
        model.add(row)
    return model


def read_run_files(run_dir: Path) -> tuple[pd.DataFrame, dict]:
    """The raw files of one run directory: (requests.csv as a frame, summary.json as a dict, {} when absent).

    Not the notebook API: ``drtp.load_run`` (drtp.analysis.run_data) builds its tidy frames on top of this."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise DrtpError(f"{run_dir}: run directory not found")
    requests = load_requests(run_dir / "requests.csv")
    summary_path = run_dir / "summary.json"
    summary: dict = load_summary(summary_path) if summary_path.is_file() else {}
    return requests, summary


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows (the replayer never writes it)")


def load_summary(path: Path) -> dict:
    """A run's ``summary.json``: a JSON object of finite numbers, or a one-line error naming the file."""
    try:
        summary = json.loads(path.read_bytes(), parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise DrtpError(f"{path}: invalid JSON ({e.msg} at line {e.lineno})") from None
    except (ValueError, RecursionError) as e:  # NaN/Infinity, bad UTF-8, nesting deeper than Python's stack
        reason = "nested too deep" if isinstance(e, RecursionError) else str(e).splitlines()[0]
        raise DrtpError(f"{path}: not a run summary ({reason})") from None
    except OSError as e:
        raise DrtpError(f"{path}: cannot read ({e.strerror})") from None
    if not isinstance(summary, dict):
        raise DrtpError(f"{path}: not a run summary (a JSON object), got a JSON {type(summary).__name__}")
    on_time = summary.get("on_time_s", ON_TIME_S)
    if isinstance(on_time, bool) or not isinstance(on_time, (int, float)) or not 0 <= on_time <= MAX_RUN_S:
        raise DrtpError(f"{path}: key 'on_time_s': expected a number of seconds ≥ 0, got {on_time!r}")
    return summary


def run_labels(run_dirs: list[Path]) -> list[str]:
    """Short unique names for runs: the directory name, or parent/name when names repeat."""
    names = [Path(d).resolve().name for d in run_dirs]
    if len(set(names)) == len(names):
        return names
    return [f"{Path(d).resolve().parent.name}/{Path(d).resolve().name}" for d in run_dirs]


def group_key(df: pd.DataFrame) -> pd.Series:
    """'GET blob', 'PUT manifest'… per row."""
    return df["method"].astype(str) + " " + df["kind"].astype(str)


# -- what the figures draw (never a number of a table) ---------------------------------------------------


def latency_curves(df: pd.DataFrame) -> dict:
    """CDF points of successful trace requests' latency (seconds, as stored), overall and per method+kind."""
    ok = df[df["ok"] & ~df["auxiliary"]]
    out = {"all": distribution(ok["latency_s"])}
    for key, part in ok.groupby(group_key(ok), sort=True):
        out[key] = distribution(part["latency_s"])
    return out


BIN_WIDTHS_S = (1.0, 0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001)  # throughput bins, widest first
MIN_BINS = 10  # a run shorter than this many seconds gets narrower bins, so its line still has a shape


def throughput_bins(df: pd.DataFrame) -> dict:
    """Successful trace requests completed in each whole bin from the run's first start.

    Bins are 1 s wide, or the widest of :data:`BIN_WIDTHS_S` that still gives
    a short run :data:`MIN_BINS` bins; a bin holds the completions in
    (start, end].  They are counted from the first request's start, so the first
    bin is always whole; the last, cut short by the run's end (the last
    completion of any request), is left out of ``counts``: its count over a
    fraction of a bin would read as a drop in throughput, or, scaled to a rate,
    as a spike.  Its length and requests are kept as ``tail_s`` and
    ``tail_requests``, so ``sum(counts) + tail_requests`` is every successful
    trace request.  Times are compared in whole microseconds, so a completion on
    a bin edge falls in the bin it ends, whatever the float rounding.
    """
    main = df[~df["auxiliary"] & df["start_s"].notna()]
    if main.empty:
        return {"bin_s": BIN_WIDTHS_S[0], "counts": [], "tail_s": 0.0, "tail_requests": 0, "origin_s": 0.0}
    origin = main["start_s"].min()
    span_us = int(round((main["end_s"].max() - origin) * 1e6))
    bin_s = next((w for w in BIN_WIDTHS_S if span_us >= MIN_BINS * w * 1e6), BIN_WIDTHS_S[-1])
    bin_us = int(round(bin_s * 1e6))
    whole = span_us // bin_us
    done_us = np.round((main.loc[main["ok"], "end_s"].to_numpy() - origin) * 1e6).astype(np.int64)
    index = np.maximum(done_us - 1, 0) // bin_us
    return {
        "bin_s": bin_s,
        "counts": [int(x) for x in np.bincount(index[index < whole], minlength=whole)],
        "tail_s": (span_us - whole * bin_us) / 1e6,
        "tail_requests": int((index >= whole).sum()),
        "origin_s": float(origin),  # the first start: where the bins, and the figure's time axis, begin
    }


def lateness_curve(df: pd.DataFrame) -> dict | None:
    """CDF points of start_s − intended_s in seconds (negative: early); None outside as-is mode."""
    main = df[~df["auxiliary"]]
    late = (main["start_s"] - main["intended_s"]).dropna()
    return distribution(late) if not late.empty else None


def analyze_run(df: pd.DataFrame, summary: dict | None = None) -> dict:
    """Every number of one run (the results model's summary), the curves its figures draw, its summary.json."""
    out = run_model(df, summary).summary()
    out["curves"] = {"latency": latency_curves(df), "throughput": throughput_bins(df), "lateness": lateness_curve(df)}
    out["replayer_summary"] = summary or {}
    return out


def trace_latencies(trace_files: list[str], trace_ids: set[str] | None = None) -> pd.DataFrame:
    """The trace's recorded response times as a results frame (method, kind, latency_s, status; ok as recorded).

    When ``trace_ids`` is given and matches some records, only those records are
    kept (the part of the trace that was replayed).
    """
    from drtp.analysis.trace_frame import load_trace

    tr = load_trace(trace_files, with_ids=bool(trace_ids))
    if trace_ids:
        matched = tr["id"].isin(trace_ids)
        if matched.any():
            tr = tr[matched]
    status = tr["status"].to_numpy()
    frame = pd.DataFrame(
        {
            "method": tr["method"].astype(str).to_numpy(),
            "kind": tr["kind"].astype(str).to_numpy(),
            "latency_s": tr["duration"].to_numpy(),
            "status": status,
            "expected_status": status,
            "ok": (status >= 200) & (status < 400),
        }
    )
    return typed(frame)


# -- tables: the model's numbers, latency and lateness in milliseconds ------------------------------------


def latency_table(results: dict[str, dict]) -> pd.DataFrame:
    """Rows run × request type (``all`` first): n (succeeded), p50, p90, p99, max latency (ms)."""
    rows_ = []
    for run, r in results.items():
        for key, g in [("all", r), *r["per_method"].items()]:
            lat = g["latency_s"]
            if lat:
                rows_.append(
                    {
                        "run": run,
                        "request": key,
                        "n": g["succeeded"],
                        "p50_ms": to_ms(lat["p50"]),
                        "p90_ms": to_ms(lat["p90"]),
                        "p99_ms": to_ms(lat["p99"]),
                        "max_ms": to_ms(lat["max"]),
                    }
                )
    return pd.DataFrame(rows_).set_index("run") if rows_ else pd.DataFrame()


def run_table(results: dict[str, dict]) -> pd.DataFrame:
    """One row per run: counts, bytes, helpers apart, throughput, latency and lateness (ms) headline numbers,
    the rates offered and achieved (requests started per second: intended, actual) and whether the run fell
    behind them."""
    table = {}
    for run, r in results.items():
        if run == TRACE_ROW:
            continue
        lat = r["latency_s"]
        late = r.get("lateness_s") or {}
        table[run] = {
            "requests": r["requests"],
            "succeeded": r["succeeded"],
            "failed": r["failed"],
            "lost": r["lost"],
            "helper_requests": r["auxiliary"]["requests"],
            "helpers_failed": r["auxiliary"]["failed"],
            "MB": r["bytes"] / 1e6,
            "duration_s": r["duration_s"],
            "throughput_rps": r["throughput_rps"],
            "latency_p50_ms": to_ms(lat.get("p50")),
            "latency_p90_ms": to_ms(lat.get("p90")),
            "latency_p99_ms": to_ms(lat.get("p99")),
            "latency_max_ms": to_ms(lat.get("max")),
            "lateness_p99_ms": to_ms(late.get("p99")),
            "on_time_ratio": r.get("on_time_ratio"),
            # from the intended start: the latency rate mode judges (coordinated omission included)
            "response_p99_ms": to_ms((r.get("response_s") or {}).get("p99")),
            "offered_rps": r.get("offered_rps"),
            "achieved_rps": r.get("achieved_rps"),
            "behind": r.get("behind"),
        }
    frame = pd.DataFrame.from_dict(table, orient="index")  # per column types: counts stay integers
    frame.index.name = "run"
    return frame


def failure_table(results: dict[str, dict], helpers: bool = False) -> pd.DataFrame:
    """Failed requests per outcome class (rows) and run (columns): the trace's, or with ``helpers`` the helpers'."""
    table = {
        run: (r["auxiliary"]["failures"] if helpers else r["failures"])
        for run, r in results.items()
        if run != TRACE_ROW
    }
    frame = pd.DataFrame(table).fillna(0).astype(int)
    frame.index.name = "outcome"
    return frame


def status_table(results: dict[str, dict], helpers: bool = False) -> pd.DataFrame:
    """Failed requests per HTTP status of their answer (rows, ``429``, ``503``…) and run (columns): a throttling
    registry's 429s apart from its errors; failures without an answer are in :func:`failure_table` alone."""
    table = {
        run: (r["auxiliary"] if helpers else r).get("failed_statuses", {})
        for run, r in results.items()
        if run != TRACE_ROW
    }
    frame = pd.DataFrame(table).fillna(0).astype(int)
    frame = frame.loc[sorted(frame.index, key=int)] if not frame.empty else frame
    frame.index.name = "status"
    return frame


def node_table(results: dict[str, dict]) -> pd.DataFrame:
    """Rows run × client node: requests, failed, throughput and latency percentiles (ms)."""
    rows_ = []
    for run, r in results.items():
        if run == TRACE_ROW:
            continue
        for node, g in r["per_node"].items():
            lat = g["latency_s"]
            rows_.append(
                {
                    "run": run,
                    "node": node,
                    "requests": g["requests"],
                    "failed": g["failed"],
                    "throughput_rps": g["throughput_rps"],
                    "p50_ms": to_ms(lat.get("p50")),
                    "p99_ms": to_ms(lat.get("p99")),
                    "failed_statuses": ", ".join(f"{c}: {n:,}" for c, n in g.get("failed_statuses", {}).items()),
                }
            )
    return pd.DataFrame(rows_).set_index("run") if rows_ else pd.DataFrame()
