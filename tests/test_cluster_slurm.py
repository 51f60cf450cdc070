"""Cluster runs against a REAL Slurm (munge, slurmctld, two slurmd) and a real sshd on loopback.

The cluster comes up once per session from scripts/slurm-cluster-up.sh and is stopped afterwards.
The replay itself runs against a real registry (LocalRegistry); the judge is what arrives in the
local results folder: one requests.csv row per trace record, all answered as the trace answered.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote

import pandas as pd
import pytest
import yaml

from drtp.analysis.results import load_requests, rows
from drtp.master.run.push_ledger import pushed_by_rows
from drtp.registry.local import LocalRegistry, free_port
from drtp.trace.reader import TraceReader
from tests.cluster_support import (
    NEEDED,
    PORT_CLASH,
    UP,
    Cluster,
    InstallFailed,
    cluster_down,
    cluster_up,
    free_port_pair,
    free_port_run,
    why_not,
)
from tests.credential_support import Helper
from tests.images import build_image, random_files, skopeo
from tests.realreg_support import Pki, write_htpasswd
from tests.registry_log import logged_requests
from tests.registry_storage import layer_links, tag_dirs
from tests.replay_support import TOKEN, make_trace

DRTP = [sys.executable, "-m", "drtp.cli"]
JOB_DRTP = f"{sys.executable} -m drtp.cli"  # the jobs run this interpreter's (this checkout's) drtp


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    reason = why_not()
    if reason:
        pytest.skip(reason)
    ci_dir = tmp_path_factory.mktemp("slurm-cluster")
    try:
        c = cluster_up(ci_dir)
    except InstallFailed as e:
        pytest.skip(str(e))
    try:
        yield c
    finally:
        subprocess.run(["scancel", "--user=root"], env=c.env(), capture_output=True, check=False)
        cluster_down(ci_dir)


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return make_trace(tmp_path_factory.mktemp("trace") / "trace.json", requests=300)


@pytest.fixture
def registry(tmp_path):
    with LocalRegistry(tmp_path / "registry") as reg:
        yield reg


def write_config(workdir: Path, trace: Path, registry: str | list[str] | None, cluster: Cluster, **sections) -> Path:
    """A config for the cluster tests (registry None: no registry: key, give registries=[…])."""
    cfg = {
        "trace": {"location": str(trace.parent), "traces": [trace.name]},
        "registry": registry if isinstance(registry, list) else [registry],
        "client_info": {"threads": 8, "token": "${DRTP_TOKEN}", "batch": 50, "inflight": 200},
        "warmup": {"output": "warmup-map.jsonl", "threads": 4},
        "results": "results",
        "slurm": {
            "nodes": 2,
            "tasks_per_node": 1,
            "time": "00:05:00",
            "client_port": free_port_pair(),
            "drtp": JOB_DRTP,
            "poll": 0.5,
            "register_timeout": 60,
        },
    }
    if registry is None:
        del cfg["registry"]
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key].update(value)
        else:
            cfg[key] = value
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def drtp(args: list[str], env: dict, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        DRTP + args, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def check_results(run_dir: Path, trace: Path, nodes: int = 2) -> pd.DataFrame:
    records = list(TraceReader([trace]))
    df = pd.read_csv(run_dir / "requests.csv", keep_default_na=False, na_values=[""])
    main = df[~df.auxiliary]
    assert len(main) == len(records)
    assert set(main.trace_id) == {r.id for r in records}
    bad = main[~main.ok]
    assert bad.empty, bad[["method", "kind", "status", "error"]].to_string()
    assert main.node.nunique() == nodes
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["requests"] == len(records)
    assert summary["trace_requests"] == len(records)
    assert summary["failed"] == 0
    return main


def test_slurm_submit_replays_through_jobs(tmp_path, cluster, trace, registry):
    config = write_config(tmp_path, trace, registry.host, cluster)
    offset = registry.log_path.stat().st_size
    proc = drtp(["slurm", "submit", "-c", str(config), "--name", "e1"], cluster.env(DRTP_TOKEN=TOKEN))
    assert proc.returncode == 0, proc.stdout + proc.stderr

    exp = tmp_path / "slurm-jobs" / "e1"
    state = json.loads((exp / "jobs.json").read_text())
    assert state["jobs"]["master"]["state"] == "COMPLETED"
    assert state["problems"] == []
    # the clients ran as Slurm tasks on the two virtual nodes; the master learnt them from Slurm
    regs = sorted((exp / "nodes").glob("task-*"))
    assert [r.read_text().split()[0] for r in regs] == ["t1", "t2"]
    run_config = yaml.safe_load((exp / "run-config.yaml").read_text())
    port = yaml.safe_load(config.read_text())["slurm"]["client_port"]
    assert run_config["client_info"]["client_list"] == [f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"]
    # the secret stays out of every file the experiment wrote
    for f in exp.rglob("*"):
        if f.is_file():
            assert TOKEN not in f.read_text(errors="replace"), f

    # gathered locally: the run, the logs, the scripts
    results = tmp_path / "results" / "e1"
    main = check_results(results, trace)
    assert set(main.node) == set(run_config["client_info"]["client_list"])
    master_id = state["jobs"]["master"]["id"]
    master_log = (results / "logs" / f"master-{master_id}.out").read_text()
    assert master_log.count("client nodes: 127.0.0.1:") == 1
    # the job's log is not a terminal: progress comes as plain lines, the last one with the whole trace
    n = f"{len(main):,}"
    assert re.search(rf"^replay: {n}/{n} \(100\.0%\) .* 0 failed, .*finished$", master_log, re.M), master_log
    assert re.search(r"^warmup: .*finished$", master_log, re.M), master_log
    assert (results / "stats_history.csv").exists()
    assert (results / "master.sbatch").exists() and (results / "clients.sbatch").exists()
    assert f"requests done {len(main)}" in proc.stdout
    assert f"results of e1 in {results}/" in proc.stdout
    # the registry served at least every trace request
    time.sleep(0.3)
    with open(registry.log_path, "rb") as f:
        f.seek(offset)
        assert sum(1 for line in f if b'"http.request.method"' in line) >= len(main)

    status = drtp(["slurm", "status", "--exp", str(exp)], cluster.env())
    assert status.returncode == 0, status.stderr
    assert re.search(rf"master: job {master_id} COMPLETED", status.stdout)


def test_repeat_reaches_the_master_job(tmp_path, cluster, trace, registry):
    """``--set repeat=2`` on ``slurm submit``: the master job's warmup and run replay two repetitions, each into
    repositories of its own, into run/rep-<k>/, gathered with their experiment.json."""
    config = write_config(tmp_path, trace, registry.host, cluster)
    offset = registry.log_path.stat().st_size
    argv = ["slurm", "submit", "-c", str(config), "--name", "rep", "--set", "repeat=2"]
    proc = drtp(argv, cluster.env(DRTP_TOKEN=TOKEN))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = tmp_path / "results" / "rep"
    for k in (1, 2):
        check_results(results / f"rep-{k}", trace)
        assert json.loads((results / f"rep-{k}" / "summary.json").read_text())["namespace"] == f"rep{k}-"
    status = json.loads((results / "experiment.json").read_text())
    assert [(key, s["exit_code"]) for key, s in status.items()] == [("rep-1", 0), ("rep-2", 0)]
    time.sleep(0.3)
    with open(registry.log_path, "rb") as f:
        f.seek(offset)
        uris = [json.loads(line).get("http.request.uri", "") for line in f if b'"http.request.uri"' in line]
    trace_repos = {u.split("/")[2] for u in uris if u.startswith("/v2/") and u.count("/") > 3}
    assert {r.split("-")[0] for r in trace_repos if r.startswith("rep")} == {"rep1", "rep2"}
    assert all(r.startswith(("rep1-", "rep2-")) for r in trace_repos), trace_repos


def test_each_registry_in_turn_on_one_allocation(tmp_path, cluster, trace, registry):
    """registry: [a, b] with each_registry: a run per address; a's registries: entry (its prefix) stays with a's run
    alone, b (no entry) runs as a plain address."""
    with LocalRegistry(tmp_path / "registry2") as second:
        hosts = [registry.host, second.host]
        own = {"id": "mine", "url": f"http://{registry.host}", "insecure": True, "repository": "one/"}
        config = write_config(tmp_path, trace, hosts, cluster, slurm={"each_registry": True}, registries=[own])
        proc = drtp(["slurm", "submit", "-c", str(config), "--name", "two"], cluster.env(DRTP_TOKEN=TOKEN))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert check_prefix(registry.log_path, "one/") >= 300
        second_paths = [u for u in uris(second.log_path) if u.rstrip("/") != "/v2"]
    exp = tmp_path / "slurm-jobs" / "two"
    state = json.loads((exp / "jobs.json").read_text())
    assert len(state["jobs"]) == 2  # one client job served both runs
    names = [f"1-{registry.host.replace(':', '_')}", f"2-{second.host.replace(':', '_')}"]
    # the master ran drtp experiment over one entry per address
    entries = yaml.safe_load((exp / "run-config.yaml").read_text())["registries"]
    assert [(e["id"], e["url"]) for e in entries] == [(n, f"http://{r}") for n, r in zip(names, hosts, strict=True)]
    assert entries[0]["repository"] == "one/" and "repository" not in entries[1]
    statuses = json.loads((tmp_path / "results" / "two" / "experiment.json").read_text())
    assert list(statuses) == names and all(s["ok"] and s["exit_code"] == 0 for s in statuses.values())
    for name, reg in zip(names, hosts, strict=True):
        main = check_results(tmp_path / "results" / "two" / name, trace)
        assert json.loads((tmp_path / "results" / "two" / name / "summary.json").read_text())["registries"] == [
            f"http://{reg}"
        ]
        assert len(main) == 300
    # b's paths are the trace's own (two levels: user/repo), without a's prefix
    assert len(second_paths) >= 300 and not any(p.startswith("/v2/one/") for p in second_paths)
    assert f"requests done {2 * len(main)}" in proc.stdout
    # one warmup map per registry, and beside each the ledger of what the run pushed there (for drtp clean)
    assert len([p for p in tmp_path.glob("warmup-map-*.jsonl") if ".pushes-" not in p.name]) == 2
    assert sorted(p.name for p in tmp_path.glob("warmup-map-*.pushes-*.jsonl")) == [
        f"warmup-map-{name}.pushes-{host.replace(':', '_')}.jsonl" for name, host in zip(names, hosts, strict=True)
    ]


def test_failed_master_job_reported_with_id_and_log(tmp_path, cluster, trace):
    # nothing listens on port 9 of loopback: the warmup fails, so does the master job
    config = write_config(tmp_path, trace, "127.0.0.1:9", cluster)
    proc = drtp(["slurm", "submit", "-c", str(config), "--name", "bad"], cluster.env(DRTP_TOKEN=TOKEN))
    state = json.loads((tmp_path / "slurm-jobs" / "bad" / "jobs.json").read_text())
    master = state["jobs"]["master"]
    # the job's own exit code (drtp warmup's: 3, could not run) is the command's
    assert master["exit_code"] == "3:0" and proc.returncode == 3, proc.stdout + proc.stderr
    log = tmp_path / "slurm-jobs" / "bad" / "logs" / f"master-{master['id']}.out"
    assert master["log"] == str(log)
    assert re.search(
        rf"drtp: master job {master['id']} FAILED, exit [1-9]\d*:0; log: {re.escape(str(log))}", proc.stdout
    )
    assert (
        re.search(r"^drtp( [a-z-]+)*: error:", log.read_text(), re.M) and "127.0.0.1:9" in log.read_text()
    )  # the reason is in the log
    # the master released its clients: their cancellation is not reported as a failure
    assert not any(p.startswith("client ") for p in state["problems"])
    assert (tmp_path / "results" / "bad" / "logs" / log.name).exists()


def test_no_wait_then_cancel_then_wait(tmp_path, cluster, trace):
    config = write_config(tmp_path, trace, "127.0.0.1:9", cluster, slurm={"register_timeout": 120})
    env = cluster.env(DRTP_TOKEN=TOKEN)
    proc = drtp(["slurm", "submit", "-c", str(config), "--name", "stop", "--no-wait"], env)
    assert proc.returncode == 0, proc.stderr
    state = json.loads((tmp_path / "slurm-jobs" / "stop" / "jobs.json").read_text())
    ids = [state["jobs"]["clients"]["id"], state["jobs"]["master"]["id"]]
    cancel = drtp(["slurm", "cancel", "-c", str(config)], env)  # -c: the config's latest experiment
    assert cancel.returncode == 0 and f"cancelled jobs {ids[0]} {ids[1]} of stop" in cancel.stdout
    waited = drtp(["slurm", "wait", "-c", str(config), "--poll", "0.5"], env)
    assert waited.returncode == 1, waited.stdout + waited.stderr
    assert f"drtp: master job {ids[1]} CANCELLED" in waited.stdout
    assert f"drtp: client job {ids[0]} CANCELLED" in waited.stdout
    assert json.loads((tmp_path / "results" / "stop" / "jobs.json").read_text())["finished"] is True


def test_cancelled_client_job_reported_and_results_kept(tmp_path, cluster, trace, registry):
    # as-is timing stretches the 300 requests over ~10 s, so the client job can be cancelled mid-run
    config = write_config(tmp_path, trace, registry.host, cluster, client_info={"wait": True, "speedup": 3.0})
    exp = tmp_path / "slurm-jobs" / "cut"
    proc = subprocess.Popen(
        DRTP + ["slurm", "submit", "-c", str(config), "--name", "cut"],
        env=cluster.env(DRTP_TOKEN=TOKEN),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        csv = exp / "run" / "requests.csv"
        deadline = time.monotonic() + 120
        while not (csv.exists() and csv.read_text().count("\n") > 30):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the run did not start"
            time.sleep(0.2)
        client_job = json.loads((exp / "jobs.json").read_text())["jobs"]["clients"]["id"]
        subprocess.run(["scancel", client_job], env=cluster.env(), check=True)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    # the master's drtp run lost its nodes (could not finish: 3), and says so with its own exit code
    assert proc.returncode == 3, out
    assert re.search(r"drtp: master job \d+ FAILED, exit 3:0", out), out
    log = exp / "logs" / f"clients-{client_job}.out"
    # reported as soon as it is seen…
    assert re.search(rf"drtp: client job {client_job} is [A-Z]+ while the master runs; log: {re.escape(str(log))}", out)
    # and in the final report, with the job id, its state and its log
    line = f"drtp: client job {client_job} CANCELLED before the master finished, exit 0:15; log: {log}"
    assert line in out
    state = json.loads((exp / "jobs.json").read_text())
    assert line.removeprefix("drtp: ") in state["problems"]

    # what was done before the cancellation is kept, and gathered locally
    results = tmp_path / "results" / "cut"
    df = pd.read_csv(results / "requests.csv", keep_default_na=False, na_values=[""])
    main = df[~df.auxiliary]
    n = len(list(TraceReader([trace])))
    assert 30 <= main.ok.sum() < n
    assert set(main.trace_id) < {r.id for r in TraceReader([trace])}
    assert (results / "logs" / log.name).read_text().count("CANCELLED") >= 1
    assert f"results of cut in {results}/ ({len(df)} requests)" in out


def test_a_cancelled_master_job_writes_its_summary_as_on_ctrl_c(tmp_path, cluster, trace, registry):
    """scancel (as Slurm's time limit) sends SIGTERM: the master's drtp run stops as on Ctrl-C, keeps its rows
    and writes summary.json marked incomplete, and the job's shell waits for it (exit 130)."""
    config = write_config(tmp_path, trace, registry.host, cluster, client_info={"wait": True, "speedup": 3.0})
    env = cluster.env(DRTP_TOKEN=TOKEN)
    assert drtp(["slurm", "submit", "-c", str(config), "--name", "term", "--no-wait"], env).returncode == 0
    exp = tmp_path / "slurm-jobs" / "term"
    csv = exp / "run" / "requests.csv"
    deadline = time.monotonic() + 120
    while not (csv.exists() and csv.read_text().count("\n") > 30):
        assert time.monotonic() < deadline, "the run did not start"
        time.sleep(0.2)
    master_job = json.loads((exp / "jobs.json").read_text())["jobs"]["master"]["id"]
    subprocess.run(["scancel", master_job], env=cluster.env(), check=True)
    summary_path = exp / "run" / "summary.json"
    while not summary_path.exists():
        assert time.monotonic() < deadline, "no summary.json after SIGTERM"
        time.sleep(0.2)
    time.sleep(0.5)  # the summary is written whole before the run's last lines
    summary = json.loads(summary_path.read_text())
    assert summary["complete"] is False and summary["incomplete_reason"] == "interrupted"
    rows = pd.read_csv(csv)
    assert 30 <= summary["requests"] == len(rows[~rows.auxiliary]) < len(list(TraceReader([trace])))
    log = exp / "logs" / f"master-{master_job}.out"
    deadline = time.monotonic() + 60
    while "SIGTERM (time limit or scancel)" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, log.read_text() if log.exists() else "no master log"
        time.sleep(0.2)
    drtp(["slurm", "cancel", "--exp", str(exp)], env)  # the client job, if still up


# -- registries: with credentials, on Slurm ---------------------------------------------------------

# where each credentialed registry's password comes from (secret_keys): change a registry's source here
SECRET_SOURCES = {"a": "env", "b": "helper"}
HELPER = "drtp-cluster-test"  # docker-credential-drtp-cluster-test: the tests' own helper, on the jobs' PATH
USERS = {"a": ("ann", "ann-Secret-7f3a9c"), "b": ("bob", "bob-Secret-41d2e8")}
PREFIXES = {"a": "alpha/", "b": "beta/team-"}


def secret_keys(rid: str, folder: Path, env: dict[str, str]) -> dict:
    """The entry keys that give registry ``rid`` its credentials from ``SECRET_SOURCES[rid]``: ``env`` (a
    ``${VAR}``, the variable set in ``env``), ``file`` (a password_file relative to the config's folder) or
    ``helper`` (a Docker credential helper put on ``env``'s PATH, which the Slurm jobs inherit)."""
    user, password = USERS[rid]
    source = SECRET_SOURCES[rid]
    if source == "env":
        var = f"REG_{rid.upper()}_PASSWORD"
        env[var] = password
        return {"username": user, "password": f"${{{var}}}"}
    if source == "helper":
        helper = Helper(folder / "helper-bin", HELPER, user, password)
        env["PATH"] = f"{helper.dir}{os.pathsep}{env.get('PATH', os.defpath)}"
        return {"credential_helper": HELPER}
    if source == "file":
        (folder / "secrets").mkdir(exist_ok=True)
        (folder / "secrets" / f"{rid}.pw").write_text(password + "\n")
        return {"username": user, "password_file": f"secrets/{rid}.pw"}
    raise ValueError(source)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("pki"))


