"""``drtp analyze results``: compare replay runs; write JSON, CSV tables, figures and a report."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from drtp.analysis.report import Section, write_report
from drtp.analysis.results import (
    TRACE_ROW,
    analyze_run,
    latency_stats,
    latency_table,
    load_run,
    run_labels,
    run_table,
    trace_latencies,
)
from drtp.analysis.results_figures import draw_all

CAPTIONS = {
    "latency_cdf": "Latency CDFs per request type (method + kind), successful requests; "
    "ibm-trace-data = the trace's recorded response times.",
    "latency_violin": "Latency violins per run and request type (log scale); "
    "extreme values clipped in the plot only, count written on it.",
    "throughput": "Successful requests completed per second over the run; dotted line = the run's average.",
    "failures": "Failed requests by HTTP status code, or by error when there was no response.",
    "lateness": "As-is mode: how late each request started after its intended time (start_s − intended_s).",
}


def load_runs(run_dirs: list[str | Path]) -> tuple[dict[str, pd.DataFrame], dict[str, dict]]:
    """Requests frames and replayer summaries keyed by run label."""
    frames, summaries = {}, {}
    for label, d in zip(run_labels([Path(d) for d in run_dirs]), run_dirs, strict=True):
        frames[label], summaries[label] = load_run(Path(d))
    return frames, summaries


def analyze_results(
    run_dirs: list[str | Path], out: Path, trace_files: list[str] | None = None, log=print
) -> dict[str, dict]:
    """Analyze runs (and the trace's recorded latencies).

    Writes results.json, runs.csv, latency.csv, PNG figures and report.html into ``out``.
    """
    out.mkdir(parents=True, exist_ok=True)
    frames, summaries = load_runs(run_dirs)
    results = {run: analyze_run(df, summaries[run]) for run, df in frames.items()}
    for run, r in results.items():
        rps = r["throughput"]["average_rps"] or 0.0
        log(f"{run}: {r['requests']:,} requests, {r['failed']:,} failed, avg {rps:.1f} req/s")
    if trace_files:
        ids: set[str] = set()
        for df in frames.values():
            if "trace_id" in df.columns:
                ids.update(df["trace_id"].dropna().astype(str))
        trace = trace_latencies(trace_files, ids or None)
        frames[TRACE_ROW] = trace
        results[TRACE_ROW] = {"requests": len(trace), "latency": latency_stats(trace)}
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    runs = run_table(results)
    runs.to_csv(out / "runs.csv")
    latency = latency_table(results)
    latency.to_csv(out / "latency.csv")
    figures = draw_all(results, frames, out)
    failures = (
        pd.DataFrame({run: r["failures"] for run, r in results.items() if run != TRACE_ROW}).fillna(0).astype(int)
    )
    failures.index.name = "status / error"
    sections = [
        Section("Runs", tables=[("", runs)], text=[f"Run directories: {', '.join(str(d) for d in run_dirs)}."]),
        Section(
            "Latency by request type",
            tables=[("", latency)],
            figures=[
                (CAPTIONS["latency_cdf"], figures["latency_cdf"]),
                (CAPTIONS["latency_violin"], figures["latency_violin"]),
            ],
        ),
        Section("Throughput", figures=[(CAPTIONS["throughput"], figures["throughput"])]),
        Section(
            "Failures",
            tables=[("", failures)] if not failures.empty else [],
            figures=[(CAPTIONS["failures"], figures["failures"])],
        ),
        Section("Lateness", figures=[(CAPTIONS["lateness"], figures["lateness"])]),
    ]
    write_report(
        out / "report.html",
        "Replay results",
        sections,
        intro="Numbers include every request; plots clip only where labelled.",
    )
    return results
