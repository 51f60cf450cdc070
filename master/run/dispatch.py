"""The master's dispatch loop: trace records planned into requests, routed to nodes and sent in batches.

:class:`Dispatch` is the half of :class:`~drtp.master.run.replay.Replay` that sends: it reads the trace's
records in order, holds the ones that wait for a request in flight (master.run.held ``HeldRecords``), routes
each to a node (master.run.routing; an upload session stays on the node that opened it), buffers it in that
node's next batch and sends batches so that each node has work and batches stay big.  At most
``client_info.inflight`` requests per node are out at a time: at the cap, and before it waits for anything,
the loop drains the nodes' results (``Replay._drain``), which is where they reach the run's outputs.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from drtp.master.run.arrivals import intended_starts
from drtp.master.run.held import HeldRecords
from drtp.master.run.nodes import NodeLink
from drtp.master.run.plan import Planner
from drtp.master.run.routing import Router
from drtp.replay.messages import ReplayRequest
from drtp.trace.records import TraceRecord, Uri

if TYPE_CHECKING:
    from drtp.config import ClientInfo

# upload sessions kept pinned to the node that opened them; one the trace abandoned (never closed) is
# forgotten beyond this many, oldest first (were it continued after all, its node would open a new one)
MAX_PINNED_UPLOADS = 100_000
PARTIAL_BATCH_S = 0.002  # stress mode: a partial batch for a node short of work waits at most this long


class Dispatch:
    """The sending half of a run; the run (its subclass) sets these up and drains the results."""

    ci: ClientInfo
    rate: float | None  # rate mode: requests per second (None: as is or stress)
    timed: bool  # requests have intended starts the nodes keep
    offset: float  # resume: new starts count on from the interrupted run's last end
    skip: set[str]  # resume: the trace ids done before
    events: queue.Queue
    links: dict[str, NodeLink]
    router: Router
    planner: Planner
    held: HeldRecords
    releases_seen: int
    cap: int
    batch: int
    refill_at: int
    busy_at: int
    inflight: dict[int, tuple[str, ReplayRequest]]
    per_node: dict[str, int]
    buffers: dict[str, list[ReplayRequest]]
    buffered_at: dict[str, float]
    upload_node: dict[tuple[str, str, str | None], str]
    dead: dict[str, dict]
    bar: object | None  # the progress bar (None: quiet)
    quiet: bool

    def _batches(self) -> Iterable[list[TraceRecord]]:
        raise NotImplementedError

    def _drain(self, timeout: float) -> int:
        raise NotImplementedError

    def _lost(self, node: str, req: ReplayRequest, reason: str) -> None:
        raise NotImplementedError

    def _dispatch(self, timed: bool) -> None:
        cap = self.cap
        speedup = self.ci.speedup
        arrivals = intended_starts(self.rate, self.ci.arrivals, self.ci.seed) if self.rate is not None else None
        first = None
        seq = 0
        for records in self._batches():
            for rec in records:
                if not self.router.alive:
                    return
                if self.events.queue:  # a lock-free peek: most records find nothing to drain
                    self._drain(timeout=0)
                    if self.held and not self._release_held():
                        return
                if self.skip and rec.id in self.skip:
                    self.planner.replayed(rec)
                    seq += 1
                    if self.bar is not None:
                        self.bar.update(1)
                    continue
                if arrivals is not None:
                    at = self.offset + next(arrivals)
                elif timed:
                    # the trace's start of a request is its arrival: a registry log stamps completions (a
                    # request that arrived before the first one in the file is due at the start)
                    t = rec.time - rec.duration if self.planner.completion_stamped else rec.time
                    if first is None:
                        first = t
                    at = self.offset + max(0.0, t - first) / speedup
                else:
                    at = None  # stress: as soon as possible (no look at the record's time, which costs)
                uri = rec.parts  # split once: hold, route and plan all look at it
                if self.planner.routes and self.planner.skips(rec, uri):  # upstream_writes: skip (counted)
                    seq += 1
                    if self.bar is not None:
                        self.bar.update(1)
                    continue
                if self.held.hold(rec, seq, at, uri):  # it waits for a request in flight; other clients go on
                    seq += 1
                    if len(self.held) >= cap and not self._wait_held(cap // 2):
                        return
                    continue
                if not self._send(rec, uri, seq, at):
                    return
                seq += 1
        self._wait_held(0)

    def _send(self, rec: TraceRecord, uri: Uri, seq: int, at: float | None) -> bool:
        """Plan ``rec`` (``uri``: its URI parts) and put it in its node's next batch; False when every node
        is dead."""
        upload = self.planner.upload_of(rec, uri, seq)
        node = self._route(rec, uri, upload)
        if node is None:  # every node is dead: what was measured is kept, the summary still written
            return False
        if self.per_node[node] >= self.cap and node not in self.dead:
            # at the cap: refill a whole batch at once, not one request per result (a batch of
            # one per result cost each node a connection and a thread per request)
            while self.per_node[node] > self.refill_at and node not in self.dead:
                self._drain(timeout=self._flush_all())
        if node in self.dead:
            node = self._route(rec, uri, upload)
            if node is None:
                return False
        req = self.planner.plan(rec, seq, at, uri, upload)
        self.inflight[seq] = (node, req)
        self.per_node[node] += 1
        buf = self.buffers[node]
        if not buf:
            self.buffered_at[node] = time.monotonic()
        buf.append(req)
        if len(buf) >= self.batch:
            self._flush(node)
        return True

    def _release_held(self) -> bool:
        """Send the held records whose wait is over; False when every node is dead.

        Held records wait only for requests in flight that the planner releases when they finish, and
        for each other: with no release since the last look, none can go (the look costs per held record).
        """
        if self.planner.releases == self.releases_seen and self.inflight:
            return True
        self.releases_seen = self.planner.releases
        for held in self.held.release(everyone=not self.inflight):
            self.held.planned(held)
            if not self._send(held.rec, held.uri, held.seq, held.at):
                return False
        return True

    def _wait_held(self, until: int) -> bool:
        """Wait for results until at most ``until`` records are held; False when every node is dead."""
        while len(self.held) > until and self.router.alive:
            self._drain(timeout=self._flush_all())
            if not self._release_held():
                return False
        return self.router.alive

    def _route(self, rec: TraceRecord, uri: Uri, upload: str | None) -> str | None:
        if uri.kind != "blob" or rec.method not in ("POST", "PATCH", "PUT"):
            return self.router.pick(rec.client)  # most requests: no upload session to follow
        op_key = (rec.client, uri.repository, upload)
        # an upload continues on the node that opened it (the node holds the session)
        pinned = self.upload_node.get(op_key)
        if pinned in self.dead:
            pinned = None
        node = pinned or self.router.pick(rec.client)
        if node is not None:
            # only a session that opened (202) or goes on is pinned: a mount (201) or a refused open leaves none
            if rec.method == "PATCH" or (rec.method == "POST" and rec.status == 202):
                self.upload_node[op_key] = node
                if len(self.upload_node) > MAX_PINNED_UPLOADS:  # sessions the trace abandoned: the oldest go
                    del self.upload_node[next(iter(self.upload_node))]
            elif rec.method == "PUT":
                self.upload_node.pop(op_key, None)
        return node

    def _flush(self, node: str) -> None:
        buf = self.buffers[node]
        if buf and node not in self.dead:
            self.links[node].send(buf)
            self.buffers[node] = []

    def _flush_all(self, final: bool = False) -> float:
        """Before the master waits: send the partial batches of the nodes that could run short of work;
        returns how long it may wait before it must look again.

        A node with four times its slots of requests out (or a whole batch, if that is less) has work for a
        while: its partial batch waits to be filled, so batches stay big (each costs a POST and a
        connection at both ends; at slow rates small batches were a large part of the master's cost).
        A node with less gets its partial batch once it is a quarter full or has waited ``PARTIAL_BATCH_S``.  As is
        and in rate mode, every partial batch goes at once: its requests have their times to keep.
        """
        wait = 1.0
        send_all = final or self.timed
        now = time.monotonic()
        for node, buf in self.buffers.items():
            if not buf or node in self.dead:
                continue
            if not send_all and self.per_node[node] - len(buf) >= self.busy_at:
                continue  # busy: its results wake the master before it runs out of work
            waited = now - self.buffered_at[node]
            if send_all or 4 * len(buf) >= self.batch or waited >= PARTIAL_BATCH_S:
                self._flush(node)
            else:
                wait = min(wait, PARTIAL_BATCH_S - waited)
        return wait

    def _finish(self) -> None:
        """The trace is sent: the last batches go, each stream is ended, and the results are awaited."""
        self._flush_all(final=True)
        for name, link in self.links.items():
            if name not in self.dead:
                link.end()
        while self.inflight:
            if not self._drain(timeout=1.0) and all(link.dead or link.finished for link in self.links.values()):
                # every stream is closed or dead: what remains will never come
                for name in {n for n, _ in self.inflight.values()}:
                    self._node_dead(name, "result stream ended before all results")
                break
        # a node ends its stream after cancelling the upload sessions the trace left open: the run ends after that
        until = time.monotonic() + self.ci.timeout + 5.0
        while not all(link.dead or link.finished for link in self.links.values()) and time.monotonic() < until:
            self._drain(timeout=0.1)
        self._drain(timeout=0)  # what the streams sent before they ended (their last frames) may still wait

    def _node_dead(self, node: str, reason: str) -> None:
        """Give up on ``node``: no more requests go there, and the ones it holds are written lost."""
        if node in self.dead:
            return
        self.links[node].dead = True
        self.router.remove(node)
        lost = [seq for seq, (owner, _) in self.inflight.items() if owner == node]
        for seq in sorted(lost):
            _, req = self.inflight.pop(seq)
            self.planner.done(req, None)
            self._lost(node, req, f"client node {node} died")
            if self.bar is not None:
                self.bar.update(1)
        self.per_node[node] = 0
        self.buffers[node] = []
        self.dead[node] = {"reason": reason, "lost": len(lost)}
        msg = f"client node {node} died ({reason}); {len(lost)} requests lost"
        if not self.quiet:
            print(f"\ndrtp: {msg}", flush=True)

    def _cancel(self) -> None:
        """Tell every node that started the run to drop what it holds (the run stops here)."""
        for link in self.links.values():
            if link.run is not None:
                link.cancel()
