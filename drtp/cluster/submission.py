"""One Slurm experiment: its folder on the shared file system, its jobs' state file, its jobs, its results.

Layout of ``<slurm.workdir>/<name>/``::

    jobs.json          the jobs' bookkeeping: job ids, log paths, the states seen, where results went
                       (``experiment.json`` in folders made before registries: ran on Slurm: still read)
    config.yaml        the user's config with absolute paths (``${VAR}`` references left unexpanded)
    clients.sbatch     the rendered scripts, as submitted (the last submission's)
    master.sbatch
    nodes/task-<i>     written by each client task: Slurm node name, host name, port
    run-config.yaml    what the master replays: config.yaml plus client_info.client_list (runconfig.py)
    run/               the master's results: requests.csv, summary.json, config.json of the one run, or
                       with registries: (or slurm.each_registry) ``drtp experiment``'s: run/<id>/ per
                       registry and run/experiment.json, the status of each
    logs/              clients-<job>.out, master-<job>.out (of every submission)
    released           marker: the master is done and cancelled the client job itself

``submit`` renders and submits both jobs (the master depends on the client job having started),
``wait`` follows them and gathers ``run/`` and the logs into ``<results>/<name>/``. ``submit --resume``
submits new jobs for the same folder; the master then resumes the replay (registries done are skipped).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import sys
import time
from pathlib import Path

import yaml

from drtp.cluster import slurm
from drtp.cluster.runconfig import (
    EXPERIMENT,
    absolute_entry_paths,
    check_run_config,
    replay_mode,
    run_config_data,
)
from drtp.config import Config, load_config
from drtp.config_overrides import apply_overrides
from drtp.errors import ConfigError, DrtpError
from drtp.exit_codes import worst
from drtp.replay.run_dirs import run_dirs_in
from drtp.yamlfile import read_yaml_mapping

STATE = "jobs.json"
LEGACY_STATE = "experiment.json"  # the state file's name before drtp experiment's experiment.json came into run/
# keys of the config that hold paths, made absolute when the config is copied into the experiment
# (the files of registries: entries are runconfig.absolute_entry_paths')
PATH_KEYS = (("trace", "location"), ("warmup", "output"), ("results",), ("slurm", "workdir"))


def raw_config(path: Path, overrides: list | tuple = ()) -> dict:
    """The config file as written (``${VAR}`` unexpanded, so secrets stay out) with the ``--set`` keys laid over
    it, paths made absolute (a relative one given by ``--set`` is relative to the config's folder too)."""
    data = read_yaml_mapping(path)
    data = apply_overrides(data, list(overrides)) if overrides else data
    base = path.resolve().parent
    for keys in PATH_KEYS:
        holder = data
        for k in keys[:-1]:
            holder = holder.get(k) if isinstance(holder, dict) else None
        if isinstance(holder, dict) and isinstance(holder.get(keys[-1]), str) and "${" not in holder[keys[-1]]:
            p = Path(os.path.expanduser(holder[keys[-1]]))
            holder[keys[-1]] = str(p if p.is_absolute() else base / p)
    if "warmup" not in data:  # the default map file would land beside the copied config
        data["warmup"] = {"output": str(base / "warmup-map.json")}
    elif "output" not in data["warmup"]:
        data["warmup"]["output"] = str(base / "warmup-map.json")
    if "results" not in data:
        data["results"] = str(base / "results")
    absolute_entry_paths(data, base)
    data.pop("deploy", None)
    return data


class Experiment:
    def __init__(self, exp_dir: Path) -> None:
        self.dir = exp_dir.resolve()
        self.state_path = self.dir / STATE
        if not self.state_path.exists() and (self.dir / LEGACY_STATE).exists():
            self.state_path = self.dir / LEGACY_STATE
        self.state: dict = json.loads(self.state_path.read_text()) if self.state_path.exists() else {}
        if not isinstance(self.state, dict) or "jobs" not in self.state:
            self.state = {}  # not a Slurm experiment's state (e.g. the registries' statuses of drtp experiment)

    # -- state --------------------------------------------------------------------------------

    def save(self) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=2))
        tmp.replace(self.state_path)

    @property
    def name(self) -> str:
        return self.dir.name

    def job_ids(self) -> list[str]:
        return [j["id"] for j in self.state.get("jobs", {}).values()]

    # -- submit ---------------------------------------------------------------------------------

    @classmethod
    def create(
        cls, config_path: Path, cfg: Config, name: str | None = None, overrides: list | tuple = ()
    ) -> Experiment:
        s = cfg.require("slurm")
        if s.nodes < 1 or s.tasks_per_node < 1:
            raise ConfigError(f"{config_path}: slurm.nodes and slurm.tasks_per_node must be ≥ 1")
        raw = read_yaml_mapping(config_path)
        check_run_config(cfg, apply_overrides(raw, list(overrides)) if overrides else raw)
        name = name or "exp-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        exp_dir = cfg.path(s.workdir).resolve() / name
        if exp_dir.exists():
            raise DrtpError(f"experiment folder {exp_dir} exists already (choose another --name)")
        (exp_dir / "logs").mkdir(parents=True)
        (exp_dir / "nodes").mkdir()
        (exp_dir / "config.yaml").write_text(yaml.safe_dump(raw_config(config_path, overrides), sort_keys=False))
        exp = cls(exp_dir)
        exp.state = {
            "name": name,
            "config": str(config_path.resolve()),
            "results": str((cfg.path(cfg.results) / name).resolve()),
            "clients": s.nodes * s.tasks_per_node,
            "submitted": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "jobs": {},
            "finished": False,
        }
        exp.save()
        return exp

    def replay(self, each_registry: bool) -> str:
        """The master's command (runconfig.EXPERIMENT or RUN) for the experiment's config.yaml."""
        return replay_mode(run_config_data(read_yaml_mapping(self.dir / "config.yaml"), each_registry))

    def prepare_resume(self) -> None:
        """Make the folder ready for new jobs: the old ones are kept in the state's ``previous``, the old
        client registrations and release marker go (the new master must wait for the new clients)."""
        infos = self.poll()
        running = [f"{role} job {i.job_id} {i.state}" for role, i in infos.items() if not i.terminal]
        if running:
            raise DrtpError(
                f"experiment {self.name}: {', '.join(running)}: follow it with 'drtp slurm wait --exp {self.dir}' "
                "or cancel it first"
            )
        self.state.setdefault("previous", []).append(
            {"jobs": self.state.get("jobs", {}), "problems": self.state.get("problems", [])}
        )
        self.state.update(jobs={}, finished=False, problems=[], csv_rows={})
        for f in (self.dir / "nodes").glob("task-*"):
            f.unlink()
        (self.dir / "released").unlink(missing_ok=True)
        if self.state_path.name != STATE:  # a folder of an older drtp: its state moves to the new name
            self.state_path.unlink()
            self.state_path = self.dir / STATE
        self.save()

    def submit(self, cfg: Config, resume: bool = False) -> None:
        s = cfg.require("slurm")
        each = bool(s.each_registry)
        mode = self.replay(each)
        self.state.update(replay=mode, each_registry=each)
        if resume:
            self.state["resumed"] = self.state.get("resumed", 0) + 1
        # drtp run --resume continues a requests.csv (a repetition's, with repeat: N); without one there is
        # nothing to continue
        run = self.dir / "run"
        started = any((d / "requests.csv").exists() for d in run_dirs_in(run))
        resume = resume and (mode == EXPERIMENT or started)
        env = dict(os.environ)
        if cfg.client_info.token:  # the jobs inherit it (sbatch --export=ALL); scripts never hold it
            env["DRTP_TOKEN"] = cfg.client_info.token
        job_name = f"drtp-{self.name}"
        clients = self.dir / "clients.sbatch"
        clients.write_text(slurm.render_clients(s, str(self.dir), job_name))
        client_job = slurm.sbatch(str(clients), env)
        self.state["jobs"]["clients"] = {"id": client_job, "log": str(self.dir / "logs" / f"clients-{client_job}.out")}
        self.save()
        master = self.dir / "master.sbatch"
        master.write_text(slurm.render_master(s, str(self.dir), job_name, client_job, mode, resume))
        try:
            master_job = slurm.sbatch(str(master), env)
        except DrtpError:
            slurm.scancel([client_job])
            raise
        self.state["jobs"]["master"] = {"id": master_job, "log": str(self.dir / "logs" / f"master-{master_job}.out")}
        self.save()

    # -- follow ----------------------------------------------------------------------------------

    def requests_done(self) -> int | None:
        """Rows in the runs' requests.csv files so far (None before the first run starts)."""
        paths = sorted((self.dir / "run").glob("**/requests.csv")) if (self.dir / "run").exists() else []
        if not paths:
            return None
        progress = self.state.setdefault("csv_rows", {})
        total = 0
        for path in paths:
            offset, count = progress.get(str(path), (0, 0))
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1
            count += chunk[:end].count(b"\n")
            progress[str(path)] = (offset + end, count)
            total += max(0, count - 1)  # the header
        return total

    def poll(self) -> dict[str, slurm.JobInfo]:
        infos = {}
        for role, job in self.state.get("jobs", {}).items():
            try:
                info = slurm.job_info(job["id"])
            except DrtpError as e:  # slurmctld busy or restarting: keep the last state, try again next poll
                print(f"drtp: {e}", file=sys.stderr, flush=True)
                info = slurm.JobInfo(job["id"], job.get("state", "PENDING"), log=job.get("log", ""))
            if info.log:
                job["log"] = info.log
            if info.state != "UNKNOWN":
                job["state"] = info.state
                job["exit_code"] = info.exit_code
                job["reason"] = info.reason
            infos[role] = info
        return infos

    def status_line(self, infos: dict[str, slurm.JobInfo]) -> str:
        parts = []
        for role, info in infos.items():
            extra = info.nodes if info.state == "RUNNING" else info.reason if info.state == "PENDING" else ""
            extra = "" if extra in ("", "None", "(null)") else f" [{extra}]"
            parts.append(f"{role} {info.job_id} {info.state}{extra}")
        done = self.requests_done()
        if done is not None:
            parts.append(f"requests done {done:,}")
        return "; ".join(parts)

    def problems(self) -> list[str]:
        """One line per job that ended badly: its id, state and log path."""
        lines = []
        released = (self.dir / "released").exists()
        for role, job in self.state.get("jobs", {}).items():
            state = job.get("state", "UNKNOWN")
            if state == "COMPLETED" or state not in slurm.TERMINAL:
                continue
            if role == "clients" and released and not job.get("ended_early"):
                continue  # the master (or wait) released it when it was done
            exit_code = f", exit {job['exit_code']}" if job.get("exit_code") not in (None, "", "0:0") else ""
            when = " before the master finished" if role == "clients" else ""
            what = "client" if role == "clients" else role
            lines.append(f"{what} job {job['id']} {state}{when}{exit_code}; log: {job['log']}")
        return lines

    def wait(self, poll: float = 2.0, out=sys.stdout, timeout: float | None = None) -> int:
        """Follow the jobs until the master ends; gather; report. Exit status: 0 if all went well."""
        last = ""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            infos = self.poll()
            clients, master = infos.get("clients"), infos.get("master")
            if clients and not clients.active and not (self.dir / "released").exists():
                job = self.state["jobs"]["clients"]
                if not job.get("ended_early") and clients.state != "UNKNOWN":
                    job["ended_early"] = True  # before the master released it
                    msg = f"client job {clients.job_id} is {clients.state} while the master runs; log: {job['log']}"
                    print(f"drtp: {msg}", file=out, flush=True)
            line = self.status_line(infos)
            if line != last:
                stamp = _dt.datetime.now().strftime("%H:%M:%S")
                print(f"[{stamp}] {line}", file=out, flush=True)
                last = line
            self.save()
            if master is None or master.terminal:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise DrtpError(f"gave up waiting for experiment {self.name} (jobs still running: drtp slurm cancel)")
            time.sleep(poll)
        if clients and not clients.terminal:
            if clients.active and not (self.dir / "released").exists():
                (self.dir / "released").touch()  # the master is over: the clients are not needed
                slurm.scancel([clients.job_id])
            end = time.monotonic() + 20  # let the client job end, so its log and state are final
            while not slurm.job_info(clients.job_id).terminal and time.monotonic() < end:
                time.sleep(min(poll, 1.0))
            self.poll()
        self.state["finished"] = True
        problems = self.problems()
        self.state["problems"] = problems
        self.save()
        dest = self.gather()
        for p in problems:
            print(f"drtp: {p}", file=out, flush=True)
        registries = self.registry_status()
        for line in registry_lines(registries):
            print(f"drtp: {line}", file=out, flush=True)
        done = self.requests_done()
        print(f"results of {self.name} in {dest}/ ({done or 0:,} requests)", file=out, flush=True)
        return self.exit_code(registries)

    def registry_status(self) -> dict:
        """``drtp experiment``'s experiment.json of the master's run (empty for a single run, or before it)."""
        path = self.dir / "run" / "experiment.json"
        try:
            return json.loads(path.read_text()) if path.exists() else {}
        except (OSError, ValueError):
            return {}

    def exit_code(self, registries: dict) -> int:
        """The master's own exit code (drtp's: the highest of its runs) and the registries', or 1 when a job
        ended otherwise (cancelled, timed out, vanished) with none of them higher."""
        master = self.state.get("jobs", {}).get("master", {})
        code = master.get("exit_code") or ""
        codes = [s.get("exit_code", 0) for s in registries.values()]
        if master.get("state") in ("COMPLETED", "FAILED") and code.split(":")[0].isdigit():
            codes.append(int(code.split(":")[0]))
        rc = worst(codes)
        return rc if rc or not self.state.get("problems") else 1

    def gather(self) -> Path:
        """Copy run/, the logs, the scripts and the state into ``<results>/<name>/``."""
        dest = Path(self.state["results"])
        dest.mkdir(parents=True, exist_ok=True)
        run = self.dir / "run"
        if run.exists():  # one run: its files; each_registry: a folder per run
            shutil.copytree(run, dest, dirs_exist_ok=True)
        (dest / "logs").mkdir(exist_ok=True)
        for f in (self.dir / "logs").iterdir():
            shutil.copy2(f, dest / "logs" / f.name)
        for name in ("clients.sbatch", "master.sbatch"):
            if (self.dir / name).exists():
                shutil.copy2(self.dir / name, dest / name)
        self.state["gathered"] = str(dest)
        self.save()
        shutil.copy2(self.state_path, dest / STATE)  # beside run/'s experiment.json (the registries'), not over it
        return dest

    def cancel(self) -> list[str]:
        ids = self.job_ids()
        slurm.scancel(ids)
        return ids


