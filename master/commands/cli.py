"""``drtp warmup``, ``drtp run``, ``drtp experiment`` and ``drtp bench``: the master's commands.

``run`` and ``experiment`` end with the exit codes of drtp.exit_codes, so that a
script or a Slurm job can tell a run that measured too many failures (1) from a
bad input (2), a run that could not run or finish (3) and Ctrl-C (130).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from drtp.cli_options import (
    add_config_options,
    add_progress_options,
    apply_progress_options,
    config_from_args,
    duration,
    non_negative_int,
    port_number,
    positive_duration,
    positive_float,
    positive_int,
    positive_size,
    refusal,
    sizes,
)
from drtp.errors import DrtpError
from drtp.outputs import check_output_file, prepare_output_dir
from drtp.replay.failure_budget import FailureBudget, parse_max_failed

EXIT_CODES_HELP = (
    "Exit codes: 0 the run completed, its failed trace requests are within --max-failed and it held every --slo "
    "objective; 1 completed with more failed (requests lost with a dead client node count as failed) or an "
    "objective broken; 2 bad input (config, option, trace); 3 could "
    "not run or could not finish (preflight, client nodes, results directory); 130 interrupted."
)
MAX_FAILED_HELP = (
    "failed trace requests tolerated for exit 0: a count (e.g. 5) or a percentage of the trace's requests "
    "(e.g. 1%%, 0.5%%); default: client_info.max_failed (0)"
)


def failure_budget(args: argparse.Namespace, cfg) -> FailureBudget:
    """--max-failed when given, else client_info.max_failed; a bad value is a one-line error naming which."""
    if args.max_failed is not None:
        value, where = args.max_failed, "--max-failed"
    else:
        value, where = cfg.client_info.max_failed, f"{cfg.source}: key 'client_info.max_failed'"
    try:
        return parse_max_failed(value)
    except ValueError as e:
        raise DrtpError(f"{where}: {e}") from None


MAX_REPLAYER_LIMITED_HELP = (
    "exit 1 when the run was replayer-limited (summary.json's replayer_limited: a client node at 90%% of a core or "
    "later than 10 ms in 10%% of the intervals; its latencies are partly the replayer's); "
    "default: client_info.max_replayer_limited (off)"
)


def max_replayer_limited(args: argparse.Namespace, cfg) -> bool:
    """--max-replayer-limited / --no-max-replayer-limited when given, else client_info.max_replayer_limited."""
    given = getattr(args, "max_replayer_limited", None)
    return cfg.client_info.max_replayer_limited if given is None else given


SLO_HELP = (
    "objectives the run must hold for exit 0, e.g. 'p99<200ms,failed<1%%,GET blob:p50<50ms' (STAT<VALUE joined by "
    "commas; STAT p50, p90, p99, mean in ms or s, failed or throttled (429s) in %%; optionally 'METHOD kind:' "
    "first); latency from each request's intended start in rate mode; default: client_info.slo"
)
RATE_HELP = (
    "open loop: start R requests per second whatever the registry answers (the trace's requests in order, its "
    "timestamps ignored; latency counted from each intended start, response_s); default: client_info.rate"
)


def objectives(args: argparse.Namespace, cfg) -> list:
    """--slo when given, else client_info.slo (None: no objectives); a bad one is a one-line error naming which."""
    from drtp.replay.slo import parse_slo

    if getattr(args, "slo", None) is not None:
        text, where = args.slo, "--slo"
    elif cfg.client_info.slo is not None:
        text, where = cfg.client_info.slo, f"{cfg.source}: key 'client_info.slo'"
    else:
        return []
    try:
        return parse_slo(text)
    except ValueError as e:
        raise DrtpError(f"{where}: {e}") from None


def rate_overrides(args: argparse.Namespace) -> None:
    """--rate, --arrivals and --seed as config keys set on the command line (checked as the config's are)."""
    from drtp.config_overrides import Override

    for option, key in (("rate", "rate"), ("arrivals", "arrivals"), ("seed", "seed")):
        value = getattr(args, option, None)
        if value is not None:
            args.overrides.append(Override(f"client_info.{key}", value, f"--{option}"))
    if getattr(args, "repeat", None) is not None:
        args.overrides.append(Override("repeat", args.repeat, "--repeat"))


REPEAT_HELP = (
    "replay N times, each run into rep-<k>/ of --out (an experiment: interleaved across its registries, A B A B), "
    "each into repositories of its own (prefix rep<k>-) warmed up for it unless repeat_state: reuse; the exit "
    "code is the worst of the runs'; default: the config's repeat (1)"
)


def add_rate_options(p: argparse.ArgumentParser) -> None:
    """``--rate``, ``--arrivals``, ``--seed`` of the commands that replay."""
    p.add_argument("--rate", type=positive_float, metavar="R", help=RATE_HELP)
    p.add_argument(
        "--arrivals",
        choices=("constant", "poisson"),
        help="rate mode: starts 1/R apart (constant) or independent (poisson); default: client_info.arrivals",
    )
    p.add_argument("--seed", type=non_negative_int, help="poisson arrivals: the random seed (a run offered again)")


TOKEN_FILE_HELP = "file holding the shared secret of the client nodes (overrides client_info.token and $DRTP_TOKEN)"


def apply_token_file(args: argparse.Namespace, cfg) -> None:
    """--token-file: the secret from that file replaces client_info.token (never on the command line itself)."""
    if args.token_file is not None:
        from drtp.replay.signing import read_token_file

        cfg.client_info.token = read_token_file(args.token_file)


def read_ca_file(path: Path) -> str:
    """The PEM text of ``--ca-file``; a missing, unreadable or binary file is a one-line error."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise DrtpError(f"--ca-file {path}: cannot read ({getattr(e, 'strerror', None) or 'not PEM text'})") from None
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise DrtpError(f"--ca-file {path}: no PEM certificate in it (-----BEGIN CERTIFICATE-----)")
    return text


def add_live_metrics_options(p: argparse.ArgumentParser) -> None:
    """``--metrics-port``, ``--metrics-host``, ``--metrics-linger`` of run, experiment and ramp."""
    p.add_argument(
        "--metrics-port",
        type=port_number,
        metavar="PORT",
        help="serve live metrics for Prometheus at http://HOST:PORT/metrics while the run goes (read-only, no "
        "secrets; default: live_metrics.port, else none)",
    )
    p.add_argument(
        "--metrics-host",
        metavar="HOST",
        help="address the live metrics listen on (default: live_metrics.host, else 127.0.0.1: this machine only)",
    )
    p.add_argument(
        "--metrics-linger",
        type=duration,
        metavar="SECONDS",
        help="at the end, wait at most this long for a scrape of the final values (default: live_metrics.linger, "
        "else 15; 0: none)",
    )


def start_live_metrics(args: argparse.Namespace, cfg):
    """The live metrics exporter, listening (None: neither the options nor the config ask for one).

    It listens before the run checks the registries or sends a request: a port in use or an address that is not
    this machine's is a one-line refusal (exit 2) before anything starts."""
    from drtp.config import listen_host_error
    from drtp.master.outputs.live_metrics import DEFAULT_HOST, DEFAULT_LINGER_S, MAX_LINGER_S, LiveMetrics, LiveSettings

    section = cfg.live_metrics
    port = args.metrics_port if args.metrics_port is not None else (section.port if section else None)
    if port is None:
        for option in ("host", "linger"):
            if getattr(args, f"metrics_{option}") is not None:
                raise DrtpError(f"--metrics-{option}: needs --metrics-port PORT (or the config key live_metrics.port)")
        return None
    host = args.metrics_host if args.metrics_host is not None else (section.host if section else DEFAULT_HOST)
    if args.metrics_host is not None and (why := listen_host_error(host)):
        raise DrtpError(f"--metrics-host: {why}")
    linger = args.metrics_linger
    if linger is None:
        linger = section.linger if section else DEFAULT_LINGER_S
    elif linger > MAX_LINGER_S:
        raise DrtpError(f"--metrics-linger: at most {MAX_LINGER_S:g} s, got {linger:g}")
    options = [f"--metrics-{k} {v}" for k, v in (("port", args.metrics_port), ("host", args.metrics_host)) if v]
    where = " ".join(options) or f"{cfg.source}: key 'live_metrics'"
    live = LiveMetrics(LiveSettings(port, host, linger))
    try:
        live.start()
    except (OSError, ValueError) as e:
        why = getattr(e, "strerror", None) or str(e)
        raise DrtpError(f"{where}: cannot serve live metrics on {host}:{port}: {why}") from None
    return live


def say(args: argparse.Namespace, message: str, code: int) -> None:
    """One line on stderr, where scripts look for why the exit code is not 0: a refusal's format, or a
    warning's when the run passed all the same (every failure tolerated, yet nothing succeeded)."""
    if message:
        line = refusal(args.drtp_prog, message) if code else f"{args.drtp_prog}: warning: {message}"
        print(line, file=sys.stderr, flush=True)


def cmd_warmup(args: argparse.Namespace) -> int:
    from drtp.master.run.warmup import run_warmup

    apply_progress_options(args)
    cfg = config_from_args(args)
    if cfg.registries and not cfg.registry:
        raise DrtpError(
            f"{args.config}: has a 'registries:' list: use 'drtp experiment -c CONFIG' (warmup + run per registry)"
        )
    from drtp.master.series.repeat import repetition_configs

    # repeat: N (fresh): each repetition's repositories and map, as drtp run --repeat replays them
    subs = repetition_configs(cfg) if cfg.repeat_state == "fresh" else [cfg]
    if args.fresh:
        from drtp.registry.repo_hooks import created_path

        for sub in subs:
            path = sub.path(sub.warmup.output)
            for done in (path, created_path(path)):  # the map, and the repositories its hooks created
                done.unlink(missing_ok=True)
    for sub in subs:
        run_warmup(sub)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from drtp.master.outputs.live_metrics import exporting
    from drtp.master.run.replay import default_out, run_replay
    from drtp.master.run.verdict import judge

    apply_progress_options(args)
    rate_overrides(args)
    cfg = config_from_args(args)
    if args.resume and not args.out:
        raise DrtpError("--resume needs --out DIR: the directory of the interrupted run")
    if cfg.registries and not cfg.registry:  # a registry list: one experiment, warmup + run per registry
        return cmd_experiment(args, cfg)
    apply_token_file(args, cfg)
    budget = failure_budget(args, cfg)
    wanted = objectives(args, cfg)
    out = Path(args.out) if args.out else default_out(cfg)
    if cfg.repeat > 1:  # repetitions: a series of runs, recorded and judged as an experiment's registries
        from drtp.exit_codes import worst
        from drtp.master.series.experiment import run_series
        from drtp.master.series.repeat import run_parts

        with exporting(start_live_metrics(args, cfg)) as live:
            status = run_series(
                run_parts(cfg, out), out, cfg.repeat, resume=args.resume, budget=budget,
                stats_interval_s=args.stats_interval, objectives=wanted, what="run", live=live,
                max_replayer_limited=max_replayer_limited(args, cfg),
            )  # fmt: skip
        return worst(s["exit_code"] for s in status.values())
    if args.resume:
        from drtp.master.series.repeat import check_layout

        check_layout([out], 1)
    with exporting(start_live_metrics(args, cfg)) as live:
        summary = run_replay(cfg, out, resume=args.resume, stats_interval_s=args.stats_interval, live=live)
    verdict = judge(summary, budget, wanted, max_replayer_limited(args, cfg))
    say(args, verdict.message, verdict.code)
    return verdict.code


def cmd_experiment(args: argparse.Namespace, cfg=None) -> int:
    from drtp.exit_codes import worst
    from drtp.master.outputs.live_metrics import exporting
    from drtp.master.series.experiment import run_experiment

    apply_progress_options(args)
    if cfg is None:
        rate_overrides(args)
        cfg = config_from_args(args)
    if args.resume and not args.out:
        raise DrtpError("--resume needs --out DIR: the directory of the interrupted experiment")
    apply_token_file(args, cfg)
    budget = failure_budget(args, cfg)
    wanted = objectives(args, cfg)
    out = Path(args.out) if args.out else None
    with exporting(start_live_metrics(args, cfg)) as live:
        status = run_experiment(
            cfg, out, resume=args.resume, budget=budget, stats_interval_s=args.stats_interval, objectives=wanted,
            live=live, max_replayer_limited=max_replayer_limited(args, cfg),
        )  # fmt: skip
    return worst(s["exit_code"] for s in status.values())


def cmd_ramp(args: argparse.Namespace) -> int:
    import datetime as _dt

    from drtp.exit_codes import ExitCode
    from drtp.master.outputs.live_metrics import exporting
    from drtp.master.series.ramp import RampPlan, run_ramp

    apply_progress_options(args)
    rate_overrides(args)
    cfg = config_from_args(args)
    if cfg.registries and not cfg.registry:
        raise DrtpError(f"{args.config}: has a 'registries:' list: a ramp runs against one registry ('registry:')")
    if cfg.client_info.engine == "loop":
        raise DrtpError(f"{cfg.source}: key 'client_info.engine': a ramp runs in rate mode, which needs 'threads'")
    if cfg.repeat > 1:
        raise DrtpError(f"{cfg.source}: key 'repeat': a ramp runs once (its steps are the series); remove the key")
    if args.to is not None and args.to < args.start:
        raise DrtpError(f"--to {args.to:g}: below --from {args.start:g}")
    wanted = objectives(args, cfg)
    if not wanted:
        raise DrtpError("--slo: missing: a ramp needs the objectives a step must hold (or client_info.slo)")
    apply_token_file(args, cfg)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else cfg.path(cfg.results) / f"ramp-{stamp}"
    plan = RampPlan(args.start, args.step, args.to, args.step_duration)
    slo_text = ",".join(o.text for o in wanted)
    strict = max_replayer_limited(args, cfg)
    with exporting(start_live_metrics(args, cfg)) as live:
        ramp = run_ramp(
            cfg,
            out,
            plan,
            wanted,
            slo_text,
            quiet=args.quiet,
            stats_interval_s=args.stats_interval,
            live=live,
            max_replayer_limited=strict,
        )
    knee = ramp["knee_rps"]
    if not args.quiet:
        print(
            f"knee: {_knee_text(ramp)} ({slo_text}); results in {out}/ (ramp.json, ramp.png, a run directory per step)"
        )
    limited = [s for s in ramp["steps"] if s["replayer_limited"]]
    if strict and limited:  # the step that ended the ramp: the knee it leaves is the replayer's, not the registry's
        step = limited[0]
        say(args, f"step at {step['rate']:g}/s: {step['broken']}", 1)
        return ExitCode.TOO_MANY_FAILED
    if knee is None:
        say(args, f"no step held the objectives {slo_text}: the first, at {args.start:g}/s, broke them", 1)
        return ExitCode.TOO_MANY_FAILED
    return ExitCode.OK


def _knee_text(ramp: dict) -> str:
    """Where the ramp's objectives broke, or that they never did (the last rate is then no knee)."""
    knee = ramp["knee_rps"]
    if knee is None:
        return "none"
    if not ramp.get("broke"):
        return f"none found: every step held, up to {knee:g} requests/s"
    return f"{knee:g} requests/s"


def add_max_replayer_limited_option(p: argparse.ArgumentParser, ramp: bool = False) -> None:
    """``--max-replayer-limited`` (and ``--no-…``, to override the config's key) of run, experiment and ramp."""
    help_text = MAX_REPLAYER_LIMITED_HELP
    if ramp:
        help_text = (
            "a step that was replayer-limited (its summary.json's replayer_limited: a client node at 90%% of a core "
            "or later than 10 ms in 10%% of the intervals) does not hold: the ramp stops and exits 1; "
            "default: client_info.max_replayer_limited (off)"
        )
    p.add_argument("--max-replayer-limited", action=argparse.BooleanOptionalAction, default=None, help=help_text)


def add_stats_interval_option(p: argparse.ArgumentParser) -> None:
    """``--stats-interval`` of the commands that replay (run, experiment)."""
    p.add_argument(
        "--stats-interval",
        type=positive_duration,
        default=1.0,
        metavar="SECONDS",
        help="width of the intervals of stats_history.csv (default 1)",
    )


def cmd_bench(args: argparse.Namespace) -> int:
    import datetime as _dt
    import os

    import msgspec

    from drtp.master.commands.bench import Bench, append_dataset, print_summary
    from drtp.registry.auth import entry_auth
    from drtp.registry.names import name_error
    from drtp.registry.repo_hooks import create_repositories
    from drtp.registry.repo_names import RepositoryMap
    from drtp.replay.messages import RegistryAuth

    auth = None
    registry = args.registry
    results = Path("results")
    names, entry_cfg = RepositoryMap(), None
    if args.config:
        cfg = config_from_args(args)
        results = cfg.path(cfg.results)
        entry = next((e for e in cfg.registries if e.id == args.registry), None)
        if entry is not None:
            auth, registry = entry_auth(entry, cfg), entry.url.rstrip("/")
            names = RepositoryMap.from_entry(entry, cfg.source)  # the entry's names, as a replay would use
            entry_cfg = msgspec.structs.replace(cfg, registries=[entry])
    if auth is None:
        if not registry.startswith(("http://", "https://")):
            raise DrtpError(f"--registry {registry!r}: give an id of the config's registries: or http(s)://host:port")
        if registry.startswith("http://") and not args.insecure:
            raise DrtpError(f"--registry {registry}: plain http needs --insecure")
        password = os.environ.get("DRTP_REGISTRY_PASSWORD") if args.username else None
        if args.username and not password:
            raise DrtpError("--username needs the password in $DRTP_REGISTRY_PASSWORD")
        ca = read_ca_file(Path(args.ca_file)) if args.ca_file else None
        auth = RegistryAuth(registry, args.username, password, ca, args.insecure and registry.startswith("https"))
    if why := name_error(f"{args.repository}/{args.mode}"):
        raise DrtpError(f"--repository {args.repository!r}: {why}")
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else results / f"bench-{args.mode}-{stamp}"
    prepare_output_dir(out, "--out")
    if args.append:
        check_output_file(Path(args.append), "--append")
    from drtp.master.run.preflight import preflight

    bench = Bench(
        registry, auth, args.mode, args.size, layers=args.layers, iterations=args.iterations,
        concurrency=args.concurrency, chunk=args.chunk or 0, repository=args.repository, names=names,
    )  # fmt: skip
    probe = names.probe()
    if entry_cfg is not None:  # the entry's create_repository hook, for the repositories bench writes to
        create_repositories(entry_cfg, [probe, bench.repo], quiet=True)
    preflight(registry, auth, args.registry, probe)
    summary = bench.run(out)
    print_summary(summary)
    print(f"results in {out}/ (requests.csv, summary.json)")
    if args.append:
        n = append_dataset(Path(args.append), out.name, out / "requests.csv")
        print(f"appended {n} rows to {args.append}")
    return 0 if summary["failed"] == 0 else 1


def register(sub) -> None:
    p = sub.add_parser(
        "warmup",
        help="push every object the trace reads into the registry (resumable)",
        description="Push the blobs and manifests the trace reads (but does not push itself) into the registry, "
        "and save the trace reference → digest map (warmup.output) as it goes.",
    )
    add_config_options(p)
    p.add_argument("--fresh", action="store_true", help="ignore the existing warmup map and start over")
    add_progress_options(p)
    p.set_defaults(func=cmd_warmup)

    p = sub.add_parser(
        "run",
        help="replay the trace through the client nodes against the registry",
        description="Replay the trace through the client nodes (client_info.client_list) against the registry; "
        "writes requests.csv and summary.json into the run directory. " + EXIT_CODES_HELP,
    )
    add_config_options(p)
    p.add_argument("--out", help="run directory (default: <results>/run-<date>-<time>)")
    p.add_argument(
        "--resume", action="store_true", help="continue the interrupted run in --out DIR; completed requests are kept"
    )
    p.add_argument("--max-failed", metavar="N|P%", help=MAX_FAILED_HELP)
    add_max_replayer_limited_option(p)
    p.add_argument("--slo", metavar="EXPR", help=SLO_HELP)
    add_rate_options(p)
    p.add_argument("--repeat", type=positive_int, metavar="N", help=REPEAT_HELP)
    p.add_argument("--token-file", metavar="PATH", help=TOKEN_FILE_HELP)
    add_stats_interval_option(p)
    add_live_metrics_options(p)
    add_progress_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "experiment",
        help="warmup + run against each registry of 'registries:' in turn",
        description="For each entry of the config's 'registries:' list: preflight, warmup and run, results in "
        "OUT/<id>/; a registry that fails is recorded in OUT/experiment.json and the next one runs. "
        "The exit code is the highest of the registries' runs (130 > 3 > 2 > 1 > 0). " + EXIT_CODES_HELP,
    )
    add_config_options(p)
    p.add_argument("--out", help="experiment directory (default: <results>/experiment-<date>-<time>)")
    p.add_argument("--resume", action="store_true", help="skip registries done in --out DIR, resume the others")
    p.add_argument("--max-failed", metavar="N|P%", help=MAX_FAILED_HELP + ", for each registry's run")
    add_max_replayer_limited_option(p)
    p.add_argument("--slo", metavar="EXPR", help=SLO_HELP + "; for each registry's run")
    add_rate_options(p)
    p.add_argument("--repeat", type=positive_int, metavar="N", help=REPEAT_HELP)
    p.add_argument("--token-file", metavar="PATH", help=TOKEN_FILE_HELP)
    add_stats_interval_option(p)
    add_live_metrics_options(p)
    add_progress_options(p)
    p.set_defaults(func=cmd_experiment)

    p = sub.add_parser(
        "ramp",
        help="open-loop steps of rising rate until the registry breaks its objectives (the knee)",
        description="Rate-mode runs at --from, --from + --step, ... requests per second, --step-duration seconds "
        "each (the trace continues from step to step, from its start again at its end), until a step breaks the "
        "--slo objectives or the step at --to; writes ramp.json (each step; knee_rps, the highest rate that held) "
        "and ramp.png into --out, and each step's run directory. A ramp from a few nodes may find a per-source-"
        "address limit of a hosted registry, not its capacity; a trace with pushes changes the registry between "
        "steps. Run 'drtp warmup' first. Exit codes: 0 the ramp ran (knee_rps says where it broke); 1 not even "
        "the first step held; 2 bad input; 3 a step could not run or finish; 130 interrupted.",
    )
    add_config_options(p)
    p.add_argument("--out", help="ramp directory (default: <results>/ramp-<date>-<time>)")
    p.add_argument("--from", dest="start", type=positive_float, required=True, metavar="R0",
                   help="rate of the first step (requests/s)")  # fmt: skip
    p.add_argument("--step", type=positive_float, required=True, metavar="DR", help="rate added at each step")
    p.add_argument("--to", type=positive_float, metavar="RMAX", help="rate of the last step (default: until broken)")
    p.add_argument("--step-duration", type=positive_duration, required=True, metavar="SECONDS",
                   help="seconds of requests per step (rate × this many requests)")  # fmt: skip
    p.add_argument("--slo", metavar="EXPR", help=SLO_HELP.replace("for exit 0", "at each step"))
    add_max_replayer_limited_option(p, ramp=True)
    p.add_argument(
        "--arrivals",
        choices=("constant", "poisson"),
        help="starts 1/R apart (constant) or independent (poisson); default: client_info.arrivals",
    )
    p.add_argument("--seed", type=non_negative_int, help="poisson arrivals: the random seed")
    p.add_argument("--token-file", metavar="PATH", help=TOKEN_FILE_HELP)
    add_stats_interval_option(p)
    add_live_metrics_options(p)
    add_progress_options(p)
    p.set_defaults(func=cmd_ramp)

    p = sub.add_parser(
        "bench",
        help="synthetic push/pull/manifest benchmark against a registry (replay-format results)",
        description="Push (HEAD, POST, PUT or PATCH+PUT per layer, config, manifest), pull (manifest and layers) or "
        "put/get manifests of N random layers, --iterations images by --concurrency threads; writes requests.csv "
        "and summary.json like 'drtp run'.",
    )
    p.add_argument("mode", choices=["push", "pull", "manifest"])
    p.add_argument("--registry", required=True, help="an id of the config's registries:, or http(s)://host:port")
    add_config_options(p, required=False, help="YAML config with a registries: list (credentials, CA)")
    p.add_argument("--username", help="with a URL: user (password from $DRTP_REGISTRY_PASSWORD)")
    p.add_argument("--ca-file", help="with a URL: CA bundle (PEM)")
    p.add_argument("--insecure", action="store_true", help="with a URL: allow http, or https without verification")
    p.add_argument("--layers", type=positive_int, default=3, help="layers per image (default 3)")
    p.add_argument(
        "--size", type=sizes, default=[1_000_000], help="layer size(s), comma-separated, used in turn (default 1MB)"
    )
    p.add_argument("--iterations", type=positive_int, default=1, help="images to push/pull (default 1)")
    p.add_argument("--concurrency", type=positive_int, default=1, help="images in parallel (default 1)")
    p.add_argument(
        "--chunk", type=positive_size, help="chunked upload: PATCH pieces of this size (default: monolithic PUT)"
    )
    p.add_argument(
        "--repository",
        default="drtp-bench",
        help="images go to repository <this>/<mode>, named as the entry's repository_map says (default drtp-bench)",
    )
    p.add_argument("--out", help="run directory (default: <results>/bench-<mode>-<date>-<time>)")
    p.add_argument("--append", help="also append the rows to this dataset CSV (with a 'run' column)")
    p.set_defaults(func=cmd_bench)
