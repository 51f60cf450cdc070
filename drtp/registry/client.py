"""One registry, spoken to by name: the Distribution protocol for everything but the replay itself.

A :class:`RegistryClient` is what drtp's tools use to talk to a registry —
warmup's existence checks, blob pushes and cross-repository mounts, manifest
puts, capture's object sizes, the demo's round trip, the local registry's readiness probe — so that
no module outside ``drtp.registry`` sends a registry request of its own.  It
is built on python-dxf (a ``requests`` session per request), reached with the
credentials and TLS trust of :mod:`drtp.registry.auth`.

Two paths stay on the client nodes' own transport (:mod:`drtp.registry.transport`,
through ``drtp.client.executor``) on purpose: the replayed requests, where the
replayer's CPU is taken from the registry under test, and what must behave
exactly as the nodes do — the preflight's push-and-pull check and ``drtp bench``.

Failures are the exceptions of python-dxf and requests, unchanged (their class
name is part of what warmup reports): :data:`REGISTRY_ERRORS` is the tuple to
catch.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from pathlib import Path

import certifi
import requests
from dxf import DXF
from dxf.exceptions import DXFError, DXFUnauthorizedError

from drtp.registry.auth import Authenticator
from drtp.replay.messages import RegistryAuth, registry_base

REGISTRY_ERRORS: tuple[type[Exception], ...] = (requests.RequestException, DXFError)
"""What a call of :class:`RegistryClient` raises when the registry refuses it or cannot be reached."""

OBJECT_PATHS = {"blob": "blobs", "manifest": "manifests"}


class RegistryClient:
    """Named Distribution calls to one registry (``host:port`` or a URL), with its credentials and TLS trust.

    Safe to share between threads: every call makes its own python-dxf handle, so no
    session or token is shared (a bearer token is fetched per call when the registry asks).
    """

    def __init__(self, registry: str, auth: RegistryAuth | None = None, timeout: float = 60.0) -> None:
        self.registry = registry
        self.host = registry.split("://")[-1].rstrip("/")
        self.timeout = timeout
        self.options = dxf_options(auth, registry)

    def _repository(self, repo: str) -> DXF:
        return DXF(self.host, repo, timeout=self.timeout, **self.options)

    def ping(self) -> int:
        """The HTTP status of an anonymous ``GET /v2/``: 200 open, 401 asking for credentials.

        Raises one of :data:`REGISTRY_ERRORS` (an ``OSError`` too) when nothing answers.
        """
        tlsverify = self.options.get("tlsverify", True)
        base = DXF(self.host, "", insecure=self.options["insecure"], tlsverify=tlsverify, timeout=self.timeout)
        try:
            return base.api_version_check()[1].status_code
        except DXFUnauthorizedError:
            return 401
        except requests.HTTPError as e:
            if e.response is None:
                raise
            return e.response.status_code

    def exists(self, kind: str, repo: str, digest: str) -> bool:
        """Whether the registry answers a ``HEAD`` of the blob or manifest ``digest`` in ``repo``."""
        try:  # python-dxf's own request (its session, auth and TLS): it has no public bare HEAD of a manifest
            self._repository(repo)._request("head", f"{OBJECT_PATHS[kind]}/{digest}")
            return True
        except REGISTRY_ERRORS:
            return False

    def push_blob(self, repo: str, data, digest: str) -> None:
        """Upload a blob (bytes, or an iterator of chunks whose hash is ``digest``) unless ``repo`` has it."""
        self._repository(repo).push_blob(data=data, digest=digest)

    def mount_blob(self, repo: str, from_repo: str, digest: str) -> None:
        """Make ``from_repo``'s blob ``digest`` part of ``repo`` without sending its bytes."""
        self._repository(repo).mount_blob(from_repo, digest)

    def put_manifest(self, repo: str, tag: str, body: bytes) -> None:
        """``PUT`` a manifest (JSON naming its ``mediaType``) under ``tag``."""
        self._repository(repo).set_manifest(tag, body.decode())

    def size(self, kind: str, repo: str, ref: str, accept: str | None = None) -> int | None:
        """The ``Content-Length`` of a ``HEAD`` of a blob or manifest, or None when the registry has no answer."""
        headers = {"Accept": accept} if accept else {}
        try:
            r = self._repository(repo)._request("head", f"{OBJECT_PATHS[kind]}/{ref}", headers=headers)
        except REGISTRY_ERRORS:
            return None
        if r.status_code != 200 or "Content-Length" not in r.headers:
            return None
        return int(r.headers["Content-Length"])

    def pull_blob(self, repo: str, digest: str) -> bytes:
        """A blob's bytes, checked against ``digest``."""
        return b"".join(self._repository(repo).pull_blob(digest))


def dxf_options(auth: RegistryAuth | None, registry: str) -> dict:
    """Keyword arguments for python-dxf's ``DXF(host, repo, **options)`` to reach ``registry``."""
    base = registry_base(registry)
    opts: dict = {"insecure": base.startswith("http://")}
    if auth is None:
        return opts
    if auth.insecure:
        opts["tlsverify"] = False
    elif auth.ca_pem:
        opts["tlsverify"] = ca_file_for(auth)
    if auth.username:
        user, password, basic = auth.username, auth.password, Authenticator(auth).basic

        def authenticate(dxf, response) -> None:
            if dxf._insecure:  # python-dxf refuses auth over http; the entry allowed it (insecure: true)
                dxf._headers = {"Authorization": basic}
                return
            dxf.authenticate(user, password, response=response)

        opts["auth"] = authenticate
    return opts


_CA_FILES: dict[str, str] = {}
_CA_LOCK = threading.Lock()


def ca_file_for(auth: RegistryAuth) -> str:
    """A file holding the CA text and the public CAs (python-dxf/requests take one path); one per bundle.

    Written whole under another name and renamed into place: a thread (or process) that reads it never
    sees half a file, which TLS would refuse as a broken certificate.
    """
    key = hashlib.sha256(auth.ca_pem.encode()).hexdigest()[:16]
    with _CA_LOCK:
        path = _CA_FILES.get(key)
        if path is None or not Path(path).exists():
            path = str(Path(tempfile.gettempdir()) / f"drtp-ca-{key}.pem")
            fd, tmp = tempfile.mkstemp(prefix=f"drtp-ca-{key}.", suffix=".tmp", dir=tempfile.gettempdir())
            with os.fdopen(fd, "w") as f:
                f.write(Path(certifi.where()).read_text() + "\n" + auth.ca_pem)
            os.replace(tmp, path)
            _CA_FILES[key] = path
    return path
