"""A run's results: ``requests.csv`` written as results arrive, ``summary.json``, and ``stats_history.csv``.

The rows are :class:`~drtp.replay.result_row.ResultRow` (their fields are the
file's columns); every number of the summary comes from
:class:`~drtp.replay.summary.ResultsModel`, the same model ``drtp analyze
results`` feeds from the file, so the two always agree.
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from drtp.errors import DrtpError
from drtp.master.outputs.output import RunOutput
from drtp.master.outputs.results_dir import ResultsWriteError, write_failed
from drtp.outputs import other_columns
from drtp.replay.frames import ResultFrame, csv_text
from drtp.replay.messages import ReplayRequest, ReplayResult
from drtp.replay.outcome import LOST
from drtp.replay.result_row import COLUMNS, COLUMNS_BEFORE_CACHE, ResultRow, cells, parse_cells, rows_of
from drtp.replay.slo import judged_latency
from drtp.replay.summary import PERCENTILES, LogHistogram, ResultsModel, bucket, replayer_limited_line
from drtp.replay.windows import event_line

if TYPE_CHECKING:
    from drtp.master.run.internal_errors import InternalErrors

__all__ = ["COLUMNS", "PERCENTILES", "LogHistogram", "RunResults", "bucket", "format_table"]


class RunResults(RunOutput):
    """Writes rows as they arrive and keeps the run's figures up to date.

    Rows come two ways: whole frames from the client nodes (drtp.replay.frames: their CSV
    text is appended as it is, the node keeps their figures and sends its model at the end
    of its stream), and rows the master makes itself (a request lost with its node, a
    resumed run's rows, ``drtp bench``), which are counted here.

    As the first of a run's outputs (drtp.master.outputs.output) it writes each frame's rows before any
    other output counts them; it is also the run's record: the run settles it once the streams are over and
    it writes summary.json, with the blocks the other outputs added.
    """

    name = "results"

    def __init__(self, out_dir: Path, timed: bool, on_time_s: float, resume: bool = False) -> None:
        self.out_dir = out_dir
        self.model = ResultsModel(timed, on_time_s)
        self.streamed_failed: dict[str, int] = {}  # node -> failures in its frames whose model is not merged yet
        self.node_models: dict[str, dict] = {}  # node -> its whole model, from its stream's last frame
        # resume: what an earlier, interrupted run of this directory completed
        self.completed: set[str] = set()  # trace ids with a result (not lost)
        self.pushed: list[tuple[str, str, str, int]] = []  # (repository, layer ref, digest, size) pushed
        self.resumed_end = 0.0  # the latest end (s after that run's start) of those results
        self.path = path = out_dir / "requests.csv"
        old = None
        if resume and path.exists():
            _check_columns(path)
            old = path.with_name("requests.csv.resumed")
            path.replace(old)
        self.file = open(path, "wb", buffering=0)  # each write reaches the file at once: nothing waits in a buffer
        self._write(csv_text([COLUMNS]))
        self.resumed = 0  # rows kept of the interrupted run, right after the header
        if old is not None:
            self._reload(old)
            old.unlink()
        self.run_offset = self.file.tell()  # where this run's own rows begin

    @property
    def all(self):
        """The figures over all trace requests so far (the nodes' share once their models are merged)."""
        return self.model.all

    @property
    def failed(self) -> int:
        """Failed trace requests so far, the nodes' frames included."""
        return self.model.failed + sum(self.streamed_failed.values())

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self.file.write(view) :]

    def _reload(self, old: Path) -> None:
        """Keep an interrupted run's completed rows (and count them); drop lost and torn rows."""
        kept = []
        with open(old, newline="") as f:
            lines = csv.reader(f)
            next(lines, None)
            for values in lines:
                try:
                    row = parse_cells(values)
                except ValueError:
                    continue  # a line torn by the interruption
                if row.outcome == LOST:
                    continue  # never answered: it is sent again
                if not row.auxiliary:
                    self._completed(row)
                self.model.add(row)
                kept.append(cells(row) if len(values) != len(COLUMNS) else values)  # a file without ``cache``
        self._write(csv_text(kept))
        self.resumed = len(kept)

    def _completed(self, row: ResultRow) -> None:
        """Remember a reloaded trace request: not sent again, and a layer it pushed stays addressable."""
        self.completed.add(row.trace_id)
        if row.start_s is not None:
            self.resumed_end = max(self.resumed_end, row.start_s + (row.latency_s or 0.0))
        if row.method == "PUT" and row.kind == "blob" and row.ok and row.digest:
            if not row.reference.startswith("uploads"):
                self.pushed.append((row.repository, row.reference, row.digest, row.size))

    def add(self, node: str, req: ReplayRequest, res: ReplayResult | None, lost_reason: str = "") -> list[ResultRow]:
        """Write and count a result the master holds itself (``res`` None: it never came back, for ``lost_reason``);
        its rows."""
        rows = list(rows_of(node, req, res, lost_reason))
        self._add_rows(rows)
        return rows

    def _add_rows(self, rows: list[ResultRow]) -> None:
        for row in rows:
            self.model.add(row)
        self._write(csv_text(map(cells, rows)))

    def add_frame(self, node: str, frame: ResultFrame) -> None:
        """A node's frame: its rows appended as they are, its failures counted."""
        if frame.rows:
            self._write(frame.rows)
        if frame.failed:
            self.streamed_failed[node] = self.streamed_failed.get(node, 0) + frame.failed

    def frame(self, node: str, frame: ResultFrame) -> None:
        """A node's frame as the run feeds its outputs: its rows written, its model kept if it is the last."""
        try:
            self.add_frame(node, frame)
        except OSError as e:
            raise write_failed(self.path, e) from None
        if frame.model is not None:
            self.node_model(node, frame.model)

    def lost(self, node: str, req: ReplayRequest, rows: list[ResultRow]) -> None:
        """The rows of a request lost with its node (the master made them), written and counted."""
        try:
            self._add_rows(rows)
        except OSError as e:
            raise write_failed(self.path, e) from None

    def node_model(self, node: str, model: dict) -> None:
        """A node's last frame: its whole model, merged when the run settles."""
        self.node_models[node] = model

    def settle(self, nodes: list[str], whole: set[str]) -> None:
        """Bring the nodes' figures into the run's once the streams are over.

        A node in ``whole`` sent every frame and the master wrote every one: its own model is merged (exact,
        and free). Any other node (it died, or the run was interrupted and frames may have been cut off or
        left unread) is counted from its rows in requests.csv instead, so the summary always says what the
        file holds.
        """
        rebuild = set()
        for node in nodes:
            model = self.node_models.pop(node, None)
            if model is not None and node in whole:
                self.model.merge(model)
            else:
                rebuild.add(node)
            self.streamed_failed.pop(node, None)
        if rebuild:
            self._count_from_file(rebuild)

    def _count_from_file(self, nodes: set[str]) -> None:
        """Count this run's rows of ``nodes`` from requests.csv (the lost ones were counted when written)."""
        with open(self.path, newline="") as f:
            f.seek(self.run_offset)
            for values in csv.reader(f):
                try:
                    row = parse_cells(values)
                except ValueError:
                    continue
                if row.node in nodes and row.outcome != LOST:
                    self.model.add(row)

    def rows(self) -> Iterator[ResultRow]:
        """This run's rows as requests.csv holds them (read back: the file is the record, nothing is kept in
        memory while the run goes)."""
        with open(self.path, newline="") as f:
            f.seek(self.run_offset)
            for values in csv.reader(f):
                try:
                    yield parse_cells(values)
                except ValueError:  # the header
                    continue

    def resumed_rows(self) -> Iterator[ResultRow]:
        """The interrupted run's rows this run kept, as requests.csv holds them (a resumed run only)."""
        with open(self.path, newline="") as f:
            lines = csv.reader(f)
            next(lines, None)  # the header
            for values in itertools.islice(lines, self.resumed):
                yield parse_cells(values)

    def summary(self, **extra) -> dict:
        return self.model.summary(**extra)

    def discard_unwritten(self) -> None:
        """After a failed write (disk full, file size limit): close requests.csv, so that close() can still
        write summary.json."""
        try:
            self.file.close()
        except OSError:
            pass

    def write_summary(
        self, extra: dict, failed: DrtpError | None, broken: InternalErrors, reason: Callable[[], str | None]
    ) -> dict:
        """Write summary.json at the run's end (``failed``: the failed write that stopped the run, if one did);
        when even that fails, say why in the error (exit 3), with the first failure.

        A bug in the results' own figures still leaves a summary.json: the run's fields without them,
        ``complete: false``, ``reason()`` (the run's incomplete reason, asked again) and the error named."""
        if failed is not None:
            self.discard_unwritten()
        try:
            return self.close(**extra)
        except DrtpError:
            raise
        except OSError as e:
            path = self.out_dir / "summary.json"
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)  # a torn summary.json would pass for a result; none says the truth
            why = f"{write_failed(path, e)}: the run's figures are lost"
            if isinstance(failed, ResultsWriteError):
                why = f"{failed}, and {why}"
            raise ResultsWriteError(why) from None
        except Exception as e:  # noqa: BLE001 - a bug in the results' figures: the run's own fields still go out
            broken.add(self.name, e)
            self.discard_unwritten()
            extra.update(complete=False, incomplete_reason=reason(), **broken.summary())
            path = self.out_dir / "summary.json"
            try:
                path.write_text(json.dumps(extra, indent=2, default=str))
            except OSError as err:
                raise write_failed(path, err) from None
            return extra

    def close(self, **extra) -> dict:
        self.file.close()
        summary = self.summary(**extra)
        (self.out_dir / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=False, default=str))
        return summary


