"""Which waiting request of a trace client may start now: its concurrency and order as in the trace.

A trace client (a remote address: a Docker daemon, a kubelet's containerd, a CI host) overlaps some
of its requests and orders others: containerd fetches three layers at once, but reads a manifest
before its layers.  The trace shows which: a request that started before the same client's previous
one ended (its ``trace_start`` before that one's ``trace_end``) overlapped it; one that started after
it ended may depend on it.  Both engines (client/scheduler.py, client/loop_engine.py) queue each
client's requests here, in the order the master sent them (the trace's), and start a client's next
request when the gate is open for it:

- ``TRACE_ORDER``: when every request of the client still running overlapped it in the trace;
- ``N``: when fewer than N of the client's requests run (still in trace order);
- ``UNLIMITED``: at once (no per-client order; ``threads`` bounds the node as a whole).  Such a request
  outside an upload session needs no lane at all (:meth:`ClientGate.passes`): the engine lists the
  request itself, in the order it came, and the gate never sees it.

In the two ordered modes the client model also caps a client's blob GETs (``downloads``) and blob
upload requests (``uploads``) running at once: a real client downloads and uploads only so many
layers in parallel.  Whatever the mode, the requests of one upload session (same repository and
upload key: POST, PATCH, PUT) never overlap and keep their order: a PATCH needs the session its POST
opened.  Where the trace has no upload ids the keys are the master's guesses (drtp.master.run.plan
``Planner.upload_of``); a request with no key belongs to no session here.

The queue of requests that may start is the engine's (a heap of due times on the thread engine, a
deque on the event loop): it holds *lanes* — a client's queue — whose head may start, each at most once.
A lane whose head may not start yet is listed again by the request whose end opens it (:meth:`done`),
so nothing is polled and no step looks at a client's waiting requests beyond its head.  The lowest
``trace_end`` of a client's running requests is the ``min`` of a short list (at most ``threads`` long,
most often one to three: a C loop that beats a heap's Python-level bookkeeping at these sizes).
"""

from __future__ import annotations

from collections import deque

from drtp.replay.messages import TRACE_ORDER, UNLIMITED, ClientModel, ReplayRequest

UPLOAD_OPS = frozenset(("upload-open", "upload-chunk", "upload-close"))
_NO_END = float("-inf")  # a running request without a trace span: nothing overlaps it


def session_of(req: ReplayRequest) -> tuple[str, str | None] | None:
    """The upload session a request belongs to within its client (repository, upload key); None: not an upload."""
    return (req.repository, req.upload) if req.op in UPLOAD_OPS else None


class Lane:
    """The waiting requests of one trace client (or, with ``UNLIMITED``, of one upload session), in order."""

    __slots__ = ("downloads", "ends", "key", "listed", "queue", "running", "sessions", "uploads")

    def __init__(self, key) -> None:
        self.key = key
        self.queue: deque[ReplayRequest] = deque()
        self.running = 0
        self.listed = False  # in the engine's queue of lanes whose head may start
        self.ends: list[float] = []  # trace_end of the running requests (TRACE_ORDER)
        self.sessions: set = set()  # upload sessions with a request running
        self.downloads = 0  # blob GETs running
        self.uploads = 0  # blob upload requests running


