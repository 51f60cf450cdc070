"""A run's maintenance events (``events:``, ``--event``): commands the master runs on the run's clock.

Each event of the config runs on a thread of its own, started in :meth:`EventsOutput.start`:

* ``at``: when the run's clock (``RunContext.clock``, requests.csv's ``start_s`` scale: 0 is the run's first
  intended start) reaches it;
* ``after: N``: once N trace requests of this run were answered — the requests the nodes' result frames
  report done, and the ones lost with a dead node (counted in :meth:`EventsOutput.frame` and
  :meth:`EventsOutput.lost`); the event's ``planned_s`` is then empty in events.csv.

``run`` is an argv list started without a shell, its program found on PATH, or relative to the config's
folder when given as a relative path with a ``/``.  Its environment is the master's without drtp's secrets
(:func:`event_environment`); its standard output and error go to ``events/<name>.log``.  The event ends when
its command ends, or later: ``until: DURATION`` after its start, or when the ``until: [argv…]`` command (run
once ``run`` ended, output to the same log) ends.  events.csv (drtp.replay.event_log) is rewritten as each
event starts and ends, so a run cut short still says what ran.

A failing event (an exit code other than 0, a program not found) is one warning line on stderr and the run
goes on; with ``required: true`` it stops the run (:meth:`RunContext.stop_run`: exit 3, what was measured
kept, summary.json saying why).  At the run's end, events not yet due are not started, and a command still
running gets :data:`STOP_GRACE_S` to end before it is terminated (a registry restart is not cut mid-way
for nothing).

What other outputs read: :meth:`EventsOutput.records` (events.csv's records as they are now) and
:meth:`EventsOutput.running_in` (which events ran in an interval of the run's clock).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import msgspec

from drtp.config import Config, secret_values
from drtp.config.checks import event_at_s, event_until_s
from drtp.config.schema import EventEntry
from drtp.errors import ConfigError
from drtp.master.outputs.output import RunContext, RunOutput
from drtp.replay.event_log import EVENTS_CSV, EventRecord, read_events, write_events
from drtp.replay.frames import ResultFrame
from drtp.replay.messages import ReplayRequest
from drtp.replay.result_row import ResultRow
from drtp.replay.windows import events_in

EVENTS_DIR = "events"  # events/<name>.log: each event's output
STOP_GRACE_S = 60.0  # at the run's end, how long a running event command may still take before it is terminated
# the variables drtp reads secrets from: never handed to an event's command
SECRET_VARS = ("DRTP_TOKEN", "DRTP_REGISTRY_PASSWORD", "DRTP_CAPTURE_SALT")
SECRET_PREFIXES = ("DRTP_CONFIG__",)  # config keys set from the environment: a token or password among them
_MIN_SECRET = 4  # shorter values are not looked for in a command line (they would match by chance)


def drtp_secrets(cfg: Config) -> list[str]:
    """drtp's secrets on this machine: the config's, and those of the variables drtp reads them from."""
    return secret_values(cfg) + [os.environ[v] for v in SECRET_VARS if os.environ.get(v)]


def event_environment(secrets: list[str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """The master's environment without drtp's secrets: the variables drtp reads them from, the config keys
    set from the environment, and any variable holding one of ``secrets``."""
    environ = dict(os.environ if environ is None else environ)
    values = {s for s in secrets if s}
    return {
        k: v
        for k, v in environ.items()
        if k not in SECRET_VARS and not k.startswith(SECRET_PREFIXES) and v not in values
    }


def _secret_in(argv: list[str], secrets: list[str]) -> bool:
    return any(s in arg for s in secrets if len(s) >= _MIN_SECRET for arg in argv)


def event_argv(cfg: Config, argv: list[str]) -> list[str]:
    """``argv`` with a program given as a relative path (with a ``/``) made relative to the config's folder."""
    program = argv[0]
    if "/" in program:
        program = str(cfg.path(program))
    return [program, *argv[1:]]


def _commands(entry: EventEntry) -> list[tuple[str, list[str]]]:
    found = [("run", entry.run)]
    if isinstance(entry.until, list):
        found.append(("until", entry.until))
    return found


