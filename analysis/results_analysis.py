"""``drtp analyze results``: compare replay runs; write JSON, CSV tables, figures and a report."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from drtp.analysis.event_bands import run_bands
from drtp.analysis.registry_side import registry_side_table
from drtp.analysis.report import Section, cache_latency_table, with_charts, write_report
from drtp.analysis.results import (
    TRACE_ROW,
    analyze_run,
    failure_table,
    latency_table,
    node_table,
    read_run_files,
    run_labels,
    run_table,
    status_table,
    trace_latencies,
)
from drtp.analysis.results_figures import draw_all
from drtp.analysis.views import Selection, run_groups, seed_views, select
from drtp.analysis.views_figures import draw_views
from drtp.errors import DrtpError
from drtp.replay.summary import replayer_limited_line
from drtp.replay.windows import event_line
from drtp.units import to_ms

CAPTIONS = {
    "latency_cdf": "Latency CDFs per request type (method + kind), successful requests, in ms; "
    "ibm-trace-data = the trace's recorded response times.",
    "latency_violin": "Latency violins per run and request type (ms, log scale); "
    "extreme values clipped in the plot only, count written on it.",
    "throughput": "Successful requests completed per second, in 1 s bins from the run's first request "
    "(narrower bins for runs under 10 s, said in the legend); the last bin, cut short by the run's end, "
    "is not drawn (its requests count in the average); dotted line = the run's average; a run's events are "
    "shaded bands (grey: before, red: during, green: after).",
    "event_latency": "p99 latency of the succeeded trace requests per 1 s interval (by end, as stats_history.csv), "
    "with each event's windows as bands (grey: before, red: during, green: after; each the event's length).",
    "failures": "Failed trace requests per outcome class (drtp.replay.outcome: anything but ok is a failure).",
    "lateness": "As-is mode: how late each request started after its intended time (start − intended, ms).",
    "registry_side": "Mean latency per handler and method over the run's window: as drtp measured it (from sending "
    "the request to its answer's last byte) and as the registry timed its own handler (its duration histogram's "
    "sum / count). The difference is network, TLS, queueing in the client and the 401 round trip of auth "
    "challenges (docs/analysis.md).",
    "latency_size": "Mean latency of successful trace requests against object size (bytes on the wire), per "
    "request type, one line per group, each point a size bin (decades from 1 kB; x = the bin's mean size).",
    "mean_latency": "Mean latency per group: all GET and total push per request (the thesis's), image pulls "
    "and pushes per image (spans); bar = mean of the group's run means, error bar = 95 % t interval over "
    "its runs (none for one run).",
}


def read_runs_by_label(run_dirs: list[str | Path]) -> tuple[dict[str, pd.DataFrame], dict[str, dict]]:
    """Each run's raw requests frame and summary dict, keyed by its label (two dicts, for the analysis's tables)."""
    frames, summaries = {}, {}
    for label, d in zip(run_labels([Path(d) for d in run_dirs]), run_dirs, strict=True):
        frames[label], summaries[label] = read_run_files(Path(d))
    return frames, summaries


def bands_by_label(run_dirs: list[str | Path]) -> dict[str, list[dict]]:
    """Each run's event windows (drtp.analysis.event_bands), keyed by its label; runs without events left out."""
    bands = {
        label: run_bands(Path(d)) for label, d in zip(run_labels([Path(d) for d in run_dirs]), run_dirs, strict=True)
    }
    return {label: b for label, b in bands.items() if b}


