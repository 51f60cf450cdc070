"""``drtp analyze results``: compare replay runs; write JSON, CSV tables, figures and a report."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from drtp.analysis.report import Section, with_charts, write_report
from drtp.analysis.results import (
    TRACE_ROW,
    analyze_run,
    failure_table,
    latency_table,
    load_run,
    node_table,
    run_labels,
    run_table,
    status_table,
    trace_latencies,
)
from drtp.analysis.results_figures import draw_all
from drtp.replay.summary import replayer_limited_line

CAPTIONS = {
    "latency_cdf": "Latency CDFs per request type (method + kind), successful requests, in ms; "
    "ibm-trace-data = the trace's recorded response times.",
    "latency_violin": "Latency violins per run and request type (ms, log scale); "
    "extreme values clipped in the plot only, count written on it.",
    "throughput": "Successful requests completed per second, in 1 s bins from the run's first request "
    "(narrower bins for runs under 10 s, said in the legend); the last bin, cut short by the run's end, "
    "is not drawn (its requests count in the average); dotted line = the run's average.",
    "failures": "Failed trace requests per outcome class (drtp.replay.outcome: anything but ok is a failure).",
    "lateness": "As-is mode: how late each request started after its intended time (start − intended, ms).",
}


def load_runs(run_dirs: list[str | Path]) -> tuple[dict[str, pd.DataFrame], dict[str, dict]]:
    """Requests frames and replayer summaries keyed by run label."""
    frames, summaries = {}, {}
    for label, d in zip(run_labels([Path(d) for d in run_dirs]), run_dirs, strict=True):
        frames[label], summaries[label] = load_run(Path(d))
    return frames, summaries


def analyze_runs(
    run_dirs: list[str | Path], trace_files: list[str] | None = None
) -> tuple[dict[str, dict], dict[str, pd.DataFrame]]:
    """(results, frames) keyed by run label; with ``trace_files`` also the trace's recorded latencies
    as the run ``ibm-trace-data`` (only the records the runs replayed, when their trace ids match)."""
    frames, summaries = load_runs(run_dirs)
    results = {run: analyze_run(df, summaries[run]) for run, df in frames.items()}
    if trace_files:
        ids: set[str] = set()
        for df in frames.values():
            ids.update(t for t in df["trace_id"] if t)
        frames[TRACE_ROW] = trace_latencies(trace_files, ids or None)
        results[TRACE_ROW] = analyze_run(frames[TRACE_ROW])
    return results, frames


def replayer_banners(summaries: dict[str, dict]) -> list[str]:
    """A banner per run that was replayer-limited: its latencies are partly the replayer's own."""
    banners = []
    for run, summary in summaries.items():
        line = replayer_limited_line(summary)
        if line:
            banners.append(f"Run {run}: {line}.")
    return banners


def analyze_results(
    run_dirs: list[str | Path], out: Path, trace_files: list[str] | None = None, log=print
) -> dict[str, dict]:
    """Analyze runs (and the trace's recorded latencies).

    Writes results.json, runs.csv, latency.csv, failures.csv, failed_statuses.csv, PNG figures and report.html
    into ``out``;
    a chart with nothing to draw is left out, and the report and ``log`` say which and why.
    """
    out.mkdir(parents=True, exist_ok=True)
    results, frames = analyze_runs(run_dirs, trace_files)
    summaries = {run: r.get("replayer_summary") or {} for run, r in results.items()}
    for run, r in results.items():
        if run != TRACE_ROW:
            why = ", ".join(f"{c} {n:,}" for c, n in r["failures"].items())
            codes = ", ".join(f"{c} {n:,}" for c, n in r["failed_statuses"].items())
            why += f"; by status: {codes}" if codes else ""
            failed = f"{r['failed']:,} failed" + (f" ({why})" if why else "")
            helpers = f"{r['auxiliary']['requests']:,} helper requests, {r['auxiliary']['failed']:,} failed"
            log(f"{run}: {r['requests']:,} requests, {failed}, {r['throughput_rps']:.1f} ok req/s; {helpers}")
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    runs = run_table(results)
    runs.to_csv(out / "runs.csv")
    latency = latency_table(results)
    latency.to_csv(out / "latency.csv")
    failures = failure_table(results)
    failures.to_csv(out / "failures.csv")
    helper_failures = failure_table(results, helpers=True)
    statuses = status_table(results)
    statuses.to_csv(out / "failed_statuses.csv")
    helper_statuses = status_table(results, helpers=True)
    nodes = node_table(results)
    charts = draw_all(results, frames, out)
    log(charts.note())
    sections = [
        Section("Runs", tables=[("", runs)], text=[f"Run directories: {', '.join(str(d) for d in run_dirs)}."]),
        with_charts(
            Section(
                "Latency by request type",
                text=["Latency in milliseconds (requests.csv and summary.json keep seconds)."],
                tables=[("", latency)],
            ),
            charts,
            CAPTIONS,
            "latency_cdf",
            "latency_violin",
        ),
        with_charts(Section("Throughput"), charts, CAPTIONS, "throughput"),
        with_charts(
            Section(
                "Failures",
                text=[
                    "A request is failed when its outcome is anything but ok (drtp/replay/outcome.py). "
                    "Helper requests (e.g. the POST opening an upload) are counted apart.",
                    "Per HTTP status: the failed requests that got an answer, by its status — 429 (Too Many "
                    "Requests) is a registry throttling its clients, 503 one unavailable (some throttle with it); "
                    "a failure without an answer (timeout, reset…) has no status and is only in the first table.",
                ],
                tables=[
                    (title, t)
                    for title, t in (
                        ("Trace requests", failures),
                        ("Trace requests per HTTP status", statuses),
                        ("Helper requests", helper_failures),
                        ("Helper requests per HTTP status", helper_statuses),
                    )
                    if not t.empty
                ],
            ),
            charts,
            CAPTIONS,
            "failures",
        ),
        with_charts(Section("Lateness"), charts, CAPTIONS, "lateness"),
        Section("Client nodes", tables=[("", nodes)] if not nodes.empty else []),
    ]
    write_report(
        out / "report.html",
        "Replay results",
        sections,
        intro="Numbers include every request (the same as each run's summary.json); plots clip only where labelled.",
        banners=replayer_banners(summaries),
    )
    return results
