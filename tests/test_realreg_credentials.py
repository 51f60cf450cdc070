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
from drtp.master.experiment import run_experiment
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
        server.password = "only-the-registry-knows"

    entry = {"id": "stale", "url": reg.url, "credential_helper": "stale-helper", "ca_file": str(pki.ca)}
    watcher = _when_rows(tmp_path / "exp" / "stale" / "requests.csv", 20, flip)
    with stack:
        _experiment(tmp_path, node, [entry], trace, wait=True, timeout=5)
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
