"""Real registries with credentials: htpasswd basic auth behind TLS, and Docker token auth (JWTs from a
token server in the test), checked by the preflight, then replayed as a registry-list experiment.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from drtp.config import load_config
from drtp.errors import ConfigError
from drtp.master.run.preflight import PreflightError, preflight
from drtp.master.series.experiment import run_experiment
from drtp.registry.auth import config_auth
from drtp.registry.local import LocalRegistry
from drtp.replay.messages import RegistryAuth
from drtp.trace.reader import TraceReader
from tests.realreg_support import PASSWORD, USER, Pki, TokenServer, write_htpasswd
from tests.replay_support import TOKEN, Node, make_trace

pytestmark = pytest.mark.registry


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def basic_registry(tmp_path_factory, pki):
    d = tmp_path_factory.mktemp("basic")
    with LocalRegistry(d / "reg", tls=(pki.cert, pki.key), htpasswd=write_htpasswd(d / "htpasswd")) as reg:
        yield reg


@pytest.fixture(scope="module")
def token_registry(tmp_path_factory, pki):
    d = tmp_path_factory.mktemp("token")
    server = TokenServer(d, pki)
    with LocalRegistry(d / "reg", tls=(pki.cert, pki.key), token=server.registry_config) as reg:
        reg.token_server = server
        yield reg
    server.stop()


def _auth(reg, pki, user=USER, password=PASSWORD, ca=True) -> RegistryAuth:
    return RegistryAuth(reg.url, user, password, pki.ca.read_text() if ca else None)


@pytest.mark.parametrize("kind", ["basic", "token"])
def test_preflight_names_the_registry_and_the_credential(kind, basic_registry, token_registry, pki):
    reg = basic_registry if kind == "basic" else token_registry
    ok = preflight(reg.url, _auth(reg, pki), "good")
    assert ok["checked"] == f"{reg.url} as {USER}"

    with pytest.raises(PreflightError) as e:
        preflight(reg.url, _auth(reg, pki, None, None), "reg-a")
    msg = str(e.value)
    assert "reg-a" in msg and ("set username and password" in msg or "anonymous" in msg)

    with pytest.raises(PreflightError) as e:
        preflight(reg.url, _auth(reg, pki, password="wrong-password"), "reg-a")
    msg = str(e.value)
    assert "reg-a" in msg and repr(USER) in msg and "wrong-password" not in msg
    assert "\n" not in msg

    with pytest.raises(PreflightError, match="TLS verification failed"):
        preflight(reg.url, _auth(reg, pki, ca=False), "reg-a")


def test_http_needs_insecure(tmp_path):
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(yaml.safe_dump({"registries": [{"id": "a", "url": "http://127.0.0.1:5000"}]}))
    with pytest.raises(ConfigError, match="insecure: true"):
        config_auth(load_config(cfg_path))


def test_experiment_replays_each_registry_and_survives_a_broken_one(
    tmp_path, basic_registry, token_registry, pki, monkeypatch
):
    trace = make_trace(tmp_path / "trace.json", requests=200)
    node = Node(tmp_path)
    monkeypatch.setenv("REG_PASSWORD", PASSWORD)
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    ca = str(pki.ca)
    cfg = {
        "trace": {"location": str(tmp_path), "traces": [trace.name]},
        "client_info": {"client_list": [node.address], "threads": 8, "token": TOKEN, "batch": 50},
        "warmup": {"output": str(tmp_path / "warmup.jsonl"), "threads": 4},
        "results": str(tmp_path / "results"),
        "registries": [
            {"id": "basic", "url": basic_registry.url, "username": USER, "password": "${REG_PASSWORD}", "ca_file": ca},
            {"id": "broken", "url": basic_registry.url, "username": USER, "password": "nope-nope", "ca_file": ca},
            {
                "id": "token",
                "url": token_registry.url,
                "repository": "team/",
                "username": USER,
                "password_file": "pw",
                "ca_file": ca,
            },
        ],
    }
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(cfg))
    try:
        status = run_experiment(load_config(path), tmp_path / "exp", quiet=True, stats_interval_s=0.1)
    finally:
        node.stop()

    records = list(TraceReader([trace]))
    assert status["basic"]["ok"] and status["token"]["ok"], status
    assert not status["broken"]["ok"]
    assert f"rejected the credentials of user {USER!r}" in status["broken"]["error"]
    assert not (tmp_path / "exp" / "broken").exists()  # refused before anything was sent
    for rid in ("basic", "token"):
        df = pd.read_csv(tmp_path / "exp" / rid / "requests.csv", keep_default_na=False, na_values=[""])
        main = df[~df.auxiliary]
        assert set(main.trace_id) == {r.id for r in records}
        bad = main[~main.ok]
        assert bad.empty, bad[["method", "kind", "reference", "status", "error"]].head().to_string()
        summary = json.loads((tmp_path / "exp" / rid / "summary.json").read_text())
        assert summary["registry_id"] == rid and summary["requests"] == len(records)
        # each registry's run keeps its own stats history, at the experiment's interval
        history = pd.read_csv(tmp_path / "exp" / rid / "stats_history.csv")
        assert history.requests.sum() == len(records)
        whole = history.elapsed_s.iloc[:-1]  # the last row ends with the run, mid-interval
        assert len(whole) and (whole.diff().dropna().round(6) == 0.1).all() and whole.iloc[0] == 0.1, history
    token_df = pd.read_csv(tmp_path / "exp" / "token" / "requests.csv")
    assert token_df.repository.str.startswith("team/").all()
    assert token_registry.token_server.issued > 0
    # the password is nowhere in what the experiment wrote, nor in the node's log
    for f in [*(tmp_path / "exp").rglob("*"), node.log]:
        if f.is_file():
            assert PASSWORD not in f.read_text(errors="replace"), f


def test_basic_auth_over_plain_http_when_insecure(tmp_path):
    """Credentials over plain http: drtp sends them only when the entry says insecure: true."""
    trace = make_trace(tmp_path / "trace.json", requests=100)
    node = Node(tmp_path)
    try:
        with LocalRegistry(tmp_path / "reg", htpasswd=write_htpasswd(tmp_path / "htpasswd")) as reg:
            entry = {"id": "plain", "url": reg.url, "insecure": True, "username": USER, "password": PASSWORD}
            cfg = {
                "trace": {"location": str(tmp_path), "traces": [trace.name]},
                "client_info": {"client_list": [node.address], "token": TOKEN},
                "warmup": {"output": str(tmp_path / "warmup.jsonl")},
                "registries": [entry],
            }
            (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
            status = run_experiment(load_config(tmp_path / "c.yaml"), tmp_path / "exp", quiet=True)
    finally:
        node.stop()
    assert status["plain"]["ok"], status
    assert status["plain"]["requests"] == 100 and status["plain"]["failed"] == 0
    assert (tmp_path / "warmup-plain.jsonl").read_text().count("\n") > 0  # warmup pushed with them
