"""The cluster parts that need no cluster: sbatch rendering, scontrol parsing, config rewriting."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from drtp.cli import main
from drtp.cluster import slurm
from drtp.cluster.deploy import Deployment, Layout, env_refs, project_files, project_root
from drtp.cluster.submission import raw_config
from drtp.config import load_config
from drtp.errors import ConfigError

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
    # the runs in turn: warmup, then run, for each line of runs.txt, both with plain progress lines in the job's log
    progress = re.escape('"${progress[@]}"')
    assert re.search(
        rf"while .* read -r name; do\n.*\n.*warmup -c \S+ {progress} && \$DRTP_CMD run -c \S+ --out \S+ {progress};",
        master,
    )
    assert 'progress=(--progress-interval "${DRTP_PROGRESS_INTERVAL:-10}")' in master


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
    assert "master/run.py" in names and "client/server.py" in names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert all(Path(root / n).is_file() for n in names)
