"""The client node's control plane under attack: replays, bad clocks, big and slow requests, SSRF, traversal.

The node is a real ``drtp client`` process, the registry a real Distribution
registry whose access log says what reached it; the attacker is this test,
speaking raw HTTP where the master's client would refuse to misbehave.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
import requests

from drtp.client.admission import batch_error, spec_error
from drtp.errors import DrtpError
from drtp.master.run.nodes import NodeLink
from drtp.replay.frames import FrameReader
from drtp.replay.messages import Batch, ClientModel, Layer, RunSpec
from drtp.replay.signing import (
    MAX_BODY,
    MIN_TOKEN_LEN,
    NONCE_HEADER,
    SIGNATURE_HEADER,
    TIME_HEADER,
    Verifier,
    _mac,
    read_token_file,
    resolve_token,
    sign,
)
from tests.registry_log import logged_requests
from tests.replay_support import DIGEST, TOKEN, Node
from tests.replay_support import blob_get as request

# -- node_auth: signatures, window, nonces ----------------------------------------------------------------


class FakeClock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _signed_at(stamp: str, body: bytes = b"", nonce: str = "0" * 32) -> dict[str, str]:
    """Headers a token holder could make for any time stamp (the MAC is right: only the time is wrong)."""
    return {
        TIME_HEADER: stamp,
        NONCE_HEADER: nonce,
        SIGNATURE_HEADER: _mac(TOKEN, "GET", "/health", stamp, nonce, body),
    }


def test_a_signed_request_is_accepted_once():
    v = Verifier(TOKEN)
    headers = sign(TOKEN, "POST", "/runs", b"{}")
    assert v.check_headers(headers) is None
    assert v.verify("POST", "/runs", b"{}", headers) is None
    assert "replayed" in v.check_headers(headers)
    assert "replayed" in v.verify("POST", "/runs", b"{}", headers)
    # each call signs with a fresh nonce, so the master's own requests never collide
    assert v.verify("POST", "/runs", b"{}", sign(TOKEN, "POST", "/runs", b"{}")) is None


def test_a_request_signed_otherwise_is_refused_and_uses_no_nonce():
    v = Verifier(TOKEN)
    headers = sign(TOKEN, "POST", "/runs", b"{}")
    assert v.verify("POST", "/runs", b'{"x":1}', headers) == "bad signature"
    assert v.verify("POST", "/runs/x/end", b"{}", headers) == "bad signature"
    assert Verifier("another-secret-0123").verify("POST", "/runs", b"{}", headers) == "bad signature"
    assert v.seen == {}  # nobody without the token can fill the nonce table
    assert v.verify("POST", "/runs", b"{}", headers) is None


@pytest.mark.parametrize("stamp", ["nan", "NaN", "inf", "-inf", "1e9", "-1700000000", "0x10", " 1700000000", ""])
def test_time_stamps_must_be_plain_finite_numbers(stamp):
    clock = FakeClock()
    assert Verifier(TOKEN, clock=clock).check_headers(_signed_at(stamp)) is not None


def test_time_stamps_must_be_within_the_window_both_ways():
    clock = FakeClock()
    v = Verifier(TOKEN, window=60, clock=clock)
    for offset, ok in ((-59, True), (59, True), (-61, False), (61, False), (-86400 * 365, False), (1e6, False)):
        why = v.check_headers(_signed_at(f"{clock.now + offset:.3f}"))
        assert (why is None) == ok, (offset, why)
        if not ok:
            assert "time stamp off" in why


def test_nonces_are_forgotten_once_their_time_cannot_pass_again():
    clock = FakeClock()
    v = Verifier(TOKEN, window=60, clock=clock)
    stamp = f"{clock.now:.3f}"
    first = _signed_at(stamp, nonce="1" * 32)
    assert v.verify("GET", "/health", b"", first) is None
    clock.now += 60.5  # the same request would now fail its time check anyway ...
    assert "time stamp off" in v.check_headers(first)
    for i in range(1000):  # ... and the table holds only what may still come again
        clock.now += 0.5
        assert v.verify("GET", "/health", b"", _signed_at(f"{clock.now:.3f}", nonce=f"{i:032x}")) is None
    assert len(v.seen) <= 2 * 60 / 0.5 + 1
    assert "1" * 32 not in v.seen


# -- the token: one minimum length, from a file or the environment --------------------------------------


def test_token_files_and_lengths(tmp_path, monkeypatch):
    monkeypatch.delenv("DRTP_TOKEN", raising=False)
    good = tmp_path / "token"
    good.write_text(f"  {TOKEN}\n")
    assert read_token_file(good) == TOKEN
    assert resolve_token(None, "x", good) == TOKEN
    (tmp_path / "empty").write_text("\n \n")
    (tmp_path / "short").write_text("x" * (MIN_TOKEN_LEN - 1))
    for name, why in (("missing", "not found"), ("empty", "is empty"), ("short", "too short"), (".", "directory")):
        with pytest.raises(DrtpError, match=why) as e:
            read_token_file(tmp_path / name)
        assert "\n" not in str(e.value)
    with pytest.raises(DrtpError, match="no shared secret"):
        resolve_token(None, "drtp client")
    monkeypatch.setenv("DRTP_TOKEN", "short-secret")
    with pytest.raises(DrtpError, match="too short") as e:
        resolve_token(None, "drtp client")
    assert "short-secret" not in str(e.value)


def _drtp(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in (env or os.environ).items() if k != "DRTP_TOKEN"} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "drtp.cli", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_token_file_errors_are_one_line_with_exit_2(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        "registry: [127.0.0.1:1]\nclient_info: {client_list: [127.0.0.1:2]}\ntrace: {location: ., traces: [t.json]}\n"
    )
    (tmp_path / "empty").write_text("")
    cases = [
        (["client", "--token-file", str(tmp_path / "missing")], "not found"),
        (["client", "--token-file", str(tmp_path)], "directory"),
        (["client", "--token-file", str(tmp_path / "empty")], "is empty"),
        (["run", "-c", str(cfg), "--token-file", str(tmp_path / "missing")], "not found"),
        (["experiment", "-c", str(cfg), "--token-file", str(tmp_path)], "directory"),
    ]
    for args, why in cases:
        proc = _drtp(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and why in lines[0] and "--token-file" in lines[0], (args, proc.stderr)


def test_a_short_token_in_a_config_is_refused_after_expansion(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("registry: [127.0.0.1:1]\nclient_info: {token: '${SHORT_SECRET}'}\n")
    proc = _drtp("config", "-c", str(cfg), env=dict(os.environ, SHORT_SECRET="abc"))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "client_info.token" in proc.stderr and "too short" in proc.stderr and "abc" not in proc.stderr


def test_a_token_on_the_command_line_warns_that_ps_shows_it(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "drtp.cli", "client", "--port", "0", "--token", TOKEN],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "DRTP_TOKEN"},
    )
    try:
        first = proc.stderr.readline()
    finally:
        proc.terminate()
        rest = proc.communicate(timeout=30)[1]
    assert "warning" in first and "ps" in first and "--token-file" in first
    assert TOKEN not in first + rest


# -- what a run may do: the batch check -------------------------------------------------------------------


TARGETS = frozenset({"http://127.0.0.1:5000"})


@pytest.mark.parametrize(
    ("over", "why"),
    [
        ({"registry": "127.0.0.1:6000"}, "not one of this run's registries"),
        ({"registry": "http://127.0.0.1:5000@evil:80"}, "not one of this run's registries"),
        ({"repository": "library/../../v2/_catalog"}, "not a Distribution name"),
        ({"repository": "Library/alpine"}, "not a Distribution name"),
        ({"reference": "latest\r\nX-Injected: 1"}, "neither a tag"),
        ({"reference": "../manifests/latest"}, "neither a tag"),
        ({"reference": "uploads/.."}, "neither a tag"),
        ({"reference": "latest?n=1"}, "neither a tag"),
        ({"digest": "sha256:../../x"}, "not algorithm:hex"),
        ({"layers": [Layer("sha256:zz", 1)], "method": "PUT", "kind": "manifest", "op": "manifest-put"}, "digest"),
        ({"method": "CONNECT"}, "not a replay request"),
        ({"kind": "../tags/list"}, "not a replay request"),
        ({"op": "upload-close"}, "does not go with"),
        ({"method": "PUT", "kind": "manifest", "op": "get"}, "does not go with"),
        ({"size": -1}, "negative size"),
        ({"at": float("nan")}, "not a finite offset"),
    ],
)
def test_a_batch_names_its_first_bad_request(over, why):
    bad = request(7, **over)
    error = batch_error([request(1), bad, request(9, registry="nowhere:1")], TARGETS)
    assert error.startswith("request seq 7: ") and why in error, error


def test_the_replay_s_own_requests_pass():
    good = [
        request(0),
        request(1, method="HEAD", kind="manifest", reference="latest", digest=None),
        request(2, method="DELETE", kind="manifest", reference=DIGEST, digest=None),
        request(
            3, method="POST", op="upload-open", reference="uploads/", digest=None, registry="http://127.0.0.1:5000"
        ),
        request(4, method="PATCH", op="upload-chunk", reference="uploads/0b6fe5c4-5a36-4c52-a6a3-1d6e0e0a3f9a"),
        request(5, method="PUT", op="upload-close", reference="e3b0c44298fc1c149afbf4c8996fb924"),
        request(6, method="PUT", kind="manifest", op="manifest-put", reference="v1.2", layers=[Layer(DIGEST, 5)]),
    ]
    assert batch_error(good, TARGETS) is None


def test_a_run_must_name_plain_registry_urls():
    assert "names no registries" in spec_error(RunSpec("r", 0.0))
    for bad in ("http://user:pw@127.0.0.1:5000", "http://127.0.0.1:5000/v2/x", "ftp://h:1", "h:1?x=1", "h:1\r\nX: y"):
        assert "is not http(s)://host[:port]" in spec_error(RunSpec("r", 0.0, registries=[bad])), bad
    assert spec_error(RunSpec("r", 0.0, registries=["127.0.0.1:5000", "https://[::1]:443", "reg.example"])) is None
    assert "run id" in spec_error(RunSpec("../x", 0.0, registries=["h:1"]))
    assert "finite" in spec_error(RunSpec("r", 0.0, timeout=float("nan"), registries=["h:1"]))


def test_a_run_must_give_each_trace_client_a_model_the_gate_can_keep():
    def spec(**client) -> RunSpec:
        return RunSpec("r", 0.0, registries=["h:1"], client=ClientModel(**client))

    assert spec_error(spec(concurrency=-1, downloads=3, uploads=5)) is None
    assert "client.concurrency" in spec_error(spec(concurrency=-2))
    assert "client.concurrency" in spec_error(spec(concurrency=5000))
    assert "client.downloads" in spec_error(spec(downloads=-1))
    assert "client.uploads" in spec_error(spec(uploads=-3))


# -- attacks on a running node --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = Node(tmp_path_factory.mktemp("node"))
    yield n
    n.stop()


def _post(node: Node, path: str, body: bytes, headers: dict[str, str]) -> requests.Response:
    return requests.post(f"http://{node.address}{path}", data=body, headers=headers, timeout=10)


def _finish(link: NodeLink, run: str) -> list[int]:
    """End a run and read its result stream to the end (the node then forgets it as running): the seqs it did."""
    assert link.call("POST", f"/runs/{run}/end").status_code == 200
    r = requests.get(f"{link.base}/runs/{run}/results", headers=sign(TOKEN, "GET", f"/runs/{run}/results"), timeout=30)
    assert r.status_code == 200
    reader = FrameReader()
    frames = reader.feed(r.content)
    assert reader.pending == 0 and frames[-1].model is not None  # the stream ends with the node's model
    return [seq for frame in frames for seq in frame.done]


def _runs(link: NodeLink) -> dict:
    return link.check()["runs"]


@pytest.mark.registry
def test_a_captured_run_start_sent_again_does_not_restart_the_run(node):
    link = NodeLink(node.address, TOKEN, None)
    body = msgspec.json.encode(RunSpec("captured", time.time(), threads=1, registries=["127.0.0.1:9"]))
    captured = sign(TOKEN, "POST", "/runs", body)
    assert _post(node, "/runs", body, captured).status_code == 201
    assert _finish(link, "captured") == []
    assert "captured" not in _runs(link)
    time.sleep(2)
    again = _post(node, "/runs", body, captured)
    assert again.status_code == 401
    assert "captured" not in _runs(link)
    # even freshly signed, a run id that has run on this node is not started again
    fresh = link.call("POST", "/runs", body)
    assert fresh.status_code == 409 and "has run" in fresh.json()["error"]
    assert "captured" not in _runs(link)


@pytest.mark.registry
def test_a_batch_sent_twice_is_refused_the_second_time(node, registry):
    link = NodeLink(node.address, TOKEN, None)
    spec = RunSpec("twice", time.time(), threads=1, registries=[registry.url])
    assert link.call("POST", "/runs", msgspec.json.encode(spec)).status_code == 201
    offset = registry.log_path.stat().st_size
    body = msgspec.json.encode(Batch("twice", [request(0, registry=registry.host)]))
    captured = sign(TOKEN, "POST", "/runs/twice/batch", body)
    assert _post(node, "/runs/twice/batch", body, captured).status_code == 202
    assert _post(node, "/runs/twice/batch", body, captured).status_code == 401
    results = _finish(link, "twice")
    assert results == [0]
    blob_gets = [x for x in logged_requests(registry.log_path, offset) if x.path.endswith(DIGEST)]
    assert len(blob_gets) == 1  # the registry saw the request once


@pytest.mark.registry
@pytest.mark.parametrize("stamp", ["nan", "inf", "far-future", "far-past"])
def test_time_headers_that_are_not_now_are_refused(node, stamp):
    now = time.time()
    value = {"far-future": f"{now + 86400:.3f}", "far-past": f"{now - 86400:.3f}"}.get(stamp, stamp)
    r = requests.get(f"http://{node.address}/health", headers=_signed_at(value), timeout=10)
    assert r.status_code == 401
    assert "time stamp" in node.log.read_text().splitlines()[-1]


def _raw(node: Node, head: str, timeout: float = 5.0) -> tuple[bytes, socket.socket]:
    """Send a request's header block only (no body byte) and read the whole answer until the node closes."""
    sock = socket.create_connection(("127.0.0.1", node.port), timeout=timeout)
    sock.sendall(head.encode("latin-1"))
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    return answer, sock