def _check_columns(path: Path) -> None:
    """Resume only a file with this version's columns (or the same without ``cache``, read with it empty): rows
    of another layout would be misread."""
    with open(path, newline="") as f:
        header = next(csv.reader(f), None)
    if header is not None and tuple(header) not in (COLUMNS, COLUMNS_BEFORE_CACHE):
        raise other_columns(path, header, COLUMNS)


def _ms(d: dict, key: str) -> str:
    v = d.get(key)
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * 1000:.1f}"


def _rps(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} req/s"


def format_table(summary: dict) -> str:
    """The summary as a console table: all requests, per method+kind, per node; failures per outcome class,
    and the failed requests per HTTP status they got (``HTTP 429``, ``HTTP 503``: throttling apart from errors).

    Helper (auxiliary) requests are a line of their own under the table, never among the trace's rows.
    In rate mode the latency columns are from each request's intended start (``response_s``), the latency
    its objectives are judged on; a line under the table gives the rates offered and achieved.
    """
    timed = "lateness_s" in summary
    judged = judged_latency(summary)
    classes = list(summary.get("failures", {}))  # every class that occurred in any slice occurred in "all"
    statuses = list(summary.get("failed_statuses", {}))  # the same holds for the statuses
    p = "resp " if judged == "response_s" else ""
    head = ["", "requests", "failed", *classes, *(f"HTTP {c}" for c in statuses)]
    head += ["req/s", "MB", f"{p}p50 ms", f"{p}p90 ms", f"{p}p99 ms", f"{p}max ms"]
    if timed:
        head += ["late p99 ms", "on time"]
    rows = []

    def row(name: str, s: dict) -> None:
        lat = s.get(judged) or {}
        failures = s.get("failures", {})
        by_status = s.get("failed_statuses", {})
        r = [name, f"{s['requests']:,}", f"{s['failed']:,}", *(f"{failures.get(c, 0):,}" for c in classes)]
        r += [f"{by_status.get(c, 0):,}" for c in statuses]
        r += [f"{s['throughput_rps']:.1f}", f"{s['bytes'] / 1e6:.1f}"]
        r += [_ms(lat, "p50"), _ms(lat, "p90"), _ms(lat, "p99"), _ms(lat, "max")]
        if timed:
            r += [_ms(s["lateness_s"], "p99"), f"{s['on_time_ratio']:.1%}"]
        rows.append(r)

    row("all", summary)
    for k, s in summary["per_method"].items():
        row(k, s)
    for k, s in summary["per_node"].items():
        row(f"node {k}", s)
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = [
        "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=False)))
        for r in [head, *rows]
    ]
    lines.insert(1, "-" * len(lines[0]))
    if statuses:
        lines.append("HTTP <status>: failed requests by the status of their answer (also in their outcome column)")
    helpers = summary.get("auxiliary")
    if isinstance(helpers, dict) and helpers.get("requests"):
        why = ", ".join(f"{c} {n:,}" for c, n in helpers["failures"].items())
        codes = ", ".join(f"HTTP {c} {n:,}" for c, n in helpers.get("failed_statuses", {}).items())
        why = ", ".join(x for x in (why, codes) if x)
        lines.append(
            f"helper requests (not counted above): {helpers['requests']:,}, {helpers['failed']:,} failed"
            + (f" ({why})" if why else "")
        )
    if summary.get("offered_rps") is not None:
        lines.append(
            f"offered {summary['offered_rps']:.1f} req/s, achieved {_rps(summary.get('achieved_rps'))} "
            f"(requests started per second: intended, actual)"
        )
    if summary.get("manifests_above_trace_size"):
        lines.append(f"manifests sent bigger than the trace's size: {summary['manifests_above_trace_size']:,}")
    limited = replayer_limited_line(summary)
    if limited:
        lines.append(limited)
    lines += [event_line(entry) for entry in summary.get("events") or []]  # windows before, during, after each
    lines += cache_lines(summary)
    return "\n".join(lines)


def cache_lines(summary: dict) -> list[str]:
    """One line per registry behind which a cache's upstream was counted (summary.json ``upstream``): the trace
    requests per cache class with their latency, and the upstream GETs per absent blob."""
    out = []
    for registry, block in (summary.get("upstream") or {}).items():
        if not isinstance(block, dict) or "latency_by_class" not in block:
            continue
        parts = [
            f"{c} {s['requests']:,} (p50 {_ms(s['latency_s'], 'p50')} ms, p99 {_ms(s['latency_s'], 'p99')} ms)"
            for c, s in block["latency_by_class"].items()
        ]
        per = (block.get("upstream_gets_per_object") or {}).get("blob", {}).get("per_absence")
        tail = f"; upstream GETs per absent blob {per:.2g}" if per is not None else ""
        out.append(f"cache {registry}: " + ", ".join(parts) + tail)
    return out