def auth_registry(folder: Path, rid: str, pki: Pki, port: int | None = None) -> LocalRegistry:
    """A registry on https (the test CA's certificate) asking for ``USERS[rid]`` (htpasswd, bcrypt)."""
    folder.mkdir(parents=True, exist_ok=True)
    htpasswd = write_htpasswd(folder / f"htpasswd-{rid}", *USERS[rid])
    return LocalRegistry(folder / f"registry-{rid}", port=port, tls=(pki.cert, pki.key), htpasswd=htpasswd)


def entry(rid: str, url: str, folder: Path, env: dict[str, str], pki: Pki) -> dict:
    """A registries: entry with its own user, prefix and secret source; the CA file relative to the config."""
    (folder / "ca.pem").write_bytes(pki.ca.read_bytes())
    keys = {"id": rid, "url": url, "repository": PREFIXES[rid], "ca_file": "ca.pem"}
    return {**keys, **secret_keys(rid, folder, env)}


def uris(log_path: Path, offset: int = 0) -> list[str]:
    """Every request target (with its query) the registry logged after ``offset``."""
    return [r.path + (f"?{r.query}" if r.query else "") for r in logged_requests(log_path, offset)]


def check_prefix(log_path: Path, prefix: str, offset: int = 0, mounts: bool = False) -> int:
    """Every object path (and mount source) the registry saw is under ``prefix``; how many object requests.

    ``mounts``: the trace's cross-repository mounts reached this registry (their sources were checked).
    """
    objects = sources = 0
    for uri in uris(log_path, offset):
        path, _, query = uri.partition("?")
        if path.rstrip("/") == "/v2":
            continue
        objects += 1
        assert path.startswith(f"/v2/{prefix}"), uri
        for source in re.findall(r"(?:^|&)from=([^&]*)", query):
            assert unquote(source).startswith(prefix), uri
            sources += 1
    assert sources or not mounts, f"no mount reached {log_path}"
    return objects


