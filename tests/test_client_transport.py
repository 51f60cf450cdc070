"""drtp.registry.transport: the lean HTTP/1.1 connection, against the real registry and a scripted socket peer."""

from __future__ import annotations

import hashlib
import os
import socket
import threading

import pytest

from drtp.registry.local import LocalRegistry
from drtp.registry.transport import Connection, RequestError


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    with LocalRegistry(tmp_path_factory.mktemp("registry")) as reg:
        yield reg


def netloc(url: str) -> str:
    return url.split("//", 1)[1]


def test_push_get_head_on_one_kept_alive_connection(registry):
    conn = Connection("http", netloc(registry.url), timeout=10)
    data = os.urandom(300_000)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    r = conn.request("POST", "/v2/t/x/blobs/uploads/")
    assert r.status == 202 and r.header("location")
    sock = conn.sock
    loc = r.header("location").split("//", 1)[-1]
    loc = loc[loc.index("/") :] if not loc.startswith("/") else loc
    r = conn.request("PUT", f"{loc}&digest={digest}", body=data, headers={"Content-Type": "application/octet-stream"})
    assert r.status == 201, r.headers
    r = conn.request("GET", f"/v2/t/x/blobs/{digest}")
    assert (r.status, r.bytes, r.header("docker-content-digest")) == (200, len(data), digest)
    r = conn.request("HEAD", f"/v2/t/x/blobs/{digest}")
    assert (r.status, r.bytes, r.header("content-length")) == (200, 0, str(len(data)))
    r = conn.request("GET", "/v2/t/x/blobs/sha256:" + "0" * 64)
    assert r.status == 404 and r.bytes > 0  # the registry's JSON error body is read to its end
    r = conn.request("GET", f"/v2/t/x/blobs/{digest}")  # after a HEAD and an error the stream is still in step
    assert (r.status, r.bytes) == (200, len(data))
    assert conn.sock is sock  # one TCP connection for all of it


def test_streamed_body_with_known_length(registry):
    conn = Connection("http", netloc(registry.url), timeout=10)
    parts = [os.urandom(1 << 20) for _ in range(3)]
    digest = "sha256:" + hashlib.sha256(b"".join(parts)).hexdigest()
    loc = conn.request("POST", "/v2/t/y/blobs/uploads/").header("location")
    loc = loc[loc.index("/v2/") :]
    size = sum(map(len, parts))
    r = conn.request("PUT", f"{loc}&digest={digest}", body=lambda: iter(parts), headers={"Content-Length": str(size)})
    assert r.status == 201
    assert conn.request("HEAD", f"/v2/t/y/blobs/{digest}").header("content-length") == str(size)


class Peer:
    """A one-connection-at-a-time socket server that answers each request with the next scripted bytes."""

    def __init__(self, answers: list[bytes | None]) -> None:
        self.answers = answers
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while self.answers:
            c, _ = self.sock.accept()
            self.connections += 1
            with c:
                while self.answers:
                    if not c.recv(65536):
                        break
                    answer = self.answers.pop(0)
                    if answer is None:  # close without answering
                        break
                    c.sendall(answer)


def test_server_closing_before_answering_is_a_reset():
    peer = Peer([None])
    conn = Connection("http", f"127.0.0.1:{peer.port}", timeout=5)
    with pytest.raises(RequestError) as e:
        conn.request("GET", "/")
    assert (e.value.outcome, e.value.answered) == ("reset", False)
    assert not conn.open


