"""The fault proxy on its own: plain clients see each fault kind, clean keep-alive passes through untouched,
and the registry's log shows every request exactly once whatever happened to its answer."""

from __future__ import annotations

import hashlib
import http.client
import os
import socket
import threading
from collections import Counter

import pytest

from drtp.registry.local import LocalRegistry
from tests.faultproxy import KINDS, At, Chosen, FaultProxy, Mixed, expected_outcome, is_replayed
from tests.registry_log import logged_requests

pytestmark = pytest.mark.registry

BLOB_SIZE = 1000
REPO = "fp/test"


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    with LocalRegistry(tmp_path_factory.mktemp("registry")) as reg:
        yield reg


@pytest.fixture(scope="module")
def blob(registry) -> str:
    """A blob pushed straight to the registry (no proxy): its digest."""
    data = os.urandom(BLOB_SIZE)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    conn = http.client.HTTPConnection(registry.host, timeout=10)
    conn.request("POST", f"/v2/{REPO}/blobs/uploads/", body=b"")
    r = conn.getresponse()
    r.read()
    assert r.status == 202
    conn.request("PUT", f"{r.getheader('Location')}&digest={digest}", body=data)
    r = conn.getresponse()
    r.read()
    assert r.status == 201
    conn.close()
    return digest


def raw_exchange(address: str, request: bytes, timeout: float = 10.0) -> tuple[bytes, str]:
    """Send ``request`` on a fresh socket and read until the server ends: (bytes received, how it ended)."""
    host, port = address.split(":")
    got = b""
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(request)
        for _ in range(10_000):  # bounded: far more reads than any test answer needs
            try:
                data = s.recv(65536)
            except ConnectionResetError:
                return got, "reset"
            except TimeoutError:
                return got, "timeout"
            if not data:
                return got, "eof"
            got += data
    raise AssertionError("the server never ended the connection")


def get(path: str, method: str = "GET") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()


def test_keep_alive_passes_through_untouched(registry, blob):
    offset = registry.log_path.stat().st_size
    paths = [
        ("GET", "/v2/"),
        ("GET", f"/v2/{REPO}/blobs/{blob}"),
        ("HEAD", f"/v2/{REPO}/blobs/{blob}"),
        ("GET", f"/v2/{REPO}/manifests/missing"),
        ("HEAD", f"/v2/{REPO}/manifests/missing"),
    ]
    direct = http.client.HTTPConnection(registry.host, timeout=10)
    expected = []
    for method, path in paths:
        direct.request(method, path)
        r = direct.getresponse()
        expected.append((r.status, r.read()))
    direct.close()
    with FaultProxy(registry.host) as proxy:
        conn = http.client.HTTPConnection(proxy.address, timeout=10)
        seen = []
        for method, path in paths * 3:
            conn.request(method, path)
            r = conn.getresponse()
            seen.append((r.status, r.read()))
        # an upload through the proxy: request bodies are forwarded whole, the Location points back at the proxy
        data = os.urandom(300)
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        conn.request("POST", f"/v2/{REPO}/blobs/uploads/", body=b"")
        r = conn.getresponse()
        r.read()
        assert r.status == 202 and proxy.address in r.getheader("Location")
        conn.request("PATCH", r.getheader("Location"), body=data)
        r = conn.getresponse()
        r.read()
        assert r.status == 202
        conn.request("PUT", f"{r.getheader('Location')}&digest={digest}", body=b"")
        r = conn.getresponse()
        r.read()
        assert r.status == 201 and r.getheader("Docker-Content-Digest") == digest
        conn.close()
        assert proxy.connections == 1  # everything above went over one kept-alive connection
        assert proxy.injected == [] and proxy.errors == []
        assert proxy.methods == Counter({"GET": 9, "HEAD": 6, "POST": 1, "PATCH": 1, "PUT": 1})
    assert seen == expected * 3
    assert seen[1] == (200, seen[1][1]) and len(seen[1][1]) == BLOB_SIZE
    logged = logged_requests(registry.log_path, offset)
    assert Counter(x.method for x in logged) == Counter({"GET": 12, "HEAD": 8, "POST": 1, "PATCH": 1, "PUT": 1})


@pytest.mark.parametrize("kind", ["503", "429", "500"])
def test_status_faults_answer_that_status_and_keep_the_connection(registry, blob, kind):
    offset = registry.log_path.stat().st_size
    with FaultProxy(registry.host, At({0: kind, 1: kind})) as proxy:
        conn = http.client.HTTPConnection(proxy.address, timeout=10)
        conn.request("GET", f"/v2/{REPO}/blobs/{blob}")
        r = conn.getresponse()
        body = r.read()
        assert r.status == int(kind) and b"injected" in body and int(r.getheader("Content-Length")) == len(body)
        conn.request("HEAD", f"/v2/{REPO}/blobs/{blob}")  # an answer to HEAD: headers only
        r = conn.getresponse()
        assert r.status == int(kind) and r.read() == b""
        conn.request("GET", f"/v2/{REPO}/blobs/{blob}")  # the same connection carries on, unfaulted
        r = conn.getresponse()
        assert r.status == 200 and len(r.read()) == BLOB_SIZE
        conn.close()
        injected = proxy.injected
        assert proxy.connections == 1 and proxy.errors == []
    assert [(f.index, f.method, f.kind, f.outcome, f.status, f.upstream_status) for f in injected] == [
        (0, "GET", kind, "http", int(kind), 200),
        (1, "HEAD", kind, "http", int(kind), 200),
    ]
    # the registry answered each request once: the real answer was read and thrown away
    assert [(x.method, x.status) for x in logged_requests(registry.log_path, offset)] == [
        ("GET", 200),
        ("HEAD", 200),
        ("GET", 200),
    ]