def test_registries_with_credentials_run_in_turn_and_resume(tmp_path, cluster, trace, pki):
    env = cluster.env(DRTP_TOKEN=TOKEN)
    port_b = free_port()
    with auth_registry(tmp_path, "a", pki) as reg_a:
        b_url = f"https://127.0.0.1:{port_b}"
        registries = [entry("a", reg_a.url, tmp_path, env, pki), entry("b", b_url, tmp_path, env, pki)]
        config = write_config(tmp_path, trace, None, cluster, registries=registries)
        # registry b is down: a runs, b is recorded as failed, the job and the command say so
        first = drtp(["slurm", "submit", "-c", str(config), "--name", "creds"], env)
        out = first.stdout + first.stderr
        assert first.returncode == 3, out
        assert re.search(rf"^drtp: registry b \({re.escape(b_url)}\): exit 3: .*127\.0\.0\.1:{port_b}", out, re.M), out
        assert "drtp: registry a" not in out
        results = tmp_path / "results" / "creds"
        status = json.loads((results / "experiment.json").read_text())
        assert status["a"]["ok"] and status["a"]["exit_code"] == 0 and not status["b"]["ok"], status
        check_results(results / "a", trace)
        a_objects = check_prefix(reg_a.log_path, PREFIXES["a"], mounts=True)
        offset_a = reg_a.log_path.stat().st_size

        # b comes up; the resumed experiment (new jobs, same folder) runs b only
        with auth_registry(tmp_path, "b", pki, port=port_b) as reg_b:
            again = drtp(["slurm", "submit", "--resume", "creds", "-c", str(config)], env)
            out = again.stdout + again.stderr
            assert again.returncode == 0, out
            b_objects = check_prefix(reg_b.log_path, PREFIXES["b"], mounts=True)
        assert uris(reg_a.log_path, offset_a) == []  # a, done before, got no request
        cleaned = clean_after_slurm(tmp_path, config, reg_a, results / "a", env)
    assert "experiment creds in" in again.stdout and "(resumed)" in again.stdout

    exp = tmp_path / "slurm-jobs" / "creds"
    jobs = json.loads((results / "jobs.json").read_text())
    assert jobs["resumed"] == 1 and len(jobs["previous"]) == 1 and jobs["replay"] == "experiment"
    master_log = (results / "logs" / f"master-{jobs['jobs']['master']['id']}.out").read_text()
    assert "== registry a: done before, skipped" in master_log and "== registry b (" in master_log
    status_out = drtp(["slurm", "status", "--exp", str(exp)], env).stdout
    assert "  registry a: done, exit 0, 300 requests, 0 failed" in status_out, status_out
    assert re.search(r"^replay: 300/300 \(100\.0%\) .*finished$", master_log, re.M), master_log
    status = json.loads((results / "experiment.json").read_text())
    assert {rid: (s["ok"], s["exit_code"]) for rid, s in status.items()} == {"a": (True, 0), "b": (True, 0)}
    for rid in ("a", "b"):
        main = check_results(results / rid, trace)
        assert main.repository.str.startswith(PREFIXES[rid]).all()
        assert json.loads((results / rid / "summary.json").read_text())["registry_id"] == rid
    assert a_objects >= 300 and b_objects >= 300
    # the relative ca_file reached the jobs as an absolute path; no secret in any file drtp wrote
    copied = yaml.safe_load((exp / "config.yaml").read_text())["registries"]
    assert copied[0]["ca_file"] == str(tmp_path / "ca.pem") and copied[0]["password"] == "${REG_A_PASSWORD}"
    assert copied[1]["credential_helper"] == HELPER and "password" not in copied[1]
    # the helper answered the master job (the server on stdin, only "get" in its argv), never with its secret in argv
    calls = (tmp_path / "helper-bin" / f"{HELPER}.log").read_text().splitlines()
    assert calls and set(calls) == {f"get 127.0.0.1:{port_b}"}, calls
    for folder in (exp, results):
        for f in folder.rglob("*"):
            if f.is_file():
                text = f.read_text(errors="replace")
                assert all(pw not in text for _, pw in USERS.values()), f
    assert all(pw not in first.stdout + again.stdout + cleaned for _, pw in USERS.values())


