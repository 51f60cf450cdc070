"""The ``drtp`` command: one subcommand per job.

Core subcommands live here; each other part of drtp (master, plugins,
analysis…) registers its own subcommands through a ``register(subparsers)``
function listed in :data:`COMMAND_MODULES`.  User mistakes raise
:class:`~drtp.errors.DrtpError` and end as one line on stderr with the error's
exit code: 2 for a bad input, 3 (:class:`~drtp.errors.RunError`) when drtp could
not run or finish.  A bug exits 3 with its traceback, never 1: 1 means a run
completed with too many failed requests (drtp.exit_codes).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import math
import sys
import time
import traceback
from pathlib import Path
from typing import NoReturn

from drtp import __version__
from drtp.errors import DrtpError
from drtp.exit_codes import ExitCode
from drtp.outputs import check_output_file, prepare_output_dir
from drtp.trace.reader import FORMATS

# modules that add subcommands of their own (each has register(subparsers))
COMMAND_MODULES: tuple[str, ...] = (
    "drtp.master.cli",
    "drtp.client.cli",
    "drtp.cluster.cli",
    "drtp.plugins.cli",
    "drtp.analysis.cli",
    "drtp.master.selfbench",
)


class DrtpArgumentParser(argparse.ArgumentParser):
    """argparse, with a bad option reported as one line naming the command and the option (exit 2).

    argparse prints the usage and then the error: two lines where drtp promises
    one.  Sub-parsers are made with the parent's class, so every subcommand
    (and sub-subcommand) reports this way.
    """

    def error(self, message: str) -> NoReturn:
        message = message.removeprefix("argument ")
        print(f"{self.prog}: {' '.join(message.split())} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(ExitCode.BAD_INPUT)


# Option types: argparse names the option in front of the message these raise.


def _integer(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be an integer ≥ {minimum}, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    """An integer ≥ 1: counts of things to make or do (records, jobs, layers, threads)."""
    return _integer(text, 1)


def _positive_float(text: str) -> float:
    """A finite number > 0 (months, seconds between polls…)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def _size(text: str) -> int:
    from drtp.units import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive_size(text: str) -> int:
    """A size of at least one byte (a layer, a chunk)."""
    size = _size(text)
    if size < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return size


def _sizes(text: str) -> list[int]:
    """Comma-separated sizes of at least one byte each: ``1MB,10MB``."""
    return [_positive_size(part) for part in text.split(",")]


def _duration(text: str) -> float:
    from drtp.units import parse_duration

    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive_duration(text: str) -> float:
    seconds = _duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be longer than 0 s, got {text!r}")
    return seconds


def _timestamp(text: str) -> _dt.datetime:
    try:
        ts = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO timestamp: {text!r}") from None
    return ts if ts.tzinfo else ts.replace(tzinfo=_dt.timezone.utc)


def add_trace_options(p: argparse.ArgumentParser, limits: bool = True) -> None:
    """Options every command that reads trace files shares (and, with ``limits``, how much to read)."""
    p.add_argument(
        "--format",
        default="auto",
        choices=FORMATS,
        help="input format (default: detected from the file)",
    )
    p.add_argument("--skip-bad", action="store_true", help="skip and count malformed records instead of stopping")
    p.add_argument("--sort-files", action="store_true", help="sort each file in memory (files not in time order)")
    if not limits:
        return
    limit = p.add_mutually_exclusive_group()
    limit.add_argument("--requests", type=_positive_int, metavar="N", help="read only the first N records")
    limit.add_argument("--seconds", type=_duration, metavar="S", help="read only the first S seconds of the trace")


def reader_from_args(args: argparse.Namespace):
    from drtp.trace.reader import TraceReader

    limit_type, amount = (None, None)
    if args.requests is not None:
        limit_type, amount = "requests", args.requests
    elif args.seconds is not None:
        limit_type, amount = "seconds", args.seconds
    return TraceReader(
        args.files,
        fmt=args.format,
        skip_bad=args.skip_bad,
        sort_files=args.sort_files,
        limit_type=limit_type,
        amount=amount,
    )


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
    _check_generate_options(args, given)
    check_output_file(Path(args.output), "-o")
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


# -- inspect --------------------------------------------------------------------