def registry_lines(registries: dict) -> list[str]:
    """One line per registry of ``drtp experiment`` that failed or ended with a non-zero exit code."""
    lines = []
    for rid, st in registries.items():
        if st.get("ok") and not st.get("exit_code"):
            continue
        why = (
            st.get("error")
            if not st.get("ok")
            else f"{st.get('failed', '?')} of {st.get('requests', '?')} requests failed"
        )
        lines.append(f"registry {rid} ({st.get('url', '?')}): exit {st.get('exit_code', '?')}: {why}")
    return lines


def find_experiment(exp: str, cfg: Config | None) -> Experiment:
    """An experiment folder, or the name of one under the config's slurm.workdir."""
    path = Path(exp)
    if not path.is_dir() and cfg is not None and cfg.slurm is not None and "/" not in exp:
        path = cfg.path(cfg.slurm.workdir) / exp
    found = Experiment(path)
    if not found.state:
        raise DrtpError(f"{exp}: not an experiment folder (no {STATE} in {path})")
    return found


def latest(cfg: Config) -> Experiment:
    """The most recently submitted experiment under the config's slurm.workdir."""
    root = cfg.path(cfg.require("slurm").workdir)
    found = [*root.glob(f"*/{STATE}"), *root.glob(f"*/{LEGACY_STATE}")] if root.exists() else []
    found = sorted(found, key=lambda p: p.stat().st_mtime)
    if not found:
        raise DrtpError(f"no experiment under {root} (submit one with 'drtp slurm submit')")
    return Experiment(found[-1].parent)


