"""The client node's HTTP service (Bottle on a threaded WSGI server).

Endpoints (every one needs the master's HMAC signature, see drtp.replay.signing;
anything else gets 401 and a log line; the check is one Bottle plugin,
:class:`SignedOnly`, which reads a body only once its headers passed):

* ``GET  /health`` — alive, version, runs;
* ``POST /runs`` — a :class:`RunSpec`: start a run (its worker pool);
* ``POST /runs/<run>/batch`` — a :class:`Batch` of requests to queue (bounded size);
* ``GET  /runs/<run>/results`` — the results as frames (drtp.replay.frames: the
  rows of requests.csv, made here, and the node's figures), streamed as requests
  complete, with an empty keep-alive frame every second (and a frame naming a registry that
  refused a secret that had worked, so the master renews it); ends, after a last frame
  holding the node's whole summary model, when the run is ended and drained;
* ``POST /runs/<run>/secret`` — a :class:`SecretUpdate`: the master renewed the secret of
  one of the run's registries (declared with credentials in its spec): it replaces the
  one the run's requests use;
* ``POST /runs/<run>/end`` — no more batches will come;
* ``POST /runs/<run>/cancel`` — drop what is queued (Ctrl-C on the master).
"""

from __future__ import annotations

import json
import logging
import queue
import re
import sys
import threading
import time
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler
from socketserver import ThreadingMixIn
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer, make_server

import bottle
import msgspec

from drtp import __version__
from drtp.client.admission import allowed_targets, batch_error, secret_error, spec_error
from drtp.client.loop_engine import LoopRun
from drtp.client.scheduler import NodeRun
from drtp.replay.frames import KEEPALIVE, Refusal, gather
from drtp.replay.messages import NODE_IDLE_CLOSE_S, batch_decoder, registry_base, secret_decoder, spec_decoder
from drtp.replay.signing import MAX_BODY, Verifier

