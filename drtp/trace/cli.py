"""``drtp generate``, ``inspect``, ``capture``, ``convert`` and ``sample``: the commands that make or read traces."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import sys
import time
from pathlib import Path

from drtp.cli_options import duration, positive_duration, positive_int, positive_size, timestamp
from drtp.errors import DrtpError
from drtp.outputs import check_output_file
from drtp.trace.options import add_trace_options, reader_from_args

# -- generate -------------------------------------------------------------------


def _check_generate_options(args: argparse.Namespace, given: dict) -> None:
    """The generator's own ranges for the options given (named as the options, not the fields)."""
    from drtp.trace.generate import option_problem

    checks = {"requests": args.requests, "span_s": args.span, **given}
    for field, value in checks.items():
        problem = option_problem(field, value) if value is not None else None
        if problem:
            option = {"requests": "-n/--requests", "span_s": "--span"}.get(field, "--" + field.replace("_", "-"))
            raise DrtpError(f"{option}: {problem}")


def cmd_generate(args: argparse.Namespace) -> int:
    from drtp.progress import progress
    from drtp.trace.generate import GenerateOptions, generate
    from drtp.trace.reader import write_ibm

    given = {"clients": args.clients, "repositories": args.repositories, "max_layer_size": args.max_layer_size}
    given = {k: v for k, v in given.items() if v is not None}
    if args.storm is None and args.storm_images is not None:
        raise DrtpError("--storm-images: only with --storm N")
    if args.storm is not None and args.requests is not None:
        raise DrtpError("-n/--requests: not with --storm (a storm holds N clients × --storm-images pulls)")
    args.requests = 10_000 if args.requests is None else args.requests
    _check_generate_options(args, given)
    check_output_file(Path(args.output), "-o")
    if args.storm is not None:
        return _generate_storm(args, given)
    if args.profile:
        from drtp.trace.profiles import load_profile, options_for

        opts = options_for(load_profile(args.profile), args.requests, args.seed, args.span, start=args.start, **given)
    else:
        opts = GenerateOptions(
            requests=args.requests, seed=args.seed, span_s=args.span or 86_400.0, start=args.start, **given
        )
    try:  # timestamps end in year 9999; twice the span leaves room for the generator's spill-over
        opts.start + _dt.timedelta(seconds=2 * opts.span_s)
    except OverflowError:
        raise DrtpError(f"--start {args.start.isoformat()}: the trace would run past the year 9999") from None
    t0 = time.perf_counter()
    with progress(total=args.requests, desc="generate", unit="req") as bar:
        n = write_ibm(args.output, bar.wrap(generate(opts)))
    print(f"wrote {n:,} records to {args.output} in {time.perf_counter() - t0:.1f} s")
    return 0


def _generate_storm(args: argparse.Namespace, given: dict) -> int:
    from drtp.trace.generate import STORM_IMAGES, GenerateOptions, storm, storm_problem
    from drtp.trace.reader import write_ibm

    images = STORM_IMAGES if args.storm_images is None else args.storm_images
    problem = storm_problem(args.storm, images)
    if problem:
        raise DrtpError(problem)
    if args.profile:
        raise DrtpError("--profile: not with --storm (a storm's shape is fixed: every client pulls every image)")
    opts = GenerateOptions(seed=args.seed, start=args.start, **given)
    gap = {} if args.span is None else {"gap_s": args.span / images}
    n = write_ibm(args.output, storm(opts, args.storm, images, **gap))
    print(f"wrote {n:,} records to {args.output}: {args.storm} clients pulling each of {images} images at once")
    return 0


# -- inspect --------------------------------------------------------------------


def cmd_inspect(args: argparse.Namespace) -> int:
    from drtp.trace.summary import format_summary, summarize

    reader = reader_from_args(args)
    summary = summarize(reader.batches())
    summary["skipped"] = reader.stats.skipped
    summary["ignored"] = reader.stats.ignored
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        print()
    else:
        print(format_summary(summary))
    for problem in reader.stats.problems[:5]:
        print(f"skipped: {problem}", file=sys.stderr)
    return 0


# -- capture ------------------------------------------------------------------


