"""Sends one replay request to its registry and measures it.

Each worker thread keeps its own keep-alive connection per registry
(drtp/registry/transport.py: on a 2-core machine the replayer's CPU is taken from the
registry, so the transport is lean), so no lock is shared; a run whose client profile keeps
connections per trace client (``ClientModel.connections``) sends each request on a connection
of its trace client's instead (drtp/registry/client_pools.py), with the profile's User-Agent
or the trace's own.  The exact trace
verb is sent — GET, HEAD, PUT, PATCH, POST, DELETE — and every error (HTTP
status, timeout, refused connection, a cut answer) becomes a failed result
classified by drtp.replay.outcome, never an exception.  A request is sent once: only
GET and HEAD are sent again, only when no byte of an answer arrived, and only
when the run asks for it (``retries``); every attempt is counted.

Blob uploads follow the Registry V2 protocol: the trace's POST
opens an upload, a PATCH sends the layer's bytes, the PUT closes it with the
digest (or sends the whole layer at once).  The open upload is remembered per
(trace client, repository, upload key): the master gives the requests of one
trace upload one key (its upload id, see master/run/plan.py), so one client's
uploads into a repository may overlap; where the trace has no upload ids the
keys are the master's guesses, and a request without one finds the upload of
key None (the node's gate, client/client_gate.py, keeps a session's requests in order).
A trace PATCH or PUT that finds no open upload opens one with an auxiliary POST.
Pushed bytes are random (or zeros), so a pushed layer gets a new digest that the result carries back to the master.

A cross-repository mount is sent as one (``?mount=<digest>&from=<repository>``).  201:
mounted.  202: the registry refused to mount and opened an upload instead; when the trace's
registry mounted (201), the node does as the registry tells it, uploads the blob to the
``Location`` given (helper rows) and reports the mount as an ``http`` failure saying so; when
the trace's own registry refused too (202), the trace's PATCH/PUT that follow use the upload.

A manifest PUT whose image has no config blob of its own names the minimal one
(drtp.registry.manifest), which the node makes sure is in the repository first: one thread of
the node checks (HEAD) and, when missing, pushes it, while the node's other manifest PUTs of
that repository wait; once there, the repository is remembered and no PUT checks again.  Two
pushes of it at once would rewrite its link while a manifest PUT reads it
(drtp.registry.keyed_lock), and the registry refuses that PUT.

No upload session outlives the run: one that a later upload open of the same trace client,
repository and upload key replaces is cancelled (DELETE, a helper row), as is one a failed fallback leaves;
those still open when the run ends — a trace upload never completed — are cancelled then.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Callable, Iterator
from urllib.parse import urlencode, urljoin

from drtp.registry.content import STREAM_ABOVE, chunks, new_seed
from drtp.registry.flow import cache_verdict
from drtp.registry.keyed_lock import KeyedLock
from drtp.registry.manifest import ACCEPT, CONFIG_BLOB, CONFIG_DIGEST, SCHEMA2, build_manifest, digest_of
from drtp.registry.spec_session import spec_session
from drtp.registry.transport import Response
from drtp.replay.messages import AuxResult, ReplayRequest, ReplayResult, RunSpec, registry_base
from drtp.replay.outcome import HTTP, NOT_SENT, OK, PROTOCOL, TRUNCATED, status_outcome

FALLBACK_SIZE = 1024  # bytes uploaded for a refused mount of a blob whose size nobody knows


class Upload:
    """An upload session opened in the registry and not yet closed."""

    __slots__ = ("location", "sha", "written")

    def __init__(self, location: str) -> None:
        self.location = location
        self.sha = hashlib.sha256()
        self.written = 0

    def digest(self) -> str:
        """The digest of every byte sent to this upload so far: what its closing PUT declares."""
        return "sha256:" + self.sha.hexdigest()

    def close_url(self, digest: str) -> str:
        """The URL of the PUT that completes this upload as the blob ``digest``."""
        sep = "&" if "?" in self.location else "?"
        return self.location + sep + urlencode({"digest": digest})


class Executor:
    """Executes requests for one run; one instance shared by the run's worker threads."""

    def __init__(self, spec: RunSpec, clock) -> None:
        self.spec = spec
        self.clock = clock  # seconds since the run's common start
        # (trace client, repository, upload key) -> open upload
        self.uploads: dict[tuple[str, str, str | None], Upload] = {}
        self.local = threading.local()
        # keep-alive connections per thread (or per trace client), credentials and TLS trust per registry
        # (spec.auth), redirects and the retry rule (drtp.registry.flow, driven by drtp.registry.session), as the
        # spec asks
        self.session = spec_session(spec)
        self.per_client = spec.client.connections > 0
        self.config_writing = KeyedLock()  # (registry base, repository) whose minimal config blob is being checked
        self.config_present: set[tuple[str, str]] = set()  # (registry base, repository) known to hold it

    def _rng(self) -> random.Random:
        rng = getattr(self.local, "rng", None)
        if rng is None:
            rng = self.local.rng = random.Random()
        return rng

    def content(self, size: int) -> bytes:
        return self._rng().randbytes(size) if self.spec.random else bytes(size)

    def payload(self, size: int) -> tuple[bytes | Callable[[], Iterator[bytes]], int]:
        """Bytes of a pushed blob: in memory when small, else a maker of a 1 MiB chunk stream."""
        if size <= STREAM_ABOVE:
            return self.content(size), size
        seed, randomized = new_seed(), self.spec.random
        return (lambda: chunks(seed, size, randomized)), size

    # -- requests --------------------------------------------------------------------

    def http(self, method: str, url: str, **kw) -> Response:
        """A registry request for the trace request this thread executes: on its trace client's connections
        (when the run keeps them per client) and with its own User-Agent (when the trace gave one)."""
        req = getattr(self.local, "req", None)
        if req is None:  # not for a trace request: preflight, drtp bench, the run's end cancelling uploads
            return self.session.request(method, url, **kw)
        client = req.client if self.per_client else None
        return self.session.request(method, url, client=client, agent=req.user_agent, **kw)

    def execute(self, req: ReplayRequest) -> ReplayResult:
        self.local.req = req
        try:
            return self._execute(req)
        finally:
            self.local.req = None

    def _execute(self, req: ReplayRequest) -> ReplayResult:
        base = registry_base(req.registry)
        aux: list[AuxResult] = []
        op = req.op
        if op == "get":
            return self._object(req, base)
        if op == "manifest-put":
            return self._manifest_put(req, base, aux)
        key = (req.client, req.repository, req.upload)
        if op == "upload-open":
            if req.mount is not None:
                return self._mount(req, base, aux)
            start = self.clock()
            r = self.http("POST", f"{base}/v2/{req.repository}/blobs/uploads/")
            latency = self.clock() - start
            if r.status == 202 and r.header("location"):
                self._keep(key, Upload(urljoin(base + "/", r.header("location"))), aux)
            elif r.status == 202:
                r.outcome, r.error = PROTOCOL, "202 without a Location header: no upload to continue"
            return self._result(req, r, start, latency, None, aux)
        upload = self.uploads.get(key)
        if upload is None:
            upload = self._open_aux(req, base, aux)
            if upload is None:
                return self._failed_aux(req, aux)
        if op == "upload-chunk":
            payload, size = self.payload(req.size)
            start = self.clock()
            r = self.http("PATCH", upload.location, body=payload, headers=_octets(size))
            latency = self.clock() - start
            if r.status == 202:
                _hash_into(upload.sha, payload)
                upload.written += size
                if r.header("location"):
                    upload.location = urljoin(base + "/", r.header("location"))
            r.bytes = 0 if r.outcome else size  # sent in full only when the answer came
            result = self._result(req, r, start, latency, None, aux)
            if r.status != 202:  # the upload cannot go on: end it in the registry too
                self.uploads.pop(key, None)
                self._cancel(upload, aux)
            return result
        # upload-close: the PUT that ends the push of a layer
        self.uploads.pop(key, None)
        payload, size = b"", 0
        if req.size > 0 or upload.written == 0:
            payload, size = self.payload(req.size or 1024)
            _hash_into(upload.sha, payload)
        digest = upload.digest()
        url = upload.close_url(digest)
        start = self.clock()
        r = self.http("PUT", url, body=payload, headers=_octets(size))
        latency = self.clock() - start
        r.bytes = 0 if r.outcome else size  # sent in full only when the answer came
        result = self._result(req, r, start, latency, digest, aux)
        result.size = upload.written + size
        if r.status not in (201, 204):  # not completed: the registry may still hold the upload
            self._cancel(upload, aux)
        return result

    def _mount(self, req: ReplayRequest, base: str, aux: list[AuxResult]) -> ReplayResult:
        """A cross-repository mount; when the registry refuses it (202) and the trace's mounted, the upload
        the registry opened instead carries the blob (helper rows) and the mount is reported as refused."""
        query = {"mount": req.mount} | ({"from": req.mount_from} if req.mount_from else {})
        start = self.clock()
        r = self.http("POST", f"{base}/v2/{req.repository}/blobs/uploads/?{urlencode(query)}")
        latency = self.clock() - start
        if r.outcome or r.status not in (201, 202):
            return self._result(req, r, start, latency, None, aux)
        if r.status == 201:
            result = self._result(req, r, start, latency, req.mount, aux)
            result.size = req.object_size
            return result
        if not r.header("location"):
            r.outcome, r.error = PROTOCOL, "202 without a Location header: no upload to continue"
            return self._result(req, r, start, latency, None, aux)
        upload = Upload(urljoin(base + "/", r.header("location")))
        if req.expected_status == 202:  # refused in the trace too: the trace's own PATCH/PUT use the upload
            self._keep((req.client, req.repository, req.upload), upload, aux)
            return self._result(req, r, start, latency, None, aux)
        digest, size = self._upload_whole(upload, req.object_size or FALLBACK_SIZE, aux)
        result = self._result(req, r, start, latency, digest, aux)
        result.ok, result.outcome = False, HTTP
        if digest is not None:
            result.size = size
            result.error = "mount refused (202): the blob was uploaded instead (helper rows)"
        else:
            result.error = "mount refused (202) and the fallback upload failed (helper rows)"
        return result

    def _upload_whole(self, upload: Upload, size: int, aux: list[AuxResult]) -> tuple[str | None, int]:
        """Push ``size`` new bytes to an open upload in one PUT: (the blob's digest, size); None when it
        failed (the upload is cancelled then)."""
        payload, size = self.payload(size)
        _hash_into(upload.sha, payload)
        digest = upload.digest()
        url = upload.close_url(digest)
        self._aux(aux, "PUT", "mount fallback upload", url, (201,), body=payload, headers=_octets(size))
        if aux[-1].outcome == OK:
            return digest, size
        self._cancel(upload, aux)
        return None, size

    def _keep(self, key: tuple[str, str, str | None], upload: Upload, aux: list[AuxResult]) -> None:
        """Remember the open upload of (trace client, repository, upload key); one it replaces is cancelled."""
        replaced = self.uploads.get(key)
        self.uploads[key] = upload
        if replaced is not None:
            self._cancel(replaced, aux)

    def _cancel(self, upload: Upload, aux: list[AuxResult]) -> None:
        """End an upload session nothing will complete (404: the registry has already dropped it)."""
        self._aux(aux, "DELETE", "upload cancel", upload.location, (204, 404))

    def close_pools(self) -> None:
        """Close the trace clients' idle connections (a client profile's), at the run's end."""
        if self.session.pools is not None:
            self.session.pools.close()

    def cancel_uploads(self) -> tuple[int, int]:
        """At the end of a run: cancel the upload sessions still open (a trace upload never completed);
        (how many, how many of those failed)."""
        open_uploads = list(self.uploads.values())
        self.uploads.clear()
        aux: list[AuxResult] = []
        for upload in open_uploads:
            self._cancel(upload, aux)
        return len(aux), sum(a.outcome != OK for a in aux)

    def _object(self, req: ReplayRequest, base: str) -> ReplayResult:
        start = self.clock()
        r = self.http(req.method, base + object_path(req), headers=object_headers(req))
        latency = self.clock() - start
        return result_of(req, r, start, latency, object_digest(req, r), [])

    def _manifest_put(self, req: ReplayRequest, base: str, aux: list[AuxResult]) -> ReplayResult:
        layers = [(layer.digest, layer.size) for layer in req.layers]
        config = (req.config.digest, req.config.size) if req.config is not None else None
        if config is None and not self._ensure_config(req, base, aux):
            return self._failed_aux(req, aux)
        body = build_manifest(layers, req.size, config)
        digest = digest_of(body)
        start = self.clock()
        r = self.http(
            "PUT", f"{base}/v2/{req.repository}/manifests/{req.reference}", body=body, headers={"Content-Type": SCHEMA2}
        )
        latency = self.clock() - start
        r.bytes = 0 if r.outcome else len(body)
        result = self._result(req, r, start, latency, digest, aux)
        result.size = len(body)
        return result

    # -- helper requests (auxiliary) ----------------------------------------------------

    def _aux(self, aux: list[AuxResult], method: str, what: str, url: str, expect: tuple[int, ...], **kw) -> Response:
        """A helper request; ok when answered completely with one of the ``expect``ed statuses."""
        start = self.clock()
        r = self.http(method, url, **kw)
        latency = self.clock() - start
        outcome, error = r.outcome, r.error
        if not outcome:
            outcome = OK if r.status in expect and not error else HTTP
            if outcome == HTTP and not error:
                error = f"HTTP {r.status}"
        aux.append(
            AuxResult(
                method,
                what,
                r.status,
                start,
                latency,
                r.bytes,
                error,
                outcome,
                r.attempts,
                r.retry_after(),
                r.challenges,
            )
        )
        return r

    def _open_aux(self, req: ReplayRequest, base: str, aux: list[AuxResult]) -> Upload | None:
        r = self._aux(aux, "POST", "blob upload open", f"{base}/v2/{req.repository}/blobs/uploads/", (202,))
        if r.status != 202:
            return None
        if not r.header("location"):
            last = aux[-1]
            last.outcome, last.error = PROTOCOL, "202 without a Location header: no upload to continue"
            return None
        return Upload(urljoin(base + "/", r.header("location")))

    def _ensure_config(self, req: ReplayRequest, base: str, aux: list[AuxResult]) -> bool:
        """Whether the repository holds the minimal config blob, pushed now if missing (helper rows): checked
        by one thread at a time per repository, and once only when found or pushed."""
        key = (base, req.repository)
        if key in self.config_present:
            return True
        with self.config_writing.hold(key):
            if key in self.config_present:  # another thread found or pushed it while this one waited
                return True
            blob = f"{base}/v2/{req.repository}/blobs/{CONFIG_DIGEST}"
            check = self._aux(aux, "HEAD", "config blob check", blob, (200, 404))
            if check.status == 404:
                upload = self._open_aux(req, base, aux)
                if upload is None:
                    return False
                url = upload.close_url(CONFIG_DIGEST)
                check = self._aux(aux, "PUT", "config blob push", url, (201,), body=CONFIG_BLOB)
            if check.status not in (200, 201):
                return False
            self.config_present.add(key)
            return True

    # -- results ----------------------------------------------------------------------------

    def _result(
        self, req: ReplayRequest, r: Response, start: float, latency: float, digest, aux: list[AuxResult]
    ) -> ReplayResult:
        return result_of(req, r, start, latency, digest, aux)

    def _failed_aux(self, req: ReplayRequest, aux: list[AuxResult]) -> ReplayResult:
        """The trace request could not be sent because a helper request failed (its own row says how)."""
        last = aux[-1]
        why = f"not sent: helper {last.method} ({last.what}) failed: {last.outcome}: {last.error}"
        return ReplayResult(req.seq, 0, False, last.start, 0.0, error=why, outcome=NOT_SENT, attempts=0, aux=aux)


