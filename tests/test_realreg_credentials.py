"""Secrets from a Docker credential helper, a password_command and a JSON key file, against real registries
(htpasswd basic auth and a Docker token server), renewed while a long run goes on.

The helper is a real ``docker-credential-NAME`` on PATH (tests/credential_support.py); the registries'
access logs say what was sent.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from contextlib import ExitStack

import pandas as pd
import pytest
import yaml

from drtp.config import load_config
from drtp.master.series.experiment import run_experiment
from drtp.registry.local import LocalRegistry
from tests.credential_support import Helper, on_path
from tests.realreg_support import PASSWORD, USER, Pki, TokenServer, write_htpasswd
from tests.registry_log import refused_requests
from tests.replay_support import TOKEN, Node, make_trace

pytestmark = pytest.mark.registry

WRITES = ("PUT", "PATCH", "POST")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("pki"))


def _token_registry(stack: ExitStack, d, pki, password: str, expires_in: int = 300) -> LocalRegistry:
    """A registry taking Docker bearer tokens from a token server that accepts ``USER`` and ``password``."""
    d.mkdir(parents=True, exist_ok=True)
    server = TokenServer(d, pki, password=password, expires_in=expires_in)
    stack.callback(server.stop)
    reg = stack.enter_context(LocalRegistry(d / "reg", tls=(pki.cert, pki.key), token=server.registry_config))
    reg.token_server = server
    return reg


def _experiment(tmp_path, node: Node, entries: list[dict], trace, **client_info) -> tuple[dict, dict]:
    cfg = {
        "trace": {"location": str(trace.parent), "traces": [trace.name]},
        "client_info": {"client_list": [node.address], "threads": 8, "token": TOKEN, "batch": 20, **client_info},
        "warmup": {"output": str(tmp_path / "warmup.jsonl"), "threads": 4},
        "registries": entries,
    }
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return cfg, run_experiment(load_config(path), tmp_path / "exp", quiet=True)


def _rows(tmp_path, rid: str) -> pd.DataFrame:
    return pd.read_csv(tmp_path / "exp" / rid / "requests.csv", keep_default_na=False, na_values=[""])


def _no_secret_written(tmp_path, node: Node, secrets: list[str]) -> None:
    """No secret in anything drtp wrote: run directories, warmup maps, experiment.json, the node's log."""
    files = [*(tmp_path / "exp").rglob("*"), *tmp_path.glob("warmup*.jsonl"), node.log]
    assert len([f for f in files if f.is_file()]) > 5
    for f in files:
        if f.is_file():
            text = f.read_text(errors="replace")
            for secret in secrets:
                assert secret not in text, f


def test_helper_command_and_json_key_secrets_for_warmup_and_run(tmp_path, pki, monkeypatch):
    helper = Helper(tmp_path / "bin", "test-helper", "carol", "helper-secret-7f3a")
    on_path(monkeypatch, helper.dir)
    key = json.dumps({"type": "service_account", "private_key": "-----BEGIN-----\nMIIx\n-----END-----\n"}, indent=2)
    (tmp_path / "key.json").write_text(key + "\n")
    command = tmp_path / "print-password"
    command.write_text(f"#!{sys.executable}\nprint('command-secret-' + 'b81c')\n")
    command.chmod(0o755)
    trace = make_trace(tmp_path / "trace.json", requests=120)
    ca = str(pki.ca)
    with ExitStack() as stack:
        htpasswd = write_htpasswd(tmp_path / "htp", "carol", "helper-secret-7f3a")
        basic = stack.enter_context(LocalRegistry(tmp_path / "basic", tls=(pki.cert, pki.key), htpasswd=htpasswd))
        by_command = _token_registry(stack, tmp_path / "t1", pki, "command-secret-b81c")
        by_key = _token_registry(stack, tmp_path / "t2", pki, key)
        by_key.token_server.user = "_json_key"
        node = Node(tmp_path)
        stack.callback(node.stop)
        entries = [
            {"id": "helper", "url": basic.url, "credential_helper": "test-helper", "ca_file": ca},
            {
                "id": "command",
                "url": by_command.url,
                "username": USER,
                "password_command": [str(command)],
                "ca_file": ca,
            },
            {"id": "jsonkey", "url": by_key.url, "username": "_json_key", "password_file": "key.json", "ca_file": ca},
        ]
        _, status = _experiment(tmp_path, node, entries, trace)
    for rid in ("helper", "command", "jsonkey"):
        assert status[rid]["ok"], status
        rows = _rows(tmp_path, rid)
        assert len(rows[~rows.auxiliary]) == 120 and rows.ok.all(), rows[~rows.ok].head().to_string()
    # the helper ran on the master with the server on stdin (argv holds no secret): the experiment's check,
    # the warmup and the run each asked it
    assert len(helper.calls) >= 3 and set(helper.calls) == {f"get {basic.host}"}
    assert by_command.token_server.issued > 0 and by_key.token_server.issued > 0
    assert (tmp_path / "warmup-helper.jsonl").read_text().count("\n") > 0  # warmup pushed with the helper's secret
    _no_secret_written(tmp_path, node, ["helper-secret-7f3a", "command-secret-b81c", "MIIx"])


