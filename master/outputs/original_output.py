"""``trace.output``: the original trace player's results file, written from a run's ``requests.csv``.

The original master collected one record per replayed request from its
client nodes and saved them as one JSON array in the file ``trace.output``
named (``output.json`` when unset).  Each record holds four keys:

``time``      when the request started, as seconds since the Unix epoch;
``duration``  how long it took, in seconds;
``size``      the bytes it moved;
``onTime``    ``"failed"`` when it failed; otherwise, replaying as is,
              ``"yes"`` when it started on time and ``"no"`` when late;
              as fast as possible, always ``"no"`` (the original's nodes said
              ``"yes"`` only after waiting for a request's time).

drtp writes that file when ``trace.output`` is set, at the end of every run
(an interrupted or incomplete one too: what was measured is kept), so that a
script written for the original reads a drtp run unchanged.  It holds one
record per trace request of ``requests.csv`` in the file's order (drtp's
helper requests are left out, as the original had none); a request never sent
or never answered is ``"failed"`` with a duration of 0.  ``requests.csv`` stays
the full record: this file is derived from it.  A relative ``trace.output`` is
put in the run directory, beside ``requests.csv``, so that runs do not
overwrite each other's.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from pathlib import Path

from drtp.config import Config
from drtp.errors import RunError
from drtp.master.outputs.output import RunContext, RunOutput
from drtp.replay.result_row import ResultRow, parse_cells

log = logging.getLogger("drtp.master.outputs.original_output")

__all__ = ["OriginalOutput", "original_record", "original_results_path", "write_original_results"]


def original_results_path(cfg: Config, out_dir: Path) -> Path | None:
    """Where ``trace.output`` asks for the original's results file (None: the key is not set)."""
    if cfg.trace is None or not cfg.trace.output:
        return None
    path = Path(os.path.expanduser(cfg.trace.output))
    return path if path.is_absolute() else out_dir / path


def original_record(row: ResultRow, start_epoch: float, on_time_s: float) -> dict:
    """One trace request as the original's results file holds it (``time``, ``duration``, ``onTime``, ``size``)."""
    if not row.ok:
        on_time = "failed"
    elif row.intended_s is not None and row.start_s is not None:
        on_time = "yes" if row.start_s - row.intended_s <= on_time_s else "no"
    else:
        on_time = "no"  # as fast as possible: no request had a time to be on
    started = row.start_s if row.start_s is not None else (row.intended_s or 0.0)
    return {
        "time": round(start_epoch + started, 6),
        "duration": row.latency_s or 0.0,
        "onTime": on_time,
        "size": row.bytes,
    }


def write_original_results(cfg: Config, out_dir: Path, start_epoch: float, quiet: bool = False) -> Path | None:
    """Write the original's results file from ``out_dir/requests.csv`` when ``trace.output`` asks for it.

    ``start_epoch`` is the run's common start (``start_s`` counts from it).  The
    file is written beside and renamed into place, so a reader never sees half
    of it; a failure to write it is a RunError naming the key and the path.
    """
    path = original_results_path(cfg, out_dir)
    if path is None:
        return None
    on_time_s = cfg.client_info.on_time_ms / 1000
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    try:
        with open(out_dir / "requests.csv", newline="") as rows, open(tmp, "w") as out:
            lines = csv.reader(rows)
            next(lines, None)  # the header
            out.write("[")
            for cells in lines:
                row = parse_cells(cells)
                if row.auxiliary:
                    continue
                out.write(("," if n else "") + "\n" + json.dumps(original_record(row, start_epoch, on_time_s)))
                n += 1
            out.write("\n]\n")
        tmp.replace(path)
    except (OSError, ValueError) as e:
        tmp.unlink(missing_ok=True)
        reason = getattr(e, "strerror", None) or str(e)
        raise RunError(f"{cfg.source}: key 'trace.output': cannot write {path} ({reason})") from None
    log.info("wrote %d requests in the original trace player's format to %s", n, path)
    if not quiet:
        print(f"trace.output: {n:,} requests in the original trace player's format in {path}")
    return path


class OriginalOutput(RunOutput):
    """``trace.output`` as one of the run's outputs: written at the run's end from requests.csv (every row is
    in by then), before summary.json; a file it cannot write is the run's error once summary.json is written."""

    name = "original output"

    def __init__(self, run: RunContext) -> None:
        self.run = run

    @classmethod
    def open(cls, run: RunContext) -> OriginalOutput | None:
        return cls(run) if original_results_path(run.cfg, run.out_dir) is not None else None

    def finish(self, summary: dict) -> None:
        run = self.run
        write_original_results(run.cfg, run.out_dir, run.start_epoch, run.quiet)
