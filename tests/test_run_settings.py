"""RunSettings: a command's options laid over the config as validated overrides, in one place; a series' config
derived through the schema, its internal keys through their own channel."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from drtp.cli import build_parser
from drtp.config import load_config
from drtp.config_overrides import Override
from drtp.errors import ConfigError, DrtpError
from drtp.master.run.settings import RunSettings, derive_config, settings_from_args
from drtp.replay.failure_budget import FailureBudget
from tests.replay_support import TOKEN


def _config(tmp_path: Path, **client_info) -> Path:
    path = tmp_path / "config.yaml"
    raw = {
        "trace": {"location": str(tmp_path), "traces": ["t.json"]},
        "registry": ["127.0.0.1:1"],
        "client_info": {"client_list": ["127.0.0.1:2"], "token": TOKEN, **client_info},
        "live_metrics": {"port": 9999, "host": "127.0.0.1", "linger": 3},
    }
    path.write_text(yaml.safe_dump(raw))
    return path


def _settings(command: str, *argv: str, quiet: bool = False):
    args = build_parser(command, every=False).parse_args([command, *argv])
    return settings_from_args(args, quiet=quiet)


def test_the_config_gives_the_settings_when_no_option_is_given(tmp_path):
    path = _config(tmp_path, max_failed="2%", slo="p99<1s", max_replayer_limited=True)
    cfg, settings = _settings("run", "-c", str(path))
    assert settings.budget == FailureBudget(percent=Fraction(2))
    assert [o.text for o in settings.objectives] == ["p99<1s"]
    assert settings.max_replayer_limited is True
    assert (settings.live.port, settings.live.linger_s) == (9999, 3)
    assert settings.live.where == f"{path}: key 'live_metrics'"
    assert settings.out_dir is None and settings.resume is False and settings.tags == {}
    assert cfg.client_info.max_failed == "2%"


def test_an_option_is_laid_over_its_key(tmp_path):
    path = _config(tmp_path, max_failed=3, slo="p99<1s", max_replayer_limited=True)
    secret = tmp_path / "token"
    secret.write_text("another-secret-0123456789\n")
    argv = ["--max-failed", "5", "--slo", "p50<10ms,failed<1%", "--no-max-replayer-limited", "--rate", "20"]
    argv += ["--metrics-port", "8123", "--token-file", str(secret), "--out", str(tmp_path / "o"), "--resume"]
    cfg, settings = _settings("run", "-c", str(path), *argv)
    assert settings.budget == FailureBudget(count=5)
    assert [o.text for o in settings.objectives] == ["p50<10ms", "failed<1%"]
    assert settings.max_replayer_limited is False
    assert (settings.live.port, settings.live.host, settings.live.where) == (8123, "127.0.0.1", "--metrics-port 8123")
    assert cfg.client_info.rate == 20 and cfg.client_info.token == "another-secret-0123456789"
    assert settings.out_dir == tmp_path / "o" and settings.resume is True


def test_the_ramp_quiets_its_runs_only_when_asked(tmp_path):
    path = _config(tmp_path)
    ramp = ["-c", str(path), "--from", "1", "--step", "1", "--step-duration", "1", "-q"]
    assert _settings("ramp", *ramp, quiet=True)[1].quiet is True
    assert _settings("run", "-c", str(path), "-q")[1].quiet is False  # -q of run: progress only


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--max-failed", "150%"], "--max-failed: expected a count"),
        (["--slo", "p42<1s"], "--slo: "),
        (["--metrics-host", "no such host"], "--metrics-host: 'no such host' is not a host name"),
        (["--metrics-linger", "2h"], "--metrics-linger: at most 3600 s, got 7200"),
    ],
)
def test_a_bad_option_is_one_line_naming_the_option(tmp_path, argv, line):
    with pytest.raises(DrtpError) as e:
        _settings("run", "-c", str(_config(tmp_path)), *argv)
    assert str(e.value).startswith(line) and "\n" not in str(e.value)
    assert "client_info" not in str(e.value) and "live_metrics." not in str(e.value)


def test_a_bad_key_is_still_named_by_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"config.yaml: key 'client_info.slo': "):
        _settings("run", "-c", str(_config(tmp_path, slo="p42<1s")))


def test_a_derived_config_is_validated_and_keeps_where_it_came_from(tmp_path):
    cfg = load_config(_config(tmp_path))
    step = derive_config(cfg, [Override("client_info.rate", 5.0, "a step")], namespace="rep2-")
    assert step.client_info.rate == 5.0 and cfg.client_info.rate is None  # the original is left as it was
    assert (step.source, step.base_dir, step.namespace) == (cfg.source, cfg.base_dir, "rep2-")
    assert derive_config(step, []).namespace == "rep2-"  # carried to what is derived from it
    loop = derive_config(cfg, [Override("client_info.engine", "loop", "a test")])
    with pytest.raises(ConfigError, match=r"key 'client_info.engine': loop replays as fast as possible; rate mode"):
        derive_config(loop, [Override("client_info.rate", 5.0, "a step")])  # the schema's cross-key rule


def test_a_file_still_may_not_set_the_internal_namespace(tmp_path):
    path = _config(tmp_path)
    path.write_text(path.read_text() + "namespace: rep1-\n")
    with pytest.raises(ConfigError, match="unknown key 'namespace'"):
        load_config(path)


def test_the_settings_default_to_a_plain_run():
    assert RunSettings() == RunSettings(budget=FailureBudget(count=0), objectives=(), quiet=False, resume=False)


def test_a_derived_config_expands_no_variable_twice(tmp_path, monkeypatch):
    """A value the file took from the environment is data once loaded: a series' run keeps it as it is."""
    path = _config(tmp_path)
    entry = "registries:\n- id: a\n  url: http://127.0.0.1:1\n  username: u\n  password: ${PW}\n"
    path.write_text(path.read_text() + entry)
    monkeypatch.setenv("PW", "p${NOT_SET_ANYWHERE}w")
    cfg = load_config(path)
    assert cfg.registries[0].password == "p${NOT_SET_ANYWHERE}w"
    run = derive_config(cfg, [Override("client_info.rate", 5.0, "a step")])
    assert run.registries[0].password == "p${NOT_SET_ANYWHERE}w"