def test_close_sends_nothing(registry, blob):
    offset = registry.log_path.stat().st_size
    with FaultProxy(registry.host, At({0: "close"})) as proxy:
        got, end = raw_exchange(proxy.address, get(f"/v2/{REPO}/blobs/{blob}"))
        assert (got, end) == (b"", "eof")
        assert [(f.kind, f.outcome, f.upstream_status) for f in proxy.injected] == [("close", "reset", 200)]
    assert [(x.method, x.status) for x in logged_requests(registry.log_path, offset)] == [("GET", 200)]


def test_reset_cuts_the_body_in_half(registry, blob):
    offset = registry.log_path.stat().st_size
    with FaultProxy(registry.host, At({0: "reset"})) as proxy:
        got, end = raw_exchange(proxy.address, get(f"/v2/{REPO}/blobs/{blob}"))
        injected = proxy.injected
    assert end == "reset"
    head, sep, body = got.partition(b"\r\n\r\n")
    assert sep and head.startswith(b"HTTP/1.1 200") and f"Content-Length: {BLOB_SIZE}".encode() in head
    assert len(body) == BLOB_SIZE // 2
    assert [(f.kind, f.outcome, f.status) for f in injected] == [("reset", "truncated", 0)]
    assert [(x.method, x.status) for x in logged_requests(registry.log_path, offset)] == [("GET", 200)]


def test_reset_without_a_body_cuts_the_header_block(registry, blob):
    offset = registry.log_path.stat().st_size
    with FaultProxy(registry.host, At({0: "reset"})) as proxy:
        got, end = raw_exchange(proxy.address, get(f"/v2/{REPO}/blobs/{blob}", "HEAD"))
        injected = proxy.injected
    assert end == "reset"
    assert got.startswith(b"HTTP/1.1 200") and b"\r\n\r\n" not in got  # part of the header block only
    assert [(f.method, f.kind, f.outcome) for f in injected] == [("HEAD", "reset", "reset")]
    assert [(x.method, x.status) for x in logged_requests(registry.log_path, offset)] == [("HEAD", 200)]


def test_delay_holds_the_answer_past_the_client_timeout_then_closes(registry, blob):
    offset = registry.log_path.stat().st_size
    with FaultProxy(registry.host, At({0: "delay"}), delay_s=1.0) as proxy:
        conn = http.client.HTTPConnection(proxy.address, timeout=0.3)
        conn.request("GET", f"/v2/{REPO}/blobs/{blob}")
        with pytest.raises(TimeoutError):
            conn.getresponse()
        conn.close()
        # a patient client gets no answer either: the connection ends empty once the hold is over
        got, end = raw_exchange(proxy.address, get(f"/v2/{REPO}/blobs/{blob}"))
        assert (got[:12], end) == (b"HTTP/1.1 200", "eof")  # index 1 is not faulted
        assert [(f.index, f.kind, f.outcome) for f in proxy.injected] == [(0, "delay", "timeout")]
    with FaultProxy(registry.host, At({0: "delay"}), delay_s=0.5) as proxy:
        assert raw_exchange(proxy.address, get(f"/v2/{REPO}/blobs/{blob}")) == (b"", "eof")
    assert [(x.method, x.status) for x in logged_requests(registry.log_path, offset)] == [("GET", 200)] * 3