def _when_rows(path, at_least: int, then, timeout: float = 60.0) -> threading.Thread:
    """Run ``then()`` once ``path`` (a requests.csv being written) holds ``at_least`` rows."""

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if path.exists() and path.read_text().count("\n") > at_least:
                then()
                return
            time.sleep(0.05)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def test_a_secret_that_changes_during_a_long_run_is_renewed_without_a_failed_row(tmp_path, pki, monkeypatch):
    helper = Helper(tmp_path / "bin", "rotating", USER, PASSWORD)
    on_path(monkeypatch, helper.dir)
    stack = ExitStack()
    reg = _token_registry(stack, tmp_path / "t", pki, PASSWORD, expires_in=3)
    server = reg.token_server
    trace = make_trace(tmp_path / "trace.json", requests=200, span=8.0)
    node = Node(tmp_path)
    stack.callback(node.stop)
    flipped: dict = {}

    def flip() -> None:  # from now on the token server takes only the new secret, which the helper gives
        server.password = "rotated-secret-2"
        helper.set(USER, "rotated-secret-2")
        flipped.update(calls=len(helper.calls), issued=server.issued)

    entry = {
        "id": "rot",
        "url": reg.url,
        "credential_helper": "rotating",
        "credential_ttl": "1s",
        "ca_file": str(pki.ca),
    }
    watcher = _when_rows(tmp_path / "exp" / "rot" / "requests.csv", 40, flip)
    with stack:
        _, status = _experiment(tmp_path, node, [entry], trace, wait=True, timeout=5)
        watcher.join(timeout=5)
    rows = _rows(tmp_path, "rot")
    main = rows[~rows.auxiliary]
    assert flipped, "the secret never changed during the run"
    assert len(main) == 200 and rows.ok.all(), rows[~rows.ok][["method", "status", "error"]].head().to_string()
    assert status["rot"]["ok"], status
    assert len(helper.calls) > flipped["calls"]  # the master asked the helper again after the change ...
    assert server.issued > flipped["issued"]  # ... and the node fetched tokens with the new secret
    assert "secret of https://127.0.0.1" in node.log.read_text()  # delivered by the signed update
    _no_secret_written(tmp_path, node, [PASSWORD, "rotated-secret-2"])


def test_a_refused_secret_fails_writes_once_and_sends_reads_again_once_after_the_renewal(tmp_path, pki, monkeypatch):
    helper = Helper(tmp_path / "bin", "stale-helper", USER, PASSWORD)  # never learns the new secret
    on_path(monkeypatch, helper.dir)
    stack = ExitStack()
    reg = _token_registry(stack, tmp_path / "t", pki, PASSWORD, expires_in=2)
    server = reg.token_server
    trace = make_trace(tmp_path / "trace.json", requests=200, span=6.0)
    node = Node(tmp_path)
    stack.callback(node.stop)
    flipped: dict = {}

    def flip() -> None:
        flipped.update(offset=reg.log_path.stat().st_size, calls=len(helper.calls))
        helper.slow(4.0)  # the renewal takes a while: requests refused meanwhile meet a refusal being renewed
        server.password = "only-the-registry-knows"

    entry = {"id": "stale", "url": reg.url, "credential_helper": "stale-helper", "ca_file": str(pki.ca)}
    watcher = _when_rows(tmp_path / "exp" / "stale" / "requests.csv", 20, flip)
    with stack:
        _experiment(tmp_path, node, [entry], trace, wait=True, timeout=10)
        watcher.join(timeout=5)
    assert flipped
    rows = _rows(tmp_path, "stale")
    refused = rows[(rows.status == 401)]
    writes, reads = refused[refused.method.isin(WRITES)], refused[~refused.method.isin(WRITES)]
    assert len(writes) and len(reads), rows.status.value_counts()
    source = f"registry stale ({reg.url}) refused the credentials of user {USER!r} from credential_helper stale-helper"
    assert writes.error.str.contains(source, regex=False).all() and (writes.attempts == 1).all()
    assert (reads.attempts == 2).any()  # sent again once, after the master's renewal; both sends in the row
    assert reads.attempts.max() == 2 and reads.error.str.contains("stale-helper").all()
    # the registry saw each refused write once and each refused read as often as its row says
    logged = refused_requests(reg.log_path, flipped["offset"])
    logged_writes = [x for x in logged if x.method in WRITES]
    assert len(logged_writes) == len(writes)
    assert len(logged) - len(logged_writes) == reads.attempts.sum()
    # one renewal for the refusal (the helper's answer did not change: no second renewal)
    assert len(helper.calls) == flipped["calls"] + 1
    _no_secret_written(tmp_path, node, [PASSWORD, "only-the-registry-knows"])


