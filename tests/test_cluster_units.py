"""The cluster parts that need no cluster: sbatch rendering, scontrol parsing, config rewriting."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
import yaml

from drtp.cli import main
from drtp.cluster import slurm
from drtp.cluster.deploy import Deployment, Layout, env_refs, project_files, project_root
from drtp.cluster.runconfig import (
    _without_secret_sources,
    check_run_config,
    missing_entry_files,
    replay_mode,
    run_config_data,
)
from drtp.cluster.submission import Experiment, find_experiment, raw_config, registry_lines
from drtp.config import SECRET_SOURCES, load_config
from drtp.errors import ConfigError, DrtpError

CFG = {
    "trace": {"location": "traces", "traces": ["a.json"]},
    "registry": ["reg.example:5000"],
    "client_info": {"token": "${DRTP_TOKEN}"},
    "results": "/scratch/${USER}/results",
    "warmup": {"output": "maps/warmup.jsonl"},
    "slurm": {
        "partition": "defq",
        "account": "proj42",
        "nodes": 3,
        "tasks_per_node": 2,
        "time": "00:20:00",
        "extra": ["--mem=4G", "#SBATCH --exclusive"],
        "setup": ["module load python/3.11", "source /home/u/venv/bin/activate"],
        "client_port": 9100,
        "drtp": "python -m drtp.cli",
    },
    "deploy": {"host": "login.example", "user": "u", "password": "${SSH_PW}", "mode": "slurm"},
}


@pytest.fixture
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("DRTP_TOKEN", "secret-token-123")
    monkeypatch.setenv("SSH_PW", "ssh-password-456")
    monkeypatch.setenv("USER", "u")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(CFG))
    return path


def test_rendered_scripts_hold_the_slurm_section(config):
    s = load_config(config).slurm
    clients = slurm.render_clients(s, "/scratch/u/e1", "drtp-e1")
    master = slurm.render_master(s, "/scratch/u/e1", "drtp-e1", "4711")
    for script in (clients, master):
        assert "{{" not in script and "}}" not in script
        assert "#SBATCH --partition=defq" in script and "#SBATCH --account=proj42" in script
        assert "#SBATCH --mem=4G" in script and "#SBATCH --exclusive" in script
        assert "module load python/3.11\nsource /home/u/venv/bin/activate" in script
        assert "export DRTP_CMD='python -m drtp.cli'" in script
        assert "secret-token-123" not in script
        # every #SBATCH line comes before the first command (sbatch stops reading them there)
        lines = script.splitlines()
        first_cmd = next(i for i, ln in enumerate(lines) if ln and not ln.startswith("#"))
        assert all(i < first_cmd for i, ln in enumerate(lines) if ln.startswith("#SBATCH"))
    assert "#SBATCH --nodes=3" in clients and "#SBATCH --ntasks-per-node=2" in clients
    assert "#SBATCH --time=00:20:00" in clients and "DRTP_CLIENT_PORT=9100" in clients
    assert "#SBATCH --dependency=after:4711" in master and "scancel 4711" in master
    # one registry: warmup, then run, both with plain progress lines in the job's log; the job exits with their code
    # (the replay in a process group of its own, which the shell passes Slurm's SIGTERM on to, and waits for)
    progress = '"${progress[@]}"'
    run_cfg = '-c "$DRTP_EXP/run-config.yaml"'
    assert (
        f"( trap '' TERM; {{ $DRTP_CMD warmup {run_cfg} {progress} && $DRTP_CMD run {run_cfg} "
        f'--out "$DRTP_EXP/run" {progress}; }} ) &\nreplay=$!'
    ) in master
    assert 'kill -TERM -- -"$replay"' in master and master.rstrip().endswith("exit $status")
    assert 'progress=(--progress-interval "${DRTP_PROGRESS_INTERVAL:-10}")' in master
    # registries: drtp experiment, the registries in turn (resumed: --resume)
    exp = slurm.render_master(s, "/scratch/u/e1", "drtp-e1", "4711", "experiment", resume=True)
    assert f"( trap '' TERM; $DRTP_CMD experiment {run_cfg} --out \"$DRTP_EXP/run\" --resume {progress} ) &" in exp
    assert "warmup" not in exp.split("slurm nodes")[1]


def test_render_command_prints_both_scripts(config, capsys):
    assert main(["slurm", "render", "-c", str(config)]) == 0
    out = capsys.readouterr().out
    assert out.count("#!/bin/bash") == 2 and "-clients" in out and "-master" in out


def test_unknown_slurm_key_is_one_line_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"slurm": {"nodse": 2}}))
    with pytest.raises(ConfigError, match="unknown key 'slurm.nodse'"):
        load_config(path)


def test_scontrol_oneliner_parsing():
    line = (
        "JobId=12 JobName=drtp-e1-master UserId=root(0) JobState=FAILED Reason=NonZeroExitCode "
        "Dependency=(null) ExitCode=2:0 ReqB:S:C:T=0:0:*:* NodeList=n1 TRES=cpu=2,node=1 "
        "StdOut=/scratch/my dir/master-12.out Power="
    )
    f = slurm.parse_oneliner(line)
    assert f["JobState"] == "FAILED" and f["ExitCode"] == "2:0" and f["TRES"] == "cpu=2,node=1"
    assert f["StdOut"] == "/scratch/my dir/master-12.out" and f["Power"] == "" and f["ReqB:S:C:T"] == "0:0:*:*"


def test_experiment_config_copy_has_absolute_paths_and_no_secrets(config):
    data = raw_config(config)
    base = config.parent.resolve()
    assert data["trace"]["location"] == str(base / "traces")
    assert data["warmup"]["output"] == str(base / "maps" / "warmup.jsonl")
    assert data["results"] == "/scratch/${USER}/results"
    assert data["client_info"]["token"] == "${DRTP_TOKEN}"
    assert "deploy" not in data


def test_deploy_rewrites_the_config_and_passes_only_job_secrets(config):
    dep = Deployment(config, load_config(config), None)
    assert dep.name == "deploy-exp"
    # the token travels (on stdin); the SSH password does not leave this machine
    assert dep.secrets == {"DRTP_TOKEN": "secret-token-123"}
    assert env_refs(CFG) == {"DRTP_TOKEN", "SSH_PW", "USER"}  # USER: the remote side's own, not sent
    lay = Layout("/home/u/drtp-deploy", "/home/u/drtp-deploy/venv", "/home/u/drtp-deploy/exp/deploy-exp")
    remote = dep.remote_config(lay, None)
    assert remote["trace"]["location"] == "traces" and remote["results"] == "results"
    assert remote["warmup"]["output"] == "warmup.jsonl"
    assert remote["slurm"]["setup"][-1] == "source /home/u/drtp-deploy/venv/bin/activate"
    assert remote["slurm"]["drtp"] == "drtp" and "deploy" not in remote
    assert "secret-token-123" not in yaml.safe_dump(remote) and "ssh-password-456" not in yaml.safe_dump(remote)


def test_project_files_cover_the_package_and_templates():
    root = project_root()
    names = {p.relative_to(root).as_posix() for p in project_files(root)}
    assert {"setup.py", "slurm/clients.sbatch", "slurm/master.sbatch", "drtp/cluster/deploy.py"} <= names
    assert "master/run/replay.py" in names and "client/server.py" in names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert all(Path(root / n).is_file() for n in names)


# -- registries: on the cluster (drtp/cluster/runconfig.py) ------------------------------------------------

ENTRIES = [
    {
        "id": "a",
        "url": "https://127.0.0.1:5001",
        "repository": "team-a/",
        "username": "ann",
        "password": "${PW_A}",
        "ca_file": "certs/ca.pem",
    },
    {
        "id": "b",
        "url": "http://127.0.0.1:5002",
        "insecure": True,
        "repository": "team-b/",
        "username": "bob",
        "password_file": "secrets/b.pw",
        "password_command": ["bin/get-pw", "--for", "b"],
        "create_repository": ["/usr/bin/true", "{repository}"],
        "delete_repository": ["helper", "{repository}"],
        "credential_helper": "pass",
    },
]


@pytest.fixture
def env(monkeypatch):
    for name, value in (
        ("DRTP_TOKEN", "secret-token-123"),
        ("SSH_PW", "ssh-password-456"),
        ("PW_A", "pw-of-ann"),
        ("USER", "u"),
    ):
        monkeypatch.setenv(name, value)


def _schema_only(path: Path) -> Path:
    """A copy of the config that loads: each entry keeps only its first secret source. ``ENTRIES``' b names
    every kind of file and command an entry can hold, for the path handling, which works on the raw file."""
    data = yaml.safe_load(path.read_text())
    for entry in data["registries"]:
        for key in [k for k in SECRET_SOURCES if k in entry][1:]:
            del entry[key]
    copy = path.with_name("schema-" + path.name)
    copy.write_text(yaml.safe_dump(data))
    return copy


def _entries_config(tmp_path: Path, **extra) -> Path:
    (tmp_path / "certs").mkdir(exist_ok=True)
    (tmp_path / "certs" / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    (tmp_path / "secrets").mkdir(exist_ok=True)
    (tmp_path / "secrets" / "b.pw").write_text("pw-of-bob\n")
    data = {k: v for k, v in CFG.items() if k != "registry"}
    data["registries"] = yaml.safe_load(yaml.safe_dump(ENTRIES))
    data.update(extra)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_entry_files_made_absolute_for_the_jobs(tmp_path, env):
    data = raw_config(_entries_config(tmp_path))
    a, b = data["registries"]
    base = tmp_path.resolve()
    assert a["ca_file"] == str(base / "certs" / "ca.pem") and a["password"] == "${PW_A}"
    assert b["password_file"] == str(base / "secrets" / "b.pw")
    assert b["password_command"] == [str(base / "bin" / "get-pw"), "--for", "b"]
    # an absolute program and a bare name (looked up on PATH) stay; a helper is a name, not a path
    assert b["create_repository"] == ["/usr/bin/true", "{repository}"]
    assert b["delete_repository"] == ["helper", "{repository}"] and b["credential_helper"] == "pass"
    assert "pw-of-ann" not in yaml.safe_dump(data)


def test_set_options_are_laid_over_before_paths_are_made_absolute(tmp_path, env):
    """``--set`` keys reach the jobs' copy of the config, and a relative path among them is relative to the
    config's folder there too (not to the experiment folder the jobs read the copy from)."""
    from drtp.config_overrides import parse_set

    path = _entries_config(tmp_path)
    sets = [parse_set("trace.location=traces2"), parse_set("client_info.threads=3")]
    data = raw_config(path, sets)
    assert data["trace"]["location"] == str(tmp_path.resolve() / "traces2")
    assert data["client_info"]["threads"] == 3