def analyze_runs(
    run_dirs: list[str | Path],
    trace_files: list[str] | None = None,
    selection: Selection | None = None,
    left_out: dict[str, dict] | None = None,
) -> tuple[dict[str, dict], dict[str, pd.DataFrame]]:
    """(results, frames) keyed by run label; with ``trace_files`` also the trace's recorded latencies
    as the run ``ibm-trace-data`` (only the records the runs replayed, when their trace ids match).

    With a ``selection`` every number is made of the rows inside it; ``left_out`` (when given) receives,
    per run, how many rows it left out and why."""
    frames, summaries = read_runs_by_label(run_dirs)
    # the trace records shown beside the runs: those of the runs' requests (in the window, whatever their latency)
    ids: set[str] = set()
    for df in frames.values():
        in_window = select(df, Selection(window=selection.window))[0] if selection is not None else df
        ids.update(t for t in in_window["trace_id"] if t)
    if selection is not None:
        for run, df in frames.items():
            frames[run], dropped = select(df, selection)
            if frames[run]["auxiliary"].all() and not df["auxiliary"].all():  # an empty "success" says nothing
                raise DrtpError(f"{selection.options()}: no trace request of the run {run} is left")
            if left_out is not None:
                left_out[run] = dropped
    results = {run: analyze_run(df, summaries[run]) for run, df in frames.items()}
    for run, bands in bands_by_label(run_dirs).items():
        results[run]["event_bands"] = bands
    if trace_files:
        frames[TRACE_ROW] = trace_latencies(trace_files, ids or None)  # the window's requests, by their ids
        if selection is not None and selection.max_latency_s is not None:  # the recorded latencies obey the cut
            frames[TRACE_ROW], dropped = select(frames[TRACE_ROW], Selection(max_latency_s=selection.max_latency_s))
            if left_out is not None:
                left_out[TRACE_ROW] = dropped
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
    run_dirs: list[str | Path],
    out: Path,
    trace_files: list[str] | None = None,
    log=print,
    groups: list[list[str]] | None = None,
    selection: Selection | None = None,
) -> dict[str, dict]:
    """Analyze runs (and the trace's recorded latencies).

    ``run_dirs`` are run directories or folders of ``rep-*/`` runs; ``groups`` the ``--group NAME=RUN…``
    word lists (drtp.analysis.views.run_groups); ``selection`` the window and latency cut every number obeys.
    Writes results.json, runs.csv, latency.csv, failures.csv, failed_statuses.csv, the views' views.json,
    latency_size.csv, image_latency.csv, mean_latency.csv, image_operations.csv, PNG figures and report.html
    into ``out``;
    a chart with nothing to draw is left out, and the report and ``log`` say which and why.
    """
    out.mkdir(parents=True, exist_ok=True)
    selection = selection or Selection()
    grouped = run_groups([str(d) for d in run_dirs], groups)
    left_out: dict[str, dict] = {}
    results, frames = analyze_runs(grouped.dirs, trace_files, selection, left_out)
    labels = run_labels(grouped.dirs)
    group_runs = {name: [labels[i] for i in members] for name, members in grouped.groups.items()}
    summaries = {run: r.get("replayer_summary") or {} for run, r in results.items()}
    for run, r in results.items():
        if run != TRACE_ROW:
            why = ", ".join(f"{c} {n:,}" for c, n in r["failures"].items())
            codes = ", ".join(f"{c} {n:,}" for c, n in r["failed_statuses"].items())
            why += f"; by status: {codes}" if codes else ""
            failed = f"{r['failed']:,} failed" + (f" ({why})" if why else "")
            helpers = f"{r['auxiliary']['requests']:,} helper requests, {r['auxiliary']['failed']:,} failed"
            log(f"{run}: {r['requests']:,} requests, {failed}, {r['throughput_rps']:.1f} ok req/s; {helpers}")
            for entry in summaries[run].get("events") or []:  # each event's windows, as the run's console said
                log(f"{run}: {event_line(entry)}")
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
    both_sides = registry_side_table(results)
    views_section = _write_views(frames, group_runs, selection, left_out, out, log)
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
        views_section,
    ]
    events = event_table(summaries)
    if not events.empty:
        text = (
            "Per event (events.csv) of a run and window — the event's length before it, during it and after it — "
            "the trace requests that started in it, from the run's summary.json events[] (whole runs, whatever "
            "--window); refused = connections refused (a registry restarting), apart from HTTP answers; "
            "recovery_s: from the event's end to the first of 3 intervals in a row at p99 ≤ 1.1 × before's."
        )
        section = Section("Maintenance events", text=[text], tables=[("", events)])
        sections.append(with_charts(section, charts, CAPTIONS, "event_latency"))
    if not both_sides.empty:  # only runs that read their registry's metrics have the registry's side
        text = (
            "Per handler and method, what drtp sent and what the registry's own metrics say it completed in the "
            "run's window (summary.json registry_side). The registry's quantiles are known only to lie in a bucket "
            "of its histogram (Distribution's smallest is 5 ms): their bounds, in ms."
        )
        section = Section("Client and registry", text=[text], tables=[("", both_sides)])
        sections.append(with_charts(section, charts, CAPTIONS, "registry_side"))
    by_class = cache_latency_table(summaries)
    if not by_class.empty:  # only runs through a cache whose upstream's log was read have classes
        text = (
            "Trace requests through a cache by class (requests.csv's cache column): hit (served from the cache), "
            "wait (served from the cache after waiting on another client's upstream fetch, e.g. nginx's lock), "
            "miss (fetched from the upstream). Latency in milliseconds."
        )
        sections.append(Section("Latency by cache class", text=[text], tables=[("", by_class)]))
    write_report(
        out / "report.html",
        "Replay results",
        sections,
        intro="Numbers include every request (the same as each run's summary.json); plots clip only where labelled.",
        banners=replayer_banners(summaries),
    )
    return results


