"""What a client node streams back to the master: result frames, built on the node.

A frame holds what the master needs from a batch of finished requests and
nothing it would have to compute per request:

* ``rows`` — their ``requests.csv`` lines, already CSV text (the node makes the
  rows with drtp.replay.result_row, byte for byte what the file holds), so the
  master appends them to the file with one write;
* ``done`` — the ``seq`` of every trace request the frame finishes (the master
  frees its in-flight slot), ``failed`` — how many of them failed (progress);
* ``feedback`` — the whole results the master's planner needs: every request
  but a read (a push's new digest, a mount's outcome);
* ``intervals`` — the frame's trace requests grouped by the interval of the run
  in which they ended (counts, bytes and a latency histogram per interval), for
  ``stats_history.csv``;
* ``refused`` — registries whose secret (of the generation given) the registry
  refused although it had worked before: the master renews it once and sends the
  nodes the new one (a frame of its own, sent as soon as the node sees it);
* ``health`` — the node's own load (CPU, engine lag, requests in flight) per
  interval of the run, each interval once after it is over: whether the node
  could keep up (``replayer`` in summary.json, the gauges of stats_history.csv);
* ``live`` — only when the master exports live metrics: the frame's trace
  requests counted per registry, method, kind and outcome with latency buckets;
* ``model`` — in the stream's last frame only: the node's whole
  :class:`~drtp.replay.summary.ResultsModel`, which the master merges into the
  run's summary.  Histograms merge exactly, so the summary's percentiles are
  those of all the rows of ``requests.csv``.

On the wire a frame is msgpack behind a 4-byte big-endian length; a length of 0
is a keep-alive.  The master's cost per frame is a decode, a write and a loop
over ``done``: none of the per-row work (row objects, CSV cells, histograms).

That cost is fixed per frame, so a frame waits up to ``FRAME_GAP_S`` after the
previous frame for more results to join it (:func:`gather`): at a slow
registry's rates results come one by one, and a frame each cost the master more
than the requests in it.  As is (requests at their trace times), a frame with a
result the master's planner waits for (a push, a mount, a manifest read: later
records may be held for it) goes at once, so a held record is not made late;
in stress mode nothing is late, and every frame may wait.
"""

from __future__ import annotations

import bisect
import csv
import io
import math
import queue
import struct
import time
from collections.abc import Iterable
from typing import NamedTuple

import msgspec

from drtp.replay.messages import ReplayRequest, ReplayResult, RunSpec, registry_base
from drtp.replay.outcome import OK
from drtp.replay.result_row import ResultRow, cells, rows_of
from drtp.replay.stats_file import STATS_COUNTS
from drtp.replay.summary import LogHistogram, ResultsModel

LENGTH = struct.Struct(">I")
KEEPALIVE = LENGTH.pack(0)
MAX_FRAME = 1 << 30  # a length above this is a broken stream, not a frame
FRAME_GAP_S = 0.01  # a frame of blob reads alone waits until this long after the previous frame
FRAME_FULL = 1024  # ... unless it holds this many results already


class Finished(NamedTuple):
    """A trace request and its result, as an engine hands it to the result stream."""

    request: ReplayRequest
    result: ReplayResult


def _add(item, finished: list[Finished]) -> bool:
    """An engine's hand-over (one result, a list of them, or None at the end) into ``finished``;
    True when the planner waits for one of them (anything but a blob read)."""
    if isinstance(item, list):
        finished.extend(item)
        return any(f.request.op != "get" or f.request.kind == "manifest" for f in item)
    finished.append(item)
    return item.request.op != "get" or item.request.kind == "manifest"


def gather(
    first, results: queue.Queue, last_sent: float, timed: bool, clock=time.monotonic
) -> tuple[list[Finished], bool]:
    """The results of the next frame, starting from ``first`` (taken from ``results``), and whether the
    engine ended (None came).  What is ready goes; the frame also waits for more until ``FRAME_GAP_S``
    after ``last_sent`` (the previous frame's time) or until it is ``FRAME_FULL`` — unless the run is
    ``timed`` (as is) and the frame holds a result the planner waits for."""
    finished: list[Finished] = []
    if first is None:
        return finished, True
    urgent = _add(first, finished) and timed
    while True:
        try:
            item = results.get_nowait()
        except queue.Empty:
            wait = last_sent + FRAME_GAP_S - clock()
            if urgent or wait <= 0 or len(finished) >= FRAME_FULL:
                return finished, False
            try:
                item = results.get(timeout=wait)
            except queue.Empty:
                return finished, False
        if item is None:
            return finished, True
        urgent = (_add(item, finished) and timed) or urgent