def cmd_capture(args: argparse.Namespace) -> int:
    from drtp.trace.anonymize import Anonymizer, salt_from
    from drtp.trace.capture import capture_files, follow_file
    from drtp.trace.reader import write_ibm

    anon = Anonymizer(salt_from(args.salt))
    out = Path(args.output)
    check_output_file(out, "-o")
    if args.follow:
        if len(args.logs) != 1:
            raise DrtpError("--follow takes exactly one log file")
        cap, records = follow_file(Path(args.logs[0]), anon, args.registry, args.delay, args.duration)
        out.parent.mkdir(parents=True, exist_ok=True)
        encode = __import__("msgspec").json.Encoder().encode
        with open(out, "ab") as f:  # JSON lines: a followed capture can stop at any time
            try:
                for rec in records:
                    f.write(encode(rec) + b"\n")
                    f.flush()
            except KeyboardInterrupt:
                pass
    else:
        cap, records = capture_files([Path(p) for p in args.logs], anon, args.registry)
        write_ibm(out, records)
    s = cap.stats
    if args.follow and not s.requests:
        raise DrtpError(f"no registry requests in {args.logs[0]} while following it{_bad_lines_note(s)}")
    if s.warning():
        print(f"drtp: warning: {s.warning()}", file=sys.stderr)
    print(
        f"wrote {s.requests:,} records to {out} ({s.ignored:,} non-object requests left out, "
        f"{s.uploads:,} uploads; sizes from the log {s.sizes_from_log:,}, from the registry "
        f"{s.sizes_from_registry:,}, unresolved {s.unresolved_sizes:,})"
    )
    return 0


def _bad_lines_note(stats) -> str:
    return f" ({stats.warning()})" if stats.warning() else ""


# -- convert ------------------------------------------------------------------


def cmd_convert(args: argparse.Namespace) -> int:
    import msgspec

    from drtp.trace.anonymize import PlainNames
    from drtp.trace.capture import capture_files
    from drtp.trace.generate import MAX_STORM, storm_copies
    from drtp.trace.parquet import write_parquet
    from drtp.trace.reader import TraceReader, detect_format, write_ibm
    from drtp.trace.records import TraceRecord

    paths = [Path(p) for p in args.files]
    out = Path(args.output)
    check_output_file(out, "-o")
    if args.storm is not None and not 1 <= args.storm <= MAX_STORM:
        raise DrtpError(f"--storm: expected an integer from 1 to {MAX_STORM:,}, got {args.storm}")
    fmt = args.format
    if fmt == "auto":
        fmt = detect_format(paths[0]) if paths[0].is_file() else "auto"
    if fmt == "registry-log" and args.storm is not None:
        raise DrtpError("--storm: convert the registry log first, then make the trace a storm")
    if fmt == "registry-log":  # normalised like a capture, names kept
        cap, dicts = capture_files(paths, PlainNames())
        if out.suffix == ".parquet":
            decode = msgspec.json.Decoder(TraceRecord).decode
            encode = msgspec.json.encode
            n = write_parquet(out, ([decode(encode(d))] for d in dicts))
        else:
            n = write_ibm(out, dicts)
        if cap.stats.warning():
            print(f"drtp: warning: {cap.stats.warning()}", file=sys.stderr)
    else:
        reader = TraceReader(paths, fmt=args.format, skip_bad=args.skip_bad, sort_files=args.sort_files)
        batches = reader.batches()
        if args.storm is not None:
            batches = ([*storm_copies(batch, args.storm)] for batch in batches)
        if out.suffix == ".parquet":
            n = write_parquet(out, batches)
        else:
            n = write_ibm(out, (rec for batch in batches for rec in batch))
        if reader.stats.skipped:
            print(f"skipped {reader.stats.skipped:,} malformed records", file=sys.stderr)
    print(f"wrote {n:,} records to {out}")
    return 0


# -- sample -------------------------------------------------------------------

_AMOUNTS = {
    "requests": "a whole number of requests ≥ 1",
    "duration": "a duration > 0, e.g. 1h",
    "bytes": "a size > 0, e.g. 3.5GB",
}
MAX_WINDOW_S = 365 * 86400  # a sliding window longer than a year is no window


def cmd_sample(args: argparse.Namespace) -> int:
    from drtp.trace.sample import sample
    from drtp.units import parse_duration, parse_size

    amount = None
    if args.amount is not None:
        parse = {"duration": parse_duration, "bytes": parse_size}.get(args.method, float)
        try:
            amount = parse(args.amount)
        except ValueError as e:
            raise DrtpError(f"--amount: {e}") from None
        whole = args.method != "requests" or float(amount).is_integer()
        if not (0 < amount < math.inf and whole):
            raise DrtpError(f"--amount {args.amount!r}: must be {_AMOUNTS.get(args.method, 'a number > 0')}")
    if not 60 <= args.window <= MAX_WINDOW_S:
        raise DrtpError(f"--window {args.window:g} s: must be between 1 minute and {MAX_WINDOW_S // 86400:g} days")
    check_output_file(Path(args.output), "-o")
    summary = sample(
        [Path(f) for f in args.files],
        Path(args.output),
        args.method,
        amount=amount,
        start=args.start,
        reader_options={"fmt": args.format, "skip_bad": args.skip_bad, "sort_files": args.sort_files},
        window_minutes=max(1, round(args.window / 60)),
    )
    summary_path = Path(args.output).with_suffix(".summary.json")
    summary_path.write_text(json.dumps(summary, indent=2))
    print(f"wrote {summary['records']:,} records ({summary['bytes'] / 1e9:.2f} GB) to {args.output}")
    print(f"span: {summary['start']} → {summary['end']}")
    print(f"why: {summary['why']['reason']}")
    print(f"summary: {summary_path}")
    return 0