@pytest.mark.registry
def test_an_oversized_unsigned_body_is_refused_before_it_is_read(node):
    big = 64 << 20
    # the node answers and closes while not one body byte was sent: it never waited for the body
    answer, sock = _raw(node, f"POST /runs HTTP/1.1\r\nHost: n\r\nContent-Length: {big}\r\n\r\n")
    sock.close()
    assert answer.startswith(b"HTTP/1.0 401") or answer.startswith(b"HTTP/1.1 401"), answer[:100]
    # signed headers with a body over the bound: 413, also before reading
    headers = sign(TOKEN, "POST", "/runs", b"")
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    answer, sock = _raw(node, f"POST /runs HTTP/1.1\r\nHost: n\r\n{lines}Content-Length: {MAX_BODY + 1}\r\n\r\n")
    sock.close()
    assert b" 413 " in answer.split(b"\r\n", 1)[0], answer[:100]
    # a chunked body is not read at all
    headers = sign(TOKEN, "POST", "/runs", b"")
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    answer, sock = _raw(node, f"POST /runs HTTP/1.1\r\nHost: n\r\n{lines}Transfer-Encoding: chunked\r\n\r\n")
    sock.close()
    assert b" 411 " in answer.split(b"\r\n", 1)[0], answer[:100]
    # and a 64 MB body really sent: the node cuts it short with its 401 instead of taking it all in
    sock = socket.create_connection(("127.0.0.1", node.port), timeout=10)
    sock.sendall(f"POST /runs HTTP/1.1\r\nHost: n\r\nContent-Length: {big}\r\n\r\n".encode())
    sent = 0
    chunk = bytes(1 << 20)
    try:
        while sent < big:
            sock.sendall(chunk)
            sent += len(chunk)
    except OSError:  # reset or broken pipe: the node closed the connection without reading the body
        pass
    finally:
        sock.close()
    assert sent < big
    assert NodeLink(node.address, TOKEN, None).check()["ok"]