def _where(cfg: Config, origin: str | None, i: int, key: str = "") -> str:
    """How an error names event ``i``: by the option that gave it (``--event``), else the config's key."""
    name = cfg.events[i].name
    if origin is not None:
        return f"{origin} (event {name!r})"
    return f"{cfg.source}: key 'events[{i}]{key}' (event {name!r})"


def check_event_commands(cfg: Config, origin: str | None = None, secrets: list[str] | None = None) -> None:
    """Each event's programs exist and are executable, and no argument holds one of drtp's secrets: a one-line
    ConfigError naming the event (``origin``: the option that gave the events, else the config's key), before
    anything is sent."""
    secrets = drtp_secrets(cfg) if secrets is None else secrets
    for i, entry in enumerate(cfg.events):
        for key, argv in _commands(entry):
            where = _where(cfg, origin, i, f".{key}")
            program = event_argv(cfg, argv)[0]
            if shutil.which(program) is None:
                why = "is not executable" if Path(program).exists() else "not found"
                raise ConfigError(f"{where}: program {argv[0]!r} {why}")
            if _secret_in(argv, secrets):
                raise ConfigError(f"{where}: an argument holds one of drtp's secrets (a token or password)")


def check_event_times(cfg: Config, span_s: float | None, requests: int, origin: str | None = None) -> None:
    """Each event is due within the trace: ``at`` no later than the trace's length on the run's clock
    (``span_s``; None when it is not known before the run: stress mode), ``after`` no more than ``requests``."""
    for i, entry in enumerate(cfg.events):
        where = _where(cfg, origin, i)
        if entry.after is not None and entry.after > requests:
            raise ConfigError(f"{where}: after {entry.after:,} requests, past the trace's {requests:,}")
        if entry.at is not None and span_s is not None and event_at_s(entry.at) > span_s:
            raise ConfigError(
                f"{where}: at {event_at_s(entry.at):g} s, past the trace, which lasts {span_s:g} s on the run's clock"
            )


class _Event:
    """One event as it runs: its entry, its record (replaced as it goes), its command's process."""

    def __init__(self, entry: EventEntry) -> None:
        self.entry = entry
        planned = event_at_s(entry.at) if entry.at is not None else None
        self.record = EventRecord(entry.name, planned, None, None, None)
        self.due = threading.Event()  # ``after``: set once enough requests were answered
        self.proc: subprocess.Popen | None = None
        self.thread: threading.Thread | None = None