def test_run_config_of_registries_each_registry_and_one_run():
    # registries: only → drtp experiment over them, unchanged
    data = {"registries": ENTRIES}
    assert run_config_data(data, False) == data and replay_mode(data) == "experiment"
    # registry: + registries: + each_registry → one entry per address, each with exactly its own entry's keys
    both = {"registry": ["127.0.0.1:5002", "https://127.0.0.1:5001/", "127.0.0.1:5003"], "registries": ENTRIES}
    out = run_config_data(both, True)
    assert "registry" not in out and replay_mode(out) == "experiment"
    got = out["registries"]
    assert [e["id"] for e in got] == ["1-127.0.0.1_5002", "2-127.0.0.1_5001", "3-127.0.0.1_5003"]
    assert got[0] == {**ENTRIES[1], "id": "1-127.0.0.1_5002"} and got[1] == {**ENTRIES[0], "id": "2-127.0.0.1_5001"}
    assert got[2] == {"id": "3-127.0.0.1_5003", "url": "http://127.0.0.1:5003", "insecure": True}
    assert both["registries"] == ENTRIES and ENTRIES[0]["id"] == "a"  # the input is left alone
    # one run over one address: only its entry (its prefix applies), warmup + run
    one = run_config_data({"registry": ["https://127.0.0.1:5001"], "registries": ENTRIES}, True)
    assert one["registries"] == [ENTRIES[0]] and replay_mode(one) == "run"