@pytest.mark.parametrize("engine", ["loop", "threads"])
def test_a_node_reports_a_refused_secret_and_sends_the_read_again_once_with_the_renewed_one(tmp_path, pki, engine):
    """The node's side alone, this test in the master's place: the refusal comes back in the result stream,
    the renewed secret goes in a signed update, and the waiting reads are sent once more.

    The renewal is sent only once the token server refused every request of the second batch (its four
    reads and the write): a registry's 401 alone is no such proof, it is the challenge that comes before
    the token fetch, and a read whose fetch starts after the renewal gets its token with the renewed secret
    on its first send (one attempt, one challenge), as it should.
    """
    import csv
    import io
    import queue

    import msgspec

    from drtp.master.run.nodes import NodeLink
    from drtp.replay.messages import RegistryAuth, RunSpec, SecretUpdate
    from drtp.replay.result_row import COLUMNS
    from tests.replay_support import blob_get

    stack = ExitStack()
    reg = _token_registry(stack, tmp_path / "t", pki, PASSWORD)  # tokens that live the whole test
    server = reg.token_server
    node = Node(tmp_path)
    stack.callback(node.stop)
    events: queue.Queue = queue.Queue()
    link = NodeLink(node.address, TOKEN, events)
    auth = RegistryAuth(reg.url, USER, PASSWORD, pki.ca.read_text(), source="credential_helper t", renewable=True)
    spec = RunSpec(f"refused-{engine}", time.time(), threads=4, timeout=10, engine=engine, auth=[auth])
    spec = msgspec.structs.replace(spec, registries=[reg.url], node="n1")
    rows: dict[str, dict] = {}
    refusals = []
    refused_at_renewal: list[int] = []

    def until(n: int, refused_fetches: int | None = None) -> None:
        """Collect rows until ``n`` came; on a refusal, send the renewed secret (as the master's renewal
        thread does) — only once the token server refused ``refused_fetches`` token requests, so that every
        request of the batch met the refusal before the renewal."""
        deadline = time.monotonic() + 30
        while len(rows) < n and time.monotonic() < deadline:
            try:
                kind, _, frames = events.get(timeout=0.2)
            except queue.Empty:
                frames = []
            else:
                assert kind == "frames", (kind, frames)
            for frame in frames:
                for cells in csv.reader(io.StringIO(frame.rows.decode())):
                    row = dict(zip(COLUMNS, cells, strict=True))
                    if row["auxiliary"] == "False":  # the trace rows (not an upload's helper rows)
                        rows[row["trace_id"]] = row
                refusals.extend(frame.refused)
            ready = refused_fetches is not None and server.refused >= refused_fetches
            if refusals and ready and not sent:
                refused_at_renewal.append(server.refused)
                sent.append(link.send_secret(SecretUpdate(spec.run, reg.url, 1, USER, "renewed-secret")))

    # the second batch goes to a repository the node holds no token for: each of its requests is challenged
    # and fetches a token with the old secret, one refused fetch each (no cached token expires, so no
    # background renewal asks the token server besides)
    def reads(first: int, repository: str) -> list:
        return [
            blob_get(
                i,
                client=f"c{i}",
                registry=reg.url,
                repository=repository,
                expected_status=404,
                digest=f"sha256:{i:064x}",
            )
            for i in range(first, first + 4)
        ]

    write = blob_get(
        8,
        registry=reg.url,
        repository="team/other",
        method="POST",
        op="upload-open",
        reference="uploads/",
        expected_status=202,
    )
    sent: list[bool] = []
    with stack:
        link.start(spec)
        link.send(reads(0, "library/alpine"))
        until(4)  # the old secret worked: a refusal of it later is worth a renewal
        issued = server.issued
        server.password = "renewed-secret"  # the registry's side changes; the node's secret is old
        offset = reg.log_path.stat().st_size
        link.send([write, *reads(4, "team/other")])
        until(9, refused_fetches=5)
        link.end()
    assert sent == [True]
    # the token server refused the batch's five requests (and nothing else) before the renewal, and none after
    assert refused_at_renewal == [5] and server.refused == 5
    assert server.issued > issued  # the reads' second send fetched its token with the renewed secret
    assert [rows[f"t{i}"]["status"] for i in range(8)] == ["404"] * 8, [
        (k, r["status"], r["attempts"], r["error"]) for k, r in rows.items()
    ]
    assert all(rows[f"t{i}"]["ok"] == "True" for i in range(8))
    # refused with the old secret, each read waited for the renewed one and was sent once more: both sends
    # in its row
    assert [rows[f"t{i}"]["attempts"] for i in range(4, 8)] == ["2"] * 4
    # the write refused meanwhile failed at once, naming the registry and the source, and was sent once
    assert (rows["t8"]["status"], rows["t8"]["attempts"]) == ("401", "1")
    assert "credential_helper t (HTTP 401); the write was not sent again" in rows["t8"]["error"]
    assert [x.method for x in refused_requests(reg.log_path, offset)].count("POST") == 1
    assert {(r.registry, r.generation) for r in refusals} == {(reg.url, 0)}  # one secret's refusal reported


