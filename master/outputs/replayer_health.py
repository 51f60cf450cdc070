"""Whether a run measured the registry or its own replayer: the client nodes' and the master's load.

A client node that runs short of CPU handles answers late, and every latency
it records then holds its own queueing.  Each node sends, per interval of the
run, its CPU, its engine lag and its requests in flight
(drtp.replay.frames ``HealthPart``, measured by drtp.client.health); the
master measures its own CPU per interval (:class:`MasterCpu`).
:class:`ReplayerHealth` collects both: the gauge columns of
``stats_history.csv`` (``node_cpu_max``, ``loop_lag_ms_max``, ``master_cpu``)
and summary.json's ``replayer`` block and ``replayer_limited``.

The rule (its constants are here and nowhere else): a node is *limited* in an
interval when it used at least ``CPU_LIMIT`` of a core or its engine lag p99
was at least ``LAG_LIMIT_MS``; a run is replayer-limited when one node was
limited in at least ``LIMITED_PERCENT`` % of the run's intervals (those in
which any node reported).  Latencies from such a run are the replayer's as
much as the registry's: more client nodes, or fewer slots per node, measure
the registry.
Only intervals at least half an interval long are judged (:func:`judged`), and
only those make the per-run figures (p50, max) of the ``replayer`` block: the
run's last interval ends with the run and may hold just a few ms of end work,
whose CPU share (a short burst can be 0.9 of a core) says nothing about the
run.  stats_history.csv still shows such a tail in its row.
The line a limited run prints under the console table (and the report's banner) is
drtp.replay.summary ``replayer_limited_line``: it reads only summary.json.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from drtp.master.outputs.output import RunContext, RunOutput
from drtp.master.outputs.stats_history import HistoryOutput
from drtp.replay.frames import HealthPart, ResultFrame
from drtp.replay.summary import nearest_rank

CPU_LIMIT = 0.90  # share of one core: a node at or above it was short of CPU in that interval
LAG_LIMIT_MS = 10.0  # engine lag p99 at or above this many ms: the node handled what was due late
LIMITED_PERCENT = 10  # a node limited in at least this % of the run's intervals makes the run replayer-limited


def judged(wall_s: float, interval_s: float) -> bool:
    """Whether figures over ``wall_s`` of wall time stand for an interval: not a short tail (0.0: length not told,
    a whole interval)."""
    return wall_s <= 0 or wall_s >= 0.5 * interval_s


def limited(part: HealthPart) -> bool:
    """Whether the node was short of CPU or late in this interval."""
    return part.cpu >= CPU_LIMIT or part.lag_ms >= LAG_LIMIT_MS


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


class ReplayerHealth:
    """The run's health parts by node and the master's CPU by interval; the history's gauges as they come."""

    def __init__(
        self,
        interval_s: float,
        gauge: Callable[[int, str, float], None] | None = None,
        late: Callable[[], int] | None = None,
    ) -> None:
        """``gauge``: where the gauge columns go (drtp.master.outputs.stats_history ``StatsHistory.gauge``); ``late``:
        how many of them came too late for their row (``StatsHistory.late_gauges``)."""
        self.interval_s = interval_s
        self.gauge = gauge
        self.late = late
        # the run-clock time this session started: a resumed run's health covers the resumed session only (the
        # interrupted one's parts are not kept), so its figures say from when
        self.since_s = 0.0
        self.nodes: dict[str, dict[int, HealthPart]] = {}  # node → interval index → its part
        self.master_cpu: dict[int, float] = {}  # interval index → the master's CPU share
        self.master_short: set[int] = set()  # intervals of the master's too short to judge (the run's tail)
        # others told of each part as it comes (live metrics: ``LiveMetrics.health`` and ``.master_cpu``)
        self.on_health: list[Callable[[str, HealthPart], None]] = []
        self.on_master_cpu: list[Callable[[float], None]] = []

    def add(self, node: str, parts: list[HealthPart]) -> None:
        """A node's parts from one frame (each interval comes once; a repeated one replaces the first)."""
        mine = self.nodes.setdefault(node, {})
        for part in parts:
            mine[part.index] = part
            if self.gauge is not None:
                self.gauge(part.index, "node_cpu_max", part.cpu)
                self.gauge(part.index, "loop_lag_ms_max", part.lag_ms)
            for listener in self.on_health:
                listener(node, part)

    def master(self, index: int, share: float, wall_s: float = 0.0) -> None:
        """The master's CPU in interval ``index`` over ``wall_s`` (called from :class:`MasterCpu`'s thread)."""
        self.master_cpu[index] = share
        if not judged(wall_s, self.interval_s):
            self.master_short.add(index)
        if self.gauge is not None:
            self.gauge(index, "master_cpu", share)
        for listener in self.on_master_cpu:
            listener(share)

    # -- summary.json ----------------------------------------------------------------------------

    def _judged(self) -> dict[str, dict[int, HealthPart]]:
        """Each node's parts that stand for an interval (:func:`judged`)."""
        iv = self.interval_s
        return {node: {i: p for i, p in parts.items() if judged(p.wall_s, iv)} for node, parts in self.nodes.items()}

    def limited(self) -> dict | None:
        """The node that limited the run, or None: of the nodes limited in enough intervals, the one limited in
        the most; between equals, the one with the worst lag (then CPU) in them."""
        nodes = self._judged()
        run_intervals = {i for parts in nodes.values() for i in parts}
        n = len(run_intervals)
        if n == 0:
            return None
        candidates = []
        for node, parts in nodes.items():
            hits = sorted(i for i, p in parts.items() if limited(p))
            if hits and 100 * len(hits) >= LIMITED_PERCENT * n:
                worst_lag = max(parts[i].lag_ms for i in hits)
                worst_cpu = max(parts[i].cpu for i in hits)
                candidates.append(((len(hits), worst_lag, worst_cpu), node, hits))
        if not candidates:
            return None
        _, node, hits = max(candidates, key=lambda c: c[0])
        parts = nodes[node]
        cpu = sum(parts[i].cpu >= CPU_LIMIT for i in hits)
        lag = sum(parts[i].lag_ms >= LAG_LIMIT_MS for i in hits)
        why = []
        if cpu:
            why.append(f"at or above {CPU_LIMIT:.0%} of a core in {cpu}")
        if lag:
            why.append(f"engine lag p99 at or above {LAG_LIMIT_MS:g} ms in {lag}")
        return {
            "node": node,
            "from_s": round(hits[0] * self.interval_s, 3),
            "to_s": round((hits[-1] + 1) * self.interval_s, 3),
            "intervals": len(hits),
            "share": round(len(hits) / n, 4),
            "why": f"{' and '.join(why)} of the run's {n} intervals "
            f"(limited in {len(hits)}, at least {LIMITED_PERCENT}% makes the run replayer-limited)",
        }

    def block(self) -> dict:
        """summary.json's ``replayer`` block."""
        nodes = {}
        judged_parts = self._judged()
        for node in sorted(judged_parts):
            parts = list(judged_parts[node].values())
            if not parts:
                continue  # reported only a tail too short to judge
            cpu = [p.cpu for p in parts]
            lag = [p.lag_ms for p in parts]
            nodes[node] = {
                "cpu_p50": _r(nearest_rank(cpu, 0.50)),
                "cpu_max": _r(max(cpu)),
                "lag_ms_p50": _r(nearest_rank(lag, 0.50)),
                "lag_ms_p99": _r(nearest_rank(lag, 0.99)),
                "lag_ms_max": _r(max(lag)),
                "in_flight_max": max(p.in_flight for p in parts),
                "intervals": len(parts),
            }
        master = [v for i, v in self.master_cpu.items() if i not in self.master_short]
        return {
            "since_s": round(self.since_s, 3),
            "nodes": nodes,
            "master": {"cpu_p50": _r(nearest_rank(master, 0.50)), "cpu_max": _r(max(master, default=None))},
            "limited": self.limited(),
            # gauge values stats_history.csv dropped: they came after their interval's row was written
            "late_gauges": self.late() if self.late is not None else 0,
        }

    def summary(self) -> dict:
        """summary.json's ``replayer_limited`` and ``replayer``."""
        block = self.block()
        return {"replayer_limited": block["limited"] is not None, "replayer": block}