def test_a_push_with_faults_on_every_step_reaches_the_registry_once_per_request(registry):
    """POST, PATCH and PUT each get a fault; the registry still sees each once (nothing is re-sent)."""
    offset = registry.log_path.stat().st_size
    data = os.urandom(2000)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    with FaultProxy(registry.host, At({0: "503", 1: "close", 2: "reset"})) as proxy:
        conn = http.client.HTTPConnection(proxy.address, timeout=10)
        conn.request("POST", f"/v2/{REPO}/blobs/uploads/", body=b"")
        r = conn.getresponse()
        r.read()
        assert r.status == 503
        # the registry did open an upload; its answer was thrown away
        assert [(f.method, f.upstream_status) for f in proxy.forwarded] == [("POST", 202)]
        # two more uploads, opened directly: one PATCHed, one closed with a monolithic PUT through the proxy
        urls = []
        direct = http.client.HTTPConnection(registry.host, timeout=10)
        for _ in range(2):
            direct.request("POST", f"/v2/{REPO}/blobs/uploads/", body=b"")
            r = direct.getresponse()
            r.read()
            urls.append(r.getheader("Location").replace(registry.host, proxy.address))
        direct.close()
        conn.request("PATCH", urls[0], body=data)
        with pytest.raises(http.client.RemoteDisconnected):
            conn.getresponse()
        conn.close()
        head = f"PUT {urls[1]}&digest={digest} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\n\r\n"
        got, end = raw_exchange(proxy.address, head.encode() + data)
        assert end == "reset" and b"\r\n\r\n" not in got  # 201 has no body: cut in the header block
        injected = proxy.injected
    assert [(f.method, f.kind, f.outcome, f.upstream_status) for f in injected] == [
        ("POST", "503", "http", 202),
        ("PATCH", "close", "reset", 202),
        ("PUT", "reset", "reset", 201),
    ]
    logged = Counter((x.method, x.status) for x in logged_requests(registry.log_path, offset))
    # the proxied POST, PATCH and PUT landed once each (two more POSTs went straight to the registry)
    assert logged == Counter({("POST", 202): 3, ("PATCH", 202): 1, ("PUT", 201): 1})


class _CannedUpstream:
    """A loopback HTTP server answering each request of one connection with the next canned answer."""

    def __init__(self, answers: list[bytes]) -> None:
        self.answers = answers
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.host = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(10)
        conn, _ = self.sock.accept()
        conn.settimeout(10)
        with conn:
            for answer in self.answers:
                buf = b""
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(4096)
                    if not data:
                        return
                    buf += data
                conn.sendall(answer)

    def close(self) -> None:
        self.thread.join(timeout=10)
        self.sock.close()


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"


def test_answer_framing_chunked_head_204_304():
    upstream = _CannedUpstream(
        [
            CHUNKED,
            b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n",  # to HEAD: no body follows
            b"HTTP/1.1 204 No Content\r\n\r\n",
            b"HTTP/1.1 304 Not Modified\r\nETag: x\r\n\r\n",
            CHUNKED,
        ]
    )
    try:
        with FaultProxy(upstream.host, At({4: "reset"})) as proxy:
            conn = http.client.HTTPConnection(proxy.address, timeout=10)
            for method, status, body in (("GET", 200, b"hello world"), ("HEAD", 200, b""), ("GET", 204, b"")):
                conn.request(method, "/v2/x/blobs/a")
                r = conn.getresponse()
                assert (r.status, r.read()) == (status, body)
            conn.request("GET", "/v2/x/blobs/a", headers={"If-None-Match": "x"})
            r = conn.getresponse()
            assert (r.status, r.read()) == (304, b"")
            conn.request("GET", "/v2/x/blobs/a")
            with pytest.raises((http.client.IncompleteRead, ConnectionResetError)):  # half a chunked body, then RST
                conn.getresponse().read()
            conn.close()
            assert proxy.connections == 1 and proxy.errors == []
            assert [(f.index, f.outcome) for f in proxy.injected] == [(4, "truncated")]
    finally:
        upstream.close()


def test_plans():
    assert is_replayed("GET", "/v2/a/b/blobs/sha256:1") and is_replayed("PATCH", "/v2/a/blobs/uploads/u")
    assert not is_replayed("GET", "/v2/") and not is_replayed("POST", "/v2/drtp-preflight/blobs/uploads/")
    chosen = Chosen(kinds=("503", "close"), per_kind=2, start=1, gap=2, methods=("GET",))
    picks = [chosen(i, "GET", f"/v2/r/blobs/{i}") for i in range(12)]
    assert picks == [None, "503", None, "503", None, "close", None, "close", None, None, None, None]
    assert Chosen()(0, "DELETE", "/v2/r/blobs/x") is None
    once = Chosen(kinds=("close",), per_kind=5, start=0, gap=1)
    assert [once(i, "GET", p) for i, p in enumerate(["/v2/r/blobs/a", "/v2/r/blobs/a", "/v2/r/blobs/b"])] == [
        "close",
        None,  # the same read again (a retry): its real answer
        "close",
    ]
    mixed = Mixed(rate=0.1, seed=3)
    draws = [mixed(i, "GET", "/v2/r/blobs/x") for i in range(5000)]
    assert draws == [Mixed(rate=0.1, seed=3)(i, "GET", "/v2/r/blobs/x") for i in range(5000)]  # seeded
    faulted = [d for d in draws if d]
    assert 400 < len(faulted) < 600 and set(faulted) == set(KINDS)
    assert mixed(1, "GET", "/v2/") is None
    assert expected_outcome("reset", 1) == ("reset", 0) and expected_outcome("reset", 2) == ("truncated", 0)
    with pytest.raises(ValueError):
        Chosen(kinds=("boom",))
    with pytest.raises(ValueError):
        FaultProxy("10.0.0.1:5000")
