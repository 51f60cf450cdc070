"""Control calls on kept-alive connections: the feeder's batches share one connection, and a kept
connection gives an attacker nothing a fresh one would not (each request is checked on its own; a
refused request closes the connection, so its unread body is never taken for a request).

The node is a real ``drtp client`` process; requests it runs go to a closed port (they fail fast),
which is all these tests need of them.
"""

from __future__ import annotations

import queue
import socket
import time

import msgspec
import pytest

from drtp.master.run import nodes
from drtp.master.run.nodes import NodeLink
from drtp.registry.transport import Connection
from drtp.replay.messages import ReplayRequest, RunSpec
from drtp.replay.signing import sign
from tests.replay_support import TOKEN, Node, blob_get

NOWHERE = "127.0.0.1:9"  # a closed port: requests sent there fail at once with "refused"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = Node(tmp_path_factory.mktemp("node"))
    yield n
    n.stop()


def _request(seq: int) -> ReplayRequest:
    return blob_get(seq, registry=NOWHERE)


def _read_all(sock: socket.socket, limit_s: float = 15.0) -> bytes:
    """Everything the node sends until it closes the connection (bounded by ``limit_s``)."""
    sock.settimeout(limit_s)
    parts = []
    while True:
        part = sock.recv(65536)
        if not part:
            return b"".join(parts)
        parts.append(part)


def _one_answer(sock: socket.socket) -> bytes:
    """One whole answer with a Content-Length (head and body) from ``sock``."""
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def _signed_get(path: str) -> bytes:
    headers = "".join(f"{k}: {v}\r\n" for k, v in sign(TOKEN, "GET", path).items())
    return f"GET {path} HTTP/1.1\r\nHost: node\r\n{headers}\r\n".encode()


def test_signed_calls_share_one_kept_connection(node):
    link = NodeLink(node.address, TOKEN, None)
    conn = Connection("http", node.address, 10)
    try:
        assert link.call("GET", "/health", conn=conn).status_code == 200
        first = conn.sock
        assert first is not None  # the node kept the connection open after its answer
        for _ in range(3):
            assert link.call("GET", "/health", conn=conn).status_code == 200
            assert conn.sock is first
    finally:
        conn.close()


def test_a_request_sent_again_on_the_kept_connection_is_refused(node):
    captured = _signed_get("/health")
    with socket.create_connection(("127.0.0.1", node.port), timeout=10) as sock:
        sock.sendall(captured)
        assert _one_answer(sock).startswith(b"HTTP/1.1 200")
        sock.sendall(captured)  # the same nonce, on the connection that carried it
        rest = _read_all(sock)
    assert rest.startswith(b"HTTP/1.1 401")
    assert rest.count(b"HTTP/1.1") == 1  # and the node closed the connection after refusing it


def test_the_body_of_a_refused_request_is_never_read_as_a_request(node):
    # an unsigned POST whose body is a validly signed request: refused on its headers, its body unread;
    # were the connection kept, the node would take that body for the next request and answer it
    smuggled = _signed_get("/health")
    head = f"POST /runs/x/batch HTTP/1.1\r\nHost: node\r\nContent-Length: {len(smuggled)}\r\n\r\n".encode()
    with socket.create_connection(("127.0.0.1", node.port), timeout=10) as sock:
        sock.sendall(head + smuggled)
        answers = _read_all(sock)
    assert answers.startswith(b"HTTP/1.1 401")
    assert answers.count(b"HTTP/1.1") == 1
    assert b'"ok"' not in answers


def _counting_connects(monkeypatch) -> list[str]:
    """The names of the threads that opened a connection to a node, one entry per connection."""
    opened: list[str] = []
    real = Connection.connect

    def connect(self) -> None:
        import threading

        opened.append(threading.current_thread().name)
        real(self)

    monkeypatch.setattr(Connection, "connect", connect)
    return opened


def _started(node: Node, run: str) -> tuple[NodeLink, queue.Queue]:
    events: queue.Queue = queue.Queue()
    link = NodeLink(node.address, TOKEN, events)
    link.start(RunSpec(run, time.time(), threads=2, registries=[NOWHERE], node=node.address))
    return link, events


