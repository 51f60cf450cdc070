"""What the replaying commands (run, experiment, ramp) share: their options' help, the options themselves, the
live metrics exporter they start from their settings, and the one line that says why the exit code is not 0.

The options that mirror config keys are registered here and read in one place only,
drtp.master.run.settings.settings_from_args, which lays them over the config as overrides.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from drtp.cli_options import (
    add_progress_options,
    duration,
    non_negative_int,
    port_number,
    positive_duration,
    positive_float,
    positive_int,
    refusal,
)
from drtp.errors import DrtpError

if TYPE_CHECKING:
    from drtp.master.outputs.live_metrics import LiveMetrics
    from drtp.master.run.settings import RunSettings

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
MAX_REPLAYER_LIMITED_HELP = (
    "exit 1 when the run was replayer-limited (summary.json's replayer_limited: a client node at 90%% of a core or "
    "later than 10 ms in 10%% of the intervals; its latencies are partly the replayer's); "
    "default: client_info.max_replayer_limited (off)"
)
SLO_HELP = (
    "objectives the run must hold for exit 0, e.g. 'p99<200ms,failed<1%%,GET blob:p50<50ms' (STAT<VALUE joined by "
    "commas; STAT p50, p90, p99, mean in ms or s, failed or throttled (429s) in %%; optionally 'METHOD kind:' "
    "first); latency from each request's intended start in rate mode; default: client_info.slo"
)
RATE_HELP = (
    "open loop: start R requests per second whatever the registry answers (the trace's requests in order, its "
    "timestamps ignored; latency counted from each intended start, response_s); default: client_info.rate"
)
REPEAT_HELP = (
    "replay N times, each run into rep-<k>/ of --out (an experiment: interleaved across its registries, A B A B), "
    "each into repositories of its own (prefix rep<k>-) warmed up for it unless repeat_state: reuse; the exit "
    "code is the worst of the runs'; default: the config's repeat (1)"
)
EVENT_HELP = (
    "run COMMAND during the run, at AT (a duration from the run's first request, e.g. 30s) or after=N (once N "
    "trace requests were answered): '[NAME@]AT:COMMAND', COMMAND split as a shell would but never run by one "
    "(NAME: default the program's file name); its output goes to events/NAME.log, its times to events.csv; "
    "repeat for more events; given, these replace the config's events: (where until: and required: are set)"
)
TOKEN_FILE_HELP = "file holding the shared secret of the client nodes (overrides client_info.token and $DRTP_TOKEN)"


def event_option(text: str) -> dict:
    """One ``--event '[NAME@]AT:COMMAND'`` as the ``events:`` entry it stands for (the config's checks then check
    it as they check the file's); a malformed one is argparse's one-line refusal."""
    import os
    import shlex

    head, colon, command = text.partition(":")
    name, at_sign, at = head.rpartition("@")
    at = at.strip()
    if not colon or not at:
        raise argparse.ArgumentTypeError(f"{text[:200]!r}: expected [NAME@]AT:COMMAND, e.g. 30s:my-script arg")
    try:
        argv = shlex.split(command)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text[:200]!r}: COMMAND: {e}") from None
    if not argv:
        raise argparse.ArgumentTypeError(f"{text[:200]!r}: no COMMAND after AT:")
    entry: dict = {"name": name.strip() if at_sign else os.path.basename(argv[0]), "run": argv}
    if at.startswith("after="):
        try:
            entry["after"] = int(at.removeprefix("after="))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:200]!r}: after=N needs a whole number of requests") from None
    else:
        entry["at"] = at
    return entry


def add_event_option(p: argparse.ArgumentParser) -> None:
    """``--event`` of run, experiment and ramp (repeatable: one per event)."""
    p.add_argument("--event", type=event_option, action="append", metavar="[NAME@]AT:COMMAND", help=EVENT_HELP)


def add_rate_options(p: argparse.ArgumentParser) -> None:
    """``--rate``, ``--arrivals``, ``--seed`` of the commands that replay."""
    p.add_argument("--rate", type=positive_float, metavar="R", help=RATE_HELP)
    p.add_argument(
        "--arrivals",
        choices=("constant", "poisson"),
        help="rate mode: starts 1/R apart (constant) or independent (poisson); default: client_info.arrivals",
    )
    p.add_argument("--seed", type=non_negative_int, help="poisson arrivals: the random seed (a run offered again)")


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


def add_token_file_option(p: argparse.ArgumentParser) -> None:
    """``--token-file`` of the commands that replay (the secret never on the command line itself)."""
    p.add_argument("--token-file", metavar="PATH", help=TOKEN_FILE_HELP)


def add_replay_options(p: argparse.ArgumentParser, each: str = "") -> None:
    """The options ``drtp run`` and ``drtp experiment`` share, in their ``--help`` order: a new one is added here.

    ``each``: what an experiment's help adds to an option that applies to each of its runs."""
    p.add_argument("--max-failed", metavar="N|P%", help=MAX_FAILED_HELP + (f", {each}" if each else ""))
    add_max_replayer_limited_option(p)
    p.add_argument("--slo", metavar="EXPR", help=SLO_HELP + (f"; {each}" if each else ""))
    add_rate_options(p)
    p.add_argument("--repeat", type=positive_int, metavar="N", help=REPEAT_HELP)
    add_token_file_option(p)
    add_stats_interval_option(p)
    add_live_metrics_options(p)
    add_event_option(p)
    add_progress_options(p)


def start_live_metrics(settings: RunSettings) -> LiveMetrics | None:
    """The live metrics exporter, listening (None: neither the options nor the config ask for one).

    It listens before the run checks the registries or sends a request: a port in use or an address that is not
    this machine's is a one-line refusal (exit 2) before anything starts."""
    wanted = settings.live
    if wanted is None:
        return None
    from drtp.master.outputs.live_metrics import LiveMetrics, LiveSettings

    live = LiveMetrics(LiveSettings(wanted.port, wanted.host, wanted.linger_s))
    try:
        live.start()
    except (OSError, ValueError) as e:
        why = getattr(e, "strerror", None) or str(e)
        raise DrtpError(f"{wanted.where}: cannot serve live metrics on {wanted.host}:{wanted.port}: {why}") from None
    return live


def say(args: argparse.Namespace, message: str, code: int) -> None:
    """One line on stderr, where scripts look for why the exit code is not 0: a refusal's format, or a
    warning's when the run passed all the same (every failure tolerated, yet nothing succeeded)."""
    if message:
        line = refusal(args.drtp_prog, message) if code else f"{args.drtp_prog}: warning: {message}"
        print(line, file=sys.stderr, flush=True)