@pytest.mark.registry
def test_stalled_half_header_connections_do_not_starve_a_signed_request(node):
    stalled = []
    try:
        for _ in range(200):
            s = socket.create_connection(("127.0.0.1", node.port), timeout=30)
            s.sendall(b"POST /runs HTTP/1.1\r\nHost: n\r\nX-Drtp-Ti")  # and then nothing
            stalled.append(s)
        link = NodeLink(node.address, TOKEN, None)
        t0 = time.monotonic()
        assert link.check()["ok"] is True
        assert time.monotonic() - t0 < 2.0
        # the node drops a stalled connection after its read timeout (the socket's timeout guards a hang)
        assert stalled[0].recv(1024) == b""
    finally:
        for s in stalled:
            s.close()


@pytest.mark.registry
def test_a_target_outside_the_run_receives_nothing(node, registry):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(1.5)
    port = listener.getsockname()[1]
    link = NodeLink(node.address, TOKEN, None)
    try:
        spec = RunSpec("ssrf", time.time(), threads=2, registries=[registry.url])
        assert link.call("POST", "/runs", msgspec.json.encode(spec)).status_code == 201
        offset = registry.log_path.stat().st_size
        batch = Batch("ssrf", [request(0, registry=registry.host), request(1, registry=f"127.0.0.1:{port}")])
        r = link.call("POST", "/runs/ssrf/batch", msgspec.json.encode(batch))
        assert r.status_code == 400
        assert "seq 1" in r.json()["error"] and f"127.0.0.1:{port}" in r.json()["error"]
        with pytest.raises(TimeoutError):
            listener.accept()
        assert _finish(link, "ssrf") == []  # nothing of the refused batch was queued ...
        assert not [x for x in logged_requests(registry.log_path, offset) if "/v2/library" in x.path]  # ... or sent
        # the same request in a run that names the listener does reach it: the listener would have seen it
        spec = RunSpec("ssrf-control", time.time(), threads=1, timeout=2, registries=[f"127.0.0.1:{port}"])
        assert link.call("POST", "/runs", msgspec.json.encode(spec)).status_code == 201
        batch = Batch("ssrf-control", [request(0, registry=f"127.0.0.1:{port}")])
        assert link.call("POST", "/runs/ssrf-control/batch", msgspec.json.encode(batch)).status_code == 202
        listener.settimeout(10)
        conn, _ = listener.accept()
        conn.close()
        link.call("POST", "/runs/ssrf-control/cancel")
    finally:
        listener.close()


