"""A stress-mode run on one event loop: the client node's fast path.

On a 2-core machine a thread pool pays for every answer with a GIL hand-off
between threads the OS may have parked behind the registry's own threads; one
event loop (uvloop when installed) reading answers with httptools keeps pace
with ``wrk`` where the pool reached ~75 % of it.  Every GET and HEAD of a
manifest or blob — almost all of a pull-heavy trace — runs on the loop, on
every kind of registry: plain http or TLS (the registry entry's CA bundle or
``insecure``), anonymous, basic auth or bearer tokens (the registry's
:class:`~drtp.registry.auth.Authenticator`; only a challenge's token fetch,
a blocking call, runs on the thread pool), and blob reads redirected to a
storage server (followed on the loop, never with the registry's credentials).
Pushes, uploads, manifest PUTs, mounts and DELETEs run on the thread Executor
through ``run_in_executor``, so they behave exactly as in the thread engine.
Per trace client the concurrency and order of the run's client model are kept
(client/client_gate.py; by default as the trace overlapped and ordered them).
A request that has run for more than ``STALL_S`` stops counting toward
``threads`` (a fresh worker takes its place, at most ``threads`` such at
once), so a registry request stuck until its timeout holds back only its own
trace client.  As-is runs keep the thread scheduler, whose timed waits are finer than the loop's millisecond timers.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from drtp.client.client_gate import Lane
from drtp.client.loop_requests import Connections, LoopRequests
from drtp.client.scheduler import STALL_S, RunBook, node_error
from drtp.replay.frames import FRAME_GAP_S, Finished
from drtp.replay.messages import ReplayRequest, ReplayResult, RunSpec

try:
    import uvloop

    new_loop = uvloop.new_event_loop
except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
    new_loop = asyncio.new_event_loop

log = logging.getLogger("drtp.client")

# Results go to the result stream at most this late, many per hand-over: each hand-over wakes the stream's
# thread, and in stress mode (the only mode on the loop) the stream sends a frame at most every FRAME_GAP_S
# anyway. Handing over every 2 ms woke it five times per frame: 19 % of the node's CPU per manifest GET.
FLUSH_S = FRAME_GAP_S


class LoopRun(RunBook):
    """Same face as scheduler.NodeRun (submit, end, cancel, results, counters); ``threads`` requests at a time."""

    def __init__(self, spec: RunSpec) -> None:
        super().__init__(spec)
        self.slots = max(1, spec.threads)
        # requests on the thread Executor: a stalled one keeps its pool thread, its stand-in needs another
        self.pool = ThreadPoolExecutor(max_workers=2 * self.slots, thread_name_prefix="drtp-slow")
        self.reads = LoopRequests(spec, self.clock, self.pool, self.executor.session.auth)  # GETs and HEADs
        self.on_loop = 0  # trace requests sent on the event loop ...
        self.on_pool = 0  # ... and on the thread Executor (pushes, uploads, mounts, deletes)
        self.busy: dict[int, float] = {}  # worker id -> loop time its request started
        self.stalled: set[int] = set()  # workers whose request overran STALL_S (a stand-in took their slot)
        self.live = 0  # worker tasks alive
        self.next_worker = 0
        self.all_done: asyncio.Future | None = None
        # lanes of the gate whose next request may start, in turn, and requests that pass the gate (unlimited)
        self.ready: deque[Lane | ReplayRequest] = deque()
        self.idle: deque[asyncio.Future] = deque()  # workers waiting for work
        self.outbox: list[Finished] = []
        self.closing = False  # set at once by end()/cancel(): no more batches (``ended`` is set on the loop)
        self.loop = new_loop()
        self.thread = threading.Thread(target=self._serve, name="drtp-loop", daemon=True)
        self.thread.start()

    # -- called by the HTTP handlers (other threads) -------------------------------------------

    def submit(self, requests: list[ReplayRequest]) -> None:
        if self.closing:
            raise RuntimeError("the run is closed")
        self.loop.call_soon_threadsafe(self._submit, requests)

    def end(self) -> None:
        self.closing = True
        self.loop.call_soon_threadsafe(self._end)

    def cancel(self) -> None:
        self.closing = True
        self.loop.call_soon_threadsafe(self._cancel)

    # -- on the loop --------------------------------------------------------------------------------

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.all_done = self.loop.create_future()
        for _ in range(self.slots):
            self._spawn()
        watch = self.loop.call_later(STALL_S / 2, self._watch)
        self.health.start_on_loop(self.loop)  # the loop's own lag: a tick on it, late when the loop is
        self.loop.run_until_complete(self.all_done)
        watch.cancel()
        self.reads.close()  # the trace clients' idle connections (a client profile's)
        self._flush()
        log.info(
            "run %s: %d requests on the event loop, %d on the thread pool (%d auth challenges answered there)",
            self.spec.run,
            self.on_loop,
            self.on_pool,
            self.reads.challenges,
        )
        self.pool.shutdown(wait=False)
        self.loop.close()

    def _spawn(self) -> None:
        self.live += 1
        self.next_worker += 1
        self.loop.create_task(self._work(self.next_worker))

    def _watch(self) -> None:
        """Give each request that overran STALL_S a stand-in worker, at most ``slots`` at once."""
        for _ in range(self._mark_stalled(self.loop.time())):
            self._spawn()
        if not self.all_done.done():
            self.loop.call_later(STALL_S / 2, self._watch)

    def _submit(self, requests: list[ReplayRequest]) -> None:
        if self.cancelled:
            return
        gate, listed = self.gate, self.ready.append
        add = gate.add
        if gate.unlimited:  # no per-client order: a request outside an upload session is listed itself
            passes = gate.passes
            for req in requests:
                if passes(req):
                    listed(req)
                else:
                    lane = add(req)
                    if lane is not None:
                        listed(lane)
        else:
            for req in requests:
                lane = add(req)
                if lane is not None:
                    listed(lane)
        self.queued += len(requests)
        self._wake(len(requests))

    def _end(self) -> None:
        self.ended = True
        self._maybe_finish()
        self._wake(len(self.idle))

    def _cancel(self) -> None:
        self._drop_queued()
        self._maybe_finish()
        self._wake(len(self.idle))

    def _wake(self, n: int) -> None:
        while n > 0 and self.idle:
            fut = self.idle.popleft()
            if not fut.done():
                fut.set_result(None)
                n -= 1

    async def _next(self) -> ReplayRequest | None:
        while True:
            if self.cancelled or (self.ended and self.queued == 0):
                # none will come: the workers still waiting (the end came while they waited for queued requests
                # of busy trace clients) end too, or the run's loop would never finish
                self._wake(len(self.idle))
                return None
            if self.ready:
                item = self.ready.popleft()
                if item.__class__ is Lane:
                    req, again = self.gate.take(item)
                    if again:  # its next request may start too (it overlapped this one in the trace)
                        self.ready.append(item)
                        self._wake(1)
                else:  # a request that passes the gate (ClientGate.passes)
                    req = item
                self._started()
                return req
            fut = self.loop.create_future()
            self.idle.append(fut)
            await fut

    async def _work(self, wid: int) -> None:
        conns: Connections = {}  # this worker's keep-alive connections, by server
        try:
            while True:
                req = await self._next()
                if req is None:
                    return
                self.busy[wid] = self.loop.time()
                try:
                    if req.op == "get":
                        self.on_loop += 1
                        result = await self.reads.get(req, conns)
                    else:
                        self.on_pool += 1
                        result = await self.loop.run_in_executor(self.pool, self.executor.execute, req)
                except Exception as e:  # a bug must not kill the worker or lose the request
                    log.exception("request %d failed inside the node", req.seq)
                    result = node_error(req, self.clock(), e)
                del self.busy[wid]
                self._complete(req, result)
                if wid in self.stalled:  # its stand-in has the slot now
                    self.stalled.discard(wid)
                    return
        finally:
            for conn in conns.values():
                conn.close()
            self.live -= 1
            if self.live == 0 and not self.all_done.done():
                self.all_done.set_result(None)

    def _complete(self, req: ReplayRequest, result: ReplayResult) -> None:
        self.outbox.append(Finished(req, result))
        if len(self.outbox) == 1:
            self.loop.call_later(FLUSH_S, self._flush)
        self.running -= 1
        self.done += 1
        gate = self.gate
        if not gate.unlimited or not gate.passes(req):
            lane = gate.done(req)
            if lane is not None:  # its end lets the client's next request start
                self.ready.append(lane)
                self._wake(1)
        self._maybe_finish()

    def _flush(self) -> None:
        if self.outbox:
            batch, self.outbox = self.outbox, []
            self.results.put(batch)
        if self.finished and not self.stream_closed:
            self.stream_closed = True
            self._end_stream()

    def _maybe_finish(self) -> None:
        if self.finished and not self.stream_closed:
            self.loop.call_soon(self._flush)
