"""Replay results as tables and numbers: loading run directories and their statistics.

A run directory (written by ``drtp run``) holds ``requests.csv`` — one row per
trace request with at least ``method``, ``kind``, ``start_s``, ``latency_s``
and ``status``; usually also client, trace_id, repository, reference, digest,
size, intended_s, response_s, ok, error, auxiliary — and ``summary.json``.
Extra columns are kept and ignored; missing optional ones are filled in
(``ok`` from the status when absent).  Outliers stay in every number here;
only plots clip them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from drtp.analysis.characterize import distribution
from drtp.errors import DrtpError

REQUIRED = ("method", "kind", "start_s", "latency_s", "status")
OPTIONAL_FLOAT = ("intended_s", "response_s", "size")
TRACE_ROW = "ibm-trace-data"  # the thesis' name for the trace's own recorded latencies
ON_TIME_S = 0.010  # a request starting at most this late counts as on time (as-is mode)


def load_requests(path: Path) -> pd.DataFrame:
    """``requests.csv`` as a frame with the columns the analysis uses, typed."""
    try:
        df = pd.read_csv(path, low_memory=False)
    except FileNotFoundError:
        raise DrtpError(f"{path}: not found (a run directory must hold requests.csv)") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise DrtpError(f"{path}: not a readable CSV ({str(e).splitlines()[0]})") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise DrtpError(f"{path}: missing column(s) {', '.join(missing)}")
    for col in ("start_s", "latency_s") + OPTIONAL_FLOAT:
        df[col] = pd.to_numeric(df[col], errors="coerce") if col in df.columns else np.nan
    df["status"] = pd.to_numeric(df["status"], errors="coerce").fillna(0).astype(int)
    if "ok" in df.columns:
        df["ok"] = df["ok"].map(_truthy).astype(bool)
    else:
        df["ok"] = (df["status"] >= 200) & (df["status"] < 400)
    if "error" in df.columns:
        df["error"] = df["error"].astype(object).where(df["error"].notna(), "").astype(str)
    else:
        df["error"] = ""
    df["method"] = df["method"].astype(str).str.upper()
    df["kind"] = df["kind"].astype(str).str.lower().replace({"layer": "blob"})
    df["end_s"] = df["start_s"] + df["latency_s"].fillna(0)
    return df


def _truthy(v) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes", "ok")
    try:
        return bool(v) and not (isinstance(v, float) and np.isnan(v))
    except (TypeError, ValueError):
        return False


def _count(v) -> int:
    """The auxiliary column as a count: a number of helper requests, or a true/false flag."""
    if isinstance(v, str):
        text = v.strip().lower()
        if text in ("true", "yes"):
            return 1
        try:
            return int(float(text))
        except ValueError:
            return 0
    try:
        return 0 if v != v else int(v)  # NaN → 0
    except (TypeError, ValueError):
        return 0


def load_run(run_dir: Path) -> tuple[pd.DataFrame, dict]:
    """(requests, summary) of one run directory; summary.json is optional."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise DrtpError(f"{run_dir}: run directory not found")
    requests = load_requests(run_dir / "requests.csv")
    summary_path = run_dir / "summary.json"
    summary: dict = {}
    if summary_path.is_file():
        try:
            summary = json.loads(summary_path.read_text())
        except json.JSONDecodeError as e:
            raise DrtpError(f"{summary_path}: invalid JSON ({e.msg} at line {e.lineno})") from None
    return requests, summary


def run_labels(run_dirs: list[Path]) -> list[str]:
    """Short unique names for runs: the directory name, or parent/name when names repeat."""
    names = [Path(d).resolve().name for d in run_dirs]
    if len(set(names)) == len(names):
        return names
    return [f"{Path(d).resolve().parent.name}/{Path(d).resolve().name}" for d in run_dirs]


def group_key(df: pd.DataFrame) -> pd.Series:
    """'GET blob', 'PUT manifest'… per row."""
    return df["method"].astype(str) + " " + df["kind"].astype(str)


def latency_stats(df: pd.DataFrame) -> dict:
    """Latency distribution (s) of successful requests, overall and per method+kind."""
    ok = df[df["ok"]]
    out = {"all": distribution(ok["latency_s"])}
    for key, part in ok.groupby(group_key(ok), sort=True):
        out[key] = distribution(part["latency_s"])
    return out