class ClientGate:
    """The per-client lanes of one run on one node; the engine's lock or loop serializes every call."""

    def __init__(self, model: ClientModel) -> None:
        self.concurrency = model.concurrency
        self.ordered = model.concurrency != UNLIMITED
        self.trace_order = model.concurrency == TRACE_ORDER
        self.limit = model.concurrency if model.concurrency > 0 else 0
        self.max_downloads = model.downloads if self.ordered else 0
        self.max_uploads = model.uploads if self.ordered else 0
        self.unlimited = not self.ordered
        self.lanes: dict[object, Lane] = {}
        # UNLIMITED: one lane for every request outside an upload session; it never waits (the engines let such
        # requests pass the gate, :meth:`passes`; the lane serves a caller that adds them all the same)
        self.free = Lane(None)

    def __len__(self) -> int:
        """Lanes with requests waiting or running (for tests and logs)."""
        return len(self.lanes) + (1 if self.free.queue or self.free.running else 0)

    def passes(self, req: ReplayRequest) -> bool:
        """Whether ``req`` may start whenever a slot is free, whatever else runs: with ``UNLIMITED``, every
        request outside an upload session.  The engines list such a request itself, not a lane, and call
        neither :meth:`add`, :meth:`take` nor :meth:`done` for it: nothing of it is kept here."""
        return self.unlimited and req.op not in UPLOAD_OPS

    def _lane_key(self, req: ReplayRequest):
        if self.ordered:
            return req.client
        if req.op in UPLOAD_OPS:
            return (req.client, req.repository, req.upload)
        return None

    def _lane(self, req: ReplayRequest, make: bool) -> Lane | None:
        key = self._lane_key(req)
        if key is None:
            return self.free
        lane = self.lanes.get(key)
        if lane is None and make:
            lane = self.lanes[key] = Lane(key)
        return lane

    def may_start(self, lane: Lane, req: ReplayRequest) -> bool:
        """Whether ``req``, the head of ``lane``, may start while the lane's running requests run."""
        if not lane.running or lane is self.free:
            return True
        if not self.ordered:  # an upload session's lane: one request at a time
            return False
        if self.limit and lane.running >= self.limit:
            return False
        if self.trace_order:
            start = req.trace_start
            if start is None or min(lane.ends) <= start:
                return False  # a running request ended before this one started in the trace
        op = req.op
        if op in UPLOAD_OPS:
            if (req.repository, req.upload) in lane.sessions:
                return False  # a request of its upload session runs: a PATCH waits for its POST
            if self.max_uploads and lane.uploads >= self.max_uploads:
                return False
        elif self.max_downloads and op == "get" and req.kind == "blob" and req.method == "GET":
            return lane.downloads < self.max_downloads
        return True

    def add(self, req: ReplayRequest) -> Lane | None:
        """Queue ``req`` behind its client's earlier requests; the lane when the engine must list it now."""
        if self.ordered:  # the common case inline: a lane per trace client
            lane = self.lanes.get(req.client)
            if lane is None:
                lane = self.lanes[req.client] = Lane(req.client)
        else:
            lane = self._lane(req, True)
        queue = lane.queue
        queue.append(req)
        if len(queue) == 1 and not lane.listed and (not lane.running or self.may_start(lane, req)):
            lane.listed = True
            return lane
        return None

    def take(self, lane: Lane) -> tuple[ReplayRequest, bool]:
        """Start the head of a listed lane: it and whether the lane's next head may start too (list it again)."""
        req = lane.queue.popleft()
        lane.running += 1
        if self.ordered:
            if self.trace_order:
                end = req.trace_end
                lane.ends.append(_NO_END if end is None else end)
            op = req.op
            if op in UPLOAD_OPS:
                lane.sessions.add((req.repository, req.upload))
                lane.uploads += 1
            elif op == "get" and req.kind == "blob" and req.method == "GET":
                lane.downloads += 1
        again = bool(lane.queue) and self.may_start(lane, lane.queue[0])  # running: this one at least
        lane.listed = again
        return req, again

    def done(self, req: ReplayRequest) -> Lane | None:
        """A started request finished; its lane when the engine must list it now (its head may start)."""
        lane = self.lanes.get(req.client) if self.ordered else self._lane(req, False)
        if lane is None:  # the run was cancelled and its lanes dropped
            return None
        lane.running -= 1
        if self.ordered:
            if self.trace_order:
                end = req.trace_end
                lane.ends.remove(_NO_END if end is None else end)
            op = req.op
            if op in UPLOAD_OPS:
                lane.sessions.discard((req.repository, req.upload))
                lane.uploads -= 1
            elif op == "get" and req.kind == "blob" and req.method == "GET":
                lane.downloads -= 1
        if lane.queue:
            if not lane.listed and (not lane.running or self.may_start(lane, lane.queue[0])):
                lane.listed = True
                return lane
        elif lane.running == 0 and lane is not self.free:
            del self.lanes[lane.key]
        return None

    def clear(self) -> None:
        """Cancel: forget every waiting request (the running ones still report through :meth:`done`)."""
        for key, lane in list(self.lanes.items()):
            lane.queue.clear()
            lane.listed = False
            if not lane.running:
                del self.lanes[key]
        self.free.queue.clear()
        self.free.listed = False