# -- inside the master job ------------------------------------------------------------------------------


def registrations(exp_dir: Path) -> list[tuple[int, str, str, int]]:
    """(task, Slurm node name, host name, port) of every client task that has registered."""
    out = []
    for f in sorted((exp_dir / "nodes").glob("task-*")):
        if f.suffix == ".tmp":
            continue
        node, host, port = f.read_text().split()
        out.append((int(f.name.split("-")[1]), node, host, int(port)))
    return sorted(out)


def resolve_clients(exp: Experiment, timeout: float, out=sys.stdout) -> str:
    """Wait for every client task, check each answers, write the run config; its replay mode."""
    from drtp.master.run.nodes import NodeLink
    from drtp.replay.signing import resolve_token

    cfg = load_config(exp.dir / "config.yaml")
    token = resolve_token(cfg.client_info.token, "client_info.token")
    expected = exp.state["clients"]
    client_job = exp.state["jobs"]["clients"]["id"]
    deadline = time.monotonic() + timeout
    while len(regs := registrations(exp.dir)) < expected:
        info = slurm.job_info(client_job)
        if info.terminal:
            raise DrtpError(f"client job {client_job} {info.state} before its clients came up; log: {info.log}")
        if time.monotonic() > deadline:
            raise DrtpError(f"only {len(regs)} of {expected} client tasks registered within {timeout:.0f} s")
        time.sleep(0.5)
    addresses = []
    for _task, node, host, port in regs:
        addr = slurm.node_address(node) or host
        addresses.append(f"{addr}:{port}")
    for a in addresses:
        link = NodeLink(a, token, None)
        while True:
            try:
                link.check()
                break
            except DrtpError as e:
                if time.monotonic() > deadline:
                    log = exp.state["jobs"]["clients"]["log"]
                    raise DrtpError(
                        f"client node {a} did not come up within {timeout:.0f} s: {e}; log: {log}"
                    ) from None
                info = slurm.job_info(client_job)
                if info.terminal:
                    raise DrtpError(
                        f"client job {client_job} {info.state} before its clients came up; log: {info.log}"
                    ) from None
                time.sleep(0.5)
    data = read_yaml_mapping(exp.dir / "config.yaml")
    data.setdefault("client_info", {})["client_list"] = addresses
    each = exp.state.get("each_registry", bool(cfg.slurm and cfg.slurm.each_registry))
    mode = write_run_config(exp.dir, data, each_registry=each)
    print(f"client nodes: {', '.join(addresses)}", file=out, flush=True)
    return mode


def write_run_config(exp_dir: Path, data: dict, each_registry: bool) -> str:
    """run-config.yaml, what the master replays (runconfig.run_config_data); its replay mode."""
    run_data = run_config_data(data, each_registry)
    (exp_dir / "run-config.yaml").write_text(yaml.safe_dump(run_data, sort_keys=False))
    return replay_mode(run_data)