def test_answer_cut_in_the_body_is_truncated_and_in_the_header_a_reset():
    peer = Peer([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf"])
    conn = Connection("http", f"127.0.0.1:{peer.port}", timeout=5)
    with pytest.raises(RequestError) as e:
        conn.request("GET", "/")
    assert (e.value.outcome, e.value.answered) == ("truncated", True)
    assert "4 of 10 body bytes" in e.value.message
    peer = Peer([b"HTTP/1.1 200 OK\r\nContent-Len"])
    with pytest.raises(RequestError) as e:
        Connection("http", f"127.0.0.1:{peer.port}", timeout=5).request("GET", "/")
    assert (e.value.outcome, e.value.answered) == ("reset", True)


def test_answer_delimited_by_close_and_connection_close_header():
    peer = Peer([b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello"])
    conn = Connection("http", f"127.0.0.1:{peer.port}", timeout=5)
    r = conn.request("GET", "/")
    assert (r.status, r.bytes) == (200, 5)
    assert not conn.open  # the answer said close: the next request reconnects


def test_chunked_answer_is_counted():
    peer = Peer([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"])
    conn = Connection("http", f"127.0.0.1:{peer.port}", timeout=5)
    r = conn.request("GET", "/")
    assert (r.status, r.bytes) == (200, 7) and conn.open


def test_a_streamed_answer_reaches_its_sink_while_it_is_still_coming():
    """The rest of the answer is sent only once the sink has its first part: a sink called at the end only
    would leave the peer waiting and the request timing out."""
    got: list[bytes] = []
    first_part = threading.Event()
    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        c, _ = srv.accept()
        with c:
            c.recv(65536)
            c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
            if first_part.wait(5):
                c.sendall(b"4\r\ndefg\r\n0\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()

    def sink(data: bytes) -> None:
        got.append(data)
        first_part.set()

    conn = Connection("http", f"127.0.0.1:{srv.getsockname()[1]}", timeout=2)
    r = conn.request("GET", "/stream", stream=sink)
    assert (r.status, r.bytes, b"".join(got)) == (200, 7, b"abcdefg") and len(got) == 2


def test_a_refused_stream_keeps_its_body_from_the_sink_and_a_failing_sink_closes_the_connection():
    got: list[bytes] = []
    peer = Peer([b"HTTP/1.1 403 Forbidden\r\nContent-Length: 6\r\n\r\nbanned"])
    r = Connection("http", f"127.0.0.1:{peer.port}", timeout=5).request("GET", "/", stream=got.append)
    assert (r.status, got) == (403, [])

    def sink(data: bytes) -> None:
        raise ValueError(f"not a frame: {data!r}")

    peer = Peer([b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\njunk"])
    conn = Connection("http", f"127.0.0.1:{peer.port}", timeout=5)
    with pytest.raises(ValueError, match="junk"):
        conn.request("GET", "/", stream=sink)
    assert not conn.open


def test_garbage_answer_is_protocol_error():
    peer = Peer([b"SSH-2.0-OpenSSH_9.2\r\n\r\n"])
    conn = Connection("http", f"127.0.0.1:{peer.port}", timeout=5)
    with pytest.raises(RequestError) as e:
        conn.request("GET", "/")
    assert e.value.outcome == "protocol"
    assert not conn.open


def test_silent_peer_times_out():
    peer = Peer([])  # accepts (backlog) and never answers
    conn = Connection("http", f"127.0.0.1:{peer.port}", timeout=0.3)
    with pytest.raises(RequestError) as e:
        conn.request("GET", "/")
    assert (e.value.outcome, e.value.answered) == ("timeout", False) and "read timeout" in e.value.message


def test_refused_connection_is_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RequestError) as e:
        Connection("http", f"127.0.0.1:{port}", timeout=2).request("GET", "/")
    assert e.value.outcome == "refused"


class ClosingPeer:
    """Answers each request on a connection, then closes that connection while it is idle."""

    def __init__(self, answer: bytes, connections: int) -> None:
        self.answer = answer
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests = 0
        threading.Thread(target=self._serve, args=(connections,), daemon=True).start()

    def _serve(self, connections: int) -> None:
        for _ in range(connections):
            c, _ = self.sock.accept()
            with c:
                if c.recv(65536):
                    self.requests += 1
                    c.sendall(self.answer)


def _executor(peer_port: int, **spec):
    import time

    from drtp.client.executor import Executor
    from drtp.replay.messages import ReplayRequest, RunSpec

    ex = Executor(RunSpec(run="r", start_epoch=time.time(), timeout=5, **spec), time.perf_counter)

    def send(seq: int, method: str = "GET", op: str = "get"):
        req = ReplayRequest(seq, f"id{seq}", "c1", method, "blob", op, f"127.0.0.1:{peer_port}", "t/x", "l", 2, 200)
        return ex.execute(req)

    return send


def test_executor_replaces_a_connection_closed_while_idle_before_writing():
    """The registry may close an idle kept-alive connection: found before the request is written, not a failure."""
    import time

    peer = ClosingPeer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", connections=2)
    send = _executor(peer.port)
    first = send(0)
    time.sleep(0.2)  # the peer has closed the idle connection by now
    second = send(1)
    assert (first.ok, first.bytes, first.attempts) == (True, 2, 1)
    assert (second.ok, second.status, second.bytes, second.attempts) == (True, 200, 2, 1), second.error
    assert peer.requests == 2


def test_executor_never_resends_a_written_request():
    """A connection that drops after the request was written is the request's failure: sent once, class reset."""
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    peer = Peer([ok, None, ok, None])
    send = _executor(peer.port)
    assert send(0).ok
    gone = send(1)
    assert (gone.ok, gone.outcome, gone.status, gone.attempts) == (False, "reset", 0, 1)
    assert "without an answer" in gone.error
    assert send(2).ok
    put = send(3, "PUT", "upload-close")  # opens its upload with a helper POST first: that one drops
    assert put.outcome == "not-sent" and put.aux[0].outcome == "reset" and put.aux[0].error
    assert peer.connections == 2  # nothing was sent again on a new connection


def test_executor_retries_only_idempotent_requests_without_an_answer_when_asked():
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    peer = Peer([None, ok, b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nok"])
    send = _executor(peer.port, retries=2)
    again = send(0)
    assert (again.ok, again.attempts) == (True, 2)  # no answer byte came: sent again, counted
    cut = send(1)
    assert (cut.ok, cut.outcome, cut.attempts) == (False, "truncated", 1)  # an answer began: never again
    assert peer.connections == 2 and not peer.answers  # the cut answer was not asked for again


def fetch(netloc: str, requests: list[tuple[str, str]], timeout: float = 5):
    """Run AsyncConnection requests one after the other on one connection; results or exceptions."""
    import asyncio

    from drtp.registry.async_transport import AsyncConnection

    async def go():
        conn = AsyncConnection(netloc, timeout)
        out = []
        for method, target in requests:
            try:
                out.append(await conn.request(method, target))
            except Exception as e:  # noqa: BLE001 - the test looks at which
                out.append(e)
        return out, conn

    return asyncio.run(go())


def test_async_connection_get_head_404_on_one_connection(registry):
    conn = Connection("http", netloc(registry.url), timeout=10)
    data = os.urandom(700_000)  # more than one read buffer
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    loc = conn.request("POST", "/v2/t/z/blobs/uploads/").header("location")
    assert conn.request("PUT", f"{loc[loc.index('/v2/') :]}&digest={digest}", body=data).status == 201
    blob = f"/v2/t/z/blobs/{digest}"
    missing = "/v2/t/z/blobs/sha256:" + "1" * 64
    out, _ = fetch(netloc(registry.url), [("GET", blob), ("HEAD", blob), ("GET", missing), ("GET", blob)])
    get, head, missing, again = out
    assert (get.status, get.bytes, get.header("docker-content-digest")) == (200, len(data), digest)
    assert (head.status, head.bytes, head.header("content-length")) == (200, 0, str(len(data)))
    assert missing.status == 404 and missing.bytes == int(missing.header("content-length")) > 0
    assert (again.status, again.bytes) == (200, len(data))


def test_async_connection_edge_cases():
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"
    peer = Peer([chunked, b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello"])
    (first, second), conn = fetch(f"127.0.0.1:{peer.port}", [("GET", "/a"), ("GET", "/b")])
    assert first.status == 200 and first.bytes == len(b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n")  # chunked: wire bytes
    assert (second.status, second.bytes) == (200, 5) and not conn.open
    closing = Peer([None])
    (gone,), _ = fetch(f"127.0.0.1:{closing.port}", [("GET", "/")])
    assert isinstance(gone, RequestError) and gone.outcome == "reset"
    cut = Peer([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf"])
    (short,), _ = fetch(f"127.0.0.1:{cut.port}", [("GET", "/")])
    assert isinstance(short, RequestError) and short.outcome == "truncated" and short.answered
    garbage = Peer([b"SSH-2.0-OpenSSH_9.2\r\n\r\n"])
    (bad,), _ = fetch(f"127.0.0.1:{garbage.port}", [("GET", "/")])
    assert isinstance(bad, RequestError) and bad.outcome == "protocol"
    silent = Peer([])  # kept referenced: its listening socket must stay open
    (slow,), _ = fetch(f"127.0.0.1:{silent.port}", [("GET", "/")], timeout=0.3)
    assert isinstance(slow, RequestError) and slow.outcome == "timeout"


def test_async_connection_reuses_its_parser_only_between_whole_get_answers():
    """After a GET answer that ended at its Content-Length the next answer is read by the same parser, with
    nothing of the previous one left (headers, status, bytes); after a HEAD, a chunked answer or a closed
    connection a new one reads it, so every answer reads as on a fresh connection."""
    digest = "sha256:" + "a" * 64
    first = f"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nDocker-Content-Digest: {digest}\r\n\r\nok".encode()
    missing = b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nnot"
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    last = b"HTTP/1.1 201 Created\r\nContent-Length: 4\r\nLocation: /x\r\n\r\ndone"
    peer = Peer([first, missing, head, first, chunked, last])
    requests = [("GET", "/a"), ("GET", "/b"), ("HEAD", "/c"), ("GET", "/d"), ("GET", "/e"), ("GET", "/f")]
    parsers = []

    import asyncio

    from drtp.registry.async_transport import AsyncConnection

    async def go():
        conn = AsyncConnection(f"127.0.0.1:{peer.port}", 5)
        out = []
        for method, target in requests:
            out.append(await conn.request(method, target))
            parsers.append(conn.parser)
        return out

    a, b, c, d, e, f = asyncio.run(go())
    assert (a.status, a.bytes, a.header("docker-content-digest")) == (200, 2, digest)
    assert (b.status, b.bytes, b.header("docker-content-digest")) == (404, 3, None)  # nothing of a's
    assert (c.status, c.bytes, c.header("content-length")) == (200, 0, "5")
    assert (d.status, d.bytes, d.header("docker-content-digest")) == (200, 2, digest)
    assert (e.status, e.bytes) == (200, len(b"3\r\nabc\r\n0\r\n\r\n"))
    assert (f.status, f.bytes, f.header("location"), f.header("transfer-encoding")) == (201, 4, "/x", None)
    assert parsers[1] is parsers[0]  # a ended at its Content-Length: b was read by the same parser
    assert parsers[2] is not parsers[1]  # a HEAD gets its own (its answer's Content-Length has no body)
    assert parsers[3] is not parsers[2]  # and the GET after it a new one
    assert parsers[5] is not parsers[4]  # as the answer after a chunked one
    assert peer.connections == 1


def run_on_loop(requests, timeout: float = 5.0) -> list:
    """Submit requests to a LoopRun (the stress engine), end the run, return its results by seq."""
    import time

    from drtp.client.loop_engine import LoopRun
    from drtp.replay.messages import RunSpec

    run = LoopRun(RunSpec(run="r", start_epoch=time.time(), threads=4, timeout=timeout, engine="loop"))
    run.submit(requests)
    run.end()
    out = []
    while (item := run.results.get(timeout=10)) is not None:
        out.extend(f.result for f in (item if isinstance(item, list) else [item]))  # Finished: request, result
    assert run.finished
    return sorted(out, key=lambda r: r.seq)


def test_loop_engine_follows_a_redirect():
    """A registry that redirects blob reads to its storage (307): the loop follows it to the storage server."""
    from drtp.replay.messages import ReplayRequest

    storage = Peer([b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nlayer"])
    registry = Peer(
        [
            f"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:{storage.port}/blob\r\n"
            "Content-Length: 0\r\n\r\n".encode()
        ]
    )
    req = ReplayRequest(0, "id0", "c1", "GET", "blob", "get", f"127.0.0.1:{registry.port}", "t/x", "sha256:ab", 5, 200)
    (result,) = run_on_loop([req])
    assert (result.ok, result.status, result.bytes) == (True, 200, 5), result.error
    assert storage.connections == 1 and registry.connections == 1


def test_loop_engine_keeps_each_clients_order_and_reports_failures(registry):
    """Requests of one trace client run one after the other; a refused registry gives failed results, not a hang."""
    from drtp.replay.messages import ReplayRequest

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    host = netloc(registry.url)
    reqs = [  # the trace's reads of a tag never pushed: 404, as the trace had it
        ReplayRequest(i, f"id{i}", f"c{i % 2}", "GET", "manifest", "get", host, "t/none", "v1", 100, 404)
        for i in range(10)
    ] + [ReplayRequest(10, "id10", "c9", "HEAD", "blob", "get", f"127.0.0.1:{closed}", "t/x", "sha256:cd", 0, 200)]
    results = run_on_loop(reqs)
    assert [r.seq for r in results] == list(range(11))
    assert all(r.ok and r.status == 404 and r.bytes > 0 for r in results[:10])
    for client in (0, 1):  # each client's requests started after the previous one ended, in trace order
        mine = [r for r in results[:10] if r.seq % 2 == client]
        assert all(a.start + a.latency <= b.start + 1e-6 for a, b in zip(mine, mine[1:], strict=False))
    assert not results[10].ok and results[10].status == 0 and results[10].outcome == "refused"
    assert "Connection refused" in results[10].error


@pytest.mark.parametrize("engine", ["loop", "threads"])
def test_a_stuck_request_holds_back_only_its_own_trace_client(engine):
    """One slot, one trace client whose registry never answers: the other clients' requests all finish
    before the stuck one times out, and the stuck client's next request waits for it (trace order)."""
    import time

    from drtp.client.loop_engine import LoopRun
    from drtp.client.scheduler import STALL_S, NodeRun
    from drtp.replay.messages import ReplayRequest, RunSpec

    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    answering = Peer([ok] * 20)
    silent = Peer([])  # accepts, never answers
    timeout = STALL_S * 4
    reqs = [ReplayRequest(0, "id0", "stuck", "GET", "blob", "get", f"127.0.0.1:{silent.port}", "t/x", "l", 2, 200)]
    reqs.append(
        ReplayRequest(1, "id1", "stuck", "GET", "blob", "get", f"127.0.0.1:{answering.port}", "t/x", "l", 2, 200)
    )
    reqs += [
        ReplayRequest(i, f"id{i}", f"c{i % 3}", "GET", "blob", "get", f"127.0.0.1:{answering.port}", "t/x", "l", 2, 200)
        for i in range(2, 14)
    ]
    spec = RunSpec(run="r", start_epoch=time.time(), threads=1, timeout=timeout, engine=engine)
    run = LoopRun(spec) if engine == "loop" else NodeRun(spec)
    run.submit(reqs)
    run.end()
    out = []
    while (item := run.results.get(timeout=30)) is not None:
        out.extend(f.result for f in (item if isinstance(item, list) else [item]))  # Finished: request, result
    by_seq = {r.seq: r for r in out}
    stuck = by_seq[0]
    assert stuck.outcome == "timeout" and stuck.latency >= timeout * 0.9
    stuck_end = stuck.start + stuck.latency
    others = [by_seq[i] for i in range(2, 14)]
    assert all(r.ok for r in others)
    assert max(r.start + r.latency for r in others) < stuck_end  # nobody else waited for the stuck one
    assert by_seq[1].ok and by_seq[1].start >= stuck_end - 1e-6  # its own client did