def _until_closed(events: queue.Queue) -> list[int]:
    """The seqs of the results the node streamed, until its stream ended (bounded)."""
    done: list[int] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        kind, _, payload = events.get(timeout=30)
        if kind == "frames":
            done += [seq for frame in payload for seq in frame.done]
        elif kind == "closed":
            return done
        else:
            raise AssertionError(f"unexpected event {kind}: {payload}")
    raise AssertionError("the result stream did not end")


def test_the_feeder_sends_every_batch_on_one_connection(node, monkeypatch):
    opened = _counting_connects(monkeypatch)
    link, events = _started(node, "kept-feed")
    for b in range(5):
        link.send([_request(10 * b + i) for i in range(3)])
    link.end()
    assert sorted(_until_closed(events)) == sorted(10 * b + i for b in range(5) for i in range(3))
    assert [name for name in opened if name.startswith("feed-")] == [f"feed-{node.address}"]


def test_the_feeder_opens_a_new_connection_after_an_idle_spell(node, monkeypatch):
    # reused only while idle for less than the node's idle limit allows: never written into a closing one
    opened = _counting_connects(monkeypatch)
    monkeypatch.setattr(nodes, "KEPT_IDLE_S", 0.3)
    link, events = _started(node, "kept-idle")
    link.send([_request(1)])
    link.send([_request(2)])  # at once: the same connection
    time.sleep(1.0)
    link.send([_request(3)])  # after the idle spell: a new one
    link.end()
    assert sorted(_until_closed(events)) == [1, 2, 3]
    assert len([name for name in opened if name.startswith("feed-")]) == 2


@pytest.mark.parametrize("role", ["sender", "reader"])
def test_a_thread_that_fails_reports_its_node_dead_instead_of_leaving_the_run_waiting(node, monkeypatch, role):
    def broken(*args, **kw):
        raise RuntimeError("broken on purpose")

    if role == "sender":
        monkeypatch.setattr(NodeLink, "_bodies", broken)
    else:
        monkeypatch.setattr(nodes.FrameReader, "feed", broken)
    link, events = _started(node, f"broken-{role}")
    link.send([_request(1)])
    link.end()
    kind, name, reason = events.get(timeout=30)
    while kind == "frames":  # the reader may pass frames on before the sender fails
        kind, name, reason = events.get(timeout=30)
    assert (kind, name) == ("dead", node.address)
    assert reason == f"the master's {role} thread for this node failed (RuntimeError: broken on purpose)"
    link.cancel()


def test_a_run_spec_is_refused_on_a_connection_that_already_failed_a_signature(node):
    # a kept connection carries no trust: after a refusal the node closes it, the next call needs a new one
    body = msgspec.json.encode(RunSpec("kept-refused", time.time(), threads=1, registries=[NOWHERE]))
    bad = {k: v for k, v in sign("another-secret-0123456789", "POST", "/runs", body).items()}
    head = "".join(f"{k}: {v}\r\n" for k, v in bad.items())
    data = f"POST /runs HTTP/1.1\r\nHost: node\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body
    with socket.create_connection(("127.0.0.1", node.port), timeout=10) as sock:
        sock.sendall(data + _signed_get("/health"))
        answers = _read_all(sock)
    assert answers.startswith(b"HTTP/1.1 401") and answers.count(b"HTTP/1.1") == 1
    assert "kept-refused" not in NodeLink(node.address, TOKEN, None).check()["runs"]


def test_an_unsigned_request_asking_to_continue_is_refused_without_an_invitation(node):
    # HTTP/1.1 lets a client wait for "100 Continue" before its body; the node must not invite a body it
    # would refuse unread: the first thing it says is the refusal
    head = b"POST /runs HTTP/1.1\r\nHost: node\r\nContent-Length: 67108864\r\nExpect: 100-continue\r\n\r\n"
    with socket.create_connection(("127.0.0.1", node.port), timeout=10) as sock:
        sock.sendall(head)
        answers = _read_all(sock)
    assert answers.startswith(b"HTTP/1.1 401")
    assert b"100 Continue" not in answers
