"""``drtp analyze``: workload characterization of traces and statistics of replay runs."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from drtp.cli_options import duration, positive_duration
from drtp.trace.options import add_trace_options


def _headless() -> None:
    """Figures are files: draw with Agg, never open a window."""
    import matplotlib

    matplotlib.use("Agg")


def cmd_analyze_trace(args: argparse.Namespace) -> int:
    _headless()
    from drtp.analysis.trace_analysis import analyze_traces, group_files
    from drtp.outputs import prepare_output_dir

    groups = group_files(args.files, args.label)
    reader_options: dict = {"fmt": args.format, "skip_bad": args.skip_bad}
    if args.requests is not None:
        reader_options.update(limit_type="requests", amount=args.requests)
    elif args.seconds is not None:
        reader_options.update(limit_type="seconds", amount=args.seconds)
    t0 = time.perf_counter()
    out = Path(args.out)
    prepare_output_dir(out, "--out")
    analyze_traces(
        groups,
        out,
        session_s=args.session,
        push_window_s=args.push_window,
        bin_s=args.bin,
        reader_options=reader_options,
        profile=args.profile,
    )
    took = time.perf_counter() - t0
    print(f"wrote {out}/characterization.json, key_numbers.csv, figures and report.html in {took:.1f} s")
    return 0


def cmd_analyze_results(args: argparse.Namespace) -> int:
    _headless()
    from drtp.analysis.results_analysis import analyze_results
    from drtp.analysis.views import Selection
    from drtp.outputs import prepare_output_dir

    out = Path(args.out)
    prepare_output_dir(out, "--out")
    selection = Selection(window=args.window, max_latency_s=args.max_latency)
    analyze_results(args.runs, out, trace_files=args.trace, groups=args.group, selection=selection)
    print(
        f"wrote {out}/results.json, runs.csv, latency.csv, failures.csv, failed_statuses.csv, views.json, "
        "latency_size.csv, image_latency.csv, mean_latency.csv, image_operations.csv, figures and report.html"
    )
    return 0


def cmd_analyze_compare(args: argparse.Namespace) -> int:
    _headless()
    from drtp.analysis.compare import compare_runs, format_rows, write_outputs
    from drtp.outputs import prepare_output_dir

    comparison = compare_runs(
        args.baseline,
        args.candidate,
        alpha=args.alpha,
        noise=args.noise / 100,
        window=args.window,
        event=args.event,
    )
    print(format_rows(comparison.rows, comparison.meta))
    if args.out:
        out = Path(args.out)
        prepare_output_dir(out, "--out")
        figures = write_outputs(comparison, out)
        print(f"wrote {out}/compare.json, compare.csv and {len(figures)} figures")
    return 0


def cmd_analyze_cache(args: argparse.Namespace) -> int:
    _headless()
    from drtp.analysis.cache_vs_sim import compare_cache, format_comparison, write_comparison
    from drtp.outputs import prepare_output_dir

    run = Path(args.run)
    if not (run / "requests.csv").is_file():
        from drtp.errors import DrtpError

        raise DrtpError(f"{run}: not a run directory (no requests.csv)")
    out = Path(args.out) if args.out else run / "cache-vs-sim"
    prepare_output_dir(out, "--out")
    comparison = compare_cache(
        run,
        args.capacity,
        args.key,
        args.slice,
        Path(args.upstream_log) if args.upstream_log else None,
        args.registry,
        Path(args.cache_log) if args.cache_log else None,
    )
    print(format_comparison(comparison))
    paths = write_comparison(comparison, out)
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0


def _capacity(text: str) -> int | str:
    """``unlimited``, bytes, a size (64MB) or a percentage of the run's working set (20%)."""
    from drtp.plugins.base import check_size

    if text == "unlimited":
        return text
    try:
        check_size(text, "capacity", minimum=1)
    except Exception as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("simulate.args.capacity: ")) from None
    return text


def _share(text: str) -> float:
    """A probability strictly between 0 and 1 (α)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must lie between 0 and 1, got {text!r}")
    return value


def _percent(text: str) -> float:
    """A percentage ≥ 0 (``2`` or ``2%``)."""
    try:
        value = float(text.removesuffix("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r}") from None
    if not 0 <= value < 1000:
        raise argparse.ArgumentTypeError(f"must be a percentage from 0, got {text!r}")
    return value


def _window(text: str) -> tuple[float, float]:
    """``FROM:TO`` seconds from a run's start (``0:60s``, ``30s:2m``; an empty end: no limit), FROM < TO."""
    low, colon, high = text.partition(":")
    if not colon:
        raise argparse.ArgumentTypeError(f"expected FROM:TO (e.g. 0:60s), got {text!r}")
    try:
        start = duration(low) if low.strip() else 0.0
        end = duration(high) if high.strip() else math.inf
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{e} in {text!r} (expected FROM:TO, e.g. 0:60s)") from None
    if not start < end:
        raise argparse.ArgumentTypeError(f"FROM must be before TO, got {text!r}")
    return start, end