class IntervalPart(msgspec.Struct, array_like=True, gc=False):
    """Trace requests that ended in interval ``index`` (end // the run's interval): one node's share."""

    index: int
    counts: dict[str, int]  # every count column of stats_history.csv (drtp.replay.stats_file), by name
    latency: list  # LogHistogram.state() of the latencies of those that succeeded


class HealthPart(msgspec.Struct, array_like=True, gc=False):
    """The node's own load in interval ``index`` of the run (the same intervals as :class:`IntervalPart`): what
    tells whether the node, rather than the registry, set the pace and the latencies it recorded."""

    index: int
    cpu: float  # share of one core the node's process used (user + system) over the interval: 1.0 = a whole core
    lag_ms: float  # p99 of how late the node's engine handled what was due (event loop or scheduler), ms
    in_flight: int  # the most trace requests the node had running at once in the interval
    # the wall time the figures cover, s: the run's last interval is cut short by the run's end (0.0: not told,
    # taken as a whole interval); master/outputs/replayer_health.py judges none shorter than half an interval
    wall_s: float = 0.0


# upper bounds (seconds) of the latency buckets of live metrics: sub-millisecond ones for a registry on the
# same host, up to a minute for a large layer far away; Prometheus's own histograms use the same bounds
LIVE_BUCKETS_S: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip


class LivePart(msgspec.Struct, array_like=True, gc=False):
    """The frame's trace requests of one registry, method, kind and outcome, for live metrics: built on the node
    only when the run exports them (``RunSpec.live``), so the master adds parts, never rows."""

    registry: str  # base URL
    method: str
    kind: str  # "manifest" or "blob"
    outcome: str  # drtp.replay.outcome
    count: int
    buckets: list[int]  # per LIVE_BUCKETS_S bound, not cumulative, then one more: above the last bound
    sum_s: float  # the sum of their latencies (latency_s)


class Refusal(msgspec.Struct, array_like=True, gc=False):
    """A registry refused the secret of ``generation`` that it took before (a node asks for a renewal)."""

    registry: str  # base URL
    generation: int


class ResultFrame(msgspec.Struct, array_like=True, gc=False):
    rows: bytes = b""
    done: list[int] = []
    failed: int = 0
    feedback: list[ReplayResult] = []
    intervals: list[IntervalPart] = []
    model: dict | None = None
    refused: list[Refusal] = []
    health: list[HealthPart] = []  # the node's load per interval, each interval once, as soon as it is over
    live: list[LivePart] = []  # only when the run exports live metrics


_encode = msgspec.msgpack.Encoder().encode
_decoder = msgspec.msgpack.Decoder(ResultFrame)


def pack(frame: ResultFrame) -> bytes:
    body = _encode(frame)
    return LENGTH.pack(len(body)) + body


def csv_text(lines: Iterable[Iterable]) -> bytes:
    """Lines of cells (drtp.replay.result_row.cells) as requests.csv text: the csv module's default dialect."""
    out = io.StringIO()
    csv.writer(out).writerows(lines)
    return out.getvalue().encode()