class EventsOutput(RunOutput):
    """Runs the config's events on the run's clock and writes events.csv and events/<name>.log."""

    name = "events"

    def __init__(self, run: RunContext, events: list[_Event]) -> None:
        self.run = run
        self.events = events
        self.dir = run.out_dir / EVENTS_DIR
        self.csv = run.out_dir / EVENTS_CSV
        self.lock = threading.Lock()  # the records, events.csv
        self.stopping = threading.Event()
        self.answered = 0  # trace requests of this run answered (or lost with their node)
        self.waiting = sorted((e for e in events if e.entry.after is not None), key=lambda e: e.entry.after)
        self.env = event_environment(drtp_secrets(run.cfg))
        self.warnings: list[str] = []

    @classmethod
    def open(cls, run: RunContext) -> EventsOutput | None:
        if not run.cfg.events:
            return None
        events = [_Event(entry) for entry in run.cfg.events]
        if run.resume:  # an event the interrupted run started is not run again: its record is kept
            before = {r.name: r for r in read_events(run.out_dir / EVENTS_CSV) if r.started_s is not None}
            for event in events:
                if event.entry.name in before:
                    event.record = before[event.entry.name]
        out = cls(run, events)
        out.dir.mkdir(exist_ok=True)
        out._write()
        return out

    # -- what other outputs read ---------------------------------------------------------------------------

    def records(self) -> list[EventRecord]:
        """Every event's record as events.csv holds it now (in the config's order)."""
        with self.lock:
            return [e.record for e in self.events]

    def running_in(self, begin_s: float, end_s: float) -> str:
        """The names of the events that ran in ``[begin_s, end_s)`` of the run's clock (stats_history.csv's
        ``event`` cell; drtp.replay.windows ``events_in``), "" when none did."""
        return events_in(self.records(), begin_s, end_s)

    # -- hooks ----------------------------------------------------------------------------------------------

    def start(self) -> None:
        for event in self.events:
            if event.record.started_s is not None:
                continue  # resumed: it ran before
            event.thread = threading.Thread(target=self._run, args=(event,), name=f"event {event.entry.name}")
            event.thread.daemon = True
            event.thread.start()

    def frame(self, node: str, frame: ResultFrame) -> None:
        if self.waiting and frame.done:
            self._answered(len(frame.done))

    def lost(self, node: str, req: ReplayRequest, rows: list[ResultRow]) -> None:
        if self.waiting:
            self._answered(1)

    def _answered(self, n: int) -> None:
        self.answered += n
        while self.waiting and self.waiting[0].entry.after <= self.answered:
            self.waiting.pop(0).due.set()

    def stop(self) -> None:
        """Events not yet due are not started; a running command gets STOP_GRACE_S, then is terminated."""
        self.stopping.set()
        for event in self.events:
            event.due.set()
        for event in self.events:
            if event.thread is None:
                continue
            event.thread.join(STOP_GRACE_S)
            if event.thread.is_alive():
                proc = event.proc
                if proc is not None and proc.poll() is None:
                    self._warn(f"event {event.entry.name}: still running at the run's end; terminated")
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, 15)
                event.thread.join(5.0)

    def finish(self, summary: dict) -> None:
        if self.warnings:
            summary["event_warnings"] = list(self.warnings)

    # -- running one event ----------------------------------------------------------------------------------

    def _run(self, event: _Event) -> None:
        entry = event.entry
        if entry.at is not None:
            wait = event_at_s(entry.at) - self.run.clock()
            if wait > 0 and self.stopping.wait(wait):
                return
        else:
            event.due.wait()
        if self.stopping.is_set():
            return
        log_path = self.dir / f"{entry.name}.log"
        started = self.run.clock()
        self._set(event, started_s=started)
        with open(log_path, "ab") as log:
            code = self._command(event, "run", entry.run, log)
            if isinstance(entry.until, list) and code == 0 and not self.stopping.is_set():
                code = self._command(event, "until", entry.until, log)
            elif entry.until is not None and not isinstance(entry.until, list):
                self.stopping.wait(max(0.0, started + event_until_s(entry.until) - self.run.clock()))
        ended = self.run.clock()
        self._set(event, ended_s=ended, exit_code=code)
        if code != 0:
            why = "its program was not found" if code is None else f"exit {code}"
            where = f"{EVENTS_DIR}/{entry.name}.log"
            if entry.required:
                reason = f"required event {entry.name} failed ({why}; its output: {where})"
                self._warn(f"{reason}; the run stops")
                self.run.stop_run(reason)
            else:
                self._warn(f"event {entry.name} failed ({why}; its output: {where}); the run goes on")

    def _command(self, event: _Event, key: str, argv: list[str], log) -> int | None:
        """Run one of the event's commands to its end; its exit code (None: it could not be started)."""
        cmd = event_argv(self.run.cfg, argv)  # its ${VAR} were replaced when the config was loaded
        log.write(f"# {key}: {' '.join(cmd)}\n".encode())
        log.flush()
        try:
            event.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                start_new_session=True,  # its own process group: terminated whole if it outlives the run
            )  # fmt: skip
        except OSError as e:
            log.write(f"# {key}: cannot start {cmd[0]!r}: {e.strerror or e}\n".encode())
            return None
        code = event.proc.wait()
        log.write(f"# {key}: exit {code}\n".encode())
        log.flush()
        return code

    def _set(self, event: _Event, **fields) -> None:
        with self.lock:
            event.record = msgspec.structs.replace(event.record, **fields)
            self._write()

    def _write(self) -> None:
        try:
            write_events(self.csv, [e.record for e in self.events])
        except OSError as e:  # the events still run; the run's own files say whether the disk failed
            self._warn(f"{self.csv}: cannot write: {e.strerror or e}")

    def _warn(self, text: str) -> None:
        self.warnings.append(text)
        print(f"drtp: warning: {text}", file=sys.stderr, flush=True)


__all__ = [
    "EVENTS_DIR",
    "EventsOutput",
    "check_event_commands",
    "check_event_times",
    "event_environment",
]