@pytest.mark.registry
@pytest.mark.parametrize(
    "over",
    [
        {"repository": "library/../../v2/_catalog"},
        {"repository": "library/alpine/../../../v2/_catalog#"},
        {"reference": "latest\r\nX-Injected: 1", "digest": None, "kind": "manifest"},
        {"reference": "uploads/..", "digest": None},
        {"digest": "sha256:" + "ab" * 32 + "/../../../_catalog"},
    ],
    ids=["traversal", "traversal-deep", "crlf", "upload-dotdot", "digest-traversal"],
)
def test_traversal_and_header_injection_never_reach_the_registry(node, registry, over):
    link = NodeLink(node.address, TOKEN, None)
    run = f"inj-{abs(hash(str(over))) % 10**9}"
    spec = RunSpec(run, time.time(), threads=1, registries=[registry.url])
    assert link.call("POST", "/runs", msgspec.json.encode(spec)).status_code == 201
    offset = registry.log_path.stat().st_size
    batch = Batch(run, [request(3, registry=registry.host, **over)])
    r = link.call("POST", f"/runs/{run}/batch", msgspec.json.encode(batch))
    assert r.status_code == 400 and "seq 3" in r.json()["error"], r.text
    assert _finish(link, run) == []
    assert logged_requests(registry.log_path, offset) == []