class LiveTally:
    """A frame's trace rows counted for live metrics, per registry, method, kind and outcome (:class:`LivePart`).

    Made only when the run exports live metrics: the node, which makes every row anyway, adds each once here,
    so the master's exporter adds a few parts per frame instead of looking at rows."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        # (registry, method, kind, outcome) -> [count, buckets (per LIVE_BUCKETS_S bound, then above), sum_s]
        self.counts: dict[tuple[str, str, str, str], list] = {}

    def add(self, registry: str, row: ResultRow) -> None:
        key = (registry, row.method, row.kind, row.outcome)
        acc = self.counts.get(key)
        if acc is None:
            acc = self.counts[key] = [0, [0] * (len(LIVE_BUCKETS_S) + 1), 0.0]
        acc[0] += 1
        latency = row.latency_s
        if latency is not None:  # a row without an end (lost) counts as a request, not as a latency
            acc[1][bisect.bisect_left(LIVE_BUCKETS_S, latency)] += 1  # the first bound >= latency: le semantics
            acc[2] += latency

    def parts(self) -> list[LivePart]:
        return [LivePart(*key, count, buckets, sum_s) for key, (count, buckets, sum_s) in self.counts.items()]


class IntervalStats:
    """The figures of one interval of stats_history.csv: its count columns (drtp.replay.stats_file
    ``STATS_COUNTS``, one slot each) and a latency histogram to merge."""

    __slots__ = (*STATS_COUNTS, "latency")

    def __init__(self) -> None:
        for name in STATS_COUNTS:
            setattr(self, name, 0)
        self.latency = LogHistogram()

    def add_row(self, row: ResultRow) -> None:
        self.requests += 1
        self.bytes += row.bytes
        if row.outcome == OK and row.latency_s is not None:
            self.latency.add(row.latency_s)
        else:
            self.failures += 1
            self.throttled += row.status == 429

    def add_part(self, part: IntervalPart) -> None:
        counts = part.counts
        for name in STATS_COUNTS:
            setattr(self, name, getattr(self, name) + counts.get(name, 0))
        self.latency.merge(LogHistogram.from_state(part.latency))

    def part(self, index: int) -> IntervalPart:
        return IntervalPart(index, {name: getattr(self, name) for name in STATS_COUNTS}, self.latency.state())


def interval_of(row: ResultRow, interval_s: float) -> int | None:
    """The interval a trace row ended in; None for a row with no end (lost)."""
    if row.start_s is None:
        return None
    return math.floor((row.start_s + (row.latency_s or 0.0)) / interval_s)


class FrameBuilder:
    """A node's side of the stream: rows, counts and the node's running model, one frame per hand-over."""

    def __init__(self, spec: RunSpec) -> None:
        self.node = spec.node
        self.interval_s = spec.stats_interval_s
        self.model = ResultsModel(spec.timed, spec.on_time_s)
        self.live = spec.live  # count LiveParts (only when the master exports live metrics)
        self.bases: dict[str, str] = {}  # a request's registry -> its base URL, the parts' registry

    def frame(self, finished: Iterable[Finished], health: list[HealthPart] | None = None) -> bytes:
        """A frame of ``finished`` requests, with the node's ``health`` parts not sent yet."""
        rows: list[ResultRow] = []
        done: list[int] = []
        feedback: list[ReplayResult] = []
        intervals: dict[int, IntervalStats] = {}
        failed = 0
        add = self.model.add
        iv = self.interval_s
        live = LiveTally() if self.live else None
        for req, res in finished:
            done.append(req.seq)
            if req.op != "get":
                feedback.append(res)
            failed += res.outcome != OK
            for row in rows_of(self.node, req, res):
                rows.append(row)
                add(row)
                if not row.auxiliary:
                    index = interval_of(row, iv)
                    stats = intervals.get(index)
                    if stats is None:
                        stats = intervals[index] = IntervalStats()
                    stats.add_row(row)
                    if live is not None:
                        live.add(self._base(req.registry), row)
        parts = [s.part(i) for i, s in intervals.items()]
        live_parts = live.parts() if live is not None else []
        return pack(
            ResultFrame(csv_text(map(cells, rows)), done, failed, feedback, parts, health=health or [], live=live_parts)
        )

    def _base(self, registry: str) -> str:
        """``registry`` (as a request names it) as a base URL, the label live metrics give it."""
        base = self.bases.get(registry)
        if base is None:
            base = self.bases[registry] = registry_base(registry)
        return base

    def health(self, health: list[HealthPart]) -> bytes:
        """A frame of the node's health alone: no result came, yet a stalled registry must show the node's load."""
        return pack(ResultFrame(health=health))

    def refusals(self, refused: list[Refusal]) -> bytes:
        """A frame that only reports refused secrets."""
        return pack(ResultFrame(refused=refused))

    def last(self, health: list[HealthPart] | None = None) -> bytes:
        """The stream's last frame: the node's whole model (and its health parts not sent yet)."""
        return pack(ResultFrame(model=self.model.state(), health=health or []))


class FrameReader:
    """The master's side: bytes of the stream in, whole frames out (keep-alives dropped)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[ResultFrame]:
        buf = self.buf
        buf += data
        frames = []
        at = 0
        end = len(buf)
        while end - at >= 4:
            (n,) = LENGTH.unpack_from(buf, at)
            if n > MAX_FRAME:
                raise msgspec.DecodeError(f"a frame of {n} bytes")
            if end - at - 4 < n:
                break
            if n:
                frames.append(_decoder.decode(buf[at + 4 : at + 4 + n]))
            at += 4 + n
        if at:
            del buf[:at]
        return frames

    @property
    def pending(self) -> int:
        """Bytes of a frame not yet complete (at the stream's end: a cut frame)."""
        return len(self.buf)