def test_the_master_s_registry_client_renews_from_the_same_source(tmp_path, pki, monkeypatch):
    """Warmup's and preflight's RegistryCalls take the secret from the run's kind of source: asked again
    before its TTL runs out (no refusal at all), and at once when the registry refuses it."""
    import hashlib

    from drtp.registry.auth import config_auth
    from drtp.registry.calls import RegistryCalls
    from drtp.registry.credentials import config_sources

    timed = Helper(tmp_path / "bin", "timed", USER, PASSWORD)
    untimed = Helper(tmp_path / "bin", "untimed", USER, PASSWORD)
    on_path(monkeypatch, timed.dir)
    with ExitStack() as stack:
        reg = _token_registry(stack, tmp_path / "t", pki, PASSWORD, expires_in=2)
        server = reg.token_server
        ca = str(pki.ca)
        entries = [
            {"id": "timed", "url": reg.url, "credential_helper": "timed", "credential_ttl": "1s", "ca_file": ca},
            {"id": "untimed", "url": reg.url, "credential_helper": "untimed", "ca_file": ca},
        ]
        (tmp_path / "c.yaml").write_text(yaml.safe_dump({"registries": entries}))
        cfg = load_config(tmp_path / "c.yaml")
        sources = config_sources(cfg)
        clients = []
        for auth, source in zip(config_auth(cfg, sources), sources, strict=True):
            client = RegistryCalls(reg.url, auth, timeout=10)
            client.use_source(reg.url, source)
            clients.append(client)

        def push(client: RegistryCalls, n: int) -> None:
            data = f"blob {n}".encode()
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            client.push_blob(f"team/app{n}", data, digest)
            assert client.exists("blob", f"team/app{n}", digest)

        push(clients[0], 0)
        push(clients[1], 1)
        for secret, helper in (("second-secret", timed), ("third-secret", untimed)):
            server.password = secret
            helper.set(USER, secret)
            time.sleep(2.5)  # the tokens fetched with the old secret expire
            calls, refused = len(helper.calls), server.refused
            push(clients[0] if helper is timed else clients[1], 2 if helper is timed else 3)
            if helper is timed:  # renewed before use: the token server never saw the old secret again
                assert server.refused == refused and len(helper.calls) > calls and sources[0].renewals >= 1
            else:  # no TTL: the token server refused the old secret once, the helper was asked once more
                assert server.refused == refused + 1 and len(helper.calls) == calls + 1
