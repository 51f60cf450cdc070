"""A client node's own load per interval of the run: whether the node, not the registry, set the pace.

A node that runs out of CPU records its own queueing in every latency it
measures.  :class:`HealthMeter` measures, per interval of the run (the
intervals of stats_history.csv: ``stats_interval_s`` wide, counted from the
run's common start as drtp.replay.frames ``interval_of`` counts them):

* ``cpu`` — the node process's CPU (user + system, every thread) over the
  interval's wall time: 1.0 is a whole core;
* ``lag_ms`` — the p99 (nearest rank) of how late a timer of the engine fired (see below);
* ``in_flight`` — the most trace requests running at once.

The lag is a timer's oversleep, measured by a tick every ``TICK_S``:

* on the event-loop engine (client/loop_engine.py) the tick is a callback on
  the run's own loop (:meth:`HealthMeter.start_on_loop`): it fires late by
  exactly as long as the loop was busy with other callbacks or the process
  waited for a CPU, which is how late the loop handles an answer that is ready;
* on the threads engine (client/scheduler.py) it is a sampler thread sleeping
  ``TICK_S`` (:meth:`HealthMeter.start_thread`): a worker woken by its request's
  due time or by an answer needs the GIL and a CPU just as the sampler does, so
  the sampler's oversleep is the delay any of them meets.  The scheduler's own
  lateness (a request's actual start minus its intended one) is not used: it
  also holds the wait for a free worker while every worker waits on a slow
  registry — a registry's slowness or too few ``threads``, already in
  summary.json's ``lateness_s`` — and it exists only when a request is due.

The ticks are due on a fixed grid, ``TICK_S`` (8 ms) apart (not ``TICK_S``
after the previous one fired, which drifts to fewer a second), and a tick that
fires late stands also for the grid ticks it slept through, each late by its
own amount: a 1 s interval holds about 125 samples, so its nearest-rank p99
is the second-largest sample, not the largest.  One stray 10 ms oversleep does
not reach the p99; a 30 ms stall gives 3 samples of 10 ms or more (the
instants of the interval handled that late) and does.  An interval of 0.8 s
or less (a smaller ``--stats-interval``) holds at most 100 samples and its p99
is its largest.

A tick still overdue when an interval ends gives that interval the lag it has
reached so far, so a loop blocked for a whole interval shows in it, not only
in the interval where the tick finally fired.  Each finished interval becomes
one :class:`~drtp.replay.frames.HealthPart`, taken once by the result stream
(:meth:`take`); the run's last, partial interval comes with the stream's last
frame (:meth:`finish`), its CPU share over its own length: requests ended in it
too, and its row of stats_history.csv would otherwise lack the node.  Each part
carries the wall time it covers (``wall_s``): the last one may cover a few ms
of end work, whose CPU share says nothing of the run, so the master's verdict
and per-run figures leave out parts shorter than half an interval
(master/outputs/replayer_health.py ``judged``); stats_history.csv still shows them.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable

from drtp.replay.frames import HealthPart
from drtp.replay.summary import nearest_rank

# the lag tick's period, on a fixed grid: 125 samples in a 1 s interval, so that its nearest-rank p99 (rank 124 of
# 125) is not its largest sample; measured on an idle loop of a loaded 2-core machine: 2.3 % of a core (1.7 % at 10 ms)
TICK_S = 0.008


class HealthMeter:
    """One run's health figures per interval, fed by its engine's tick; parts handed to the result stream."""

    def __init__(
        self, interval_s: float, clock: Callable[[], float], running: Callable[[], int], cpu=time.process_time
    ) -> None:
        """``clock``: seconds since the run's common start; ``running``: trace requests running now."""
        self.interval_s = interval_s
        self.clock = clock
        self.running = running
        self.cpu = cpu
        self.lock = threading.Lock()  # ticks (loop or sampler thread) against the result stream's take/finish
        self.peak = 0  # the most requests running at once in the current interval (the engines raise it)
        self.parts: list[HealthPart] = []  # finished intervals not yet taken
        self.samples: list[float] = []  # lag samples (s) of the current interval
        self.index: int | None = None  # the current interval (None until the run's start)
        self.begin = 0.0  # run-clock time of the current window's start (the first one may start late)
        self.cpu_begin = 0.0
        self.stopped = False
        self.next_due: float | None = None  # when the engine's next tick is due (None: no timer started yet)

    # -- the engines' ticks ----------------------------------------------------------------------

    def tick(self, due: float, now: float) -> None:
        """A tick due at run-clock ``due`` fired at ``now``: its oversleep is a lag sample."""
        with self.lock:
            if self.stopped or now < 0:
                return
            self._tick(due, now)

    def _tick(self, due: float, now: float) -> None:
        """:meth:`tick` under the lock."""
        if self.index is None:
            self._open(now)
        iv = self.interval_s
        while now >= (self.index + 1) * iv:  # an interval ended: close it (and any the tick slept through)
            end = (self.index + 1) * iv
            if due < end:  # this tick was overdue at that end: the interval saw that much lag at least
                self.samples.append(end - max(due, self.index * iv))
            self._close(end, now)
        self.samples.append(max(0.0, now - due))

    def _open(self, now: float) -> None:
        self.index = math.floor(now / self.interval_s)
        self.begin = now
        self.cpu_begin = self.cpu()

    def _close(self, end: float, now: float) -> None:
        """Close the current interval at its ``end`` (read at ``now``, a little later) and open the next."""
        cpu = self.cpu()
        wall = now - self.begin
        share = (cpu - self.cpu_begin) / wall if wall > 0 else 0.0
        running = self.running()
        lag_ms = round((nearest_rank(self.samples, 0.99) or 0.0) * 1000, 3)
        self.parts.append(HealthPart(self.index, round(share, 4), lag_ms, self.peak, round(wall, 4)))
        self.samples = []
        self.peak = running  # what still runs is in flight in the next interval too
        self.index += 1
        if now >= (self.index + 1) * self.interval_s:
            return  # slept through it as well: the same CPU reading spans both (closed by the caller's loop)
        self.begin = now
        self.cpu_begin = cpu

    def _ticks(self, due: float, now: float) -> float:
        """The tick due at ``due`` fired at ``now``, and so did every grid tick it slept through (each a sample of
        its own lateness); the next tick's due time on the grid."""
        self.tick(due, now)
        due += TICK_S
        while due <= now:
            self.tick(due, now)
            due += TICK_S
        self.next_due = due
        return due

    # -- the result stream ---------------------------------------------------------------------------

    def take(self) -> list[HealthPart]:
        """The finished intervals not yet sent (each is sent once)."""
        if not self.parts:  # a lock-free look first: most frames find none
            return []
        with self.lock:
            parts, self.parts = self.parts, []
        return parts

    def finish(self) -> None:
        """Stop measuring (the run's requests are over): the partial last interval joins the parts to send.
        Idempotent."""
        with self.lock:
            if self.stopped:
                return
            self.stopped = True
            now = self.clock()
            due = self.next_due
            if due is not None and due < now and now >= 0:
                # the engine's tick is overdue (its loop or the process was held up at the end): the lag it
                # reached closes any interval it spans, as a tick firing now would
                self._tick(due, now)
            if self.index is not None:
                now = max(now, self.begin)
                self._close(now, now)

    # -- the two engines' timers ---------------------------------------------------------------------

    def start_on_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Tick on ``loop`` (call from the loop's thread); stops by itself once :meth:`finish` ran.

        The times are the run's clock (perf_counter), not the loop's: uvloop's clock counts whole milliseconds.
        """
        clock = self.clock

        def fire(due: float) -> None:
            now = clock()
            due = self._ticks(due, now)
            if not self.stopped:
                loop.call_later(max(0.0, due - clock()), fire, due)

        self.next_due = clock() + TICK_S
        loop.call_later(TICK_S, fire, self.next_due)

    def start_thread(self, name: str) -> None:
        """Tick on a thread of its own (the threads engine); it ends once :meth:`finish` ran."""

        def sample() -> None:
            clock, sleep = self.clock, time.sleep
            due = self.next_due = clock() + TICK_S
            while not self.stopped:
                sleep(max(0.0, due - clock()))
                due = self._ticks(due, clock())

        threading.Thread(target=sample, name=name, daemon=True).start()