def object_path(req: ReplayRequest) -> str:
    """Where a GET/HEAD of a manifest or blob goes: the warmed or pushed digest, else the trace's reference."""
    return f"/v2/{req.repository}/{req.kind}s/{req.digest or req.reference}"


# the headers of a manifest read: one dict for every one (no sender changes the headers it is given)
MANIFEST_READ_HEADERS: dict[str, str] = {"Accept": ACCEPT}


def object_headers(req: ReplayRequest) -> dict[str, str] | None:
    return MANIFEST_READ_HEADERS if req.kind == "manifest" else None


def object_digest(req: ReplayRequest, r: Response) -> str | None:
    return req.digest or (r.header("docker-content-digest") if r.status < 300 else None)


def result_of(
    req: ReplayRequest, r: Response, start: float, latency: float, digest: str | None, aux: list[AuxResult]
) -> ReplayResult:
    """The result of a trace request, classified once (drtp.replay.outcome): ok only when answered completely,
    with a success or the trace's own status, and with the whole object when its size is known."""
    status = r.status
    outcome, error = r.outcome, r.error
    if not outcome:
        outcome = HTTP if error else status_outcome(status, req.expected_status)
        if outcome == HTTP and not error:
            error = f"HTTP {status}"
        elif outcome == OK and status == 200 and req.method == "GET" and req.object_size and r.bytes < req.object_size:
            outcome, error = TRUNCATED, f"a complete 200 answer with {r.bytes} of the object's {req.object_size} bytes"
    ok = outcome == OK
    nbytes = head_bytes(req.kind, r) if req.method == "HEAD" and not r.outcome else r.bytes
    return ReplayResult(
        req.seq,
        status,
        ok,
        start,
        latency,
        nbytes,
        digest,
        error=error,
        outcome=outcome,
        attempts=r.attempts,
        aux=aux,
        retry_after=r.retry_after(),
        challenges=r.challenges,
        cache=cache_verdict(r.headers),
    )


def head_bytes(kind: str, r: Response) -> int:
    """The bytes of a HEAD as a registry's log (and so a trace) records them: the length of the body a GET
    would have got, which the Distribution registry writes and logs though HTTP sends none for a HEAD —
    an error body (a missing blob: 157 bytes) or a manifest — and 0 for a blob found, which it answers
    without writing its body."""
    if kind == "blob" and r.status < 400:
        return 0
    length = r.header("content-length")
    return int(length) if length and length.isdigit() else 0


def _octets(size: int) -> dict[str, str]:
    return {"Content-Type": "application/octet-stream", "Content-Length": str(size)}


def _hash_into(sha, payload) -> None:
    if isinstance(payload, bytes):
        sha.update(payload)
    else:
        for chunk in payload():
            sha.update(chunk)