def clean_after_slurm(folder: Path, config: Path, reg: LocalRegistry, run: Path, env: dict) -> str:
    """``drtp clean -c CONFIG --registry a --yes`` after the Slurm experiment, no ``--run``: the master job wrote
    the ledger of what registry a accepted beside a's warmup map (the config's folder, not the job's work dir),
    so nothing drtp made is left in a's storage (the run's own tags and layer links too), and an image skopeo
    pushed into one of drtp's repositories is kept.  Its output."""
    user, password = USERS["a"]
    pushed = list(pushed_by_rows(rows(load_requests(run / "requests.csv"))))
    run_tags = {(repo, tag) for kind, repo, _, tag in pushed if kind == "manifest" and ":" not in tag}
    assert run_tags and run_tags <= tag_dirs(reg)  # the run pushed tags of its own, which no warmup map records
    assert (folder / f"warmup-map-a.pushes-{reg.host.replace(':', '_')}.jsonl").is_file()
    shared = sorted(run_tags)[0][0]
    image = build_image(folder / "foreign", [random_files(1, 5000, 21)])
    creds = f"{user}:{password}"
    skopeo(
        "copy",
        "--dest-tls-verify=false",
        "--dest-creds",
        creds,
        f"dir:{folder / 'foreign'}",
        f"docker://{reg.host}/{shared}:foreign",
    )
    done = drtp(["clean", "-c", str(config), "--registry", "a", "--yes"], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(pushed)} push ledger entries of 1 run" in done.stdout.splitlines()[0], done.stdout
    assert tag_dirs(reg) == {(shared, "foreign")}
    assert layer_links(reg) == {(shared, d) for d in [image["config"], *image["layers"]]}
    return done.stdout


