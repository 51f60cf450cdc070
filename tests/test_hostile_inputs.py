"""Every command that reads a kind of input, against every hostile input of that kind (tests/hostile_cases.py).

The rule, checked on the real ``drtp`` process: a bad input ends with exit code 2 and exactly one line on
stderr that names the input (the file, and the record, key or option when the case has one); no traceback,
no usage block, no hang, nothing on stdout or on disk that claims success, and — for the commands that
talk to a registry — no request reaches the registry before the input is refused.  A valid but unusual
input (a UTF-8 BOM before a trace) is simply read: exit 0.

Each case is a process of its own, for three reasons an in-process call cannot give: a hang is ended by
killing the process group, a memory or recursion blow-up cannot take the test process down (the address
space and file size are capped), and what is checked is exactly what a user sees (exit code, stderr, stdout,
files left).  Commands that replay run against a real registry and two real client nodes, so a bad input
that slips through really runs (and shows as exit 0 or 1) rather than failing for want of a registry.

Most cases are forked from a fork server (tests/forkserver.py), one per lane, that has imported drtp, every
command module and what the commands load lazily (pandas, matplotlib, pyarrow, paramiko …): importing is
most of a fresh process's CPU, and a refusal needs none of it again.  The forked child keeps the three
properties because it is still a process of its own: it leads its own session (the hang guard kills its
group, as before), gets the same address-space and file-size caps (a blow-up kills the child, never the
server or the tests; the server's preloaded size leaves most of MEMORY_CAP to the child), and runs with
cwd, stdin from /dev/null, stdout and stderr to files, the test's environment, a fresh interpreter's signal
dispositions and ``sys.argv``, the entry point ``python -m drtp.cli`` runs, and the interpreter's exit
(SystemExit's code, a traceback and exit 1, atexit handlers, flushed streams).  A fresh ``python -m
drtp.cli`` process (:func:`run_drtp`) still runs the valid and warning inputs, the first case of each
command (so each command's startup and import path is covered), the environment's warmup and run, and the
deploy check at the end.

The cases are many and each is a short process, so the module runs them all at once, before its first
test, in a pool of a few lanes at a time (one after another for those that talk to the registry: the
registry's log tells whether a refused input reached it); each test then checks its own case's outcome.
Under pytest-xdist each worker runs its own cases one by one instead.

``DRTP_HOSTILE_REPORT=FILE`` appends each case's outcome to FILE (JSON lines), for a table of failures.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from drtp.registry.local import LocalRegistry, free_port
from tests.forkserver import ForkServer, limits
from tests.hostile_cases import (
    CONFIG_CASES,
    CONFIG_COMMANDS,
    LOG_CASES,
    PROFILE_CASES,
    REGISTRY_LOG,
    RESULTS_CASES,
    TRACE_CASES,
    Case,
    valid_records,
)
from tests.replay_support import TOKEN

pytestmark = [pytest.mark.hostile, pytest.mark.registry]

HANG_GUARD_S = 60  # generous: only a process stuck for good takes this long
MEMORY_CAP = 4 << 30  # address space of each drtp process: a runaway allocation fails instead of swapping
FILE_CAP = 256 << 20  # largest file a drtp process may write: a runaway output fails instead of filling the disk
REPORT = os.environ.get("DRTP_HOSTILE_REPORT")
WORKERS = max(2, os.cpu_count() or 2)  # cases run at once besides the registry's one at a time

# what commands print on success: on a refusal, stdout must hold none of it
SUCCESS = re.compile(r"^(wrote |results in |results: |# .*: valid|records\s+\d|volume \(|summary: )", re.MULTILINE)


# -- running drtp ------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    code: int | None  # None: killed by the hang guard
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def _limits() -> None:
    """In a fresh drtp process: cap its address space and file size (runs before exec)."""
    limits(MEMORY_CAP, FILE_CAP)


def _read_bounded(path: Path, part: int = 32 << 10) -> str:
    """The file, or its first and last ``part`` bytes when longer (a traceback's last line is what tells)."""
    with open(path, "rb") as f:
        head = f.read(2 * part)
        if len(head) < 2 * part:
            return head.decode("utf-8", "replace")
        f.seek(-part, os.SEEK_END)
        tail = f.read(part)
    return (head[:part] + b"\n[...]\n" + tail).decode("utf-8", "replace")


def run_drtp(argv: list[str], cwd: Path) -> Outcome:
    """``drtp ARGV`` in its own process group; a process still running after HANG_GUARD_S is killed whole."""
    out, err = cwd / "drtp.stdout", cwd / "drtp.stderr"  # files, not pipes: a runaway output cannot fill memory
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(
            [sys.executable, "-m", "drtp.cli", *map(str, argv)],
            stdout=o,
            stderr=e,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_limits,
        )
        try:
            code: int | None = proc.wait(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    return Outcome(code, _read_bounded(out), _read_bounded(err))


def fork_drtp(server: ForkServer, argv: list, cwd: Path) -> Outcome:
    """``drtp ARGV`` forked by ``server`` (drtp already imported): the same process a fresh one would be."""
    out, err = cwd / "drtp.stdout", cwd / "drtp.stderr"
    code = server.run(list(map(str, argv)), cwd, out, err, HANG_GUARD_S)
    return Outcome(code, _read_bounded(out), _read_bounded(err))


# -- the rule ----------------------------------------------------------------------------------------------


@dataclass
class Expect:
    """What one (command, input) pair must do."""

    valid: bool = False
    warns: bool = False  # valid with parts left out: exit 0 and exactly one stderr line naming the input
    names: tuple[str, ...] = ()  # one of these must be in the error line (the input's file name, …)
    key: str | None = None  # the key or option the line must name (its last dotted part is enough)
    record: int | None = None  # the bad record's index: the line must say it (0-based or as a 1-based line)
    artifacts: tuple[Path, ...] = ()  # what the command writes on success: none may be left after a refusal
    produces: tuple[Path, ...] = ()  # what a valid input must leave behind
    registry_log: Path | None = None  # the registry's log: a refusal must come before any request to it


def _first(lines: list[str]) -> str:
    return lines[0][:200] if lines else "(nothing)"


def _head(lines: list[str]) -> str:
    """The first two stderr lines, joined and cut: enough to see what went wrong in a report row."""
    return " | ".join(lines[:2])[:240]


def _crash(outcome: Outcome) -> str | None:
    """A hang, a signal or a traceback: what failed, in a few words."""
    if outcome.code is None:
        return f"hang: still running after {HANG_GUARD_S} s (killed)"
    if outcome.code < 0:
        return f"killed by {signal.Signals(-outcome.code).name}: {_first(outcome.lines[-1:])}"
    if "Traceback (most recent call last)" in outcome.stderr:
        exc = next((x for x in reversed(outcome.lines) if re.match(r"^[\w.]+(Error|Exception|Exit)\b", x)), "")
        return f"traceback, exit {outcome.code}: {exc[:160] or _first(outcome.lines[-2:])}"
    return None


def _names_the_input(line: str, expect: Expect) -> str | None:
    if expect.key:  # a key or option: naming it is enough (the file too is better, but not required)
        if expect.key.split(".")[-1] not in line:
            return f"does not name {expect.key!r}: {line[:200]}"
    elif expect.names and not any(n in line for n in expect.names):
        return f"does not name {expect.names[0]!r}: {line[:200]}"
    if expect.record is not None:
        rest = line
        for n in expect.names:  # file names and paths may hold digits of their own
            rest = re.sub(r"\S*" + re.escape(n) + r"\S*", " ", rest)
        numbers = "|".join(str(n) for n in (expect.record, expect.record + 1))
        if not re.search(rf"(?<![\w.])({numbers})(?!\w|\.\d)", rest):
            return f"does not name record {expect.record}: {line[:200]}"
    return None


def _requests_logged(log: Path | None) -> int:
    if log is None or not log.exists():
        return 0
    with open(log, "rb") as f:
        return sum(1 for line in f if b'"response completed' in line)


def _settle(log: Path, quiet_s: float = 0.5, bound_s: float = 15.0) -> None:
    """Wait until the registry's log stops growing, so the next case counts only its own requests.

    The registry logs a request just after answering it, and a killed run's nodes may finish their batch.
    """
    deadline = time.monotonic() + bound_s
    size = log.stat().st_size
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = log.stat().st_size
        if now == size:
            return
        size = now


# every refusal, whatever the command: argparse's form, so one pattern finds them all
REFUSAL = re.compile(r"drtp( [a-z][a-z-]*)*: error: \S")


def verdict(outcome: Outcome, expect: Expect, logged_before: int) -> str | None:
    """None when the outcome keeps the rule; otherwise what went wrong, in one line."""
    crash = _crash(outcome)
    if crash:
        return crash
    lines = outcome.lines
    if expect.warns:
        if outcome.code != 0:
            return f"input with a bad part refused, exit {outcome.code}: {_head(lines)}"
        if len(lines) != 1:
            return f"exit 0 with {len(lines)} stderr lines, not one warning: {_head(lines)}"
        problem = _names_the_input(lines[0], expect)
        if problem:
            return f"exit 0, one warning line, but it {problem}"
    if expect.valid or expect.warns:
        if outcome.code != 0:
            return f"valid input refused, exit {outcome.code}: {_head(lines)}"
        missing = [p.name for p in expect.produces if not p.exists()]
        return f"exit 0 but wrote no {missing[0]}" if missing else None
    if outcome.code == 0:
        return f"exit 0 (accepted): {_first(outcome.stdout.splitlines())}"
    if outcome.code != 2:
        return f"exit {outcome.code}: {_head(lines)}"
    if len(lines) != 1:
        return f"exit 2 with {len(lines)} stderr lines: {_head(lines)}"
    if not REFUSAL.match(lines[0]):
        return f"exit 2, one line, but not in the form 'drtp[ COMMAND]: error: WHAT': {_head(lines)}"
    problem = _names_the_input(lines[0], expect)
    if problem:
        return f"exit 2, one line, but it {problem}"
    claimed = SUCCESS.search(outcome.stdout)
    if claimed:
        return f"exit 2 but stdout claims success: {claimed.group(0)}"
    left = [p for p in expect.artifacts if p.exists()]
    if left:
        return f"exit 2 but left {left[0].name} behind"
    contacted = _requests_logged(expect.registry_log) - logged_before
    if contacted > 0:
        return f"exit 2 but {contacted} request(s) reached the registry before the refusal"
    return None


# -- the environment: a registry, two client nodes, a valid trace and a real run -------------------------------


@dataclass
class Env:
    registry: LocalRegistry
    nodes: list[str]
    trace: Path  # a valid trace, read by the config and profile cases
    ssh_port: int  # a closed loopback port: where deploy's SSH connection fails
    scratch: Path  # the module's folder
    good_run: Path | None = None  # a real run directory, for the results cases

    def base_config(self, folder: Path) -> dict[str, Any]:
        """A config every config command accepts (deploy: up to its SSH connection); files in ``folder``."""
        return {
            "trace": {"location": str(self.trace.parent), "traces": [self.trace.name]},
            "registry": [self.registry.host],
            "registries": [{"id": "local", "url": self.registry.url, "insecure": True}],
            "client_info": {"client_list": self.nodes, "threads": 4, "token": TOKEN, "batch": 20},
            "warmup": {"output": str(folder / "warmup-map.jsonl"), "threads": 2},
            "results": str(folder / "results"),
            "simulate": {"name": "lru", "args": {"capacity": "10%", "percent_of": "footprint"}},
            "slurm": {"workdir": str(folder / "slurm-jobs")},
            "deploy": {
                "host": "127.0.0.1",
                "port": self.ssh_port,
                "known_hosts": str(folder / "known_hosts"),
                "remote_dir": "drtp-hostile",
            },
        }

    def config_for_trace(self, trace: Path, folder: Path) -> Path:
        """The base config reading ``trace`` (its folder and name)."""
        cfg = self.base_config(folder)
        cfg["trace"] = {"location": str(trace.parent), "traces": [trace.name]}
        path = folder / "hostile-config.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path


@pytest.fixture(scope="module")
def env(tmp_path_factory, nodes) -> Env:
    base = tmp_path_factory.mktemp("hostile-env")
    with LocalRegistry(base / "registry") as reg:
        trace = base / "trace" / "good.json"
        trace.parent.mkdir()
        trace.write_text(json.dumps(valid_records()))
        folder = base / "good-run"
        folder.mkdir()
        e = Env(reg, [n.address for n in nodes], trace, free_port(), base)
        config = e.config_for_trace(trace, folder)
        for argv in (["warmup", "-c", config], ["run", "-c", config, "--out", folder / "run"]):
            outcome = run_drtp(argv, folder)
            assert outcome.code == 0, f"the valid trace does not replay: {outcome.stderr}"
        e.good_run = folder / "run"  # a real run directory: the results cases break copies of it
        yield e


# -- one (command, input) pair -------------------------------------------------------------------------------


@dataclass
class Job:
    """What one case runs, where, and what it must do; ``cleanup`` undoes what the set-up did."""

    argv: list
    cwd: Path
    expect: Expect
    cleanup: Callable[[], None] | None = None


@dataclass(frozen=True)
class Spec:
    """One (command, input) pair: ``build(env, folder)`` writes the input under ``folder`` and says what to run.

    ``build`` returns None when this machine cannot set the case up (it is skipped); ``registry``: the
    command talks to the registry, so the case runs in the one lane where the registry's log is read.
    """

    id: str
    build: Callable[[Env, Path], Job | None]
    registry: bool = False


def _expect(case: Case, path: Path, command: str = "", **kw: Any) -> Expect:
    names = (path.name, *case.extra_names)
    warns = command in case.warns
    return Expect(valid=case.valid, warns=warns, names=names, key=case.key, record=case.record, **kw)


def _case_specs(kind: str, cases: list[Case], commands: dict[str, TraceCommand], registry: set[str]) -> list[Spec]:
    """Every command of ``commands`` against every case that applies to it."""

    def spec(command: str, case: Case) -> Spec:
        def build(env: Env, folder: Path) -> Job:
            path = case.write(folder / "input", env)
            argv, kw = commands[command](env, path, folder / "out")
            return Job(argv, folder / "out", _expect(case, path, command, **kw))

        return Spec(f"{command}-{kind}_{case.id}", build, command in registry)

    return [spec(c, case) for case in cases for c in commands if not case.commands or c in case.commands]


TraceCommand = Callable[[Env, Path, Path], tuple[list, dict]]


def _config_command(name: str) -> TraceCommand:
    def command(env: Env, trace: Path, out: Path) -> tuple[list, dict]:
        config = env.config_for_trace(trace, out)
        if name == "simulate":
            return ["simulate", "-c", config, "--out", out / "sim"], {
                "artifacts": (out / "sim" / "summary.json",),
                "produces": (out / "sim" / "summary.json",),
            }
        if name == "warmup":
            return ["warmup", "-c", config], {"registry_log": env.registry.log_path}
        (out / "warmup-map.jsonl").touch()  # an empty map: the run starts; what it reads is the trace's doing
        run = out / "run"
        return ["run", "-c", config, "--out", run, "--max-failed", "100%"], {
            "artifacts": (run / "summary.json",),
            "produces": (run / "summary.json",),
            "registry_log": env.registry.log_path,
        }

    return command


TRACE_COMMANDS: dict[str, TraceCommand] = {
    "inspect": lambda env, t, out: (["inspect", t], {}),
    "convert": lambda env, t, out: (
        ["convert", t, "-o", out / "converted.json"],
        {"artifacts": (out / "converted.json",), "produces": (out / "converted.json",)},
    ),
    "sample": lambda env, t, out: (
        ["sample", t, "-o", out / "sampled.json", "--method", "requests", "--amount", "1000"],
        {"artifacts": (out / "sampled.json", out / "sampled.summary.json"), "produces": (out / "sampled.json",)},
    ),
    "cost": lambda env, t, out: (["cost", t], {}),
    "analyze_trace": lambda env, t, out: (
        ["analyze", "trace", t, "--out", out / "analysis"],
        {"artifacts": (out / "analysis" / "report.html",), "produces": (out / "analysis" / "report.html",)},
    ),
    "simulate": _config_command("simulate"),
    "warmup": _config_command("warmup"),
    "run": _config_command("run"),
}


LOG_COMMANDS: dict[str, TraceCommand] = {
    "capture": lambda env, log, out: (
        ["capture", log, "-o", out / "captured.json", "--salt", "hostile-salt"],
        {"artifacts": (out / "captured.json",), "produces": (out / "captured.json",)},
    ),
    "convert": lambda env, log, out: (
        ["convert", log, "--format", "registry-log", "-o", out / "converted.json"],
        {"artifacts": (out / "converted.json",), "produces": (out / "converted.json",)},
    ),
    "inspect": lambda env, log, out: (["inspect", log, "--format", "registry-log"], {}),
}


def _config_argv(command: str, config: Path, out: Path, env: Env) -> tuple[list, dict]:
    if command == "config":
        return ["config", "-c", config], {}
    if command == "run":
        (out.parent / "input" / "warmup-map.jsonl").touch()  # the base config's map: the run may start
        return ["run", "-c", config, "--out", out / "run", "--max-failed", "100%"], {
            "artifacts": (out / "run" / "summary.json",),
            "produces": (out / "run" / "summary.json",),
            "registry_log": env.registry.log_path,
        }
    if command == "warmup":
        return ["warmup", "-c", config], {"registry_log": env.registry.log_path}
    if command == "experiment":
        return ["experiment", "-c", config, "--out", out / "exp", "--max-failed", "100%"], {
            "artifacts": (out / "exp" / "experiment.json",),
            "produces": (out / "exp" / "experiment.json",),
            "registry_log": env.registry.log_path,
        }
    if command == "simulate":
        return ["simulate", "-c", config, "--out", out / "sim"], {
            "artifacts": (out / "sim" / "summary.json",),
            "produces": (out / "sim" / "summary.json",),
        }
    if command == "slurm":  # render validates the config and submits nothing: no cluster needed
        return ["slurm", "render", "-c", config], {}
    if command == "clean":  # a dry run: it deletes nothing, but reads the config (and its map) first
        return ["clean", "-c", config], {"registry_log": env.registry.log_path}
    assert command == "deploy"
    return ["deploy", "-c", config, "--copy-only"], {}


PROFILE_COMMANDS: dict[str, TraceCommand] = {
    "generate": lambda env, p, out: (
        ["generate", "--profile", p, "-n", "200", "-o", out / "generated.json"],
        {"artifacts": (out / "generated.json",), "produces": (out / "generated.json",)},
    ),
    "analyze_trace": lambda env, p, out: (
        ["analyze", "trace", env.trace, "--profile", p, "--out", out / "analysis"],
        {"artifacts": (out / "analysis" / "report.html",), "produces": (out / "analysis" / "report.html",)},
    ),
}


RESULTS_COMMANDS: dict[str, TraceCommand] = {
    "analyze_results": lambda env, run, out: (
        ["analyze", "results", run, "--out", out / "analysis"],
        {"artifacts": (out / "analysis" / "report.html",), "produces": (out / "analysis" / "report.html",)},
    ),
    "cost": lambda env, run, out: (["cost", run], {}),
    "analyze_compare": lambda env, run, out: (
        ["analyze", "compare", "--baseline", run, "--candidate", run, "--out", out / "compare"],
        {"artifacts": (out / "compare" / "compare.json",), "produces": (out / "compare" / "compare.json",)},
    ),
}


def _config_command_of(command: str) -> TraceCommand:
    return lambda env, config, out: _config_argv(command, config, out, env)


CONFIG_ARGV: dict[str, TraceCommand] = {c: _config_command_of(c) for c in CONFIG_COMMANDS}


@dataclass(frozen=True)
class Option:
    """A bad option value or output path: ``argv(env, out)`` builds the command line."""

    id: str
    argv: Callable[[Env, Path], list]
    names: tuple[str, ...]  # one of them must be in the error line
    artifacts: Callable[[Path], tuple[Path, ...]] = lambda out: ()
    contacts_registry: bool = False


def _bench(*extra: str) -> Callable[[Env, Path], list]:
    return lambda env, out: ["bench", "push", "--registry", env.registry.url, "--insecure", "--out", out / "bench",
                             *extra]  # fmt: skip


def _sim_config(env: Env, out: Path) -> Path:
    cfg = env.base_config(out)
    cfg["simulate"] = {"name": "lru", "args": {"capacity": ["5%", "10%"], "percent_of": "footprint"}}
    path = out / "sweep.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


OPTIONS: list[Option] = [
    Option("cost_months_negative", lambda env, out: ["cost", "--storage", "1GB", "--months", "-1"], ("--months",)),
    Option("cost_months_nan", lambda env, out: ["cost", "--storage", "1GB", "--months", "nan"], ("--months",)),
    Option("cost_months_inf", lambda env, out: ["cost", "--storage", "1GB", "--months", "inf"], ("--months",)),
    Option("cost_storage_negative", lambda env, out: ["cost", "--storage", "-5GB"], ("--storage",)),
    Option("cost_egress_words", lambda env, out: ["cost", "--egress", "lots"], ("--egress",)),
    Option("simulate_jobs_zero", lambda env, out: ["simulate", "-c", _sim_config(env, out), "--jobs", "0",
                                                   "--out", out / "sim"], ("--jobs",),
           lambda out: (out / "sim" / "summary.json",)),
    Option("simulate_jobs_negative", lambda env, out: ["simulate", "-c", _sim_config(env, out), "--jobs", "-2",
                                                       "--out", out / "sim"], ("--jobs",),
           lambda out: (out / "sim" / "summary.json",)),
    Option("bench_concurrency_zero", _bench("--concurrency", "0"), ("--concurrency",),
           lambda out: (out / "bench" / "summary.json",), True),
    Option("bench_iterations_zero", _bench("--iterations", "0"), ("--iterations",),
           lambda out: (out / "bench" / "summary.json",), True),
    Option("bench_layers_negative", _bench("--layers", "-1"), ("--layers",),
           lambda out: (out / "bench" / "summary.json",), True),
    Option("bench_size_words", _bench("--size", "abc"), ("--size", "abc"),
           lambda out: (out / "bench" / "summary.json",), True),
    Option("bench_size_zero", _bench("--size", "0"), ("--size",),
           lambda out: (out / "bench" / "summary.json",), True),
    Option("bench_chunk_words", _bench("--chunk", "abc"), ("--chunk", "abc"),
           lambda out: (out / "bench" / "summary.json",), True),
    Option("analyze_bin_zero", lambda env, out: ["analyze", "trace", env.trace, "--bin", "0", "--out", out / "a"],
           ("--bin",), lambda out: (out / "a" / "report.html",)),
    Option("analyze_bin_negative", lambda env, out: ["analyze", "trace", env.trace, "--bin", "-60",
                                                     "--out", out / "a"], ("--bin",),
           lambda out: (out / "a" / "report.html",)),
    Option("analyze_session_negative", lambda env, out: ["analyze", "trace", env.trace, "--session", "-1",
                                                         "--out", out / "a"], ("--session",),
           lambda out: (out / "a" / "report.html",)),
    Option("analyze_labels_mismatch", lambda env, out: ["analyze", "trace", env.trace, "--label", "a", "b",
                                                        "--out", out / "a"], ("--label",),
           lambda out: (out / "a" / "report.html",)),
    Option("generate_n_negative", lambda env, out: ["generate", "-n", "-5", "-o", out / "g.json"],
           ("-n", "--requests"), lambda out: (out / "g.json",)),
    Option("generate_n_zero", lambda env, out: ["generate", "-n", "0", "-o", out / "g.json"],
           ("-n", "--requests"), lambda out: (out / "g.json",)),
    Option("generate_span_zero", lambda env, out: ["generate", "-n", "100", "--span", "0", "-o", out / "g.json"],
           ("--span",), lambda out: (out / "g.json",)),
    Option("generate_clients_zero", lambda env, out: ["generate", "-n", "100", "--clients", "0", "-o", out / "g.json"],
           ("--clients",), lambda out: (out / "g.json",)),
    Option("generate_max_layer_zero", lambda env, out: ["generate", "-n", "100", "--max-layer-size", "0",
                                                        "-o", out / "g.json"], ("--max-layer-size",),
           lambda out: (out / "g.json",)),
    Option("inspect_requests_negative", lambda env, out: ["inspect", env.trace, "--requests", "-1"], ("--requests",)),
    Option("inspect_seconds_negative", lambda env, out: ["inspect", env.trace, "--seconds", "-5"], ("--seconds",)),
    Option("inspect_seconds_nan", lambda env, out: ["inspect", env.trace, "--seconds", "nan"], ("--seconds",)),
    Option("sample_amount_negative", lambda env, out: ["sample", env.trace, "-o", out / "s.json", "--method",
                                                       "requests", "--amount", "-5"], ("--amount",),
           lambda out: (out / "s.json",)),
    Option("sample_window_zero", lambda env, out: ["sample", env.trace, "-o", out / "s.json", "--method", "window",
                                                   "--window", "0"], ("--window",), lambda out: (out / "s.json",)),
    Option("run_max_failed_negative", lambda env, out: ["run", "-c", env.config_for_trace(env.trace, out),
                                                        "--max-failed", "-1", "--out", out / "run"],
           ("--max-failed",), lambda out: (out / "run" / "summary.json",), True),
    Option("run_max_failed_over", lambda env, out: ["run", "-c", env.config_for_trace(env.trace, out),
                                                    "--max-failed", "150%", "--out", out / "run"],
           ("--max-failed",), lambda out: (out / "run" / "summary.json",), True),
    Option("run_rate_zero", lambda env, out: ["run", "-c", env.config_for_trace(env.trace, out), "--rate", "0",
                                              "--out", out / "run"], ("--rate",),
           lambda out: (out / "run" / "summary.json",), True),
    Option("run_slo_garbage", lambda env, out: ["run", "-c", env.config_for_trace(env.trace, out),
                                                "--slo", "p99 under 5", "--out", out / "run"], ("--slo",),
           lambda out: (out / "run" / "summary.json",), True),
    Option("run_repeat_zero", lambda env, out: ["run", "-c", env.config_for_trace(env.trace, out), "--repeat", "0",
                                                "--out", out / "run"], ("--repeat",),
           lambda out: (out / "run" / "rep-1" / "summary.json",), True),
    Option("run_repeat_negative", lambda env, out: ["run", "-c", env.config_for_trace(env.trace, out),
                                                    "--repeat", "-1", "--out", out / "run"], ("--repeat",),
           lambda out: (out / "run" / "rep-1" / "summary.json",), True),
    Option("run_repeat_words", lambda env, out: ["run", "-c", env.config_for_trace(env.trace, out), "--repeat", "x",
                                                 "--out", out / "run"], ("--repeat",),
           lambda out: (out / "run" / "rep-1" / "summary.json",), True),
    Option("experiment_repeat_zero", lambda env, out: ["experiment", "-c", env.config_for_trace(env.trace, out),
                                                       "--repeat", "0", "--out", out / "exp"], ("--repeat",),
           lambda out: (out / "exp" / "experiment.json",), True),
    Option("ramp_from_zero", lambda env, out: _ramp(env, out, "--from", "0"), ("--from",),
           lambda out: (out / "ramp" / "ramp.json",), True),
    Option("ramp_step_negative", lambda env, out: _ramp(env, out, "--step", "-5"), ("--step",),
           lambda out: (out / "ramp" / "ramp.json",), True),
    Option("ramp_duration_nan", lambda env, out: _ramp(env, out, "--step-duration", "nan"), ("--step-duration",),
           lambda out: (out / "ramp" / "ramp.json",), True),
    Option("ramp_slo_unknown_stat", lambda env, out: _ramp(env, out, "--slo", "p42<10ms"), ("--slo", "p42"),
           lambda out: (out / "ramp" / "ramp.json",), True),
    Option("ramp_to_below_from", lambda env, out: _ramp(env, out, "--from", "50", "--to", "10"), ("--to",),
           lambda out: (out / "ramp" / "ramp.json",), True),
    Option("compare_noise_negative", lambda env, out: ["analyze", "compare", "--baseline", out,
                                                       "--candidate", out, "--noise", "-1"], ("--noise",)),
    Option("compare_alpha_one", lambda env, out: ["analyze", "compare", "--baseline", out,
                                                  "--candidate", out, "--alpha", "1"], ("--alpha",)),
    Option("results_window_backwards", lambda env, out: ["analyze", "results", out, "--window", "60:10",
                                                         "--out", out / "a"], ("--window",),
           lambda out: (out / "a" / "report.html",)),
    Option("results_window_words", lambda env, out: ["analyze", "results", out, "--window", "first-minute",
                                                     "--out", out / "a"], ("--window",),
           lambda out: (out / "a" / "report.html",)),
    Option("results_window_nan", lambda env, out: ["analyze", "results", out, "--window", "0:nan",
                                                   "--out", out / "a"], ("--window",),
           lambda out: (out / "a" / "report.html",)),
    Option("results_max_latency_zero", lambda env, out: ["analyze", "results", out, "--max-latency", "0",
                                                         "--out", out / "a"], ("--max-latency",),
           lambda out: (out / "a" / "report.html",)),
    Option("results_max_latency_negative", lambda env, out: ["analyze", "results", out, "--max-latency", "-2s",
                                                             "--out", out / "a"], ("--max-latency",),
           lambda out: (out / "a" / "report.html",)),
    Option("results_group_nameless", lambda env, out: ["analyze", "results", "--group", out,
                                                       "--out", out / "a"], ("--group",),
           lambda out: (out / "a" / "report.html",)),
    Option("results_group_twice", lambda env, out: ["analyze", "results", "--group", f"a={out}", "--group",
                                                    f"a={out}", "--out", out / "a"], ("--group",),
           lambda out: (out / "a" / "report.html",)),
]  # fmt: skip


def _ramp(env: Env, out: Path, *changed: str) -> list:
    """``drtp ramp`` with valid options but ``changed`` (an option and its bad value, laid over them)."""
    options = {"--from": "10", "--step": "10", "--to": "20", "--step-duration": "1", "--slo": "p99<1s"}
    options.update(dict(zip(changed[::2], changed[1::2], strict=True)))
    argv = ["ramp", "-c", _run_config(env, out), "--out", out / "ramp"]
    for option, value in options.items():
        argv += [option, value]
    return argv


def _output_options(kind: str, where: Callable[[Path], Path]) -> list[Option]:
    """Each command that writes, told to write where it cannot: ``where(out)`` is the path it is given."""

    return [
        Option(f"generate_output_{kind}", lambda env, out: ["generate", "-n", "100", "-o", where(out)], ()),
        Option(f"convert_output_{kind}", lambda env, out: ["convert", env.trace, "-o", where(out)], ()),
        Option(f"sample_output_{kind}", lambda env, out: ["sample", env.trace, "-o", where(out), "--method",
                                                          "requests", "--amount", "5"], ()),
        Option(f"capture_output_{kind}", lambda env, out: ["capture", REGISTRY_LOG, "-o", where(out),
                                                           "--salt", "hostile-salt"], ()),
        Option(f"analyze_trace_output_{kind}", lambda env, out: ["analyze", "trace", env.trace,
                                                                 "--out", where(out)], ()),
        Option(f"cost_output_{kind}", lambda env, out: ["cost", env.trace, "--out", where(out)], ()),
        Option(f"simulate_output_{kind}", lambda env, out: ["simulate", "-c", env.config_for_trace(env.trace, out),
                                                            "--out", where(out)], ()),
        Option(f"run_output_{kind}", lambda env, out: ["run", "-c", _run_config(env, out), "--out", where(out),
                                                       "--max-failed", "100%"], (), contacts_registry=True),
    ]  # fmt: skip


def _run_config(env: Env, out: Path) -> Path:
    config = env.config_for_trace(env.trace, out)
    (out / "warmup-map.jsonl").touch()
    return config


def _a_directory(out: Path) -> Path:
    """An existing directory given where a file is expected (and a file where a directory is: see below)."""
    path = out / "existing_dir"
    path.mkdir(exist_ok=True)
    return path


def _under_a_file(out: Path) -> Path:
    """A path inside a regular file: no one, root included, can create it (the run-as-root read-only dir)."""
    blocker = out / "plain_file"
    blocker.write_text("a file, not a folder\n")
    return blocker / "result"


def _in_immutable_dir(out: Path) -> Path:
    """A path inside a directory made immutable (chattr +i): read-only even for root."""
    return out / "frozen" / "result"


FILE_WRITERS = {"generate", "convert", "sample", "capture"}  # the others take a directory
OUTPUT_OPTIONS = (
    [o for o in _output_options("is_dir", _a_directory) if o.id.split("_output")[0] in FILE_WRITERS]
    + _output_options("under_file", _under_a_file)
    + _output_options("read_only", _in_immutable_dir)
)


def _is_file_where_dir(out: Path) -> Path:
    path = out / "existing_file"
    path.write_text("a file\n")
    return path


OUTPUT_OPTIONS += [
    o for o in _output_options("is_file", _is_file_where_dir) if o.id.split("_output")[0] not in FILE_WRITERS
]


def _freeze(path: Path) -> bool:
    """Make ``path`` immutable (chattr +i): read-only even for root, who ignores permissions."""
    path.mkdir(parents=True, exist_ok=True)
    if shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0


def _option_spec(option: Option) -> Spec:
    def build(env: Env, folder: Path) -> Job | None:
        out = folder / "out"
        cleanup = None
        if option.id.endswith("_read_only"):
            frozen = out / "frozen"
            if not _freeze(frozen):
                return None  # no CAP_LINUX_IMMUTABLE here; the under_file cases still cover a path nobody can write
            cleanup = lambda: subprocess.run(["chattr", "-i", str(frozen)], check=True)  # noqa: E731
        argv = option.argv(env, out)
        names = option.names
        if not names:  # an output path: the error names the path (its last part or its folder) or the option
            target = Path(argv[argv.index("-o") + 1] if "-o" in argv else argv[argv.index("--out") + 1])
            names = (target.name, target.parent.name, "--out", "--output")
        log = env.registry.log_path if option.contacts_registry else None
        return Job(argv, out, Expect(names=names, artifacts=option.artifacts(out), registry_log=log), cleanup)

    return Spec(f"option-{option.id}", build, option.contacts_registry)


SPECS: list[Spec] = (
    _case_specs("trace", TRACE_CASES, TRACE_COMMANDS, {"warmup", "run"})
    + _case_specs("log", LOG_CASES, LOG_COMMANDS, set())
    + _case_specs("config", CONFIG_CASES, CONFIG_ARGV, {"run", "warmup", "experiment"})
    + _case_specs("profile", PROFILE_CASES, PROFILE_COMMANDS, set())
    + _case_specs("results", RESULTS_CASES, RESULTS_COMMANDS, set())
    + [_option_spec(o) for o in OPTIONS + OUTPUT_OPTIONS]
)
assert len({s.id for s in SPECS}) == len(SPECS), "case ids repeat"

SKIPPED = "cannot be set up here: chattr +i needs CAP_LINUX_IMMUTABLE"


# -- running the cases ---------------------------------------------------------------------------------------


class Runner:
    """Runs cases and keeps each one's verdict (None when it kept the rule, or the exception set-up raised)."""

    def __init__(self, env: Env, root: Path) -> None:
        self.env = env
        self.root = root
        self.results: dict[str, str | BaseException | None] = {}
        self._lane = threading.local()  # each lane's fork server: a lane runs one case at a time
        self._servers: list[ForkServer] = []
        self._fresh: set[str] = set()  # the commands a case has already run for in a fresh process
        self._lock = threading.Lock()

    def close(self) -> None:
        for server in self._servers:
            server.close()

    def _server(self) -> ForkServer:
        server = getattr(self._lane, "server", None)
        if server is None:
            log = self.root / f"forkserver-{threading.get_ident()}.log"
            server = self._lane.server = ForkServer(log, MEMORY_CAP, FILE_CAP)
            with self._lock:
                self._servers.append(server)
        return server

    def _runs_fresh(self, job: Job) -> bool:
        """A valid input, and the first case of each command: a fresh process, startup and imports included."""
        if job.expect.valid or job.expect.warns:
            return True
        words = [w for w in job.argv[:2] if isinstance(w, str) and re.fullmatch(r"[a-z][a-z-]*", w)]
        command = " ".join(words if len(words) == 2 else words[:1])
        with self._lock:
            first = command not in self._fresh
            self._fresh.add(command)
        return first

    def run_all(self, specs: list[Spec]) -> None:
        """All of ``specs`` at once: the registry's users one after another, the others WORKERS at a time."""
        with ThreadPoolExecutor(1) as lane, ThreadPoolExecutor(WORKERS) as pool:
            futures = {s.id: (lane if s.registry else pool).submit(self._one, s) for s in specs}
            for id_, future in futures.items():
                self.results[id_] = future.result()

    def result(self, spec: Spec) -> str | BaseException | None:
        if spec.id not in self.results:
            self.results[spec.id] = self._one(spec)
        return self.results[spec.id]

    def _one(self, spec: Spec) -> str | BaseException | None:
        folder = self.root / spec.id
        (folder / "input").mkdir(parents=True)
        (folder / "out").mkdir()
        try:
            job = spec.build(self.env, folder)
        except Exception as e:  # a broken recipe fails its own test, not the whole module
            return e
        if job is None:
            return SKIPPED
        try:
            log = job.expect.registry_log
            before = _requests_logged(log)
            if self._runs_fresh(job):
                outcome = run_drtp(job.argv, job.cwd)
            else:
                outcome = fork_drtp(self._server(), job.argv, job.cwd)
            if log is not None and _requests_logged(log) != before:
                _settle(log)  # this case reached the registry: its last lines may still be on the way
            problem = verdict(outcome, job.expect, before)
        finally:
            if job.cleanup:
                job.cleanup()
        problem = problem.replace(f"{folder}/", "") if problem else None  # paths relative to the case's folder
        if REPORT:
            with open(REPORT, "a") as f:
                f.write(json.dumps({"id": spec.id, "problem": problem, "code": outcome.code}) + "\n")
        return problem


@pytest.fixture(scope="module")
def runner(env: Env, tmp_path_factory, request) -> Iterator[Runner]:
    """The verdicts of the selected cases, all run before the first test (one by one under pytest-xdist)."""
    r = Runner(env, tmp_path_factory.mktemp("hostile-cases"))
    try:
        if "PYTEST_XDIST_WORKER" not in os.environ:
            selected = {
                item.callspec.params["spec"].id
                for item in request.session.items
                if isinstance(getattr(item, "callspec", None) and item.callspec.params.get("spec"), Spec)
            }
            r.run_all([s for s in SPECS if s.id in selected])
        yield r
    finally:  # the fork servers end even when a case could not be run
        r.close()


@pytest.mark.parametrize("spec", [pytest.param(s, id=s.id) for s in SPECS])
def test_hostile_input(spec: Spec, runner: Runner) -> None:
    problem = runner.result(spec)
    if isinstance(problem, BaseException):
        raise problem
    if problem == SKIPPED:
        pytest.skip(problem)
    assert problem is None, problem


def test_deploy_gets_past_validation_of_the_valid_config(env: Env, tmp_path: Path) -> None:
    """The deploy cases mean something: the valid base config reaches the SSH connection (and fails there)."""
    (tmp_path / "input").mkdir()
    path = CONFIG_CASES[0].write(tmp_path / "input", env)
    outcome = run_drtp(["deploy", "-c", path, "--copy-only"], tmp_path)
    assert outcome.code not in (0, None), outcome.stderr
    assert len(outcome.lines) == 1 and f"ssh 127.0.0.1:{env.ssh_port}" in outcome.lines[0], outcome.stderr