def cmd_inspect(args: argparse.Namespace) -> int:
    from drtp.analysis.trace_summary import format_summary, summarize

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
    from drtp.trace.capture import Anonymizer, capture_files, follow_file, salt_from
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

    from drtp.trace.capture import PlainNames, capture_files
    from drtp.trace.columnar import write_parquet
    from drtp.trace.reader import TraceReader, detect_format, write_ibm
    from drtp.trace.records import TraceRecord

    paths = [Path(p) for p in args.files]
    out = Path(args.output)
    check_output_file(out, "-o")
    fmt = args.format
    if fmt == "auto":
        fmt = detect_format(paths[0]) if paths[0].is_file() else "auto"
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
        if out.suffix == ".parquet":
            n = write_parquet(out, reader.batches())
        else:
            n = write_ibm(out, reader)
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


# -- cost ---------------------------------------------------------------------


def cmd_cost(args: argparse.Namespace) -> int:
    from drtp.analysis.cost import cost_rows, load_pricing, plot_costs, run_volume, trace_volume
    from drtp.units import parse_size

    if args.out:
        prepare_output_dir(Path(args.out), "--out")
    plans = load_pricing([Path(p) for p in args.pricing] if args.pricing else None)
    if args.plans:
        wanted = set(args.plans.split(","))
        unknown = wanted - {p.name for p in plans}
        if unknown:
            raise DrtpError(f"--plans: unknown plan '{sorted(unknown)[0]}' (see drtp cost --list)")
        plans = [p for p in plans if p.name in wanted]
    if args.list:
        for p in plans:
            print(f"{p.name:<22} {p.provider:<26} {p.limits}")
        return 0
    inputs = [Path(x) for x in args.inputs]
    if inputs and all(p.is_dir() for p in inputs):
        volume, source = run_volume(inputs), "replay runs"
    elif inputs:
        volume, source = trace_volume(inputs), "trace"
    else:
        volume = {}
        for option, key, text in (("--storage", "storage_gb", args.storage), ("--egress", "egress_gb", args.egress)):
            try:
                volume[key] = parse_size(text or "0") / 1e9
            except ValueError as e:
                raise DrtpError(f"{option}: {e}") from None
        source = "given"
    rows = cost_rows(plans, volume["storage_gb"], volume["egress_gb"], args.months)
    print(
        f"volume ({source}): storage {volume['storage_gb']:,.3f} GB, egress {volume['egress_gb']:,.3f} GB, "
        f"{args.months:g} month(s); USD, list prices from the pricing tables"
    )
    print(f"{'plan':<22} {'fee':>10} {'storage':>10} {'ops':>8} {'egress':>10} {'total':>11}")
    for r in rows:
        print(
            f"{r['plan']:<22} {r['fee']:>10,.2f} {r['storage']:>10,.2f} {r['operations']:>8,.2f} "
            f"{r['egress']:>10,.2f} {r['total']:>11,.2f}"
        )
    if args.out:
        out = Path(args.out)
        import pandas as pd

        pd.DataFrame(rows).to_csv(out / "cost.csv", index=False)
        (out / "cost.json").write_text(json.dumps({"volume": volume, "months": args.months, "plans": rows}, indent=2))
        plot_costs(plans, out / "cost_vs_volume.png", mark_gb=max(volume.values()) or None)
        print(f"results: {out}/cost.csv, cost.json, cost_vs_volume.png")
    return 0


# -- config ---------------------------------------------------------------------


def cmd_config(args: argparse.Namespace) -> int:
    import yaml

    from drtp.config import load_config, redacted

    cfg = load_config(args.config)
    print(f"# {args.config}: valid")
    print(yaml.safe_dump(redacted(cfg), sort_keys=False), end="")
    return 0


# -- demo -----------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    from drtp.master.demo import run_demo

    prepare_output_dir(Path(args.out), "--out")

    return run_demo(Path(args.out), requests=args.requests, seed=args.seed)