def throughput(df: pd.DataFrame) -> dict:
    """Completed requests per second over the run (from its first start) and the average rate."""
    if df.empty or df["start_s"].isna().all():
        return {"average_rps": None, "duration_s": 0.0, "per_second": []}
    t0 = float(df["start_s"].min())
    done = df[df["ok"] & df["end_s"].notna()]
    duration = float(df["end_s"].max() - t0)
    per_s = np.bincount(np.floor(done["end_s"] - t0).astype(np.int64)) if len(done) else np.zeros(0, int)
    return {
        "average_rps": len(done) / duration if duration > 0 else None,
        "duration_s": duration,
        "per_second": [int(x) for x in per_s],
        "per_second_stats": distribution(per_s),
    }


def failure_label(status: int, error: str) -> str:
    if status:
        return str(status)
    return (error.split(":")[0].strip() or "no response")[:40]


def failures(df: pd.DataFrame) -> dict[str, int]:
    """Failed requests by HTTP status (or by error kind when there was no response)."""
    bad = df[~df["ok"]]
    labels = [failure_label(s, e) for s, e in zip(bad["status"], bad["error"], strict=True)]
    return {k: int(v) for k, v in pd.Series(labels, dtype=object).value_counts().items()}


def lateness(df: pd.DataFrame) -> dict | None:
    """start_s − intended_s in as-is mode (None when the run has no intended starts)."""
    late = (df["start_s"] - df["intended_s"]).dropna()
    if late.empty:
        return None
    d = distribution(late)
    d["on_time_ratio"] = float((late <= ON_TIME_S).mean())
    d["on_time_s"] = ON_TIME_S
    return d


def analyze_run(df: pd.DataFrame, summary: dict | None = None) -> dict:
    """Every number of one run."""
    aux = df["auxiliary"].map(_count) if "auxiliary" in df.columns else None
    response = df["response_s"].dropna()
    return {
        "requests": len(df),
        "succeeded": int(df["ok"].sum()),
        "failed": int((~df["ok"]).sum()),
        "auxiliary_requests": int(aux.sum()) if aux is not None else None,
        "bytes": int(df.loc[df["ok"], "size"].fillna(0).sum()),
        "latency": latency_stats(df),
        "response_from_intended": distribution(response) if not response.empty else None,
        "throughput": throughput(df),
        "failures": failures(df),
        "lateness": lateness(df),
        "replayer_summary": summary or {},
    }


def trace_latencies(trace_files: list[str], trace_ids: set[str] | None = None) -> pd.DataFrame:
    """The trace's recorded response times as a results-like frame (method, kind, latency_s, ok).

    When ``trace_ids`` is given and matches some records, only those records are
    kept (the part of the trace that was replayed).
    """
    from drtp.analysis.columns import load_trace

    tr = load_trace(trace_files, with_ids=bool(trace_ids))
    if trace_ids:
        matched = tr["id"].isin(trace_ids)
        if matched.any():
            tr = tr[matched]
    return pd.DataFrame(
        {
            "method": tr["method"].astype(str).to_numpy(),
            "kind": tr["kind"].astype(str).to_numpy(),
            "latency_s": tr["duration"].to_numpy(),
            "ok": ((tr["status"] >= 200) & (tr["status"] < 400)).to_numpy(),
        }
    )


def latency_table(results: dict[str, dict]) -> pd.DataFrame:
    """Rows run × method+kind: n, p50, p90, p99, max latency (s)."""
    rows = []
    for run, r in results.items():
        for key, d in r["latency"].items():
            if d.get("n"):
                rows.append(
                    {
                        "run": run,
                        "request": key,
                        "n": d["n"],
                        "p50_s": d["p50"],
                        "p90_s": d["p90"],
                        "p99_s": d["p99"],
                        "max_s": d["max"],
                    }
                )
    return pd.DataFrame(rows).set_index("run") if rows else pd.DataFrame()


def run_table(results: dict[str, dict]) -> pd.DataFrame:
    """One row per run: counts, throughput, latency and lateness headline numbers."""
    rows = {}
    for run, r in results.items():
        if run == TRACE_ROW:
            continue
        lat = r["latency"]["all"]
        late = r.get("lateness") or {}
        rows[run] = {
            "requests": r["requests"],
            "succeeded": r["succeeded"],
            "failed": r["failed"],
            "duration (s)": r["throughput"]["duration_s"],
            "avg throughput (req/s)": r["throughput"]["average_rps"],
            "latency p50 (s)": lat.get("p50"),
            "latency p99 (s)": lat.get("p99"),
            "latency max (s)": lat.get("max"),
            "lateness p99 (s)": late.get("p99"),
            "on-time ratio": late.get("on_time_ratio"),
        }
    table = pd.DataFrame(rows).T
    table.index.name = "run"
    return table
