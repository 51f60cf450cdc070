"""The master's connection to one client node: signed control calls, a feeder, a result reader.

Each node gets two threads: the feeder sends the node's batches in order
(one POST each), the reader holds the node's result stream open and turns
every line into an event on the master's one event queue.  A node that
refuses a call, drops the stream, or sends nothing (not even a keep-alive)
for ``silence_s`` is reported dead once, with the reason.
"""

from __future__ import annotations

import http.client
import queue
import threading
from urllib.parse import urlsplit

import msgspec
import requests

from drtp.errors import RunError
from drtp.replay.messages import Batch, ReplayRequest, RunSpec, result_decoder
from drtp.replay.signing import MAX_BODY, sign

_END = object()
_CANCEL = object()


class NodeLink:
    def __init__(self, address: str, token: str, events: queue.Queue, silence_s: float = 15.0) -> None:
        self.name = address
        self.base = address if address.startswith("http") else f"http://{address}"
        self.token = token
        self.events = events
        self.silence_s = silence_s
        self.session = requests.Session()
        self.session.trust_env = False  # nodes are addressed directly: no proxy/netrc lookups per batch
        self.outbox: queue.Queue = queue.Queue()
        self.run: str | None = None
        self.dead = False
        self.finished = False  # the result stream ended normally
        self.threads: list[threading.Thread] = []

    # -- control calls ---------------------------------------------------------------------

    def call(self, method: str, path: str, body: bytes = b"", timeout: float = 10.0) -> requests.Response:
        headers = sign(self.token, method, path, body)
        if body:
            headers["Content-Type"] = "application/json"
        return self.session.request(method, self.base + path, data=body, headers=headers, timeout=timeout)

    def check(self) -> dict:
        """The node's health; a RunError (exit 3) naming the node if it is down or refuses the token."""
        try:
            r = self.call("GET", "/health", timeout=5)
        except requests.RequestException as e:
            raise RunError(f"client node {self.name} does not answer ({type(e).__name__})") from None
        if r.status_code == 401:
            raise RunError(f"client node {self.name} refused the shared secret (client_info.token)")
        if r.status_code != 200:
            raise RunError(f"client node {self.name}: health check answered HTTP {r.status_code}")
        return r.json()

    def start(self, spec: RunSpec) -> None:
        try:
            r = self.call("POST", "/runs", msgspec.json.encode(spec))
        except requests.RequestException as e:
            raise RunError(f"client node {self.name} did not start the run ({type(e).__name__})") from None
        if r.status_code != 201:
            raise RunError(f"client node {self.name} did not start the run: HTTP {r.status_code} {r.text[:200]}")
        self.run = spec.run
        self.threads = [
            threading.Thread(target=self._feed, name=f"feed-{self.name}", daemon=True),
            threading.Thread(target=self._read, name=f"read-{self.name}", daemon=True),
        ]
        for t in self.threads:
            t.start()

    def send(self, requests_: list[ReplayRequest]) -> None:
        self.outbox.put(requests_)

    def end(self) -> None:
        self.outbox.put(_END)

    def cancel(self) -> None:
        """Ctrl-C: ask the node to drop what it queued (best effort, short timeout)."""
        self.outbox.put(_CANCEL)
        try:
            self.call("POST", f"/runs/{self.run}/cancel", timeout=2)
        except requests.RequestException:
            pass

    def _died(self, reason: str) -> None:
        if not self.dead:
            self.dead = True
            self.events.put(("dead", self.name, reason))

    # -- threads ------------------------------------------------------------------------------

    def _feed(self) -> None:
        while not self.dead:
            item = self.outbox.get()
            if item is _CANCEL:
                return
            if item is _END:
                self._post(f"/runs/{self.run}/end", b"")
                return
            for body in self._bodies(item):
                if not self._post(f"/runs/{self.run}/batch", body):
                    return

    def _bodies(self, requests_: list[ReplayRequest]) -> list[bytes]:
        """The batch encoded, split in halves until each part fits the node's body bound (MAX_BODY)."""
        body = msgspec.json.encode(Batch(self.run, requests_))
        if len(body) <= MAX_BODY or len(requests_) == 1:
            return [body]
        half = len(requests_) // 2
        return self._bodies(requests_[:half]) + self._bodies(requests_[half:])

    def _post(self, path: str, body: bytes) -> bool:
        """One control POST of the feeder; False (the node reported dead) when it failed or was refused."""
        try:
            r = self.call("POST", path, body, timeout=30)
        except requests.RequestException as e:
            self._died(f"{type(e).__name__} while sending a batch")
            return False
        if r.status_code not in (200, 202):
            self._died(f"refused a batch: HTTP {r.status_code} {r.text[:200]}")
            return False
        return True

    def _read(self) -> None:
        path = f"/runs/{self.run}/results"
        url = urlsplit(self.base)
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=self.silence_s)
        decode = result_decoder.decode
        try:
            conn.request("GET", path, headers=sign(self.token, "GET", path))
            resp = conn.getresponse()
            if resp.status != 200:
                self._died(f"refused the result stream: HTTP {resp.status}")
                return
            rest = b""
            while True:  # what arrived, split into lines: one event per read, not per result
                data = resp.read1(1 << 16)
                if not data:
                    break
                *lines, rest = (rest + data).split(b"\n")
                results = [decode(line) for line in lines if line.strip()]
                if results:
                    self.events.put(("results", self.name, results))
            if rest.strip():
                self.events.put(("results", self.name, [decode(rest)]))
        except (OSError, http.client.HTTPException) as e:
            self._died(f"result stream broken ({type(e).__name__}: {e})"[:200])
            return
        except msgspec.DecodeError as e:
            self._died(f"sent a malformed result ({e})")
            return
        finally:
            conn.close()
        self.finished = True
        self.events.put(("closed", self.name, ""))