def test_the_master_splits_a_batch_over_the_node_s_bound(monkeypatch):
    import drtp.master.run.nodes as nodes

    monkeypatch.setattr(nodes, "MAX_BODY", 2000)
    link = NodeLink("127.0.0.1:1", TOKEN, None)
    link.run = "r"
    reqs = [request(i) for i in range(40)]
    bodies = link._bodies(reqs)
    assert len(bodies) > 1 and all(len(b) <= 2000 for b in bodies)
    seqs = [r.seq for b in bodies for r in msgspec.json.decode(b, type=Batch).requests]
    assert seqs == list(range(40))


@pytest.mark.registry
def test_a_token_from_a_file_stays_out_of_ps_and_the_log(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text(TOKEN + "\n")
    node = Node(tmp_path, token_file=secret)
    try:
        assert requests.get(f"http://{node.address}/health", timeout=5).status_code == 401
        with pytest.raises(DrtpError, match="refused the shared secret"):
            NodeLink(node.address, "wrong-secret-0123456", None).check()
        assert TOKEN not in Path(f"/proc/{node.proc.pid}/cmdline").read_text()
        assert TOKEN not in Path(f"/proc/{node.proc.pid}/environ").read_bytes().decode(errors="replace")
    finally:
        node.stop()
    text = node.log.read_text()
    assert "refused GET /health" in text and TOKEN not in text


def test_refusals_never_show_a_password_in_a_registry_url():
    assert "pw" not in spec_error(RunSpec("r", 0.0, registries=["http://user:pw@127.0.0.1:5000"]))
    assert "pw" not in batch_error([request(0, registry="http://user:pw@127.0.0.1:5000")], TARGETS)


def test_a_tls_registry_s_password_never_goes_to_a_plain_http_token_server():
    from drtp.registry.auth import Authenticator, AuthError
    from drtp.replay.messages import RegistryAuth

    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(1.0)
    realm = f"http://127.0.0.1:{listener.getsockname()[1]}/token"
    try:
        auth = Authenticator(RegistryAuth("https://127.0.0.1:5443", "user", "the-password"))
        with pytest.raises(AuthError, match="plain http") as e:
            auth.fetch_token({"realm": realm, "service": "registry"})
        assert "the-password" not in str(e.value)
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()


# -- renewed registry secrets: POST /runs/<run>/secret ---------------------------------------------------------


@pytest.fixture(scope="module")
def basic_registry(tmp_path_factory):
    from drtp.registry.local import LocalRegistry
    from tests.realreg_support import write_htpasswd

    d = tmp_path_factory.mktemp("basic")
    with LocalRegistry(d / "reg", htpasswd=write_htpasswd(d / "htpasswd", "rita", "the-right-one")) as reg:
        yield reg


def _statuses(link: NodeLink, run: str, requests_: list) -> list[int]:
    """Run ``requests_`` in ``run`` to its end: the registry's status of each trace request, in seq order."""
    import csv
    import io

    assert link.call("POST", f"/runs/{run}/batch", msgspec.json.encode(Batch(run, requests_))).status_code == 202
    assert link.call("POST", f"/runs/{run}/end").status_code == 200
    path = f"/runs/{run}/results"
    r = requests.get(f"{link.base}{path}", headers=sign(TOKEN, "GET", path), timeout=30)
    rows = [row for f in FrameReader().feed(r.content) for row in csv.reader(io.StringIO(f.rows.decode()))]
    return [int(row[14]) for row in sorted(rows, key=lambda row: row[2])]  # trace_id t<seq>, status column


@pytest.mark.registry
def test_a_renewed_secret_is_taken_only_signed_fresh_once_and_for_a_declared_registry(node, basic_registry):
    from drtp.replay.messages import RegistryAuth, SecretUpdate

    link = NodeLink(node.address, TOKEN, None)
    reg = basic_registry
    declared = RegistryAuth(reg.url, "rita", "an-old-one", source="credential_helper t", renewable=True)
    fixed = RegistryAuth("http://127.0.0.1:9", "rita", "x", source="password")  # declared, not renewable
    spec = RunSpec("renew", time.time(), threads=1, auth=[declared, fixed], registries=[reg.url, fixed.registry])
    assert link.call("POST", "/runs", msgspec.json.encode(spec)).status_code == 201
    path = "/runs/renew/secret"

    def body(generation: int, password: str, registry: str = reg.url, run: str = "renew") -> bytes:
        return msgspec.json.encode(SecretUpdate(run, registry, generation, "rita", password))

    good = body(1, "the-right-one")
    captured = sign(TOKEN, "POST", path, good)
    assert _post(node, path, good, captured).json() == {"replaced": True, "generation": 1}
    # a newer generation with a wrong secret, sent by whoever lacks a fresh signature, changes nothing
    wrong = body(2, "wrong-again")
    assert _post(node, path, wrong, {}).status_code == 401  # unsigned
    assert _post(node, path, good, captured).status_code == 401  # the captured update sent again
    stamp = f"{time.time() - 3600:.3f}"
    stale = {TIME_HEADER: stamp, NONCE_HEADER: "5" * 32}
    stale[SIGNATURE_HEADER] = _mac(TOKEN, "POST", path, stamp, "5" * 32, wrong)
    assert _post(node, path, wrong, stale).status_code == 401  # signed an hour ago
    for bad, why in (
        (body(2, "wrong-again", registry="http://127.0.0.1:6000"), "no credentials in this run's spec"),
        (body(2, "wrong-again", registry=fixed.registry), "not renewed in this run"),
        (body(0, "wrong-again"), "generation"),
        (body(2, "wrong-again", run="other"), "another run"),
    ):
        r = link.call("POST", path, bad)
        assert r.status_code == 400 and why in r.json()["error"], r.text
    assert link.call("POST", path, body(1, "wrong-again")).json()["replaced"] is False  # not newer
    assert "wrong-again" not in node.log.read_text() and "the-right-one" not in node.log.read_text()
    # the registry takes the renewed secret (404: the blob is unknown, not a 401)
    assert _statuses(link, "renew", [request(0, registry=reg.host)]) == [404]
    # control: without the update, the run's own secret is refused
    spec = msgspec.structs.replace(spec, run="no-renew")
    assert link.call("POST", "/runs", msgspec.json.encode(spec)).status_code == 201
    assert _statuses(link, "no-renew", [request(0, registry=reg.host)]) == [401]
