"""Where a registry's secret comes from: password_file, a Docker credential helper, a password_command.

The helper is a real executable on PATH speaking the helpers' protocol (tests/credential_support.py);
its failures must stop a command with one line and exit 2, showing its stderr and never its stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
import yaml

from drtp.config import load_config, redacted
from drtp.errors import ConfigError
from drtp.registry.auth import config_auth
from drtp.registry.credentials import CredentialError, CredentialSource, renew_after
from tests.credential_support import Helper, on_path

URL = "https://127.0.0.1:5443"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _config(tmp_path, **entry):
    data = {"registries": [{"id": "hub", "url": URL, **entry}]}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def _source(tmp_path, clock=None, **entry) -> CredentialSource:
    cfg = _config(tmp_path, **entry)
    return CredentialSource(cfg.registries[0], cfg, **({"clock": clock} if clock else {}))


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ({"password": "a", "password_file": "f"}, "password_file"),
        ({"password_file": "f", "credential_helper": "x"}, "credential_helper"),
        ({"credential_helper": "x", "password_command": ["echo"]}, "password_command"),
    ],
)
def test_one_secret_source_per_entry(tmp_path, entry, key):
    with pytest.raises(ConfigError) as e:
        _config(tmp_path, username="u", **entry)
    msg = str(e.value)
    assert f"key 'registries[0].{key}'" in msg and "\n" not in msg


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({"password": "a", "credential_ttl": "1h"}, "only a credential_helper or password_command"),
        ({"credential_helper": "x", "credential_ttl": "soon"}, "not a duration"),
        ({"credential_helper": "x", "credential_ttl": 0}, "more than 0"),
        ({"credential_helper": "../../bin/sh"}, "not a helper name"),
        ({"password_command": []}, "an empty command"),
    ],
)
def test_bad_secret_keys_are_one_line(tmp_path, entry, why):
    with pytest.raises(ConfigError, match=why) as e:
        _config(tmp_path, **entry)
    assert "registries[0]" in str(e.value)


def test_password_file_is_the_whole_file(tmp_path):
    key = {"type": "service_account", "private_key": "-----BEGIN KEY-----\nabc\n-----END KEY-----\n", "x": 1}
    text = json.dumps(key, indent=2)
    (tmp_path / "key.json").write_text(text + "\n")
    (auth,) = config_auth(_config(tmp_path, username="_json_key", password_file="key.json"))
    assert auth.password == text and json.loads(auth.password) == key
    assert auth.source == "password_file key.json" and not auth.renewable


def test_password_command_output_without_its_newline(tmp_path):
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "print-token"
    script.write_text(f"#!{sys.executable}\nimport sys\nprint('tok-' + sys.argv[1])\n")
    script.chmod(0o755)
    # a path in argv[0] is relative to the config's folder, as the config's other paths
    (auth,) = config_auth(_config(tmp_path, username="oauth2accesstoken", password_command=["bin/print-token", "42"]))
    assert (auth.username, auth.password) == ("oauth2accesstoken", "tok-42")
    assert auth.source == "password_command print-token" and auth.renewable


def test_a_helper_gets_the_server_on_stdin_and_is_asked_again_near_its_ttl(tmp_path, monkeypatch):
    helper = Helper(tmp_path / "bin", "test-helper", "AWS", "first-secret")
    on_path(monkeypatch, helper.dir)
    clock = FakeClock()
    src = _source(tmp_path, clock, credential_helper="test-helper", credential_ttl="10m")
    assert src.current() == ("AWS", "first-secret", 0)
    assert helper.calls == ["get 127.0.0.1:5443"]  # argv is 'get', the server came on stdin: no secret in ps
    helper.set("AWS", "second-secret")
    clock.now += renew_after(600) - 1
    assert src.current().password == "first-secret" and len(helper.calls) == 1
    clock.now += 2
    assert src.current() == ("AWS", "second-secret", 1) and len(helper.calls) == 2
    # a refusal renews once: a second report of the same generation finds a newer secret already
    assert src.renew(refused=1).generation == 2 and src.renew(refused=1).generation == 2
    assert len(helper.calls) == 3


def test_default_ttls_of_the_expiring_helpers(tmp_path, monkeypatch):
    for name in ("ecr-login", "gcr", "pass"):
        Helper(tmp_path / "bin", name, "u", "s")
    on_path(monkeypatch, tmp_path / "bin")
    ttl = {n: _source(tmp_path, credential_helper=n).ttl_s for n in ("ecr-login", "gcr", "pass")}
    assert ttl == {"ecr-login": 11 * 3600, "gcr": 50 * 60, "pass": None}
    assert _source(tmp_path, credential_helper="gcr", credential_ttl="20m").ttl_s == 1200


def test_a_failing_renewal_keeps_the_secret_in_hand(tmp_path, monkeypatch):
    helper = Helper(tmp_path / "bin", "flaky", "u", "kept-secret")
    on_path(monkeypatch, helper.dir)
    clock = FakeClock()
    src = _source(tmp_path, clock, credential_helper="flaky", credential_ttl=60)
    helper.fail("network down")
    clock.now += 3600
    assert src.current() == ("u", "kept-secret", 0)
    with pytest.raises(CredentialError, match="network down"):
        src.renew()


def test_an_identity_token_is_not_sent_as_a_password(tmp_path, monkeypatch):
    helper = Helper(tmp_path / "bin", "desktop", "<token>", "refresh-token-value")
    on_path(monkeypatch, helper.dir)
    with pytest.raises(ConfigError, match="identity token") as e:
        _source(tmp_path, credential_helper="desktop")
    assert "refresh-token-value" not in str(e.value)


def test_helper_keys_in_drtp_config_output(tmp_path):
    cfg = _config(tmp_path, credential_helper="ecr-login", credential_ttl="11h")
    entry = redacted(cfg, full=True)["registries"][0]
    assert entry["credential_helper"] == "ecr-login" and entry["credential_ttl"] == "11h"


# -- a helper that fails stops the command: one line, exit 2, its stderr but never its stdout -----------


def _experiment(tmp_path, entry: dict, env: dict) -> subprocess.CompletedProcess:
    cfg = {
        "trace": {"location": str(tmp_path), "traces": ["none.json"]},
        "warmup": {"output": str(tmp_path / "w.jsonl")},
        "results": str(tmp_path / "results"),
        "registries": [{"id": "ecr-eu", "url": URL, **entry}],
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    return subprocess.run(
        [sys.executable, "-m", "drtp.cli", "experiment", "-c", str(tmp_path / "c.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@pytest.mark.parametrize(
    ("case", "expect"),
    [
        ("missing", "docker-credential-nowhere not found on PATH"),
        ("fails", "exited with code 1: keychain locked | try again"),
        ("not-json", "answered no JSON with Username and Secret for 127.0.0.1:5443"),
        ("not-found", "exited with code 1: it holds no credentials for 127.0.0.1:5443"),
    ],
)
def test_a_helper_failure_is_one_line_and_exit_2(tmp_path, case, expect):
    helper = Helper(tmp_path / "bin", "test-helper", "AWS", "the-helper-secret")
    env = dict(os.environ, PATH=f"{helper.dir}{os.pathsep}{os.environ['PATH']}")
    name = "nowhere" if case == "missing" else "test-helper"
    if case == "fails":
        helper.fail("keychain locked\ntry again\n", stdout='{"Secret": "the-helper-secret"}')
    elif case == "not-json":
        helper.answer_raw("Secret: the-helper-secret")
    elif case == "not-found":
        helper.fail("", stdout="credentials not found in native keychain\n")
    p = _experiment(tmp_path, {"credential_helper": name}, env)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert "registries[ecr-eu]" in lines[0] and f"credential_helper {name}" in lines[0], lines[0]
    assert expect in lines[0], lines[0]
    assert "the-helper-secret" not in p.stderr + p.stdout
    assert not (tmp_path / "results").exists()  # stopped before anything ran


def test_a_failing_password_command_is_one_line_and_exit_2(tmp_path):
    script = tmp_path / "vault-read"
    script.write_text(f"#!{sys.executable}\nimport sys\nprint('s3cr3t-out')\nsys.exit('permission denied')\n")
    script.chmod(0o755)
    p = _experiment(tmp_path, {"username": "u", "password_command": [str(script)]}, dict(os.environ))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "password_command vault-read: exited with code 1: permission denied" in p.stderr
    assert "s3cr3t-out" not in p.stderr


def test_a_helper_that_does_not_answer_is_killed_in_bounded_time(tmp_path, monkeypatch):
    import drtp.registry.credentials as credentials

    helper = Helper(tmp_path / "bin", "hangs", "u", "s")
    helper.slow(30)
    on_path(monkeypatch, helper.dir)
    monkeypatch.setattr(credentials, "COMMAND_TIMEOUT_S", 0.5)
    with pytest.raises(ConfigError, match=r"credential_helper hangs: no answer within 0.5 s \(killed\)"):
        _source(tmp_path, credential_helper="hangs")


def test_an_expired_secret_is_asked_for_once_by_many_threads_and_a_failure_waits_retry_s(tmp_path, monkeypatch):
    """Every master request asks ``current()``: past the TTL, threads that meet it together cost one helper
    call, and a failing helper is not run again by every request but once per ``RETRY_S``."""
    from concurrent.futures import ThreadPoolExecutor

    from drtp.registry.credentials import RETRY_S

    helper = Helper(tmp_path / "bin", "busy", "u", "first")
    on_path(monkeypatch, helper.dir)
    clock = FakeClock()
    src = _source(tmp_path, clock, credential_helper="busy", credential_ttl=60)
    helper.set("u", "second")
    clock.now += 3600
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: src.current(), range(8)))
    assert {s.password for s in got} == {"second"} and src.secret.generation == 1 and len(helper.calls) == 2
    helper.fail("throttled")
    clock.now += 3600
    for _ in range(5):
        assert src.current().password == "second"  # kept
    assert len(helper.calls) == 3  # one failed try, not five
    clock.now += RETRY_S + 0.1
    src.current()
    assert len(helper.calls) == 4


def test_a_renewed_secret_never_makes_a_write_go_twice():
    """A write sent with the secret of generation 0 that meets its 401 after generation 1 arrived is not sent
    again by the challenge (a read is; a request that went without credentials gets the challenge's send)."""
    from drtp.registry.auth import Authenticator
    from drtp.replay.messages import RegistryAuth

    auth = Authenticator(RegistryAuth("https://r.example", "u", "old", renewable=True))
    sent = {"Authorization": auth.basic}
    assert not auth.replaced_under("PUT", sent, 0)
    auth.replace_secret(type("S", (), {"username": "u", "password": "new", "generation": 1})())
    assert auth.replaced_under("PUT", sent, 0) and auth.replaced_under("POST", sent, 0)
    assert not auth.replaced_under("GET", sent, 0) and not auth.replaced_under("PUT", {}, 0)
    assert not auth.replaced_under("PUT", {"Authorization": auth.basic}, 1)


def test_a_renewal_that_brings_the_same_secret_back_replaces_nothing_a_write_met():
    """A helper asked again at its TTL answers the same secret: a new generation, but a write's 401 meanwhile is a
    plain challenge (a new repository's scope), answered and sent as any challenge is."""
    from drtp.registry.auth import Authenticator
    from drtp.replay.messages import RegistryAuth

    auth = Authenticator(RegistryAuth("https://r.example", "u", "same", renewable=True))
    sent = {"Authorization": "Bearer token-of-another-scope"}
    auth.replace_secret(type("S", (), {"username": "u", "password": "same", "generation": 1})())
    assert auth.generation == 1 and not auth.replaced_under("POST", sent, 0)
    auth.replace_secret(type("S", (), {"username": "u", "password": "changed", "generation": 2})())
    assert auth.replaced_under("POST", sent, 0) and auth.replaced_under("POST", sent, 1)
    assert not auth.replaced_under("POST", sent, 2)


def test_a_read_waits_once_for_a_renewal_that_does_not_come():
    """On a node, the reads refused with one generation wait for its renewal; once a wait ran out, later reads
    refused with that generation fail at once instead of each waiting the whole timeout."""
    from drtp.registry.auth import Authenticator
    from drtp.replay.messages import RegistryAuth

    auth = Authenticator(RegistryAuth("https://r.example", "u", "old", renewable=True))
    assert not auth.wait_renewed(0, 0.2)
    second: list[bool] = []
    waiter = threading.Thread(target=lambda: second.append(auth.wait_renewed(0, 1e6)), daemon=True)
    waiter.start()
    waiter.join(60)  # a hang check: without the fix this read would wait a million seconds
    assert second == [False]
    auth.replace_secret(type("S", (), {"username": "u", "password": "new", "generation": 1})())
    assert auth.wait_renewed(0, 30.0)


class _Link:
    """A node link that records the secret updates sent to it (the renewal thread's only use of a node)."""

    def __init__(self, fail: bool = False) -> None:
        self.dead, self.fail, self.updates = False, fail, []

    def send_secret(self, update) -> None:
        if self.fail:
            self.fail = False  # the first push is lost
            return
        self.updates.append(update.generation)


def test_the_renewal_thread_pushes_again_to_a_node_that_missed_a_secret_and_retries_a_failed_renewal(
    tmp_path, monkeypatch
):
    from drtp.master.run.renewal import SecretRenewal
    from drtp.replay.frames import Refusal

    helper = Helper(tmp_path / "bin", "retry", "u", "s0")
    on_path(monkeypatch, helper.dir)
    cfg = _config(tmp_path, credential_helper="retry")
    src = CredentialSource(cfg.registries[0], cfg)
    link = _Link(fail=True)
    renewal = SecretRenewal([src], config_auth(cfg, [src]), {"n": link}, "run-1")
    renewal.refused([Refusal(URL, 0)])
    renewal._round()  # renewed to generation 1, pushed: the push is lost
    assert src.secret.generation == 1 and link.updates == []
    renewal.refused([Refusal(URL, 0)])  # the node still refuses with generation 0: it gets generation 1 again
    renewal._round()
    assert link.updates == [1] and src.secret.generation == 1 and len(helper.calls) == 2
    helper.fail("down")
    renewal.refused([Refusal(URL, 1)])
    assert renewal._round() > 0 and renewal.refusals == [Refusal(URL, 1)]  # kept for the next round
    helper.set("u", "s2")
    (helper.dir / "retry.fail").unlink()
    renewal._round()
    assert src.secret.generation == 2 and link.updates == [1, 2] and renewal.refusals == []
