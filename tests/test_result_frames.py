"""Result frames: what a node streams and how the master merges it, checked against the rows themselves."""

from __future__ import annotations

import csv
import io
import queue
import random

import msgspec
import pytest

from drtp.replay.frames import (
    FRAME_FULL,
    FRAME_GAP_S,
    KEEPALIVE,
    Finished,
    FrameBuilder,
    FrameReader,
    IntervalStats,
    gather,
    interval_of,
)
from drtp.replay.messages import AuxResult, ReplayRequest, ReplayResult, RunSpec
from drtp.replay.result_row import COLUMNS, cells, parse_cells, rows_of
from drtp.replay.summary import ResultsModel

OUTCOMES = ["ok"] * 8 + ["http", "timeout", "reset"]


def finished(rng: random.Random, seq: int, timed: bool) -> Finished:
    method, kind = rng.choice([("GET", "blob"), ("GET", "manifest"), ("HEAD", "blob"), ("PUT", "manifest")])
    op = "manifest-put" if method == "PUT" else "get"
    req = ReplayRequest(seq, f"id{seq}", f"10.0.0.{rng.randrange(20)}", method, kind, op, "127.0.0.1:5000",
                        f"repo{rng.randrange(5)}", f"ref{seq}", rng.randrange(5000), 200,
                        at=seq * 0.01 if timed else None)  # fmt: skip
    outcome = rng.choice(OUTCOMES)
    start = seq * 0.01 + rng.random() * 0.005
    aux = [AuxResult("POST", "upload", 202, start, 0.001, 0)] if rng.random() < 0.1 else []
    if rng.random() < 0.05:  # a throttled helper, told when to come back
        aux.append(AuxResult("POST", "upload", 429, start, 0.001, 0, "HTTP 429", "http", 1, 2.0))
    status = 200 if outcome == "ok" else (rng.choice([429, 503]) if outcome == "http" else 0)
    retry_after = rng.choice([None, 1.0, 30.5]) if status in (429, 503) else None
    res = ReplayResult(seq, status, outcome == "ok", start,
                       rng.lognormvariate(-5, 1.5), bytes=rng.randrange(10_000), outcome=outcome,
                       error="" if outcome == "ok" else f"HTTP {status}", aux=aux,
                       retry_after=retry_after)  # fmt: skip
    return Finished(req, res)


@pytest.mark.parametrize("timed", [False, True])
def test_nodes_models_merged_equal_one_model_over_all_rows(timed):
    rng = random.Random(7)
    nodes = {f"node{i}": FrameBuilder(RunSpec("r", 0.0, node=f"node{i}", timed=timed, on_time_s=0.002,
                                              stats_interval_s=0.5)) for i in range(3)}  # fmt: skip
    stream = {name: bytearray() for name in nodes}
    for seq in range(3000):
        name = rng.choice(list(nodes))
        stream[name] += nodes[name].frame([finished(rng, seq, timed)])
    merged = ResultsModel(timed, 0.002)
    text = io.StringIO()
    for name, b in nodes.items():
        data = bytes(stream[name] + b.last())
        reader = FrameReader()
        frames = []
        for i in range(0, len(data), 977):  # the stream arrives in pieces that cut frames anywhere
            frames += reader.feed(data[i : i + 977])
        assert reader.pending == 0
        assert frames[-1].model is not None and all(f.model is None for f in frames[:-1])
        merged.merge(frames[-1].model)
        text.write("".join(f.rows.decode() for f in frames))
    # one model fed every row of the concatenated CSV text, as `drtp analyze results` reads the file
    alone = ResultsModel(timed, 0.002)
    rows = [parse_cells(v) for v in csv.reader(io.StringIO(text.getvalue()))]
    for row in rows:
        alone.add(row)
    assert len([r for r in rows if not r.auxiliary]) == 3000

    def no_means(d):
        return {k: no_means(v) for k, v in d.items() if k != "mean"} if isinstance(d, dict) else d

    assert no_means(merged.summary()) == no_means(alone.summary())
    assert merged.summary()["latency_s"]["mean"] == pytest.approx(alone.summary()["latency_s"]["mean"], rel=1e-12)


def test_a_frame_holds_the_rows_as_the_file_has_them_and_what_the_master_needs():
    rng = random.Random(3)
    b = FrameBuilder(RunSpec("r", 0.0, node="n1", stats_interval_s=1.0))
    batch = [finished(rng, seq, False) for seq in range(50)]
    (frame,) = FrameReader().feed(b.frame(batch))
    expected = io.StringIO()
    csv.writer(expected).writerows(cells(row) for req, res in batch for row in rows_of("n1", req, res))
    assert frame.rows.decode() == expected.getvalue()
    assert frame.done == list(range(50))
    assert frame.failed == sum(res.outcome != "ok" for _, res in batch)
    assert [r.seq for r in frame.feedback] == [req.seq for req, _ in batch if req.op != "get"]
    by_interval: dict[int, IntervalStats] = {}
    for req, res in batch:
        row = next(rows_of("n1", req, res))
        by_interval.setdefault(interval_of(row, 1.0), IntervalStats()).add_row(row)
    assert {p.index: p.counts for p in frame.intervals} == {
        i: {"requests": s.requests, "failures": s.failures, "throttled": s.throttled, "bytes": s.bytes}
        for i, s in by_interval.items()
    }
    assert sum(p.counts["requests"] for p in frame.intervals) == 50
    throttled = sum(res.status == 429 for _, res in batch)
    assert throttled and sum(p.counts["throttled"] for p in frame.intervals) == throttled
    assert tuple(next(csv.reader(io.StringIO(frame.rows.decode())))) != COLUMNS  # rows only, no header


