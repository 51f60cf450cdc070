"""The client node's HTTP service (Bottle on a threaded WSGI server).

Endpoints (every one needs the master's HMAC signature, see drtp.node_auth;
anything else gets 401 and a log line):

* ``GET  /health`` — alive, version, runs;
* ``POST /runs`` — a :class:`RunSpec`: start a run (its worker pool);
* ``POST /runs/<run>/batch`` — a :class:`Batch` of requests to queue (bounded size);
* ``GET  /runs/<run>/results`` — the results as newline-delimited JSON, streamed
  as they complete, with a blank keep-alive line every second; ends when the
  run is ended and drained;
* ``POST /runs/<run>/end`` — no more batches will come;
* ``POST /runs/<run>/cancel`` — drop what is queued (Ctrl-C on the master).
"""

from __future__ import annotations

import functools
import json
import logging
import queue
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import bottle
import msgspec

from drtp import __version__
from drtp.client.loop_engine import LoopRun
from drtp.client.scheduler import NodeRun
from drtp.node_auth import verify
from drtp.replay_types import batch_decoder, spec_decoder

log = logging.getLogger("drtp.client")
MAX_BODY = 64 << 20  # a batch is bounded by the master; refuse anything absurd
KEEPALIVE_S = 1.0


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the stdlib's name
        log.debug("%s " + format, self.client_address[0], *args)


def _json(status: int, payload: dict) -> str:
    bottle.response.status = status
    bottle.response.content_type = "application/json"
    return json.dumps(payload)


class NodeService:
    """The Bottle app of one client node; ``serve()`` runs it until ``shutdown()``."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.runs: dict[str, NodeRun | LoopRun] = {}
        self.lock = threading.Lock()
        self.app = bottle.Bottle()
        self.server = None
        app = self.app
        app.route("/health", "GET", self._guard(self.health))
        app.route("/runs", "POST", self._guard(self.create_run))
        app.route("/runs/<run>/batch", "POST", self._guard(self.batch))
        app.route("/runs/<run>/end", "POST", self._guard(self.end))
        app.route("/runs/<run>/cancel", "POST", self._guard(self.cancel))
        app.route("/runs/<run>/results", "GET", self._guard(self.results))

    # -- authentication ----------------------------------------------------------------

    def _guard(self, handler):
        @functools.wraps(handler)
        def wrapped(**kw):
            req = bottle.request
            length = req.content_length
            if length > MAX_BODY:
                return _json(413, {"error": f"body over {MAX_BODY} bytes"})
            body = req.body.read() if length > 0 else b""
            why = verify(self.token, req.method, req.path, body, req.headers)
            if why:
                log.warning("refused %s %s from %s: %s", req.method, req.path, req.remote_addr, why)
                return _json(401, {"error": "unauthorized"})
            return handler(body, **kw)

        return wrapped

    # -- handlers ------------------------------------------------------------------------

    def health(self, body: bytes):
        with self.lock:
            runs = {k: {"queued": r.queued, "running": r.running, "done": r.done} for k, r in self.runs.items()}
        return _json(200, {"ok": True, "version": __version__, "runs": runs})

    def create_run(self, body: bytes):
        try:
            spec = spec_decoder.decode(body)
        except msgspec.DecodeError as e:
            log.warning("malformed run spec: %s", e)
            return _json(400, {"error": f"malformed run spec: {e}"})
        if spec.threads < 1 or spec.threads > 1024:
            return _json(400, {"error": "threads must be 1..1024"})
        with self.lock:
            if spec.run in self.runs:
                return _json(409, {"error": f"run {spec.run} exists"})
            self.runs[spec.run] = LoopRun(spec) if spec.engine == "loop" else NodeRun(spec)
        log.info("run %s: %d at a time (%s engine)", spec.run, spec.threads, spec.engine)
        return _json(201, {"run": spec.run})

    def _run(self, run: str) -> NodeRun | LoopRun | None:
        with self.lock:
            return self.runs.get(run)

    def batch(self, body: bytes, run: str):
        node_run = self._run(run)
        if node_run is None:
            return _json(404, {"error": f"no run {run}"})
        try:
            batch = batch_decoder.decode(body)
        except msgspec.DecodeError as e:
            log.warning("malformed batch for run %s: %s", run, e)
            return _json(400, {"error": f"malformed batch: {e}"})
        if batch.run != run:
            return _json(400, {"error": "batch is for another run"})
        try:
            node_run.submit(batch.requests)
        except RuntimeError as e:
            return _json(409, {"error": str(e)})
        return _json(202, {"accepted": len(batch.requests)})

    def end(self, body: bytes, run: str):
        node_run = self._run(run)
        if node_run is None:
            return _json(404, {"error": f"no run {run}"})
        node_run.end()
        return _json(200, {"ended": run})

    def cancel(self, body: bytes, run: str):
        node_run = self._run(run)
        if node_run is None:
            return _json(404, {"error": f"no run {run}"})
        node_run.cancel()
        return _json(200, {"cancelled": run})

    def results(self, body: bytes, run: str):
        node_run = self._run(run)
        if node_run is None:
            return _json(404, {"error": f"no run {run}"})
        bottle.response.content_type = "application/x-ndjson"
        encode = msgspec.json.encode

        def stream():
            try:
                while True:
                    try:
                        item = node_run.results.get(timeout=KEEPALIVE_S)
                    except queue.Empty:
                        yield b"\n"
                        continue
                    lines = []
                    while item is not None:  # send what is ready in one write
                        if isinstance(item, list):  # the loop engine hands results over in batches
                            lines.extend(map(encode, item))
                        else:
                            lines.append(encode(item))
                        try:
                            item = node_run.results.get_nowait()
                        except queue.Empty:
                            break
                    if lines:
                        yield b"\n".join(lines) + b"\n"
                    if item is None:
                        return
            finally:
                with self.lock:
                    if self.runs.get(run) is node_run and node_run.finished:
                        del self.runs[run]

        return stream()

    # -- serving ---------------------------------------------------------------------------

    def serve(self, host: str = "127.0.0.1", port: int = 8081, ready: threading.Event | None = None) -> None:
        self.server = make_server(host, port, self.app, server_class=_ThreadingServer, handler_class=_QuietHandler)
        log.info("drtp client node listening on %s:%d", host, self.server.server_port)
        if ready is not None:
            ready.set()
        self.server.serve_forever(poll_interval=0.2)

    def shutdown(self) -> None:
        for run in list(self.runs.values()):
            run.cancel()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
