"""Config loading: the original trace player's keys, validation errors, secrets."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from drtp.config import load_config, redacted
from drtp.errors import ConfigError

ORIGINAL = """\
client_info:
    client_list:
        - 10.0.0.2:8081
        - 10.0.0.3:8081
    port: 8081
    threads: 100
    wait: true
    route: false
verbose: false
trace:
    location: /data/traces
    traces:
        - prod-dal09-logstash-2017.08.01-0.json
        - prod-dal09-logstash-2017.08.01-1.json
    limit:
        type: seconds
        amount: 3600
    output: results.json
registry:
    - 10.0.0.10:5000
warmup:
    output: interm.json
    threads: 10
    random: true
simulate:
    name: cache.py
    args:
        cache_size: 8
"""


def write(tmp_path, text: str):
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_original_config_loads_unchanged(tmp_path):
    cfg = load_config(write(tmp_path, ORIGINAL))
    assert cfg.client_info.client_list == ["10.0.0.2:8081", "10.0.0.3:8081"]
    assert cfg.client_info.threads == 100 and cfg.client_info.wait is True
    assert cfg.registry == ["10.0.0.10:5000"]
    assert cfg.warmup.output == "interm.json" and cfg.warmup.threads == 10
    assert cfg.simulate.name == "cache.py" and cfg.simulate.args == {"cache_size": 8}
    assert [p.name for p in cfg.trace_paths()] == [
        "prod-dal09-logstash-2017.08.01-0.json",
        "prod-dal09-logstash-2017.08.01-1.json",
    ]
    assert cfg.reader_options()["limit_type"] == "seconds"
    assert cfg.reader_options()["amount"] == 3600


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("trace: {location: ., traces: [a], bogus: 1}", "unknown key 'trace.bogus'"),
        ("verbos: true", "unknown key 'verbos'"),
        ("client_info: {threads: many}", "key 'client_info.threads': expected an integer, got 'many'"),
        ("trace: {traces: [a]}", "missing key 'trace.location'"),
        ("trace: {location: ., traces: [a], limit: {type: minutes, amount: 3}}", "key 'trace.limit.type'"),
        ("client_info: {client_list: [a, 3]}", "key 'client_info.client_list[1]'"),
        ("warmup: {random: [1]}", "key 'warmup.random'"),
        ("client_info: {engine: fast}", "key 'client_info.engine'"),
        ("client_info: {engine: loop, wait: true}", "key 'client_info.engine': loop replays as fast as possible"),
        ("- a\n- b", "must be a mapping"),
        ("trace: {location: [unclosed", "config.yaml:1:28: not valid YAML: expected ',' or ']'"),
    ],
)
def test_bad_configs_name_the_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert message in str(err.value) and str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_required_key_for_a_command(tmp_path):
    cfg = load_config(write(tmp_path, "verbose: true"))
    with pytest.raises(ConfigError, match="missing key 'trace'"):
        cfg.trace_paths()


def test_env_secrets_are_expanded_and_never_printed(tmp_path, monkeypatch):
    monkeypatch.setenv("DRTP_TEST_TOKEN", "s3cr3t-value-0123456")
    path = write(tmp_path, "client_info: {token: '${DRTP_TEST_TOKEN}'}\nregistry: localhost:5000\n")
    cfg = load_config(path)
    assert cfg.client_info.token == "s3cr3t-value-0123456"
    assert cfg.registry == ["localhost:5000"]  # a single host:port is accepted as the original did
    assert "s3cr3t" not in str(redacted(cfg))
    out = subprocess.run(
        [sys.executable, "-m", "drtp.cli", "config", "-c", str(path)],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "DRTP_TEST_TOKEN": "s3cr3t-value-0123456"},
    )
    assert out.returncode == 0 and "***" in out.stdout and "s3cr3t" not in out.stdout + out.stderr


def test_missing_env_var_names_key(tmp_path, monkeypatch):
    monkeypatch.delenv("DRTP_NOT_SET", raising=False)
    path = write(tmp_path, "client_info: {token: '${DRTP_NOT_SET}'}")
    with pytest.raises(ConfigError, match=r"key 'client_info.token': environment variable DRTP_NOT_SET is not set"):
        load_config(path)


def test_cli_reports_bad_config_in_one_line(tmp_path):
    path = write(tmp_path, "trace: {location: ., traces: [a], bogus: 1}")
    out = subprocess.run([sys.executable, "-m", "drtp.cli", "config", "-c", str(path)], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "unknown key 'trace.bogus'" in out.stderr
    assert "Traceback" not in out.stderr


def test_shipped_example_configs_load_and_their_traces_read(monkeypatch):
    from pathlib import Path

    from drtp.trace.reader import TraceReader

    monkeypatch.setenv("DRTP_TOKEN", "example-secret-0123")  # the replay examples take the secret from here
    monkeypatch.setenv("USER", "tester")  # the Slurm example's work folder is per user
    monkeypatch.setenv("HARBOR_PASSWORD", "example-password")  # and experiment-example.yaml a password
    configs = sorted((Path(__file__).parent.parent / "configs").glob("*.yaml"))
    assert configs
    for path in configs:
        cfg = load_config(path)
        if cfg.trace is not None:
            reader = TraceReader(cfg.trace_paths(), **cfg.reader_options())
            assert sum(len(b) for b in reader.batches()) > 0, path


# -- hostile input: bounded YAML, numbers in range, one line naming the key ---------------------------

BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (BOMB, "not valid YAML: more than 100,000 values once aliases are expanded"),
        ("a: &a [*a]", "config.yaml:1:8: not valid YAML: alias *a refers to a value that contains it"),
        ("a: " + "[" * 100_000 + "]" * 100_000, "config.yaml:1:67: not valid YAML: nested deeper than 64 levels"),
        ("a: 1\n b: 2\n", "config.yaml:2:3: not valid YAML: mapping values are not allowed here"),
        ("x: " + "9" * 5000, "not valid YAML: Exceeds the limit"),
        ("a: \x07", "not valid YAML: character #x0007 at position 3 is not allowed"),
        ("42", "the config must be a mapping of keys, not int"),
        ("{1: 2}", "key '(top level)': every key in it must be a name"),
        ("client_info: {threads: 0}", "key 'client_info.threads': expected an integer ≥ 1, got 0"),
        ("client_info: {threads: 5000}", "key 'client_info.threads': expected an integer ≤ 1024, got 5000"),
        ("client_info: {threads: true}", "key 'client_info.threads': expected an integer, got True"),
        ("client_info: {timeout: -1}", "key 'client_info.timeout': expected a number > 0, got -1"),
        ("client_info: {timeout: 0}", "key 'client_info.timeout': expected a number > 0, got 0"),
        ("client_info: {timeout: .nan}", "key 'client_info.timeout': expected a number > 0, got nan"),
        ("client_info: {connect_timeout: .inf}", "key 'client_info.connect_timeout': expected a number ≤ 604800"),
        ("client_info: {batch: 0}", "key 'client_info.batch': expected an integer ≥ 1, got 0"),
        ("client_info: {inflight: -5}", "key 'client_info.inflight': expected an integer ≥ 1, got -5"),
        ("client_info: {speedup: 0}", "key 'client_info.speedup': expected a number > 0, got 0"),
        ("client_info: {retries: 11}", "key 'client_info.retries': expected an integer ≤ 10, got 11"),
        ("client_info: {port: 70000}", "key 'client_info.port': expected an integer ≤ 65535, got 70000"),
        ("client_info: {on_time_ms: -1}", "key 'client_info.on_time_ms': expected a number ≥ 0, got -1"),
        ("warmup: {threads: 0}", "key 'warmup.threads': expected an integer ≥ 1, got 0"),
        ("trace: {location: ., traces: [a], limit: {type: requests, amount: -10}}", "key 'trace.limit.amount'"),
        ("trace: {location: ., traces: [a], limit: {type: requests, amount: 2.5}}", "must be whole, got 2.5"),
        ("trace: {location: ., traces: [a], reorder_window: .nan}", "key 'trace.reorder_window'"),
        ("trace: {location: ., traces: [a], format: xml}", "'xml' is not one of auto, ibm, jsonl, registry-log"),
        ("slurm: {nodes: 0}", "key 'slurm.nodes': expected an integer ≥ 1, got 0"),
        ("slurm: {poll: 0}", "key 'slurm.poll': expected a number > 0, got 0"),
        ("slurm: {client_port: 65535, tasks_per_node: 2}", "key 'slurm.client_port': 65535 + 2 tasks per node"),
        ("deploy: {host: h, port: 0}", "key 'deploy.port': expected an integer ≥ 1, got 0"),
    ],
)
def test_hostile_configs_are_one_line_naming_file_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert message in str(err.value) and str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_a_directory_a_binary_file_and_a_bom(tmp_path):
    with pytest.raises(ConfigError, match="is a directory, not a YAML file"):
        load_config(tmp_path)
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\xff\xfe\x00junk")
    with pytest.raises(ConfigError, match=r"b.yaml: not UTF-8 text \(byte 0\)"):
        load_config(binary)
    bom = tmp_path / "bom.yaml"
    bom.write_bytes(b"\xef\xbb\xbfverbose: true\n")
    assert load_config(bom).verbose is True


def test_anchors_that_do_not_multiply_still_work(tmp_path):
    cfg = load_config(write(tmp_path, "registry: &r [a:5000]\nclient_info: {client_list: *r}\n"))
    assert cfg.registry == cfg.client_info.client_list == ["a:5000"]
    path = write(tmp_path, "registries:\n  - &base {id: a, url: 'https://a'}\n  - {<<: *base, id: b}\n")
    assert [r.id for r in load_config(path).registries] == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("client_info: {threads: 0}", "key 'client_info.threads': expected an integer ≥ 1, got 0"),
        ("a: " + "[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels"),
        (BOMB, "more than 100,000 values"),
    ],
)
def test_hostile_configs_through_every_config_command(tmp_path, text, message):
    """One stderr line and exit 2 from each command that reads a config, not a node's HTTP 400 or a hang."""
    path = write(tmp_path, text)
    for command in (["config"], ["run"], ["warmup"], ["experiment"], ["simulate"], ["slurm", "render"]):
        out = subprocess.run(
            [sys.executable, "-m", "drtp.cli", *command, "-c", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 2, (command, out.stderr)
        assert out.stderr.count("\n") == 1 and message in out.stderr, (command, out.stderr)


# -- client_info.port: the original's master callback port ---------------------------------------------------

ORIGINAL_EXAMPLE = """\
client_info:
    client_list:
        - localhost:8081
        - localhost:8082
    port: 8080 # master's server port needed for clients to send information back
    threads: 100
    wait: true
    route: true
verbose: true
trace:
    location: /data
    traces: [prod-dal09-logstash-2017.08.01-0.json]
    limit: {type: requests, amount: 100}
    output: results.json
registry: [localhost:5005]
warmup: {output: interm.json, threads: 100, random: true}
"""


def test_the_originals_callback_port_is_accepted_and_leaves_the_nodes_alone(tmp_path):
    """The original's example config: port is the master's port (8080); the nodes keep their own ports."""
    from drtp.master.run.replay import node_addresses

    cfg = load_config(write(tmp_path, ORIGINAL_EXAMPLE))
    assert cfg.client_info.port == 8080
    assert node_addresses(cfg) == ["localhost:8081", "localhost:8082"]
    assert load_config(write(tmp_path, "client_info: {client_list: ['h:9000']}")).client_info.port is None


def test_a_node_without_its_port_is_refused_saying_port_is_not_its_default(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, "client_info: {client_list: [localhost], port: 8081}"))
    text = str(e.value)
    assert "key 'client_info.client_list[0]': 'localhost' is not host:port" in text
    assert "client_info.port is not a default port for them" in text


def test_verbose_run_says_the_callback_port_is_unused(tmp_path, caplog):
    from drtp.config import effective_config

    effective = effective_config(write(tmp_path, ORIGINAL_EXAMPLE), {})
    with caplog.at_level("INFO", logger="drtp"):
        effective.log()
    assert "client_info.port 8080 not used: it is the original trace player's master callback port" in caplog.text


# -- the effective config: file < environment < --set ------------------------------------------------------


def test_precedence_file_then_environment_then_set_in_order(tmp_path):
    from drtp.config import effective_config
    from drtp.config_overrides import parse_set

    path = write(tmp_path, ORIGINAL_EXAMPLE)
    env = {"DRTP_CONFIG__CLIENT_INFO__THREADS": "8", "DRTP_CONFIG__WARMUP__THREADS": "4", "DRTP_TOKEN": "not-a-key"}
    sets = [
        parse_set("warmup.threads=5"),
        parse_set("warmup.threads=6"),
        parse_set("trace.limit={type: seconds, amount: 1.5}"),
    ]
    eff = effective_config(path, env, sets)
    cfg = eff.config
    assert cfg.client_info.threads == 8 and cfg.warmup.threads == 6  # the later --set wins
    assert cfg.trace.limit.type == "seconds" and cfg.trace.limit.amount == 1.5
    assert cfg.client_info.wait is True and cfg.registry == ["localhost:5005"]  # the file's keys stay
    assert eff.origin("client_info.threads") == "DRTP_CONFIG__CLIENT_INFO__THREADS"
    assert eff.origin("warmup.threads") == "--set" and eff.origin("trace.limit.amount") == "--set"
    assert eff.origin("client_info.wait") is None and eff.origin("client_info") is None
    assert cfg.source == str(path) and cfg.base_dir == str(tmp_path)  # relative paths still from the file's folder
    assert load_config(path).client_info.threads == 100  # the file alone: unchanged


def test_set_can_make_a_section_the_file_lacks_and_clear_a_key(tmp_path):
    from drtp.config import effective_config
    from drtp.config_overrides import parse_set

    path = write(tmp_path, ORIGINAL_EXAMPLE)
    cfg = effective_config(path, {}, [parse_set("slurm.nodes=3"), parse_set("trace.limit=")]).config
    assert cfg.slurm.nodes == 3 and cfg.trace.limit is None


def test_override_values_are_read_as_yaml_and_checked_by_the_schema(tmp_path):
    from drtp.config import effective_config
    from drtp.config_overrides import parse_set

    path = write(tmp_path, ORIGINAL_EXAMPLE)
    cfg = effective_config(
        path, {}, [parse_set("client_info.client_list=[a:1, 'b:2']"), parse_set("verbose=no")]
    ).config
    assert cfg.client_info.client_list == ["a:1", "b:2"] and cfg.verbose is False
    with pytest.raises(
        ConfigError, match=r"key 'client_info.wait' \(from --set\): expected true or false, got 'maybe'"
    ):
        effective_config(path, {}, [parse_set("client_info.wait=maybe")])
    with pytest.raises(ConfigError, match=r"key 'client_info.token' \(from DRTP_CONFIG__CLIENT_INFO__TOKEN\)"):
        effective_config(path, {"DRTP_CONFIG__CLIENT_INFO__TOKEN": "short"})


def test_full_redacted_config_keeps_every_key_and_int_types(tmp_path):
    cfg = load_config(write(tmp_path, ORIGINAL_EXAMPLE))
    full = redacted(cfg, full=True)
    assert full["trace"]["limit"]["amount"] == 100 and type(full["trace"]["limit"]["amount"]) is int
    assert full["client_info"]["batch"] == 200 and "batch" not in redacted(cfg)["client_info"]
    assert set(full) >= {"trace", "client_info", "verbose", "registry", "registries", "warmup", "simulate", "results"}