# -- drtp deploy over SSH ------------------------------------------------------------------------


def deploy_section(tmp_path: Path, cluster: Cluster, mode: str) -> dict:
    if sys.prefix == sys.base_prefix:
        pytest.skip("the deploy tests reuse the virtualenv the tests run in, and this is not one")
    return {
        "host": "127.0.0.1",
        "port": cluster.ssh_port,
        "user": "root",
        "key_file": str(cluster.ssh_key),
        "known_hosts": str(tmp_path / "known_hosts"),
        "remote_dir": str(tmp_path / "remote"),
        # reuse this interpreter's venv: drtp is importable there, so the install is skipped (fast)
        "venv": sys.prefix,
        "install": "auto",
        "mode": mode,
        "env": {"SLURM_CONF": str(cluster.slurm_conf)},
        # the same sshd under two names: the second is handled as another host (its own connection and copy)
        "client_hosts": [
            {"host": "127.0.0.1", "port": cluster.ssh_port},
            {"host": "localhost", "port": cluster.ssh_port},
        ],
    }


@pytest.mark.parametrize("mode", ["slurm", "ssh"])
def test_deploy_over_ssh_pulls_results_back(tmp_path, cluster, trace, pki, mode):
    """A registries: entry whose password_file and ca_file (relative to the config) are copied to the deploy host
    and named by their remote paths there; drtp experiment runs there (mode ssh) or in the Slurm master job."""
    (tmp_path / "ca.pem").write_bytes(pki.ca.read_bytes())
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "bob.pw").write_text(USERS["b"][1] + "\n")
    keys = {"username": USERS["b"][0], "password_file": "secrets/bob.pw", "ca_file": "ca.pem"}
    with auth_registry(tmp_path, "b", pki) as reg:
        config = write_config(
            tmp_path,
            trace,
            None,
            cluster,
            client_info={"port": free_port_pair()},
            deploy=deploy_section(tmp_path, cluster, mode),
            registries=[{"id": "b", "url": reg.url, "repository": PREFIXES["b"], **keys}],
        )
        env = dict(os.environ, DRTP_TOKEN=TOKEN)
        env.pop("SLURM_CONF", None)  # only the remote side knows the cluster (deploy.env)
        proc = drtp(["deploy", "-c", str(config)], env)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out
        objects = check_prefix(reg.log_path, PREFIXES["b"])
    assert TOKEN not in out and USERS["b"][1] not in out
    m = re.search(r"copied (\d+) files \(.*\) to .*, 0 already there", out)
    assert m and int(m.group(1)) > 20, out
    remote = tmp_path / "remote"
    assert (remote / "project" / "drtp" / "cluster" / "deploy.py").read_bytes() == (
        Path(__file__).resolve().parents[1] / "drtp" / "cluster" / "deploy.py"
    ).read_bytes()
    exp = remote / "exp" / "deploy-config"
    assert (exp / "traces" / trace.name).read_bytes() == trace.read_bytes()
    remote_cfg = (exp / "config.yaml").read_text()
    assert "${DRTP_TOKEN}" in remote_cfg and TOKEN not in remote_cfg and "deploy" not in yaml.safe_load(remote_cfg)
    assert USERS["b"][1] not in remote_cfg
    # the entry's files were copied, and the remote config names the copies
    b = yaml.safe_load(remote_cfg)["registries"][0]
    assert b["password_file"] == str(exp / "registries" / "0" / "password_file" / "bob.pw")
    assert b["ca_file"] == str(exp / "registries" / "0" / "ca_file" / "ca.pem")
    assert Path(b["password_file"]).read_text() == (tmp_path / "secrets" / "bob.pw").read_text()
    assert Path(b["ca_file"]).read_bytes() == pki.ca.read_bytes()

    runs = list((tmp_path / "results").iterdir())
    assert len(runs) == 1 and runs[0].name.startswith("run-")
    assert "pulled" in out and str(runs[0]) in out
    assert json.loads((runs[0] / "experiment.json").read_text())["b"]["ok"]
    main = check_results(runs[0] / "b", trace)
    assert main.repository.str.startswith(PREFIXES["b"]).all() and objects >= len(main)
    if mode == "ssh":
        assert len(list((runs[0] / "logs").glob("client-*.log"))) == 2
        port = yaml.safe_load(config.read_text())["client_info"]["port"]
        assert set(main.node) == {f"127.0.0.1:{port}", f"localhost:{port + 1}"}
        assert re.search(r"copied 0 files \(0.0 MB\) to root@localhost:\d+:.*, \d+ already there", out)
        assert not list((exp / "logs").glob("*.pid"))  # the clients were stopped
    else:
        assert list((runs[0] / "logs").glob("master-*.out")) and (runs[0] / "jobs.json").exists()