def test_keepalives_are_dropped_and_a_cut_frame_stays_pending():
    b = FrameBuilder(RunSpec("r", 0.0, node="n1"))
    one = b.frame([finished(random.Random(1), 0, False)])
    reader = FrameReader()
    assert reader.feed(KEEPALIVE + one[:-3]) == []
    assert reader.pending == len(one) - 3
    assert len(reader.feed(one[-3:] + KEEPALIVE)) == 1 and reader.pending == 0
    with pytest.raises(msgspec.DecodeError):
        FrameReader().feed(b"\xff\xff\xff\xff" + b"x")


def _one(seq: int, method: str, kind: str) -> Finished:
    op = "manifest-put" if (method, kind) == ("PUT", "manifest") else "get"
    req = ReplayRequest(seq, f"id{seq}", "10.0.0.1", method, kind, op, "127.0.0.1:5000", "r/x", f"ref{seq}", 10, 200)
    return Finished(req, ReplayResult(seq, 200, True, 0.0, 0.001))


class _Clock:
    """A clock that moves only when the queue is waited on (the wait's timeout passes in full)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.waits: list[float] = []  # the timeout of every wait on the queue

    def __call__(self) -> float:
        return self.now


class _Results(queue.Queue):
    """Results handed over by an engine; a wait that finds nothing lets the clock run to its timeout."""

    def __init__(self, clock: _Clock, later: list) -> None:
        super().__init__()
        self.clock, self.later = clock, later

    def get(self, block=True, timeout=None):
        if not self.empty():
            return super().get(False)
        if not block:
            raise queue.Empty
        self.clock.waits.append(timeout)
        if self.later:
            self.clock.now += timeout / 2
            return self.later.pop(0)  # arrives half-way through the wait
        self.clock.now += timeout
        raise queue.Empty


def test_a_frame_of_blob_reads_waits_for_more_until_the_gap_and_one_the_planner_needs_goes_at_once():
    clock = _Clock()
    # blob reads alone, the previous frame just sent: the frame waits, and what comes meanwhile joins it
    results = _Results(clock, [_one(2, "GET", "blob")])
    results.put(_one(1, "HEAD", "blob"))
    got, ended = gather(_one(0, "GET", "blob"), results, last_sent=clock.now, timed=True, clock=clock)
    assert [f.request.seq for f in got] == [0, 1, 2] and not ended
    assert clock.waits[0] == pytest.approx(FRAME_GAP_S) and clock.now == pytest.approx(100.0 + FRAME_GAP_S)
    # a manifest read (held records may wait for it) goes with what is ready, without waiting
    clock.waits.clear()
    results = _Results(clock, [_one(9, "GET", "blob")])
    results.put(_one(4, "GET", "manifest"))
    got, ended = gather(_one(3, "GET", "blob"), results, last_sent=clock.now, timed=True, clock=clock)
    assert [f.request.seq for f in got] == [3, 4] and clock.waits == []
    # a push too, and so does a frame whose gap is over; the engine's end (None) ends the gather
    got, _ = gather(_one(5, "PUT", "manifest"), _Results(clock, []), last_sent=clock.now, timed=True, clock=clock)
    assert [f.request.seq for f in got] == [5] and clock.waits == []
    results = _Results(clock, [])
    results.put([_one(7, "GET", "blob")])
    results.put(None)
    got, ended = gather(_one(6, "GET", "blob"), results, last_sent=clock.now - 1.0, timed=True, clock=clock)
    assert [f.request.seq for f in got] == [6, 7] and ended and clock.waits == []


def test_in_stress_mode_a_frame_with_a_push_waits_too():
    """Nothing is late in stress mode: the planner's results wait for more like any other."""
    clock = _Clock()
    results = _Results(clock, [_one(1, "GET", "blob")])
    got, ended = gather(_one(0, "PUT", "manifest"), results, last_sent=clock.now, timed=False, clock=clock)
    assert [f.request.seq for f in got] == [0, 1] and clock.waits[0] == pytest.approx(FRAME_GAP_S)


def test_a_full_frame_does_not_wait():
    clock = _Clock()
    results = _Results(clock, [_one(10**6, "GET", "blob")])
    for seq in range(1, FRAME_FULL):
        results.put(_one(seq, "GET", "blob"))
    got, ended = gather(_one(0, "GET", "blob"), results, last_sent=clock.now, timed=True, clock=clock)
    assert len(got) == FRAME_FULL and clock.waits == [] and not ended