def register(sub) -> None:
    p = sub.add_parser(
        "analyze",
        help="characterize traces or compare replay results; writes JSON, PNG and report.html",
        description="Analysis of registry traces and replay runs.",
    )
    asub = p.add_subparsers(dest="analyze_command", metavar="WHAT", required=True)

    t = asub.add_parser(
        "trace",
        help="workload characterization of trace files (the measures of Anwar et al., FAST '18)",
        description="Characterize traces: request types, sizes, load, response times, popularity, "
        "follow-ups, concurrency, rhythm, inter-arrival and idle times, data volume.",
    )
    t.add_argument("files", nargs="+", help="trace files; files with the same label are read as one trace")
    t.add_argument("--out", required=True, help="output directory")
    t.add_argument(
        "--label",
        nargs="+",
        metavar="NAME",
        help="one label per file (e.g. availability zones: --label dal dal lon); default from file names",
    )
    t.add_argument(
        "--session",
        type=positive_duration,
        default=60.0,
        help="trace client session threshold for follow-ups (default 1 min)",
    )
    t.add_argument(
        "--push-window",
        type=positive_duration,
        default=None,
        help="how long after a PUT a GET manifest counts as 'after a push' (default: the session threshold)",
    )
    t.add_argument(
        "--profile",
        metavar="NAME|FILE",
        help="check every trace against this workload profile's targets (default: labels named like a "
        "built-in profile, e.g. dal, are checked against it)",
    )
    t.add_argument("--bin", type=positive_duration, default=60.0, help="bin width for concurrency (default 60 s)")
    add_trace_options(t)
    t.set_defaults(func=cmd_analyze_trace)

    r = asub.add_parser(
        "results",
        help="latency, throughput, failures and lateness of replay runs",
        description="Compare replay runs (directories with requests.csv and summary.json).",
    )
    r.add_argument(
        "runs",
        nargs="*",
        metavar="RUN_DIR",
        help="run directories written by the replayer, or folders of rep-*/ runs (one group of repeated runs)",
    )
    r.add_argument("--out", required=True, help="output directory")
    r.add_argument(
        "--trace", nargs="+", metavar="FILE", help="the replayed trace: adds its recorded latencies (ibm-trace-data)"
    )
    r.add_argument(
        "--group",
        nargs="+",
        action="append",
        metavar="NAME=RUN",
        help="runs that form one group, e.g. --group eu=runs/ecr-eu runs/gcr-eu (repeat for each group); a group's "
        "bar is the mean of its runs' means with a 95%% interval over them",
    )
    r.add_argument(
        "--window",
        type=_window,
        metavar="FROM:TO",
        help="only requests started in [FROM, TO) of each run, e.g. 0:60s (default: all)",
    )
    r.add_argument(
        "--max-latency",
        type=positive_duration,
        metavar="DURATION",
        help="leave out requests slower than this (e.g. 2s); how many is said (default: none left out)",
    )
    r.set_defaults(func=cmd_analyze_results)

    c = asub.add_parser(
        "compare",
        help="is a candidate's result better, worse or the same as a baseline's? medians, intervals, tests",
        description="Compare runs of a baseline and a candidate (run directories, or folders of rep-*/ runs) per "
        "slice and statistic: median over runs, relative change with a 95%% bootstrap interval, Mann-Whitney U "
        "p-value and a verdict (better, worse, same, or inconclusive below 4 runs a side).",
    )
    c.add_argument("--baseline", nargs="+", required=True, metavar="RUN", help="the baseline's runs")
    c.add_argument(
        "--candidate", nargs="+", metavar="RUN", help="the candidate's runs (required unless --event is given)"
    )
    part = c.add_mutually_exclusive_group()
    part.add_argument(
        "--window",
        type=_window,
        metavar="FROM:TO",
        help="only requests started in [FROM, TO) of each run, e.g. 0:60s, as analyze results (default: all)",
    )
    part.add_argument(
        "--event",
        metavar="NAME",
        help="each run's requests during its event NAME (events.csv) against those in the same length of time "
        "before it: the baseline is 'before', the candidate 'during', for the runs of --baseline and --candidate",
    )
    c.add_argument("--out", help="write compare.json, compare.csv and a figure per slice here")
    c.add_argument("--alpha", type=_share, default=0.05, help="significance level of the test (default 0.05)")
    c.add_argument("--noise", type=_percent, default=2.0, help="a change under this many %% is 'same' (default 2)")
    c.set_defaults(func=cmd_analyze_compare)

    k = asub.add_parser(
        "cache",
        help="the simulator's hit ratio beside a real cache's, on a run through the cache",
        description="Run the cache simulator on the requests a run sent through a pull-through cache and put "
        "predicted and measured hit ratios side by side, per kind and per time slice, with the causes of a "
        "difference it can count (docs/caches.md). Measured: requests.csv's cache column, else the upstream's "
        "access log (Distribution's JSON log).",
    )
    k.add_argument("run", metavar="RUN", help="a run directory (requests.csv, summary.json, config.json)")
    k.add_argument("--out", help="output directory (default RUN/cache-vs-sim)")
    k.add_argument(
        "--capacity",
        type=_capacity,
        default="unlimited",
        help="the cache's capacity: unlimited (default), bytes, a size (64MB) or a share of the run's "
        "working set (20%%)",
    )
    k.add_argument(
        "--key",
        choices=["repository+digest", "digest"],
        default="repository+digest",
        help="what the cache keys a layer by: repository+digest (Distribution's proxy; default) or digest "
        "(an nginx cache keyed by digest)",
    )
    k.add_argument("--slice", type=positive_duration, help="width of a time slice (default: a tenth of the run)")
    k.add_argument(
        "--upstream-log",
        metavar="FILE",
        help="the upstream's access log (Distribution's JSON log), for a run whose requests.csv has no cache "
        "column (default: config.json's registries[].upstream.access_log)",
    )
    k.add_argument("--registry", metavar="ID", help="the registries entry whose upstream to read, when several")
    k.add_argument(
        "--cache-log",
        metavar="FILE",
        help="with the upstream's log: the cache's own JSON log (Distribution's proxy), whose 'scheduler entry' "
        "lines say when it stored each layer; a request sent before then counts as in flight",
    )
    k.set_defaults(func=cmd_analyze_cache)
