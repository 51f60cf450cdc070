"""Trace records held back while a request they depend on is in flight, so the rest of the trace goes on.

The planner (drtp.master.run.plan) knows what is in flight and which digests requests address; this
module keeps the records that must wait for one of those requests, per trace client, and gives them
back in trace order once the planner frees what they wait for.  It is apart from the planner because
it is a different job with its own state and cost: the planner is asked once per record, the held
records only when a record has to wait, and their bookkeeping (filing each trace client under the
objects it waits for, so that a release looks only at the clients something was freed for) is about
the master's cost per request, not about what a request addresses.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter
from typing import TYPE_CHECKING

import msgspec

from drtp.trace.records import TraceRecord, Uri

if TYPE_CHECKING:
    from drtp.master.run.plan import Planner


class Held(msgspec.Struct, gc=False):
    """A trace record the master holds back, with what it was given when read and the objects it pushes and
    reads (worked out once: a held record is looked at again after every release)."""

    rec: TraceRecord
    uri: Uri  # the record's URI parts
    seq: int
    at: float | None
    push_key: tuple | None = None
    read_key: tuple | None = None


def _push_key(rec: TraceRecord, uri: Uri) -> tuple | None:
    """The object a record pushes (a layer, or a manifest tag; a mount pushes its blob), if it pushes one."""
    if rec.method != "PUT":
        mount = rec.mount if rec.method == "POST" else None
        return ("blob", mount.blob) if mount is not None else None
    if uri.kind == "manifest":
        return ("manifest", uri.repository, uri.reference)
    return None if uri.reference.startswith("uploads") else ("blob", uri.reference)


def _read_key(rec: TraceRecord, uri: Uri) -> tuple | None:
    """The object a record reads (a layer, or a manifest tag; a mount reads its blob), if it reads one."""
    method, kind = rec.method, uri.kind
    if kind == "blob" and method == "POST":
        mount = rec.mount
        return ("blob", mount.blob) if mount is not None else None
    if method == "PUT" or (kind == "blob" and method == "PATCH"):
        return None
    if kind == "manifest":
        return ("manifest", uri.repository, uri.reference)
    return None if uri.reference.startswith("uploads") else ("blob", uri.reference)


_seq_of = attrgetter("seq")  # a held record's place in the trace (the sort key of a release)


def _waits_for(held: Held, pushes: set[tuple]) -> bool:
    """Does a held record depend on one of ``pushes`` (a manifest PUT on any blob push into its repository)?"""
    key = held.read_key
    if key is not None and key in pushes:
        return True
    push = held.push_key  # a manifest PUT pushes ("manifest", repository, tag)
    return push is not None and push[0] == "manifest" and ("image", push[1]) in pushes


class HeldRecords:
    """Records that wait for a request in flight, per trace client, so the rest of the trace goes on.

    A record that must wait (:meth:`Planner.blocked_by`) is held, and so is every later record
    of its trace client (their order is the trace's); other clients' records are dispatched
    meanwhile.  A held record also holds back the later records of other trace clients that would
    overtake it on the same object: a read of what it pushes, a push of the tag it reads.
    A held record counts as such until it is planned (``planned``), also after ``release``.

    A client's first held record waits for objects: pushes or reads in flight (the planner frees
    them as results come) or earlier held records on them (freed when those are planned).  Each
    client is filed under the objects it waits for, and a release pass looks only at the clients
    whose objects were freed since the last pass: looking at every waiting client after every
    result made the master's cost per request grow with the number of waiting clients, most at
    a slow registry's rates, where each result comes on its own.
    """

    def __init__(self, planner: Planner) -> None:
        self.planner = planner
        self.by_client: dict[str, list[Held]] = {}
        self.pushes: dict[tuple, list[int]] = {}  # object -> seqs of held records pushing it, ascending
        self.reads: dict[tuple, list[int]] = {}  # manifest tag -> seqs of held records reading it, ascending
        self.count = 0
        self.waiting: dict[tuple, set[str]] = {}  # object -> clients whose first held record waits for it
        self.woken: set[str] = set()  # clients to look at in the next pass: an object they wait for was freed

    def _wait(self, client: str, keys: Iterable[tuple | None]) -> None:
        """File ``client`` under the objects its first held record waits for."""
        for key in keys:
            if key is not None:
                self.waiting.setdefault(key, set()).add(client)

    def _wake(self, key: tuple) -> None:
        clients = self.waiting.pop(key, None)
        if clients:
            self.woken |= clients

    def __len__(self) -> int:
        return self.count

    def _overtakes(self, read_key: tuple | None, push_key: tuple | None, seq: int) -> bool:
        """Would a record (its read and push keys) overtake an earlier held record on the same object?"""
        if read_key is not None and (seqs := self.pushes.get(read_key)) and seqs[0] < seq:
            return True
        key = push_key
        return key is not None and key[0] == "manifest" and bool(seqs := self.reads.get(key)) and seqs[0] < seq

    def hold(self, rec: TraceRecord, seq: int, at: float | None, uri: Uri | None = None) -> bool:
        """Hold ``rec`` when its client already waits or it depends on a request in flight or held
        (``uri``: its URI parts, if split already)."""
        uri = uri or rec.parts
        queue = self.by_client.get(rec.client)
        push_key = read_key = None
        if queue is None:
            if self.count and (self.pushes or self.reads):  # only a held push or manifest read can be overtaken
                push_key, read_key = _push_key(rec, uri), _read_key(rec, uri)
                if self._overtakes(read_key, push_key, seq):
                    queue = self.by_client[rec.client] = []
                    self._wait(rec.client, (read_key, push_key))
            if queue is None:
                blockers = self.planner.blocked_by(rec, uri)
                if not blockers:
                    return False
                queue = self.by_client[rec.client] = []
                self._wait(rec.client, blockers)
        if push_key is None and read_key is None:
            push_key, read_key = _push_key(rec, uri), _read_key(rec, uri)
        queue.append(Held(rec, uri, seq, at, push_key, read_key))
        if push_key is not None:
            self.pushes.setdefault(push_key, []).append(seq)
        if read_key is not None and read_key[0] == "manifest":
            self.reads.setdefault(read_key, []).append(seq)
        self.count += 1
        return True

    def release(self, everyone: bool = False) -> list[Held]:
        """The held records that may go now, in each client's trace order; call ``planned`` for each.

        Only the clients an object was freed for are looked at, or ``everyone`` (when nothing is in
        flight, no result will free anything: a last look at all of them)."""
        for key in self.planner.take_freed():
            self._wake(key)
        if everyone:
            clients = list(self.by_client)
        else:
            clients = [c for c in self.woken if c in self.by_client]
        self.woken = set()
        out: list[Held] = []
        for client in clients:
            queue = self.by_client[client]
            n = 0
            pushes: set[tuple] = set()  # what this pass releases of the client's pushes (not planned yet)
            for held in queue:
                if self._overtakes(held.read_key, held.push_key, held.seq):
                    self._wait(client, (held.read_key, held.push_key))
                    break
                if blockers := self.planner.blocked_by(held.rec, held.uri):
                    self._wait(client, blockers)
                    break
                if pushes and _waits_for(held, pushes):  # it depends on a push released just before it
                    self._wait(client, pushes)
                    break
                if (key := held.push_key) is not None:
                    pushes.add(key)
                    if key[0] == "blob":
                        pushes.add(("image", held.uri.repository))
                out.append(held)
                n += 1
            if n == len(queue):
                del self.by_client[client]
            elif n:
                del queue[:n]
        self.count -= len(out)
        out.sort(key=_seq_of)
        return out

    def planned(self, held: Held) -> None:
        """A released record is about to be planned: the planner counts it from now on.  (Most held records
        are reads of layers: ``reads`` files only manifest reads, so those have nothing to take back.)"""
        if held.push_key is not None:
            self._unfile(self.pushes, held.push_key, held.seq)
        key = held.read_key
        if key is not None and key[0] == "manifest":
            self._unfile(self.reads, key, held.seq)

    def _unfile(self, table: dict[tuple, list[int]], key: tuple, seq: int) -> None:
        seqs = table.get(key)
        if seqs and seq in seqs:
            seqs.remove(seq)
            if not seqs:
                del table[key]
            self._wake(key)  # a later record of another client may wait for this one
