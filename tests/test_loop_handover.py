"""The event-loop engine hands its results to the result stream in bunches, not one wake-up per few results.

In stress mode the stream sends a frame at most every FRAME_GAP_S; every hand-over in between only woke the
stream's thread (at 2 ms, five times per frame: a fifth of a node's CPU per manifest GET).
"""

from __future__ import annotations

import asyncio
import time

from drtp.client.loop_engine import LoopRun
from drtp.replay.frames import FRAME_GAP_S
from drtp.replay.messages import ReplayRequest, ReplayResult, RunSpec

REQUESTS, SLOTS = 4000, 16


def test_results_go_to_the_stream_at_most_once_per_frame_gap():
    run = LoopRun(RunSpec(run="r", start_epoch=time.time(), threads=SLOTS, timeout=5.0, engine="loop"))

    async def instant_get(req: ReplayRequest, conns) -> ReplayResult:
        await asyncio.sleep(0.001)  # a registry answering at once: the run lasts many frame gaps
        return ReplayResult(req.seq, 200, True, run.clock(), 0.001)

    run.reads.get = instant_get
    started = time.monotonic()
    run.submit(
        [
            ReplayRequest(i, f"id{i}", f"c{i % 500}", "GET", "blob", "get", "127.0.0.1:1", "t/x", "l", 1, 200)
            for i in range(REQUESTS)
        ]
    )
    run.end()
    handovers, seqs = 0, []
    while (item := run.results.get(timeout=30)) is not None:
        handovers += 1
        seqs.extend(f.request.seq for f in item)
    elapsed = time.monotonic() - started
    run.thread.join(timeout=30)
    assert sorted(seqs) == list(range(REQUESTS))  # every result handed over once
    # a hand-over waits FLUSH_S after the first result it holds (timers never fire early), plus the last one
    assert handovers <= elapsed / FRAME_GAP_S + 2, (handovers, elapsed)