# -- the parsers ----------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate",
        help="write a synthetic trace in the IBM format",
        description="Write a synthetic registry trace (IBM JSON format) with a realistic shape.",
    )
    p.add_argument("-o", "--output", required=True, help="trace file to write (.json, or .json.gz)")
    p.add_argument("-n", "--requests", type=positive_int, help="number of records (default 10000)")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument(
        "--span",
        type=positive_duration,
        help="approximate time span, e.g. 3600 or 1d (default 1d, or the profile's rate)",
    )
    p.add_argument(
        "--start",
        type=timestamp,
        default=_dt.datetime(2017, 8, 1, tzinfo=_dt.timezone.utc),
        help="timestamp of the start (default 2017-08-01T00:00:00Z)",
    )
    p.add_argument("--profile", help="a workload profile: dal, lon, fra, syd, stg, prs, dev, or a profile .yaml")
    p.add_argument("--clients", type=positive_int, help="number of distinct clients (default 200)")
    p.add_argument("--repositories", type=positive_int, help="number of repositories (default 300)")
    p.add_argument("--max-layer-size", type=positive_size, help="cap on layer sizes, e.g. 4MB (default 256MiB)")
    p.add_argument(
        "--storm",
        type=positive_int,
        metavar="N",
        help="a cold-pull storm: N clients pull each image (manifest, then its layers) at the same instant",
    )
    p.add_argument(
        "--storm-images",
        type=positive_int,
        metavar="K",
        help="with --storm: how many images, one storm each, from K repositories (default 5; "
        "--span spreads them, default 10 s apart)",
    )
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser(
        "inspect",
        help="summarise trace files (counts, span, bytes, clients…)",
        description="Read trace files and print what they hold; also checks them for bad records.",
    )
    p.add_argument("files", nargs="+", help="trace files: IBM JSON arrays, JSON lines or registry JSON logs")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_trace_options(p)
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser(
        "capture",
        help="turn a registry's JSON log into an anonymized IBM-format trace",
        description="Turn a Distribution registry's JSON log (log.formatter: json) into an anonymized trace "
        "in the IBM format: object requests only, arrival times, upload sizes resolved, names hashed with a salt.",
    )
    p.add_argument("logs", nargs="+", help="registry log files (JSON lines)")
    p.add_argument("-o", "--output", required=True, help="trace to write (.json; JSON lines when following)")
    p.add_argument("--salt", help="secret for the keyed hash (default: $DRTP_CAPTURE_SALT); keep it to link captures")
    p.add_argument("--registry", help="URL of the live registry, to resolve sizes the log lacks (HEAD requests)")
    p.add_argument("--follow", action="store_true", help="follow a growing log until interrupted")
    p.add_argument("--delay", type=duration, default=30.0, help="when following: hold requests this long (default 30s)")
    p.add_argument("--duration", type=duration, help="when following: stop after this long")
    p.set_defaults(func=cmd_capture)

    p = sub.add_parser(
        "convert",
        help="convert traces: IBM JSON ⇄ Parquet, registry log → IBM JSON",
        description="Convert trace files, streaming: to Parquet (OUTPUT ends in .parquet) or to an IBM JSON "
        "array (.json, .json.gz). Registry JSON logs are normalised as by capture, without anonymizing.",
    )
    p.add_argument("files", nargs="+", help="input traces (IBM JSON, JSON lines, registry log, Parquet)")
    p.add_argument("-o", "--output", required=True, help="output file: .parquet, .json or .json.gz")
    p.add_argument(
        "--storm",
        type=positive_int,
        metavar="N",
        help="make the trace a storm: each pull request (GET/HEAD of a manifest or blob) sent by N clients at its "
        "timestamp (copies k=1..N-1 are client <client>~k); pushes stay single",
    )
    add_trace_options(p, limits=False)
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser(
        "sample",
        help="cut a representative day, a steady window, or a budget out of a trace",
        description="Write a piece of a trace: the representative day (requests, egress, ingress within 10%% of "
        "the daily averages), the steadiest sliding window (per-minute p5/p95 within 50%% of the median), or the "
        "first N requests / S seconds / B bytes. A .summary.json beside the output says why.",
    )
    p.add_argument("files", nargs="+", help="trace files")
    p.add_argument("-o", "--output", required=True, help="trace file to write")
    p.add_argument("--method", required=True, choices=["day", "window", "requests", "duration", "bytes"])
    p.add_argument("--amount", help="for requests/duration/bytes: e.g. 10000, 1h, 3.5GB")
    p.add_argument("--start", type=timestamp, help="for requests/duration/bytes: begin at this time")
    p.add_argument("--window", type=duration, default=3600.0, help="length of the sliding window (default 1h)")
    add_trace_options(p, limits=False)
    p.set_defaults(func=cmd_sample)
