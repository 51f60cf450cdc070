"""A registry whose blob reads are redirected to a separate storage server, as production registries do.

The real Distribution registry's ``redirect`` storage middleware answers a blob
GET with ``307 Location: BASEURL/docker/registry/v2/blobs/…/data``; a
:class:`BlobStore` on another loopback port serves those files from the
registry's own storage directory and records every request it gets (method,
path, and whether it carried an ``Authorization`` header: credentials of the
registry must never reach it).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from drtp.registry.local import LocalRegistry, free_port


@dataclass(frozen=True)
class StoreRequest:
    method: str
    path: str
    authorization: str | None


class BlobStore:
    """A plain-http file server for ``root`` on 127.0.0.1; ``requests`` lists what it was asked."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[StoreRequest] = []
        store = self

        class Handler(SimpleHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as object storage

            def __init__(self, *args, **kw) -> None:
                super().__init__(*args, directory=str(store.root), **kw)

            def send_head(self):
                store.requests.append(StoreRequest(self.command, self.path, self.headers.get("Authorization")))
                return super().send_head()

            def log_message(self, format, *args) -> None:  # noqa: A002 - the stdlib's name
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class RedirectingRegistry:
    """A :class:`LocalRegistry` (``**registry`` passed on: tls, htpasswd, token) whose blob GETs redirect to a
    :class:`BlobStore`; use as a context manager, ``.registry`` and ``.store`` inside."""

    def __init__(self, workdir: Path, **registry) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "storage").mkdir(exist_ok=True)
        self.store = BlobStore(workdir / "storage")
        self.registry = LocalRegistry(workdir, redirect=self.store.url + "/", **registry)

    def __enter__(self) -> RedirectingRegistry:
        self.registry.start()
        return self

    def __exit__(self, *exc) -> None:
        self.registry.close()
        self.store.close()
