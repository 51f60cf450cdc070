"""A client node's run: a pool of worker threads that keeps each trace client in order.

Requests of one trace client are executed one at a time, in the order they
arrived (a Docker client does one push or pull step after the other); requests
of different trace clients run in parallel on ``threads`` workers.  In as-is
mode a request is not started before its intended time (``at`` seconds after
the run's common start); the actual start is recorded by the executor, after
any wait (defect B2).  Results go to one queue that the result stream drains.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
from collections import deque

from drtp.client.executor import Executor, monotonic_clock
from drtp.replay_types import ReplayRequest, ReplayResult, RunSpec

log = logging.getLogger("drtp.client")


class RunBook:
    """What both engines keep about a run: per-client queues, counters, the result queue, end and cancel flags."""

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.clock = monotonic_clock(spec.start_epoch)
        self.executor = Executor(spec, self.clock)
        self.results: queue.Queue = queue.Queue()  # ReplayResult (or lists of them), then None at the end
        self.pending: dict[str, deque[ReplayRequest]] = {}  # trace client -> its waiting requests
        self.ready: list | deque = []  # idle trace clients with work (how depends on the engine)
        self.queued = 0
        self.running = 0
        self.done = 0
        self.ended = False  # the master sent its last batch
        self.cancelled = False
        self.stream_closed = False

    @property
    def finished(self) -> bool:
        return self.ended and self.queued == 0 and self.running == 0

    def _drop_queued(self) -> None:
        """Cancel: forget what has not started; what runs finishes and is reported."""
        self.cancelled = True
        dropped = self.queued
        self.pending.clear()
        self.ready.clear()
        self.queued = 0
        self.ended = True
        log.info("run %s cancelled; %d queued requests dropped", self.spec.run, dropped)


class NodeRun(RunBook):
    """The thread engine: ``threads`` workers; as-is waits are timed condition waits."""

    def __init__(self, spec: RunSpec) -> None:
        super().__init__(spec)
        self.cv = threading.Condition()
        self.ready: list[tuple[float, int, str]] = []  # (due, tie, trace client) of idle clients with work
        self.tie = itertools.count()
        self.workers = [
            threading.Thread(target=self._work, name=f"drtp-worker-{i}", daemon=True)
            for i in range(max(1, spec.threads))
        ]
        for w in self.workers:
            w.start()

    # -- called by the HTTP handlers ----------------------------------------------------

    def submit(self, requests: list[ReplayRequest]) -> None:
        with self.cv:
            if self.ended or self.cancelled:
                raise RuntimeError("the run is closed")
            for req in requests:
                q = self.pending.get(req.client)
                if q is None:
                    q = self.pending[req.client] = deque()
                    heapq.heappush(self.ready, (req.at or 0.0, next(self.tie), req.client))
                q.append(req)
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
                        _, _, client = heapq.heappop(self.ready)
                        req = self.pending[client].popleft()  # the client stays in pending while busy
                        self.queued -= 1
                        self.running += 1
                        return req
                    self.cv.wait(wait)
                else:
                    self.cv.wait(1.0)

    def _work(self) -> None:
        while True:
            req = self._next()
            if req is None:
                return
            try:
                result = self.executor.execute(req)
            except Exception as e:  # a bug must not kill the worker or lose the request
                log.exception("request %d failed inside the node", req.seq)
                result = ReplayResult(req.seq, 0, False, self.clock(), 0.0, error=f"node error: {e!r}"[:300])
            self.results.put(result)
            with self.cv:
                self.running -= 1
                self.done += 1
                q = self.pending.get(req.client)
                if q:
                    heapq.heappush(self.ready, (q[0].at or 0.0, next(self.tie), req.client))
                    self.cv.notify()
                elif q is not None:
                    del self.pending[req.client]
                self._maybe_finish()

    def _maybe_finish(self) -> None:
        if self.finished and not self.stream_closed:
            self.stream_closed = True
            self.results.put(None)  # end of the result stream
