"""The outputs of a run, in the order the run feeds them, and the loops that call their hooks.

A new output is a module with a :class:`~drtp.master.outputs.output.RunOutput` subclass and one entry in
:data:`OUTPUTS`.  The order is part of what the run means:

* requests.csv first: a frame's rows are written before any other output counts them, so a write that
  fails leaves no figure counting a row the file lacks;
* the registries' metrics before the master's CPU sampler: their first reading comes before the sampler
  starts and their last after it stopped (:meth:`RunOutputs.stop` goes in reverse order), and their
  ``registry_side`` block is added first;
* stats_history.csv before the replayer's health: the history's last grouping counts the gauges it drops
  as late before the ``replayer`` block is made, and the health parts feed its gauge columns;
* the event windows after the events output and stats_history.csv: at the finish they read events.csv
  and the history's last row, both written by then;
* live metrics after the replayer's health, whose master CPU readings it shows;
* the events before every output that reads them (the windows of summary.json are cut from events.csv at
  finish, once the events stopped: :class:`~drtp.master.outputs.events.EventsOutput` ``records()``; the stats
  history's ``event`` column asks ``running_in(begin_s, end_s)``);
* what reached a cache's upstream before the original trace player's results file: it rewrites requests.csv
  with the ``cache`` column filled, and every later reader sees the classes;
* the original trace player's results file last: it is made from requests.csv once every row is in,
  before summary.json, which says if it failed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from drtp.errors import RunError
from drtp.master.outputs.events import EventsOutput
from drtp.master.outputs.live_metrics import LiveMetricsOutput
from drtp.master.outputs.original_output import OriginalOutput
from drtp.master.outputs.output import RunContext, RunOutput, overrides
from drtp.master.outputs.registry_metrics import RegistryMetricsOutput
from drtp.master.outputs.replayer_health import ReplayerHealthOutput
from drtp.master.outputs.results import RunResults
from drtp.master.outputs.stats_history import HistoryOutput
from drtp.master.outputs.upstream import UpstreamOutput
from drtp.master.outputs.windows import WindowsOutput
from drtp.replay.frames import ResultFrame
from drtp.replay.messages import ReplayRequest
from drtp.replay.result_row import ResultRow

if TYPE_CHECKING:
    from drtp.master.run.internal_errors import InternalErrors

# every output a run may have, in the order the run feeds them (requests.csv is the run's own: always there)
OUTPUTS: list[type[RunOutput]] = [
    EventsOutput,
    RegistryMetricsOutput,
    HistoryOutput,
    WindowsOutput,
    ReplayerHealthOutput,
    LiveMetricsOutput,
    UpstreamOutput,
    OriginalOutput,
]


class RunOutputs:
    """A run's outputs (requests.csv's :class:`RunResults` first), each hook called on each in turn.

    The per-frame hooks go only to the outputs that do something on them, as bound methods gathered once.
    """

    def __init__(self, run: RunContext, results: Callable[[], RunResults]) -> None:
        """Open every output of :data:`OUTPUTS` that ``run`` has, then requests.csv (``results()``), which is
        moved aside on resume only once every other file could be resumed (an OSError: a file not made)."""
        for kind in OUTPUTS:
            output = kind.open(run)
            if output is not None:
                run.opened.append(output)
        run.results = results()
        run.opened.insert(0, run.results)
        self.run = run
        self.all: list[RunOutput] = list(run.opened)
        self._frame = [o.frame for o in self.all if overrides(o, "frame")]
        self._lost = [o.lost for o in self.all if overrides(o, "lost")]
        self._tick = [o.tick for o in self.all if overrides(o, "tick")]

    def start(self, broken: InternalErrors) -> None:
        """The nodes have started (a bug in one output's start costs that output)."""
        for output in self.all:
            broken.step(output.name, output.start)

    def frame(self, node: str, frame: ResultFrame) -> None:
        for hook in self._frame:
            hook(node, frame)

    def lost(self, node: str, req: ReplayRequest, rows: list[ResultRow]) -> None:
        for hook in self._lost:
            hook(node, req, rows)

    def tick(self, in_flight: int | None) -> None:
        for hook in self._tick:
            hook(in_flight)

    def stop(self, broken: InternalErrors) -> None:
        """After the last answer, last started first; one that fails is named, the others still stop."""
        for output in reversed(self.all):
            broken.step(output.name, output.stop)

    def finish(self, summary: dict, broken: InternalErrors) -> list[RunError]:
        """Each output's block into ``summary``, in order; a bug is named and the others still finish.
        Returns the files that could not be written (raised once summary.json is)."""
        errors = []
        for output in self.all:
            try:
                broken.step(output.name, output.finish, summary)
            except RunError as e:
                errors.append(e)
        return errors
