"""Events on the run's clock, their input: ``events:`` entries, ``--event`` options, the checks made before a
request is sent (one line, exit 2), the environment an event's command gets, and the output run on its own.

The end-to-end runs against a real registry are in tests/test_events_e2e.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pytest
import yaml

from drtp.cli import main
from drtp.config import config_from_dict
from drtp.errors import ConfigError
from drtp.master.commands.options import event_option
from drtp.master.outputs.events import EventsOutput, check_event_commands, event_environment
from drtp.master.outputs.output import RunContext
from drtp.replay.event_log import read_events
from tests.conftest import ibm_record, write_json

BASE = {"trace": {"location": ".", "traces": ["t.json"]}, "registry": ["127.0.0.1:5000"]}
TRUE = sys.executable  # a program that is there on every machine the tests run on


def config(events: list, base_dir: str = ".") -> object:
    return config_from_dict({**BASE, "events": events}, source="c.yaml", base_dir=base_dir)


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ([{"name": "gc", "at": "1s", "run": ["x"], "when": 1}], "c.yaml: unknown key 'events[0].when'"),
        ([{"name": "gc", "run": ["x"]}], "key 'events[0]' (event 'gc'): give exactly one of 'at'"),
        ([{"name": "gc", "at": 1, "after": 5, "run": ["x"]}], "key 'events[0]' (event 'gc'): give exactly one of"),
        ([{"name": "gc", "at": "soon", "run": ["x"]}], "key 'events[0].at' (event 'gc'): not a duration: 'soon'"),
        ([{"name": "gc", "after": 0, "run": ["x"]}], "key 'events[0].after'"),
        ([{"name": "gc", "at": 1, "run": []}], "key 'events[0].run' (event 'gc'): an empty command"),
        ([{"name": "gc", "at": 1, "run": ["x"], "until": "0s"}], "key 'events[0].until' (event 'gc'): must be more"),
        ([{"name": "gc", "at": 1, "run": ["x"], "until": []}], "key 'events[0].until' (event 'gc'): an empty command"),
        ([{"name": "g c", "at": 1, "run": ["x"]}], "key 'events[0].name': 'g c' is not a name"),
        ([{"name": "../x", "at": 1, "run": ["x"]}], "key 'events[0].name': '../x' is not a name"),
        (
            [{"name": "gc", "at": 1, "run": ["x"]}, {"name": "gc", "after": 3, "run": ["y"]}],
            "key 'events[1]' (event 'gc'): two events named 'gc'",
        ),
    ],
)
def test_a_bad_event_is_one_line_naming_it(events, message):
    with pytest.raises(ConfigError) as e:
        config(events)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_good_event_keeps_its_keys():
    (event,) = config([{"name": "ro", "at": "2s", "run": ["a", "b"], "until": ["c"], "required": True}]).events
    assert (event.name, event.at, event.run, event.until, event.required) == ("ro", "2s", ["a", "b"], ["c"], True)


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        ("30s:my-gc --dry-run 'a b'", {"name": "my-gc", "at": "30s", "run": ["my-gc", "--dry-run", "a b"]}),
        ("gc@after=100:/usr/bin/gc x", {"name": "gc", "after": 100, "run": ["/usr/bin/gc", "x"]}),
        ("1m:./bin/switch.sh on;off", {"name": "switch.sh", "at": "1m", "run": ["./bin/switch.sh", "on;off"]}),
    ],
)
def test_event_option_is_split_as_a_shell_would_into_an_entry(text, entry):
    assert event_option(text) == entry


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("30s", "expected [NAME@]AT:COMMAND"),
        (":cmd", "expected [NAME@]AT:COMMAND"),
        ("30s:", "no COMMAND after AT:"),
        ("30s:cmd 'open", "COMMAND: No closing quotation"),
        ("after=ten:cmd", "after=N needs a whole number of requests"),
    ],
)
def test_a_malformed_event_option_is_refused(text, message):
    with pytest.raises(argparse.ArgumentTypeError) as e:
        event_option(text)
    assert message in str(e.value)


def test_commands_are_found_on_path_or_beside_the_config_and_hold_no_secret(tmp_path):
    script = tmp_path / "bin" / "switch"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    check_event_commands(config([{"name": "a", "at": 1, "run": ["bin/switch"], "until": ["sh"]}], str(tmp_path)))
    with pytest.raises(ConfigError, match=r"key 'events\[0\].run' \(event 'a'\): program 'nosuch/x' not found"):
        check_event_commands(config([{"name": "a", "at": 1, "run": ["nosuch/x"]}], str(tmp_path)))
    with pytest.raises(ConfigError, match=r"key 'events\[0\].until' \(event 'a'\): program 'no-such-prog-x' not"):
        check_event_commands(config([{"name": "a", "at": 1, "run": ["sh"], "until": ["no-such-prog-x"]}]))
    script.chmod(0o644)
    with pytest.raises(ConfigError, match="program 'bin/switch' is not executable"):
        check_event_commands(config([{"name": "a", "at": 1, "run": ["bin/switch"]}], str(tmp_path)))
    cfg = config_from_dict(
        {**BASE, "client_info": {"token": "s3cret-token-xyz"}, "events": [{"name": "a", "at": 1,
         "run": ["sh", "-c", "echo s3cret-token-xyz"]}]}, source="c.yaml",
    )  # fmt: skip
    with pytest.raises(ConfigError, match="an argument holds one of drtp's secrets"):
        check_event_commands(cfg)


def test_an_event_gets_the_environment_without_drtps_secrets():
    environ = {
        "PATH": "/bin",
        "DRTP_TOKEN": "t",
        "DRTP_REGISTRY_PASSWORD": "p",
        "DRTP_CONFIG__CLIENT_INFO__TOKEN": "x",
        "MY_PASSWORD_VAR": "hunter22",
        "REGISTRY_CONFIG": "/etc/registry.yml",
    }
    assert event_environment(["hunter22"], environ) == {"PATH": "/bin", "REGISTRY_CONFIG": "/etc/registry.yml"}


def _cli(capsys, *args: str) -> tuple[int, str]:
    try:
        code = main(list(args))
    except SystemExit as e:
        code = int(e.code)
    return code, capsys.readouterr().err


@pytest.fixture
def run_config(tmp_path: Path) -> Path:
    write_json(tmp_path / "t.json", [ibm_record(i) for i in range(10)])  # 10 requests, 1 s apart
    data = {**BASE, "client_info": {"client_list": ["127.0.0.1:9"], "token": "a-token-of-the-nodes-1234"}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--event", "30s"], "drtp run: error: --event: '30s': expected [NAME@]AT:COMMAND"),
        (["--event", "1s:no-such-prog-x"], "drtp run: error: --event (event 'no-such-prog-x'): program"),
        (["--event", f"1s:{TRUE}", "--event", f"2s:{TRUE}"], "two events named"),
        (["--event", f"5s:{TRUE}", "--rate", "5"], "--event (event 'python"),  # 10 requests at 5/s: 2 s
        (["--event", f"after=11:{TRUE}", "--rate", "5"], "after 11 requests, past the trace's 10"),
    ],
)
def test_bad_events_on_the_command_line_are_one_line_exit_2_before_anything_is_sent(
    capsys, tmp_path, run_config, options, message
):
    out = tmp_path / "run"
    code, err = _cli(capsys, "run", "-c", str(run_config), "--out", str(out), "-q", *options)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert message in err
    assert not out.exists()  # refused before the run's folder was kept, nothing sent


def test_an_event_past_the_trace_as_is_names_the_traces_length(capsys, tmp_path, run_config):
    data = yaml.safe_load(run_config.read_text())
    data["client_info"]["wait"] = True
    data["events"] = [{"name": "late", "at": "9.5s", "run": [TRUE]}]  # the trace lasts 9 s
    run_config.write_text(yaml.safe_dump(data))
    code, err = _cli(capsys, "run", "-c", str(run_config), "--out", str(tmp_path / "run"), "-q")
    assert code == 2 and "key 'events[0]' (event 'late'): at 9.5 s, past the trace, which lasts 9." in err, err


def _context(tmp_path: Path, events: list, clock) -> RunContext:
    cfg = config(events, str(tmp_path))
    stops: list[str] = []
    run = RunContext(cfg, tmp_path, True, False, True, 1.0, clock, lambda r: "r", stop_run=stops.append)
    run.stops = stops  # type: ignore[attr-defined]
    return run


def test_the_output_runs_events_at_their_time_and_records_them(tmp_path):
    origin = time.monotonic()
    run = _context(tmp_path, [
        {"name": "first", "at": 0, "run": [TRUE, "-c", "print('hello')"], "until": "0.2s"},
        {"name": "second", "after": 3, "run": [TRUE, "-c", "import sys; sys.exit(5)"], "required": True},
        {"name": "never", "after": 9, "run": [TRUE, "-c", "pass"]},
    ], lambda: time.monotonic() - origin)  # fmt: skip
    out = EventsOutput.open(run)
    assert [r.started_s for r in read_events(tmp_path / "events.csv")] == [None, None, None]
    out.start()
    out._answered(3)  # what frame() counts: three answered trace requests
    deadline = time.monotonic() + 60
    while any(r.ended_s is None for r in out.records()[:2]) and time.monotonic() < deadline:
        time.sleep(0.05)
    out.stop()
    first, second, never = read_events(tmp_path / "events.csv")
    assert first.planned_s == 0.0 and first.exit_code == 0 and first.ended_s - first.started_s >= 0.2
    assert second.planned_s is None and second.exit_code == 5 and second.started_s is not None
    assert never.started_s is None and never.ended_s is None
    assert "first" in out.running_in(first.started_s, first.ended_s).split(";")
    assert out.running_in(first.ended_s + 100, first.ended_s + 101) == ""
    assert run.stops == ["required event second failed (exit 5; its output: events/second.log)"]
    assert "hello" in (tmp_path / "events" / "first.log").read_text()
    assert os.path.exists(tmp_path / "events" / "second.log") and not (tmp_path / "events" / "never.log").exists()


def _cluster_config(tmp_path: Path, **extra) -> Path:
    (tmp_path / "bin").mkdir(exist_ok=True)
    (tmp_path / "bin" / "switch").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "switch").chmod(0o755)
    data = {
        "trace": {"location": "traces", "traces": ["a.json"]},
        "registry": ["reg.example:5000"],
        "client_info": {"token": "a-token-of-the-nodes-1234"},
        "slurm": {"partition": "defq"},
        "events": [
            {"name": "ro", "at": "30s", "run": ["bin/switch", "on"], "until": ["bin/switch", "off"]},
            {"name": "gc", "after": 100, "run": ["docker-registry", "garbage-collect", "/etc/r.yml"], "until": "1m"},
        ],
        **extra,
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_slurm_and_deploy_jobs_carry_the_events_with_their_programs(tmp_path):
    from drtp.cluster.deploy import Deployment, Layout
    from drtp.cluster.runconfig import missing_entry_files
    from drtp.cluster.submission import raw_config
    from drtp.config import load_config

    path = _cluster_config(tmp_path)
    # a Slurm job reads the experiment's copy of the config: a program beside the config is made absolute
    ro, gc = raw_config(path)["events"]
    switch = str(tmp_path.resolve() / "bin" / "switch")
    assert ro == {"name": "ro", "at": "30s", "run": [switch, "on"], "until": [switch, "off"]}
    assert gc["run"][0] == "docker-registry" and gc["until"] == "1m" and gc["after"] == 100  # on PATH: as is
    assert missing_entry_files(yaml.safe_load(path.read_text()), tmp_path) == []
    (tmp_path / "bin" / "switch").unlink()
    raw = yaml.safe_load(path.read_text())
    assert missing_entry_files(raw, tmp_path) == ["events[ro].run: bin/switch", "events[ro].until: bin/switch"]
    # a deploy copies the program to the remote host and names the copy
    path = _cluster_config(tmp_path, deploy={"host": "login.example", "mode": "ssh"})
    dep = Deployment(path, load_config(path), None)
    exp = "/home/u/drtp-deploy/exp/deploy-exp"
    data = dep.remote_config(Layout("/home/u/drtp-deploy", "/home/u/drtp-deploy/venv", exp), ["10.0.0.1:9000"])
    ro, gc = data["events"]
    assert ro["run"] == [f"{exp}/events/0/run/switch", "on"] and ro["until"] == [f"{exp}/events/0/until/switch", "off"]
    assert gc["run"][0] == "docker-registry"
    assert sorted(dep.entry_files) == [
        (tmp_path / "bin" / "switch", ro["run"][0]),
        (tmp_path / "bin" / "switch", ro["until"][0]),
    ]