def test_redeploy_skips_files_already_copied(tmp_path, cluster, trace):
    section = deploy_section(tmp_path, cluster, "slurm")
    # through a jump host (the same sshd: it forwards the connection to itself)
    section["jump"] = {"host": "127.0.0.1", "port": cluster.ssh_port, "user": "root", "key_file": str(cluster.ssh_key)}
    config = write_config(tmp_path, trace, "127.0.0.1:9", cluster, deploy=section)
    env = dict(os.environ, DRTP_TOKEN=TOKEN)
    first = drtp(["deploy", "-c", str(config), "--copy-only"], env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"connected to root@127.0.0.1:{cluster.ssh_port} through 127.0.0.1" in first.stdout
    copied = int(re.search(r"copied (\d+) files", first.stdout).group(1))
    assert copied > 20

    again = drtp(["deploy", "-c", str(config), "--copy-only"], env)
    assert again.returncode == 0, again.stderr
    assert (
        f"copied 0 files (0.0 MB) to root@127.0.0.1:{cluster.ssh_port}:{tmp_path / 'remote'}, {copied} already there"
        in again.stdout
    )

    # a changed trace file (same size is not enough: the hash decides) is copied again, alone
    remote_trace = tmp_path / "remote" / "exp" / "deploy-config" / "traces" / trace.name
    data = bytearray(remote_trace.read_bytes())
    data[-2] = ord(" ") if data[-2] != ord(" ") else ord("\n")
    remote_trace.write_bytes(bytes(data))
    third = drtp(["deploy", "-c", str(config), "--copy-only"], env)
    assert "copied 1 files" in third.stdout and f"{copied - 1} already there" in third.stdout
    assert remote_trace.read_bytes() == trace.read_bytes()


def test_deploy_makes_a_venv_and_installs_the_copied_project(tmp_path, cluster, trace):
    section = deploy_section(tmp_path, cluster, "slurm")
    venv = tmp_path / "remote-venv"
    section.update(
        venv=str(venv),
        install="always",
        python=getattr(sys, "_base_executable", sys.executable),
        system_site_packages=True,
        pip_args=["--no-deps"],  # quick: the code, not its dependencies
    )
    config = write_config(tmp_path, trace, "127.0.0.1:9", cluster, deploy=section)
    proc = drtp(["deploy", "-c", str(config), "--copy-only"], dict(os.environ, DRTP_TOKEN=TOKEN))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "-m venv --system-site-packages" in proc.stdout and "pip install" in proc.stdout
    # the venv's drtp is the copied project (an editable install of <remote_dir>/project)
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import drtp.cluster, drtp.slurm; print(drtp.cluster.__file__)"],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip() == str(tmp_path / "remote" / "project" / "drtp" / "cluster" / "__init__.py")


def test_a_taken_slurmd_port_is_named_and_exit_code_4(tmp_path):
    """A port clash exits 4 and names the port (not a cgroup failure), so callers retry on new ports."""
    reason = why_not()
    if reason or not all(Path(b).exists() for b in NEEDED):
        pytest.skip(reason or "Slurm is not installed")
    base = free_port_run(3)
    env = dict(
        os.environ,
        CI_DIR=str(tmp_path),
        SSH_PORT=str(free_port_run(1)),
        CTLD_PORT=str(base),
        SLURMD_PORT_BASE=str(base),
        NODE_PREFIX="c",
        INSTALL="0",
    )
    with socket.socket() as held:
        held.bind(("0.0.0.0", base + 2))
        held.listen()
        try:
            proc = subprocess.run(["bash", str(UP)], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        finally:
            cluster_down(tmp_path)
    assert proc.returncode == PORT_CLASH, proc.stdout + proc.stderr
    assert f"slurmd c2: port {base + 2} is already in use" in proc.stderr
    assert "falling back" not in proc.stdout
