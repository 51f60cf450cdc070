"""A real CNCF Distribution registry on loopback, for tests and the demo.

Starts ``docker-registry serve CONFIG`` (Debian package ``docker-registry``)
on a free 127.0.0.1 port with a temporary storage directory and JSON logging,
waits until ``/v2/`` answers and stops it on exit.  Its JSON log — the
"response completed" lines — is the ground truth of what a replay sent, and
``drtp.trace.reader`` reads it as a trace (format ``registry-log``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from drtp.errors import DrtpError
from drtp.registry.calls import REGISTRY_ERRORS, RegistryCalls
from drtp.replay.messages import RegistryAuth

CONFIG_TEMPLATE = """\
version: 0.1
log:
  level: info
  formatter: json
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {storage}
  delete:
    enabled: {delete}
  maintenance:
    uploadpurging:
      enabled: false
    readonly:
      enabled: {readonly}
http:
  addr: 127.0.0.1:{port}
  secret: drtp-local-registry
"""


def registry_binary() -> str:
    """The registry executable: ``$DRTP_REGISTRY_BIN``, Debian's, or one on PATH."""
    for candidate in (os.environ.get("DRTP_REGISTRY_BIN"), "/usr/bin/docker-registry"):
        if candidate and Path(candidate).is_file():
            return candidate
    found = shutil.which("docker-registry") or shutil.which("registry")
    if not found:
        raise DrtpError("the Distribution registry is not installed (apt-get install docker-registry)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalRegistry:
    """A registry process on 127.0.0.1; use as a context manager.

    ``workdir`` holds ``config.yml``, ``storage/`` and ``registry.log`` (the
    JSON log); a temporary directory is made and removed when none is given.

    Optional, for testing real-registry features: ``tls=(cert, key)`` serves
    https; ``htpasswd=PATH`` requires HTTP basic auth (bcrypt htpasswd file);
    ``token={realm, service, issuer, rootcertbundle}`` requires Docker bearer
    tokens (JWTs signed by a key whose certificate is in the bundle);
    ``redirect=BASEURL`` answers blob GETs with a redirect to ``BASEURL`` + the blob's
    path under ``storage/`` (the registry's own redirect middleware, as production
    registries send blob reads to object storage); ``delete=False`` turns the storage's
    deletes off, so every DELETE is answered 405 ``UNSUPPORTED`` (as registries that
    manage repositories through an API of their own do); ``metrics=True`` serves the registry's
    Prometheus metrics on a second port (``http.debug``), at :attr:`metrics_url`; ``proxy={remoteurl,
    username, password}`` makes it a pull-through cache of that upstream (start the upstream first: the
    registry panics at start when it cannot reach it); ``readonly=True`` refuses writes (the storage's
    maintenance mode; change :attr:`readonly` and :meth:`restart` to switch).  ``http.secret`` is fixed, so an
    upload spans a restart.
    """

    def __init__(
        self,
        workdir: str | Path | None = None,
        port: int | None = None,
        tls: tuple[str | Path, str | Path] | None = None,
        htpasswd: str | Path | None = None,
        token: dict | None = None,
        redirect: str | None = None,
        delete: bool = True,
        metrics: bool = False,
        proxy: dict | None = None,
        readonly: bool = False,
    ) -> None:
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="drtp-registry-")
        self.workdir = Path(workdir or self._tmp.name)
        self.port = port
        self.tls = tls
        self.htpasswd = htpasswd
        self.token = token
        self.redirect = redirect
        self.delete = delete
        self.metrics_port = free_port() if metrics else None
        self.proxy = proxy
        self.readonly = readonly
        self.proc: subprocess.Popen | None = None

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``, the form the config's ``registry`` takes."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}"

    @property
    def metrics_url(self) -> str:
        """Where the registry serves its Prometheus metrics (``metrics=True``)."""
        if self.metrics_port is None:
            raise ValueError("the registry was started without metrics=True")
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def _config_text(self) -> str:
        text = CONFIG_TEMPLATE.format(
            storage=self.workdir / "storage",
            port=self.port,
            delete=str(self.delete).lower(),
            readonly=str(self.readonly).lower(),
        )
        if self.metrics_port is not None:
            text += f"  debug:\n    addr: 127.0.0.1:{self.metrics_port}\n    prometheus:\n      enabled: true\n"
            text += "      path: /metrics\n"
        if self.tls:
            text += f"  tls:\n    certificate: {self.tls[0]}\n    key: {self.tls[1]}\n"
        if self.htpasswd:
            text += f"auth:\n  htpasswd:\n    realm: drtp-test\n    path: {self.htpasswd}\n"
        elif self.token:
            text += "auth:\n  token:\n" + "".join(f"    {k}: {v}\n" for k, v in self.token.items())
        if self.proxy:
            text += "proxy:\n" + "".join(f"  {k}: {v}\n" for k, v in self.proxy.items())
        if self.redirect:
            text += f"middleware:\n  storage:\n    - name: redirect\n      options:\n        baseurl: {self.redirect}\n"
        return text

    @property
    def log_path(self) -> Path:
        return self.workdir / "registry.log"

    def start(self, timeout: float = 20.0) -> LocalRegistry:
        if self.proc is not None and self.proc.poll() is None:  # running already (``with`` on a started one)
            return self
        binary = registry_binary()
        self.workdir.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):  # a free port can be taken between probe and bind
            self.port = self.port if self.port and attempt == 0 else free_port()
            config = self.workdir / "config.yml"
            config.write_text(self._config_text())
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [binary, "serve", str(config)], stdout=log, stderr=log, stdin=subprocess.DEVNULL
                )
            if self._wait_ready(timeout):
                return self
            self.stop()
        raise DrtpError(f"the registry did not start; see {self.log_path}")

    def _wait_ready(self, timeout: float) -> bool:
        # our own process, reached without verifying its certificate: readiness only
        probe = RegistryCalls(self.url, RegistryAuth(self.url, insecure=True), timeout=1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                if probe.ping() in (200, 401):  # up (401: and asking for credentials)
                    return True
            except (*REGISTRY_ERRORS, OSError):
                pass
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self, timeout: float = 20.0) -> LocalRegistry:
        """Stop and start again on the same port, with the settings as they are now (e.g. :attr:`readonly`)."""
        self.stop()
        return self.start(timeout)

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> LocalRegistry:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