class MasterCpu:
    """The master process's CPU (user + system, every thread) per interval of the run, on a thread of its own.

    The thread sleeps until each interval's end (one wake per interval: nothing the run would notice) and reads
    the process's CPU time there; a late wake widens that reading's window, the share stays true over it.
    """

    def __init__(
        self, health: ReplayerHealth, clock: Callable[[], float], interval_s: float, cpu=time.process_time
    ) -> None:
        """``clock``: seconds since the run's common start."""
        self.health = health
        self.clock = clock
        self.interval_s = interval_s
        self.cpu = cpu
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._sample, name="drtp-master-cpu", daemon=True)
        self.index: int | None = None
        self.begin = 0.0
        self.cpu_begin = 0.0
        self.failure: Exception | None = None  # a bug on the sampler's thread, raised by stop() to the run

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Stop sampling; the partial last interval's share is over its own length (a short one is shown in
        stats_history.csv, not judged: :func:`judged`)."""
        self.stop_event.set()
        if self.thread.ident is None:
            return  # never started
        self.thread.join()
        if self.failure is not None:  # not sampled again: the run names it once
            raise self.failure
        if self.index is not None:
            self._close(self.clock())

    def _close(self, now: float) -> None:
        wall = now - self.begin
        cpu = self.cpu()
        share = round((cpu - self.cpu_begin) / wall, 4) if wall > 0 else 0.0
        self.health.master(self.index, share, max(wall, 1e-9))
        self.index = math.floor(now / self.interval_s)
        self.begin, self.cpu_begin = now, cpu

    def _sample(self) -> None:
        try:
            self._every_interval()
        except Exception as e:  # noqa: BLE001 - a bug costs the samples, not the run: stop() hands it on
            self.failure = e

    def _every_interval(self) -> None:
        iv = self.interval_s
        # an as-is run's common start is a little ahead: wait for it
        if self.stop_event.wait(max(0.0, -self.clock())):
            return
        now = self.clock()
        self.index = math.floor(now / iv)
        self.begin, self.cpu_begin = now, self.cpu()
        while not self.stop_event.wait(max(0.0, (self.index + 1) * iv - self.clock())):
            now = self.clock()
            if now >= (self.index + 1) * iv:  # a timed wait may end a hair early
                self._close(now)


class ReplayerHealthOutput(RunOutput):
    """The replayer's health as one of the run's outputs: the nodes' health parts from their frames, the
    master's CPU from :class:`MasterCpu`'s thread (started and stopped with the run's requests), the history's
    gauge columns fed as they come, summary.json's ``replayer_limited`` and ``replayer``."""

    name = "replayer health"

    def __init__(self, run: RunContext, health: ReplayerHealth, sampler: MasterCpu) -> None:
        self.run = run
        self.health = health
        self.sampler = sampler

    @classmethod
    def open(cls, run: RunContext) -> ReplayerHealthOutput:
        history = run.output(HistoryOutput)
        if history is not None:
            h = history.history
            health = ReplayerHealth(run.interval_s, h.gauge, lambda: h.late_gauges)
        else:
            health = ReplayerHealth(run.interval_s)
        return cls(run, health, MasterCpu(health, run.clock, run.interval_s))

    def start(self) -> None:
        if self.run.resume:
            self.health.since_s = self.run.results.resumed_end  # the replayer block covers this session only
        self.sampler.start()

    def frame(self, node: str, frame: ResultFrame) -> None:
        if frame.health:
            self.health.add(node, frame.health)

    def stop(self) -> None:
        self.sampler.stop()

    def finish(self, summary: dict) -> None:
        # after the history's last grouping: the block counts every gauge that grouping dropped as late
        summary.update(self.health.summary())