def test_repeat_reaches_the_master_jobs_replay(tmp_path, env):
    """``repeat: N`` (from the file or ``--set``) is in the run config the master job replays, whichever command
    replays it: drtp run (warmup then run, each of which reads it) or drtp experiment."""
    from drtp.cluster.submission import write_run_config
    from drtp.config_overrides import parse_set

    single = tmp_path / "one.yaml"
    single.write_text(yaml.safe_dump({**CFG, "repeat": 4}))
    experiment = tmp_path / "two.yaml"
    entries = [{"id": i, "url": f"http://127.0.0.1:500{n}", "insecure": True} for n, i in enumerate("ab")]
    experiment.write_text(yaml.safe_dump({**{k: v for k, v in CFG.items() if k != "registry"}, "registries": entries}))
    for path, sets, mode in (
        (single, [], "run"),
        (experiment, [parse_set("repeat=3"), parse_set("repeat_state=reuse")], "experiment"),
    ):
        exp_dir = tmp_path / f"exp-{mode}"
        exp_dir.mkdir()
        assert write_run_config(exp_dir, raw_config(path, sets), False) == mode
        replayed = load_config(exp_dir / "run-config.yaml")
        assert (replayed.repeat, replayed.repeat_state) == ((4, "fresh") if mode == "run" else (3, "reuse"))


