"""What every output of a run implements: the hooks through which the run feeds it and closes it.

An output is one thing a run writes or serves (requests.csv and summary.json, stats_history.csv, the
replayer's health, live metrics, the registries' metrics, the original trace player's results file).
The run holds a list of them (drtp.master.outputs.run_outputs ``OUTPUTS``) and calls the same hooks on
each, in the list's order:

* ``open`` (a class method) — before any node starts, so a file that cannot be made costs nothing (a
  resumed run's file of another version is refused here, before requests.csv is touched); None when the run
  has nothing for it (no metrics endpoint, no ``trace.output``, no exporter);
* :meth:`RunOutput.start` — the nodes have started, the first request is about to go;
* :meth:`RunOutput.frame` — each result frame of a node: its rows, interval and health parts, live parts;
* :meth:`RunOutput.lost` — the rows the master writes itself for the requests lost with a dead node;
* :meth:`RunOutput.tick` — after each drain of the nodes' events, and on an idle wait;
* :meth:`RunOutput.stop` — after the last answer, in the list's reverse order (threads of its own end);
* :meth:`RunOutput.finish` — its own block added to summary.json, before summary.json is written.

The per-frame hooks run on the master's dispatch thread: they cost per frame, never per row, and a bug
in one stops the run (the run names it ``replay``).  ``start``, ``stop`` and ``finish`` are each guarded
by the run's :class:`~drtp.master.run.internal_errors.InternalErrors` under the output's :attr:`name`: a bug
costs that output only, which is not called again.  An output may outlive one run (live metrics: the command
starts the exporter and hands it in, :attr:`RunContext.live`) or feed itself (the registries' metrics
and the master's CPU are read on threads of their own, started in ``start``, joined in ``stop``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, TypeVar

from drtp.config import Config
from drtp.replay.frames import ResultFrame
from drtp.replay.messages import ReplayRequest
from drtp.replay.result_row import ResultRow

if TYPE_CHECKING:  # prometheus-client is imported only by a run that exports
    from drtp.master.outputs.live_metrics import LiveMetrics
    from drtp.master.outputs.results import RunResults

OutputT = TypeVar("OutputT", bound="RunOutput")


@dataclass
class RunContext:
    """What an output may know of the run it belongs to (one per run, made before any node starts)."""

    cfg: Config
    out_dir: Path
    timed: bool  # requests have intended starts (as is, rate mode)
    resume: bool  # continuing an interrupted run in out_dir
    quiet: bool
    interval_s: float  # the width of stats_history.csv's intervals, and of the health and metrics readings
    clock: Callable[[], float]  # seconds since the run's common start (requests.csv's start_s origin)
    registry_of: Callable[[str], str]  # the registry (as ``registry:`` names it) a trace repository goes to
    live: LiveMetrics | None = None  # the command's exporter, already listening (it outlives the run)
    # requests.csv, the run's record (a resumed run's rows, this run's rows read back): made once every other
    # output opened, so that on resume each checks its own file before requests.csv is moved aside
    results: RunResults | None = None
    start_epoch: float = 0.0  # the run's common start, wall-clock seconds; set before the outputs start
    opened: list[RunOutput] = field(default_factory=list)  # the outputs opened so far, in the list's order
    # ask the run to stop (from any thread): it cancels on the nodes, keeps the rows that came, writes
    # summary.json with ``reason`` and exits 3 (a required event that failed); the first reason wins
    stop_run: Callable[[str], None] = field(default_factory=lambda: _ignore_stop)

    def output(self, kind: type[OutputT]) -> OutputT | None:
        """The opened output of this class, if the run has one (an output that feeds another finds it here)."""
        return next((o for o in self.opened if isinstance(o, kind)), None)


def _ignore_stop(reason: str) -> None:
    """A context made outside a run (a test's, a tool's) has no run to stop."""


class RunOutput:
    """One output of a run; every hook does nothing unless the output overrides it (the run calls only the
    hooks an output overrides: :func:`overrides`)."""

    name: ClassVar[str]  # how summary.json and stderr name it when a bug struck it ("stats history"…)

    @classmethod
    def open(cls: type[OutputT], run: RunContext) -> OutputT | None:
        """The output for ``run``, its files made; None when the run has nothing for it."""
        raise NotImplementedError

    def start(self) -> None:
        """The nodes have started: the first request is about to go."""

    def frame(self, node: str, frame: ResultFrame) -> None:
        """A node's result frame (on the dispatch thread: per frame, never per row)."""

    def lost(self, node: str, req: ReplayRequest, rows: list[ResultRow]) -> None:
        """A request lost with its node, as the rows the master wrote for it (its helper rows too)."""

    def tick(self, in_flight: int | None) -> None:
        """The nodes' events were drained (``in_flight``: the master's requests out at the nodes now), or a
        wait ended without any, or the run's last results were in (None)."""

    def stop(self) -> None:
        """After the last answer: end what the output runs on threads of its own."""

    def finish(self, summary: dict) -> None:
        """Add this output's block to ``summary`` (summary.json, written after every output finished).

        A :class:`~drtp.errors.RunError` (a file it could not write) leaves the other outputs to finish and
        summary.json to be written; it is the run's error then, unless the run already has one."""


def overrides(output: RunOutput, hook: str) -> bool:
    """Whether ``output`` does something on ``hook`` (the run leaves the others out of its per-frame loops)."""
    return getattr(type(output), hook) is not getattr(RunOutput, hook)