def event_table(summaries: dict[str, dict]) -> pd.DataFrame:
    """One line per run, event and window of the runs' summary.json ``events[]`` (empty without events)."""
    lines = []
    for run, summary in summaries.items():
        for entry in summary.get("events") or []:
            for window, w in (entry.get("windows") or {}).items():
                if not w:
                    continue
                latency = w.get("latency_s") or {}
                lines.append(
                    {
                        "run / event / window": f"{run} / {entry['name']} / {window}",
                        "from_s": w["from_s"],
                        "to_s": w["to_s"],
                        "requests": w["requests"],
                        "failed": w["failed"],
                        "refused": w["failures"].get("refused", 0),
                        "http": w["failures"].get("http", 0),
                        "throttled": w["throttled"],
                        "p50_ms": to_ms(latency.get("p50")),
                        "p99_ms": to_ms(latency.get("p99")),
                        "max_ms": to_ms(latency.get("max")),
                        "throughput_rps": w["throughput_rps"],
                        "helpers_failed": (w.get("auxiliary") or {}).get("failed"),
                        "recovery_s": entry.get("recovery_s") if window == "after" else None,
                    }
                )
    if not lines:
        return pd.DataFrame()
    return pd.DataFrame(lines).set_index("run / event / window")


def _write_views(
    frames: dict[str, pd.DataFrame],
    groups: dict[str, list[str]],
    selection: Selection,
    left_out: dict[str, dict],
    out: Path,
    log,
) -> Section:
    """The studies' views (drtp.analysis.views): files, figures, console lines and the report's section."""
    runs = {run: df for run, df in frames.items() if run != TRACE_ROW}
    views = seed_views(runs, groups, selection)
    views.left_out = left_out
    (out / "views.json").write_text(json.dumps(views.to_json(), indent=1, default=str))
    views.latency_size.to_csv(out / "latency_size.csv", index=False)
    views.per_run.to_csv(out / "image_latency.csv", index=False)
    views.bars.to_csv(out / "mean_latency.csv", index=False)
    views.operations.to_csv(out / "image_operations.csv", index=False)
    text = [f"Rows: {selection.describe()}."]
    for run, dropped in left_out.items():
        if any(dropped.values()):
            line = (
                f"{run}: left out {dropped['outside_window']:,} rows outside the window, "
                f"{dropped['over_max_latency']:,} over the latency cut ({dropped['over_max_latency_failed']:,} "
                "of them failed)"
            )
            log(line)
            text.append(line + ".")
    if any(len(members) > 1 for members in groups.values()) or len(groups) < len(runs):
        text.append("Groups: " + "; ".join(f"{g} = {', '.join(m)}" for g, m in groups.items()) + ".")
    text.append(
        "An image pull runs from its manifest GET to the end of its last layer GET (layers of the same client and "
        "repository until its next manifest GET, none starting over 60 s after the pull's requests so far); an "
        "image push from its first upload request to the end of its manifest PUT. Both count only operations "
        "that moved a layer; 'without_layers' counts the others. all GET = every GET, total push = every PUT, "
        "per request."
    )
    charts = draw_views(views, out)
    log(charts.note())
    section = Section(
        "Latency by object size, image pulls and pushes",
        text=text,
        tables=[
            (title, table.set_index(index))
            for title, table, index in (
                ("Mean latency per group (ms; interval over runs)", views.bars, "group"),
                ("Per run (ms)", views.per_run, "run"),
                ("Latency by object size (ms)", views.latency_size, "group"),
            )
            if not table.empty
        ],
    )
    return with_charts(section, charts, CAPTIONS, "latency_size", "mean_latency")
