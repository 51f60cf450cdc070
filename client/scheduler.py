"""A client node's run: a pool of worker threads that keeps each trace client's concurrency and order.

Requests of one trace client start in the order they arrived and overlap only
as the run's client model allows (client/client_gate.py: by default as they
overlapped in the trace, so a layer GET that followed a manifest GET waits for
it while three layer GETs that overlapped run at once); requests of different
trace clients run in parallel on ``threads`` workers.  In as-is
mode a request is not started before its intended time (``at`` seconds after
the run's common start); the actual start is recorded by the executor, after
any wait, so lateness shows.  A request that has run for more than
``STALL_S`` stops counting toward ``threads``: a stand-in worker takes its
place (at most ``threads`` such at once), so a registry request stuck until its
timeout holds back only its own trace client.  Finished requests go to one
queue that the result stream drains (drtp.replay.frames).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
from collections import deque

from drtp.client.client_gate import ClientGate, Lane
from drtp.client.executor import Executor
from drtp.client.health import HealthMeter
from drtp.replay.frames import Finished, FrameBuilder
from drtp.replay.messages import ReplayRequest, ReplayResult, RunSpec
from drtp.replay.outcome import ERROR
from drtp.replay.run_clock import monotonic_clock

log = logging.getLogger("drtp.client")
STALL_S = 1.0  # a request running longer than this hands its slot to a stand-in worker


def node_error(req: ReplayRequest, now: float, e: Exception) -> ReplayResult:
    """The failed result of a request that hit a bug inside the node (the log has the traceback)."""
    return ReplayResult(req.seq, 0, False, now, 0.0, error=f"node error: {e!r}"[:300], outcome=ERROR)


class RunBook:
    """What both engines keep about a run: the per-client gate, counters, the result queue, end and cancel flags."""

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.clock = monotonic_clock(spec.start_epoch)
        self.executor = Executor(spec, self.clock)
        # Finished requests (or lists of them), then None at the end; the result stream turns them into frames
        self.results: queue.Queue = queue.Queue()
        self.frames = FrameBuilder(spec)
        # the node's CPU, engine lag and requests in flight per interval (each engine starts its ticks)
        self.health = HealthMeter(spec.stats_interval_s, self.clock, lambda: self.running)
        self.gate = ClientGate(spec.client)  # each trace client's waiting requests, and which may start
        self.ready: list | deque = []  # lanes of the gate whose next request may start (how depends on the engine)
        self.queued = 0
        self.running = 0
        self.done = 0
        self.ended = False  # the master sent its last batch
        self.cancelled = False
        self.stream_closed = False

    def _mark_stalled(self, now: float) -> int:
        """Mark the requests that overran STALL_S (at most ``slots`` at once); how many stand-ins to start.

        Engines keep ``busy`` (worker id -> start of its request), ``stalled`` and ``slots``.
        """
        n = 0
        for wid, started in self.busy.items():
            if len(self.stalled) >= self.slots:
                break
            if now - started > STALL_S and wid not in self.stalled:
                self.stalled.add(wid)
                n += 1
        return n

    @property
    def finished(self) -> bool:
        return self.ended and self.queued == 0 and self.running == 0

    def _started(self) -> None:
        """A trace request starts: one more running (the health meter keeps the interval's most)."""
        self.queued -= 1
        self.running += 1
        if self.running > self.health.peak:
            self.health.peak = self.running

    def _end_stream(self) -> None:
        """End the result stream; first cancel the upload sessions the trace opened and never completed,
        so none outlives the run (off the lock: nothing of the trace is measured any more)."""
        self.health.finish()  # the run's requests are over: its last interval ends here
        self.executor.close_pools()  # no trace request comes any more: the trace clients' idle connections go

        def cancel_then_end() -> None:
            try:
                cancelled, failed = self.executor.cancel_uploads()
                log.info("run %s: cancelled %d upload sessions left open (%d failed)", self.spec.run, cancelled, failed)
            finally:
                self.results.put(None)

        if self.executor.uploads:
            threading.Thread(target=cancel_then_end, name="drtp-uploads-end", daemon=True).start()
        else:
            self.results.put(None)

    def _drop_queued(self) -> None:
        """Cancel: forget what has not started; what runs finishes and is reported."""
        self.cancelled = True
        dropped = self.queued
        self.gate.clear()
        self.ready.clear()
        self.queued = 0
        self.ended = True
        log.info("run %s cancelled; %d queued requests dropped", self.spec.run, dropped)


class NodeRun(RunBook):
    """The thread engine: ``threads`` workers; as-is waits are timed condition waits."""

    def __init__(self, spec: RunSpec) -> None:
        super().__init__(spec)
        self.cv = threading.Condition()
        # (due, tie, lane) of the lanes whose head may start, (due, tie, request) of requests that pass the gate
        self.ready: list[tuple[float, int, Lane | ReplayRequest]] = []
        self.tie = itertools.count()
        self.slots = max(1, spec.threads)
        self.busy: dict[int, float] = {}  # worker id -> clock time its request started
        self.stalled: set[int] = set()  # workers whose request overran STALL_S (a stand-in took their slot)
        self.worker_ids = itertools.count()
        self.watch_stop = threading.Event()
        for _ in range(self.slots):
            self._spawn()
        threading.Thread(target=self._watch, name="drtp-watch", daemon=True).start()
        self.health.start_thread("drtp-health")

    def _spawn(self) -> None:
        wid = next(self.worker_ids)
        threading.Thread(target=self._work, args=(wid,), name=f"drtp-worker-{wid}", daemon=True).start()

    def _watch(self) -> None:
        """Give each request that overran STALL_S a stand-in worker, at most ``slots`` at once.

        It sleeps on its own event, not on ``cv``: a ``notify()`` meant for a worker must not wake it.
        """
        while not self.watch_stop.wait(STALL_S / 2):
            with self.cv:
                if self.stream_closed:
                    return
                for _ in range(self._mark_stalled(self.clock())):
                    self._spawn()

    # -- called by the HTTP handlers ----------------------------------------------------

    def submit(self, requests: list[ReplayRequest]) -> None:
        with self.cv:
            if self.ended or self.cancelled:
                raise RuntimeError("the run is closed")
            gate, ready, tie = self.gate, self.ready, self.tie
            add, passes = gate.add, gate.passes
            for req in requests:
                if gate.unlimited and passes(req):  # no per-client order: listed itself, not its lane
                    heapq.heappush(ready, (req.at or 0.0, next(tie), req))
                    continue
                lane = add(req)
                if lane is not None:
                    heapq.heappush(ready, (req.at or 0.0, next(tie), lane))
            self.queued += len(requests)
            self.cv.notify_all()

    def end(self) -> None:
        with self.cv:
            self.ended = True
            self._maybe_finish()
            self.cv.notify_all()

    def cancel(self) -> None:
        with self.cv:
            self._drop_queued()
            self._maybe_finish()
            self.cv.notify_all()

    # -- workers ----------------------------------------------------------------------------

    def _next(self) -> ReplayRequest | None:
        with self.cv:
            while True:
                if self.cancelled or (self.ended and self.queued == 0):
                    return None
                if self.ready:
                    due = self.ready[0][0]
                    wait = due - self.clock()
                    if wait <= 0:
                        _, _, item = heapq.heappop(self.ready)
                        if item.__class__ is Lane:
                            req, again = self.gate.take(item)
                            if again:  # its next request may start too (it overlapped this one in the trace)
                                heapq.heappush(self.ready, (item.queue[0].at or 0.0, next(self.tie), item))
                                self.cv.notify()
                        else:  # a request that passes the gate (ClientGate.passes)
                            req = item
                        self._started()
                        return req
                    self.cv.wait(wait)
                else:
                    self.cv.wait(1.0)

    def _work(self, wid: int) -> None:
        while True:
            req = self._next()
            if req is None:
                return
            with self.cv:
                self.busy[wid] = self.clock()
            try:
                result = self.executor.execute(req)
            except Exception as e:  # a bug must not kill the worker or lose the request
                log.exception("request %d failed inside the node", req.seq)
                result = node_error(req, self.clock(), e)
            self.results.put(Finished(req, result))
            with self.cv:
                del self.busy[wid]
                stood_in = wid in self.stalled
                self.stalled.discard(wid)
                self.running -= 1
                self.done += 1
                gate = self.gate
                lane = None if gate.unlimited and gate.passes(req) else gate.done(req)
                if lane is not None:  # its end lets the client's next request start
                    heapq.heappush(self.ready, (lane.queue[0].at or 0.0, next(self.tie), lane))
                    self.cv.notify()
                self._maybe_finish()
            if stood_in:  # its stand-in has the slot now
                return

    def _maybe_finish(self) -> None:
        if self.finished and not self.stream_closed:
            self.stream_closed = True
            self.watch_stop.set()
            self._end_stream()
