"""When the master sends a node its partial batch: batches stay big for a node that has work queued (each batch
is a POST and a connection at both ends), and a node that may run short of work gets what there is."""

from __future__ import annotations

import time

from drtp.master.run.dispatch import PARTIAL_BATCH_S
from drtp.master.run.replay import Replay
from drtp.master.run.settings import RunSettings
from tests.replay_support import make_trace, write_config

THREADS, BATCH = 4, 40  # a node with 4 × 4 requests out has work for a while


def replay(tmp_path, wait: bool = False) -> tuple[Replay, list[tuple[str, int]]]:
    """A Replay over two node addresses nobody listens on; what it sends is recorded, not sent."""
    trace = make_trace(tmp_path / "trace.json", requests=10)
    nodes = ["127.0.0.1:1", "127.0.0.1:2"]
    cfg = write_config(tmp_path, trace, ["127.0.0.1:5000"], nodes, threads=THREADS, batch=BATCH, wait=wait)
    r = Replay(cfg, RunSettings(out_dir=tmp_path / "run", quiet=True))
    sent: list[tuple[str, int]] = []
    for name, link in r.links.items():
        link.send = lambda requests, name=name: sent.append((name, len(requests)))
    return r, sent


def buffer(r: Replay, node: str, queued: int, out: int, age_s: float) -> None:
    """``queued`` requests in ``node``'s partial batch, begun ``age_s`` ago, beside ``out`` already sent."""
    r.buffers[node] = [f"request {i}" for i in range(queued)]
    r.buffered_at[node] = time.monotonic() - age_s
    r.per_node[node] = out + queued


def test_a_node_with_four_times_its_slots_out_waits_for_a_fuller_batch(tmp_path):
    r, sent = replay(tmp_path)
    busy, short = r.links
    buffer(r, busy, 5, 4 * THREADS, age_s=1.0)
    buffer(r, short, 5, 4 * THREADS - 1, age_s=1.0)
    wait = r._flush_all()
    assert sent == [(short, 5)]
    assert len(r.buffers[busy]) == 5 and r.buffers[short] == []
    assert wait == 1.0  # the busy node's results wake the master; nothing is due before


def test_a_node_short_of_work_gets_a_partial_batch_when_it_is_a_quarter_full_or_old_enough(tmp_path):
    r, sent = replay(tmp_path)
    a, b = r.links
    buffer(r, a, BATCH // 4 - 1, 0, age_s=0.0)
    buffer(r, b, BATCH // 4, 0, age_s=0.0)
    wait = r._flush_all()
    assert sent == [(b, BATCH // 4)]
    assert 0 < wait <= PARTIAL_BATCH_S  # a's partial batch is due within PARTIAL_BATCH_S
    r.buffered_at[a] -= PARTIAL_BATCH_S
    r._flush_all()
    assert sent == [(b, BATCH // 4), (a, BATCH // 4 - 1)]


def test_as_is_every_partial_batch_goes_at_once(tmp_path):
    r, sent = replay(tmp_path, wait=True)
    a, b = r.links
    buffer(r, a, 1, 10 * THREADS, age_s=0.0)
    buffer(r, b, 1, 0, age_s=0.0)
    r._flush_all()
    assert sorted(sent) == sorted([(a, 1), (b, 1)])