def build_parser() -> argparse.ArgumentParser:
    parser = DrtpArgumentParser(
        prog="drtp",
        description="drtp — the Docker Registry Trace Player: replay, simulate and analyse registry traces.",
    )
    parser.add_argument("--version", action="version", version=f"drtp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "generate",
        help="write a synthetic trace in the IBM format",
        description="Write a synthetic registry trace (IBM JSON format) with a realistic shape.",
    )
    p.add_argument("-o", "--output", required=True, help="trace file to write (.json, or .json.gz)")
    p.add_argument("-n", "--requests", type=_positive_int, default=10_000, help="number of records (default 10000)")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument(
        "--span",
        type=_positive_duration,
        help="approximate time span, e.g. 3600 or 1d (default 1d, or the profile's rate)",
    )
    p.add_argument(
        "--start",
        type=_timestamp,
        default=_dt.datetime(2017, 8, 1, tzinfo=_dt.timezone.utc),
        help="timestamp of the start (default 2017-08-01T00:00:00Z)",
    )
    p.add_argument("--profile", help="a workload profile: dal, lon, fra, syd, stg, prs, dev, or a profile .yaml")
    p.add_argument("--clients", type=_positive_int, help="number of distinct clients (default 200)")
    p.add_argument("--repositories", type=_positive_int, help="number of repositories (default 300)")
    p.add_argument("--max-layer-size", type=_positive_size, help="cap on layer sizes, e.g. 4MB (default 256MiB)")
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
    p.add_argument(
        "--delay", type=_duration, default=30.0, help="when following: hold requests this long (default 30s)"
    )
    p.add_argument("--duration", type=_duration, help="when following: stop after this long")
    p.set_defaults(func=cmd_capture)

    p = sub.add_parser(
        "convert",
        help="convert traces: IBM JSON ⇄ Parquet, registry log → IBM JSON",
        description="Convert trace files, streaming: to Parquet (OUTPUT ends in .parquet) or to an IBM JSON "
        "array (.json, .json.gz). Registry JSON logs are normalised as by capture, without anonymizing.",
    )
    p.add_argument("files", nargs="+", help="input traces (IBM JSON, JSON lines, registry log, Parquet)")
    p.add_argument("-o", "--output", required=True, help="output file: .parquet, .json or .json.gz")
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
    p.add_argument("--start", type=_timestamp, help="for requests/duration/bytes: begin at this time")
    p.add_argument("--window", type=_duration, default=3600.0, help="length of the sliding window (default 1h)")
    add_trace_options(p, limits=False)
    p.set_defaults(func=cmd_sample)

    p = sub.add_parser(
        "cost",
        help="storage and egress cost of a trace or run for registry pricing tables",
        description="Cost of a workload (trace files, replay run directories, or --storage/--egress) for the "
        "pricing tables in configs/pricing/ (list prices; editable YAML).",
    )
    p.add_argument("inputs", nargs="*", help="trace files or run directories (optional)")
    p.add_argument("--storage", help="storage volume when no inputs are given, e.g. 2TB")
    p.add_argument("--egress", help="egress volume per month when no inputs are given, e.g. 10TB")
    p.add_argument("--months", type=_positive_float, default=1.0, help="months the storage is kept (default 1)")
    p.add_argument("--pricing", nargs="+", help="pricing YAML files or folders (default configs/pricing/)")
    p.add_argument("--plans", help="comma-separated plan names to include")
    p.add_argument("--list", action="store_true", help="list the plans and exit")
    p.add_argument("--out", help="write cost.csv, cost.json and cost_vs_volume.png here")
    p.set_defaults(func=cmd_cost)

    p = sub.add_parser("config", help="validate a config file and print it (secrets masked)")
    p.add_argument("-c", "--config", required=True, help="YAML config file")
    p.set_defaults(func=cmd_config)

    p = sub.add_parser("demo", help="the main job on a local registry: generate, start a registry, replay, summarise")
    p.add_argument("--out", default="results/demo", help="output directory (default results/demo)")
    p.add_argument("--requests", type=_positive_int, default=2000, help="trace length (default 2000)")
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=cmd_demo)

    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return ExitCode.BAD_INPUT
    try:
        return int(args.func(args) or 0)
    except DrtpError as e:
        print(f"drtp: error: {e}", file=sys.stderr)  # one line: DrtpError escapes any line break it quotes
        return e.exit_code
    except KeyboardInterrupt:
        print("drtp: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception:  # a bug: its traceback is what a report needs, and Python's own exit 1 would read as a verdict
        traceback.print_exc()
        print("drtp: internal error (the traceback above is a bug in drtp)", file=sys.stderr)
        return ExitCode.CANNOT_RUN


if __name__ == "__main__":
    sys.exit(main())
