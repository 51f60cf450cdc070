"""The master's connection to one client node: signed control calls, a feeder, a result reader.

Each node gets two threads: the feeder sends the node's batches in order
(one POST each), the reader holds the node's result stream open and turns
every line into an event on the master's one event queue.  A node that
refuses a call, drops the stream, or sends nothing (not even a keep-alive)
for ``silence_s`` is reported dead once, with the reason.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from typing import NamedTuple
from urllib.parse import urlsplit

import msgspec

from drtp.errors import RunError
from drtp.registry.transport import Connection, RequestError
from drtp.replay.frames import FrameReader
from drtp.replay.messages import NODE_IDLE_CLOSE_S, Batch, ReplayRequest, RunSpec, SecretUpdate
from drtp.replay.signing import MAX_BODY, sign

log = logging.getLogger(__name__)
CALL_ERRORS = (RequestError,)  # a control call that got no (whole) answer
FEED_TIMEOUT_S = 30.0  # the longest a node may take to accept a batch
KEPT_IDLE_S = NODE_IDLE_CLOSE_S / 2  # the feeder's connection is reused while idle for at most this long

_END = object()


class Reply(NamedTuple):
    """A node's answer to a control call."""

    status_code: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body)


_CANCEL = object()


class NodeLink:
    def __init__(self, address: str, token: str, events: queue.Queue, silence_s: float = 15.0) -> None:
        self.name = address
        self.base = address if address.startswith("http") else f"http://{address}"
        self.token = token
        self.events = events
        self.silence_s = silence_s
        url = urlsplit(self.base)
        self.host, self.port = url.hostname, url.port or 80
        self.outbox: queue.Queue = queue.Queue()
        self.run: str | None = None
        self.dead = False
        self.finished = False  # the result stream ended normally
        self.threads: list[threading.Thread] = []

    # -- control calls ---------------------------------------------------------------------

    def call(
        self, method: str, path: str, body: bytes = b"", timeout: float = 10.0, conn: Connection | None = None
    ) -> Reply:
        """One signed control call on drtp's own lean HTTP connection: ``conn`` if given (kept open for the
        next call while the node keeps it), else a connection of its own, closed after the answer.

        Not http.client: it parses every answer's headers through the email package, which cost the
        master's feeder threads a few hundred µs of CPU per batch. Raises RequestError.
        """
        headers = sign(self.token, method, path, body)
        if body:
            headers["Content-Type"] = "application/json"
        own = conn is None
        if own:
            conn = Connection("http", f"{self.host}:{self.port}", timeout)
        try:
            r = conn.request(method, path, body if body or method != "GET" else None, headers, keep_body=True)
            return Reply(r.status, r.body)
        finally:
            if own:
                conn.close()

    def check(self) -> dict:
        """The node's health; a RunError (exit 3) naming the node if it is down or refuses the token."""
        try:
            r = self.call("GET", "/health", timeout=5)
        except CALL_ERRORS as e:
            raise RunError(f"client node {self.name} does not answer ({e.outcome}: {e.message})") from None
        if r.status_code == 401:
            raise RunError(f"client node {self.name} refused the shared secret (client_info.token)")
        if r.status_code != 200:
            raise RunError(f"client node {self.name}: health check answered HTTP {r.status_code}")
        return r.json()

    def start(self, spec: RunSpec) -> None:
        try:
            r = self.call("POST", "/runs", msgspec.json.encode(spec))
        except CALL_ERRORS as e:
            raise RunError(f"client node {self.name} did not start the run ({e.outcome}: {e.message})") from None
        if r.status_code != 201:
            raise RunError(f"client node {self.name} did not start the run: HTTP {r.status_code} {r.text[:200]}")
        self.run = spec.run
        self.threads = [
            threading.Thread(target=self._guarded, args=(self._feed, "sender"), name=f"feed-{self.name}", daemon=True),
            threading.Thread(target=self._guarded, args=(self._read, "reader"), name=f"read-{self.name}", daemon=True),
        ]
        for t in self.threads:
            t.start()

    def send_secret(self, update: SecretUpdate) -> bool:
        """Hand the node a renewed registry secret (a signed call of its own, on a connection of its own, so
        it never waits behind a batch); False, with a log line that never holds the secret, if it failed."""
        path = f"/runs/{self.run}/secret"
        try:
            r = self.call("POST", path, msgspec.json.encode(update), timeout=FEED_TIMEOUT_S)
        except CALL_ERRORS as e:
            log.warning("client node %s: renewed secret not delivered (%s: %s)", self.name, e.outcome, e.message)
            return False
        if r.status_code != 200:
            log.warning("client node %s refused a renewed secret: HTTP %d %s", self.name, r.status_code, r.text[:200])
            return False
        return True

    def send(self, requests_: list[ReplayRequest]) -> None:
        self.outbox.put(requests_)

    def end(self) -> None:
        self.outbox.put(_END)

    def cancel(self) -> None:
        """Ctrl-C: ask the node to drop what it queued (best effort, short timeout)."""
        self.outbox.put(_CANCEL)
        try:
            self.call("POST", f"/runs/{self.run}/cancel", timeout=2)
        except CALL_ERRORS:
            pass

    def _died(self, reason: str) -> None:
        if not self.dead:
            self.dead = True
            self.events.put(("dead", self.name, reason))

    # -- threads ------------------------------------------------------------------------------

    def _guarded(self, body, role: str) -> None:
        """Run one of the node's threads; if it fails unexpectedly, the node is reported dead with the error.
        (A thread that just ended would leave the master waiting forever for results nobody reads or for
        requests nobody sends.)"""
        try:
            body()
        except Exception as e:
            log.debug("the %s thread of node %s failed", role, self.name, exc_info=True)
            self._died(f"the master's {role} thread for this node failed ({type(e).__name__}: {e})"[:200])

    def _feed(self) -> None:
        """Send the outbox's batches in order, on one connection kept open between them (a connection per
        batch cost both ends a connect, an accept, a thread and a close)."""
        conn = Connection("http", f"{self.host}:{self.port}", FEED_TIMEOUT_S)
        try:
            while not self.dead:
                item = self.outbox.get()
                if item is _CANCEL:
                    return
                if conn.open and time.monotonic() - conn.progress > KEPT_IDLE_S:
                    conn.close()  # the node may be closing it: a new one, before a byte of the batch is sent
                if item is _END:
                    self._post(f"/runs/{self.run}/end", b"", conn)
                    return
                for body in self._bodies(item):
                    if not self._post(f"/runs/{self.run}/batch", body, conn):
                        return
        finally:
            conn.close()

    def _bodies(self, requests_: list[ReplayRequest]) -> list[bytes]:
        """The batch encoded, split in halves until each part fits the node's body bound (MAX_BODY)."""
        body = msgspec.json.encode(Batch(self.run, requests_))
        if len(body) <= MAX_BODY or len(requests_) == 1:
            return [body]
        half = len(requests_) // 2
        return self._bodies(requests_[:half]) + self._bodies(requests_[half:])

    def _post(self, path: str, body: bytes, conn: Connection) -> bool:
        """One control POST of the feeder; False (the node reported dead) when it failed or was refused."""
        try:
            r = self.call("POST", path, body, conn=conn)
        except CALL_ERRORS as e:
            self._died(f"{e.outcome} while sending a batch: {e.message}"[:200])
            return False
        if r.status_code not in (200, 202):
            self._died(f"refused a batch: HTTP {r.status_code} {r.text[:200]}")
            return False
        return True

    def _read(self) -> None:
        """The node's result stream, one event per read of the socket with every whole frame it completed;
        the connection's timeout is the longest silence allowed (the node sends a keep-alive frame)."""
        path = f"/runs/{self.run}/results"
        frames = FrameReader()
        last = False

        def frames_in(data: bytes) -> None:
            nonlocal last
            got = frames.feed(data)
            if got:
                last = got[-1].model is not None
                self.events.put(("frames", self.name, got))

        conn = Connection("http", f"{self.host}:{self.port}", self.silence_s)
        try:
            r = conn.request("GET", path, None, sign(self.token, "GET", path), stream=frames_in)
        except RequestError as e:
            self._died(f"result stream broken ({e.outcome}: {e.message})"[:200])
            return
        except msgspec.DecodeError as e:
            self._died(f"sent a malformed result frame ({e})"[:200])
            return
        finally:
            conn.close()
        if r.status != 200:
            self._died(f"refused the result stream: HTTP {r.status}")
            return
        if frames.pending or not last:
            self._died("result stream ended without the node's last frame")
            return
        self.finished = True
        self.events.put(("closed", self.name, ""))
