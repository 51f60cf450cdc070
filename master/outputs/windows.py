"""summary.json's ``events[]``: the run's figures before, during and after each maintenance event.

Made at the run's finish from the run's own files: events.csv (the events output, drtp.master.outputs.events,
has written it whole by then), stats_history.csv (its last row is written in the history's finish, which
comes earlier in :data:`~drtp.master.outputs.run_outputs.OUTPUTS`) and requests.csv read back
(:meth:`RunResults.rows`, a resumed run's earlier rows first: they share one ``start_s`` origin).  The
windows and the recovery are drtp.replay.windows's; a run without events.csv gets no ``events`` key.
"""

from __future__ import annotations

import itertools

from drtp.master.outputs.output import RunContext, RunOutput
from drtp.replay.event_log import EVENTS_CSV, read_events
from drtp.replay.stats_file import STATS_FILE
from drtp.replay.windows import event_entries, read_intervals


class WindowsOutput(RunOutput):
    """The event windows as one of the run's outputs: nothing while the run goes, ``events`` at its finish."""

    name = "event windows"

    def __init__(self, run: RunContext) -> None:
        self.run = run

    @classmethod
    def open(cls, run: RunContext) -> WindowsOutput:
        return cls(run)  # events.csv is looked for at the finish: an event may be added by any means

    def finish(self, summary: dict) -> None:
        out_dir = self.run.out_dir
        events = read_events(out_dir / EVENTS_CSV)
        results = self.run.results
        if not events or results is None:
            return
        rows = itertools.chain(results.resumed_rows(), results.rows())
        intervals = read_intervals(out_dir / STATS_FILE)
        model = results.model  # settled before the outputs finish: the nodes' figures are in
        run_end = model.all.last if model.all.sent else None  # the last end of any trace request
        summary["events"] = event_entries(rows, events, intervals, model.timed, model.on_time_s, run_end)