def test_cluster_config_checked_like_drtp_experiment(tmp_path, env):
    path = _schema_only(_entries_config(tmp_path))
    assert check_run_config(load_config(path)) == "experiment"
    (tmp_path / "secrets" / "b.pw").unlink()
    with pytest.raises(ConfigError, match=r"registries\[b\]: cannot read password_file secrets/b.pw"):
        check_run_config(load_config(path))
    dup = yaml.safe_load(path.read_text())
    dup["registries"][1].update(id="a", password="x")
    dup["registries"][1].pop("password_file")
    path.write_text(yaml.safe_dump(dup))
    with pytest.raises(ConfigError, match="duplicate id"):
        check_run_config(load_config(path))
    # one run spread over two registries would drop the entries' prefixes: refused, not silently
    spread = {**dup, "registry": ["https://127.0.0.1:5001", "127.0.0.1:5002"]}
    spread["registries"][1]["id"] = "b"
    path.write_text(yaml.safe_dump(spread))
    with pytest.raises(ConfigError, match=r"registries\[a\]\.repository: one run spread over 2 registries"):
        check_run_config(load_config(path))
    # names mapped without a prefix are an entry's own names too: refused here, as the master would
    for entry in spread["registries"]:
        entry.pop("repository", None)
    spread["registries"][1]["repository_map"] = "flatten"
    path.write_text(yaml.safe_dump(spread))
    with pytest.raises(ConfigError, match=r"registries\[b\]\.repository_map: one run spread over 2 registries"):
        check_run_config(load_config(path))