log = logging.getLogger("drtp.client")
KEEPALIVE_S = 1.0
# Seconds a connection may send nothing while the node waits for its request line, headers or body:
# a stalled or trickling client loses its thread after this.  (The result stream only writes, and the
# master reads it continuously.)
READ_TIMEOUT_S = NODE_IDLE_CLOSE_S
REMEMBERED_RUNS = 4096  # ids of runs this node started, kept so that none is started twice
_LENGTH = re.compile(r"[0-9]{1,12}")


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address) -> None:
        """A connection that stalled past READ_TIMEOUT_S or vanished costs a log line, not a traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            log.info("dropped the connection from %s: %s", client_address[0], error or type(error).__name__)
            return
        super().handle_error(request, client_address)


class _KeptServerHandler(ServerHandler):
    """wsgiref's handler answering in HTTP/1.1, which tells its request handler whether the connection may
    carry another request: only after a 2xx answer of known length (a refused request may have left its
    body unread; the result stream is delimited by the connection's end)."""

    http_version = "1.1"

    def cleanup_headers(self) -> None:
        super().cleanup_headers()
        if "Content-Length" not in self.headers:
            self.headers["Connection"] = "close"

    def close(self) -> None:
        handler = self.request_handler
        kept = bool(self.status) and self.status.startswith("2") and "Connection" not in (self.headers or {})
        handler.close_connection = handler.close_connection or not kept
        super().close()


class _QuietHandler(WSGIRequestHandler):
    """One connection: requests one after another while each answer keeps it open (HTTP/1.1 keep-alive),
    so the master's feeder sends its batches without a connection (and a node thread) per batch.  Every
    request is signed and checked on its own, kept connection or not."""

    timeout = READ_TIMEOUT_S  # StreamRequestHandler sets it on the connection's socket: also the idle limit
    protocol_version = "HTTP/1.1"
    # an answer's head and body leave in one write (wsgiref flushes after each body part), and nothing
    # waits for the peer's delayed ACK: on a kept connection Nagle's algorithm would hold every answer
    wbufsize = -1
    disable_nagle_algorithm = True

    # wsgiref handles one request per connection; the stdlib's own loop handles them one after another
    # until an answer closes the connection (idle timeout, bad request line, or _KeptServerHandler's verdict)
    handle = BaseHTTPRequestHandler.handle

    def __getattr__(self, name: str):
        """Every method goes to the app (``do_GET``, ``do_POST``, …), which answers the ones it does not route."""
        if name.startswith("do_"):
            return self._run_app
        raise AttributeError(name)

    def _run_app(self) -> None:
        handler = _KeptServerHandler(self.rfile, self.wfile, self.get_stderr(), self.get_environ(), multithread=False)
        handler.request_handler = self
        handler.run(self.server.get_app())

    def handle_expect_100(self) -> bool:
        """No "100 Continue" before the signature is checked: nobody is invited to send a body that may
        never be read (a client that waits for it sends its body after its own short wait)."""
        return True

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the stdlib's name
        log.debug("%s " + format, self.client_address[0], *args)


def _json(status: int, payload: dict) -> str:
    bottle.response.status = status
    bottle.response.content_type = "application/json"
    return json.dumps(payload)


def _read_exactly(stream, length: int) -> bytes | None:
    """``length`` bytes of the request body, or None when the client closed or stalled before sending them."""
    parts, left = [], length
    try:
        while left > 0:
            part = stream.read(min(left, 1 << 20))
            if not part:
                return None
            parts.append(part)
            left -= len(part)
    except OSError:  # TimeoutError included: READ_TIMEOUT_S without a byte
        return None
    return b"".join(parts)


class SignedOnly:
    """Bottle plugin: every route answers only requests signed with the token, each accepted once.

    In order: the signature headers (present, time finite and fresh, nonce
    unused), the body's framing (a Content-Length within MAX_BODY; no chunked
    bodies), then exactly that many bytes are read and the MAC over them is
    checked, which uses the nonce up.  A request refused on its headers costs
    no body bytes.  The route's callback gets the body as its first argument.
    """

    name = "drtp-signed"
    api = 2

    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier

    def apply(self, callback, route):
        verifier = self.verifier

        def signed(**kw):
            req = bottle.request
            why = verifier.check_headers(req.headers)
            if why:
                return _refused(401, why)
            if req.environ.get("HTTP_TRANSFER_ENCODING"):
                return _refused(411, "a Transfer-Encoding body (only Content-Length bodies are read)")
            length_text = req.environ.get("CONTENT_LENGTH") or "0"
            if not _LENGTH.fullmatch(length_text):
                return _refused(400, f"bad Content-Length {length_text[:20]!r}")
            length = int(length_text)
            if length > MAX_BODY:
                return _refused(413, f"body of {length} bytes (at most {MAX_BODY})")
            body = _read_exactly(req.environ["wsgi.input"], length) if length else b""
            if body is None:
                return _refused(400, f"body shorter than its Content-Length ({length})")
            why = verifier.verify(req.method, req.path, body, req.headers)
            if why:
                return _refused(401, why)
            return callback(body, **kw)

        return signed


def _authenticators(node_run: NodeRun | LoopRun) -> dict:
    """A run's registry authenticators by base URL (both engines share the executor's)."""
    return {registry_base(a.auth.registry): a for a in node_run.executor.session.auth.values() if a.auth}


def _refused(status: int, why: str):
    """Refuse the current request: a log line saying why and a short answer (the server closes the connection)."""
    req = bottle.request
    path = repr(req.path[:100])[1:-1]  # a decoded %0d%0a must not start a forged log line
    log.warning("refused %s %s from %s: %s", req.method, path, req.remote_addr, why)
    return _json(status, {"error": "unauthorized" if status == 401 else why})


class NodeService:
    """The Bottle app of one client node; ``serve()`` runs it until ``shutdown()``."""

    def __init__(self, token: str) -> None:
        self.runs: dict[str, NodeRun | LoopRun] = {}
        self.targets: dict[str, frozenset[str]] = {}  # run -> the registry base URLs it may address
        self.started: OrderedDict[str, None] = OrderedDict()  # ids of runs started here, newest last
        self.lock = threading.Lock()
        self.app = bottle.Bottle()
        self.app.install(SignedOnly(Verifier(token)))
        self.server = None
        app = self.app
        app.route("/health", "GET", self.health)
        app.route("/runs", "POST", self.create_run)
        app.route("/runs/<run>/batch", "POST", self.batch)
        app.route("/runs/<run>/secret", "POST", self.secret)
        app.route("/runs/<run>/end", "POST", self.end)
        app.route("/runs/<run>/cancel", "POST", self.cancel)
        app.route("/runs/<run>/results", "GET", self.results)

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
        why = spec_error(spec)
        if why:
            log.warning("refused run spec: %s", why)
            return _json(400, {"error": f"bad run spec: {why}"})
        with self.lock:
            if spec.run in self.started:  # running, or finished: a run is never started twice
                return _json(409, {"error": f"run {spec.run} exists or has run on this node"})
            self.started[spec.run] = None
            if len(self.started) > REMEMBERED_RUNS:
                self.started.popitem(last=False)
            self.targets[spec.run] = allowed_targets(spec)
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
        why = batch_error(batch.requests, self.targets.get(run, frozenset()))
        if why:
            log.warning("refused a batch of run %s: %s", run, why)
            return _json(400, {"error": f"refused batch: {why}"})
        try:
            node_run.submit(batch.requests)
        except RuntimeError as e:
            return _json(409, {"error": str(e)})
        return _json(202, {"accepted": len(batch.requests)})

    def secret(self, body: bytes, run: str):
        node_run = self._run(run)
        if node_run is None:
            return _json(404, {"error": f"no run {run}"})
        try:
            update = secret_decoder.decode(body)
        except msgspec.DecodeError:  # never the decoder's text: it may quote the body
            log.warning("malformed secret update for run %s", run)
            return _json(400, {"error": "malformed secret update"})
        if update.run != run:
            return _json(400, {"error": "secret update is for another run"})
        why = secret_error(update, node_run.spec)
        if why:
            log.warning("refused a secret update of run %s: %s", run, why)
            return _json(400, {"error": f"refused secret update: {why}"})
        auth = _authenticators(node_run).get(registry_base(update.registry))
        replaced = auth is not None and auth.replace_secret(update)
        log.info(
            "run %s: secret of %s %s (generation %d)",
            run,
            auth.auth.registry if auth else "?",
            "renewed" if replaced else "kept, as new already",
            update.generation,
        )
        return _json(200, {"replaced": replaced, "generation": update.generation})

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
        bottle.response.content_type = "application/octet-stream"
        frames = node_run.frames
        health = node_run.health

        def stream():
            last_sent = 0.0
            auths = _authenticators(node_run)
            try:
                while True:
                    refused = [Refusal(base, g) for base, a in auths.items() for g in a.take_refusals()]
                    if refused:
                        yield frames.refusals(refused)
                    try:
                        item = node_run.results.get(timeout=KEEPALIVE_S)
                    except queue.Empty:  # no result for a while: the node's health still goes, as it is due
                        parts = health.take()
                        yield frames.health(parts) if parts else KEEPALIVE
                        continue
                    finished, ended = gather(item, node_run.results, last_sent, node_run.spec.timed)
                    if finished:
                        yield frames.frame(finished, health.take())
                        last_sent = time.monotonic()
                    if ended:
                        health.finish()
                        yield frames.last(health.take())
                        return
            finally:
                health.finish()  # a stream that broke off: the sampler stops all the same
                with self.lock:
                    if self.runs.get(run) is node_run and node_run.finished:
                        del self.runs[run]
                        self.targets.pop(run, None)

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