def test_status_of_a_folder_that_is_no_slurm_experiment_is_one_line(tmp_path, capsys):
    """A drtp experiment's output folder holds an experiment.json too (the registries' statuses): it is not
    taken for an experiment folder of older drtp versions, whose job bookkeeping had that name."""
    (tmp_path / "experiment.json").write_text(json.dumps({"a": {"ok": True, "exit_code": 0}}))
    for action in ("status", "wait", "cancel"):
        assert main(["slurm", action, "--exp", str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "not an experiment folder" in err, err


def test_submit_refuses_a_bad_registries_config_before_any_folder_or_job(tmp_path, env, monkeypatch, capsys):
    monkeypatch.setenv("PATH", "/nonexistent")  # no sbatch: nothing can be submitted
    path = _schema_only(_entries_config(tmp_path, slurm={"workdir": "jobs"}))
    (tmp_path / "secrets" / "b.pw").unlink()
    assert main(["slurm", "submit", "-c", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "registries[b].password_file: secrets/b.pw: no such file" in err
    assert "pw-of" not in err and not (tmp_path / "jobs").exists()
    # a credential the master would refuse: refused here, as one line
    (tmp_path / "secrets" / "b.pw").write_text("pw-of-bob\n")
    data = yaml.safe_load(path.read_text())
    del data["registries"][0]["username"]
    path.write_text(yaml.safe_dump(data))
    assert main(["slurm", "submit", "-c", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "registries[a]: username is missing" in err and "pw-of" not in err
    assert not (tmp_path / "jobs").exists()


def test_files_of_entries_checked_and_secret_sources_left_to_the_master(tmp_path, env):
    raw = yaml.safe_load(_entries_config(tmp_path).read_text())
    assert missing_entry_files(raw, tmp_path) == ["registries[b].password_command: bin/get-pw"]
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "get-pw").write_text("#!/bin/sh\n")
    assert missing_entry_files(raw, tmp_path) == []
    # a helper or command is not run where the job is submitted: a stand-in password takes its place for the check
    data = _without_secret_sources(yaml.safe_load(yaml.safe_dump(raw)))
    b = data["registries"][1]
    assert "credential_helper" not in b and "password_command" not in b and b["password_file"] == "secrets/b.pw"
    del raw["registries"][1]["password_file"]
    del raw["registries"][1]["username"]
    b = _without_secret_sources(raw)["registries"][1]
    assert b["password"] == b["username"] == "obtained-where-the-master-runs" and "credential_helper" not in b


def test_deploy_copies_entry_files_and_names_their_remote_copies(tmp_path, env):
    path = _entries_config(tmp_path, deploy={"host": "login.example", "mode": "ssh"})
    dep = Deployment(path, load_config(_schema_only(path)), None)  # the rewriting reads the raw file
    exp = "/home/u/drtp-deploy/exp/deploy-exp"
    lay = Layout("/home/u/drtp-deploy", "/home/u/drtp-deploy/venv", exp)
    a, b = dep.remote_config(lay, ["10.0.0.1:9000"])["registries"]
    assert a["ca_file"] == f"{exp}/registries/0/ca_file/ca.pem" and a["password"] == "${PW_A}"
    assert b["password_file"] == f"{exp}/registries/1/password_file/b.pw"
    assert b["password_command"] == [f"{exp}/registries/1/password_command/get-pw", "--for", "b"]
    assert b["create_repository"][0] == "/usr/bin/true" and b["delete_repository"][0] == "helper"
    assert sorted(dep.entry_files) == sorted(
        [
            (tmp_path / "certs" / "ca.pem", a["ca_file"]),
            (tmp_path / "secrets" / "b.pw", b["password_file"]),
            (tmp_path / "bin" / "get-pw", b["password_command"][0]),
        ]
    )
    assert dep.mode == "experiment"  # mode ssh: drtp experiment on the deploy host
    assert dep.secrets == {"DRTP_TOKEN": "secret-token-123", "PW_A": "pw-of-ann"}  # on stdin, not in a file


def test_jobs_state_beside_the_registries_status_and_old_folders_read(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    (old / "experiment.json").write_text(json.dumps({"name": "old", "jobs": {"master": {"id": "7", "log": "x"}}}))
    assert find_experiment(str(old), None).job_ids() == ["7"]
    with pytest.raises(DrtpError, match="not an experiment folder"):
        find_experiment(str(tmp_path / "none"), None)
    exp = Experiment(tmp_path / "new")
    exp.state = {"jobs": {"master": {"id": "9", "state": "FAILED", "exit_code": "3:0"}}, "problems": ["x"]}
    status = {
        "a": {"ok": True, "exit_code": 0, "url": "https://r1"},
        "b": {"ok": False, "exit_code": 3, "url": "https://r2", "error": "registry b: unreachable"},
        "c": {"ok": True, "exit_code": 1, "url": "https://r3", "failed": 12, "requests": 300},
    }
    assert exp.exit_code(status) == 3
    assert registry_lines(status) == [
        "registry b (https://r2): exit 3: registry b: unreachable",
        "registry c (https://r3): exit 1: 12 of 300 requests failed",
    ]
    exp.state["jobs"]["master"].update(state="CANCELLED", exit_code="0:15")
    assert exp.exit_code({}) == 1  # a job that ended without drtp's own code


def test_deploy_refuses_a_bad_registries_config_before_connecting(tmp_path, env, capsys):
    # nothing listens on port 1: a deploy that got as far as connecting would fail there (exit 3), not with exit 2
    path = _schema_only(_entries_config(tmp_path, deploy={"host": "127.0.0.1", "port": 1, "mode": "ssh"}))
    (tmp_path / "secrets" / "b.pw").unlink()
    assert main(["deploy", "-c", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "registries[b].password_file: secrets/b.pw: no such file" in err


def test_clean_finds_the_warmup_maps_of_each_registrys_runs(tmp_path):
    """With slurm.each_registry the master replays each address as an entry of its own, whose warmup map is
    named after it: drtp clean looks for exactly the maps those entries wrote."""
    from drtp.config import config_from_dict
    from drtp.master.commands.clean_records import warmup_maps
    from drtp.master.series.experiment import registry_config
    from drtp.replay.messages import registry_base

    data = {
        "registry": ["127.0.0.1:5001", "127.0.0.1:5002"],
        "warmup": {"output": str(tmp_path / "map.jsonl")},
        "slurm": {"each_registry": True},
    }
    cfg = config_from_dict(data, base_dir=str(tmp_path))
    replayed = config_from_dict(run_config_data(data, True), base_dir=str(tmp_path))
    written = {
        cfg.path(registry_config(replayed, e).warmup.output): {registry_base(e.url)} for e in replayed.registries
    }
    assert warmup_maps(cfg, [registry_base(r) for r in cfg.registry]) == written
    assert sorted(p.name for p in written) == ["map-1-127.0.0.1_5001.jsonl", "map-2-127.0.0.1_5002.jsonl"]


def test_clean_finds_the_warmup_map_of_each_repetition(tmp_path):
    """repeat: N (fresh): each repetition warmed repositories of its own into a map of its own; drtp clean reads
    exactly those maps, for a run and for each entry of an experiment."""
    from drtp.config import config_from_dict
    from drtp.master.commands.clean_records import warmup_maps
    from drtp.master.series.experiment import experiment_parts
    from drtp.master.series.repeat import run_parts
    from drtp.replay.messages import registry_base

    run = config_from_dict(
        {"registry": ["127.0.0.1:5001"], "warmup": {"output": str(tmp_path / "map.jsonl")}, "repeat": 3},
        base_dir=str(tmp_path),
    )
    written = {run.path(p.cfg.warmup.output): {"http://127.0.0.1:5001"} for p in run_parts(run, tmp_path)}
    assert warmup_maps(run, ["http://127.0.0.1:5001"]) == written
    assert sorted(p.name for p in written) == ["map-rep1.jsonl", "map-rep2.jsonl", "map-rep3.jsonl"]
    entries = [{"id": i, "url": f"http://127.0.0.1:500{n}", "insecure": True} for n, i in enumerate("ab")]
    exp = config_from_dict(
        {"registries": entries, "warmup": {"output": str(tmp_path / "map.jsonl")}, "repeat": 2},
        base_dir=str(tmp_path),
    )
    written = {}
    for p in experiment_parts(exp, tmp_path):
        written.setdefault(exp.path(p.cfg.warmup.output), set()).add(registry_base(p.url))
    assert warmup_maps(exp, [registry_base(e["url"]) for e in entries]) == written
    assert len(written) == 4 and (tmp_path / "map-b-rep2.jsonl") in written
    # reuse: one map, the registry's own, for every repetition
    reuse = msgspec.structs.replace(run, repeat_state="reuse")
    assert warmup_maps(reuse, ["http://127.0.0.1:5001"]) == {tmp_path / "map.jsonl": {"http://127.0.0.1:5001"}}
