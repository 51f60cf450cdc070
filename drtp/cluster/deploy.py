"""``drtp deploy``: run an experiment on a remote host over SSH (paramiko) and pull the results back.

Steps: connect (keys from ``deploy.key_file``, the SSH agent or ~/.ssh; a password only from a
``${VAR}`` in the config; optionally through ``deploy.jump``), copy the project, the config and the
trace files (a file whose size and SHA-256 already match is skipped), make the venv (``deploy.install``),
run — ``drtp slurm submit`` there (mode slurm), or one ``drtp client`` per ``deploy.client_hosts`` entry
plus what the Slurm master would run (mode ssh: ``drtp experiment`` for ``registries:``, else ``drtp warmup``
and ``drtp run``) — and copy the run's results into the local results folder. The files registry entries
name (``ca_file``, ``password_file``, a command's program) are copied too, and the remote config names
their copies.  Secrets referenced by the config (``${VAR}``) reach remote commands on their stdin, never on a
command line, in a file or in the output.

The SSH connection itself (connect, run, copy trees) is drtp.cluster.remote; this module is the steps.

Remote layout under ``deploy.remote_dir``: ``project/`` (the source), ``venv/``, and
``exp/<name>/`` (config.yaml, traces/, registries/<i>/<key>/<file>, results/, logs/).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from drtp.cluster.remote import Remote
from drtp.cluster.runconfig import (
    EXPERIMENT,
    RUN,
    check_run_config,
    each_registry_of,
    map_entry_paths,
    map_event_paths,
    replay_mode,
    run_config_data,
)
from drtp.config import Config, Deploy, SshHost, load_config
from drtp.errors import DrtpError, RunError
from drtp.yamlfile import read_yaml_mapping

PROJECT_DIRS = ("drtp", "master", "client", "plugins", "analysis", "slurm")
PROJECT_FILES = ("setup.py", "pyproject.toml", "README.md")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# variables that describe the machine itself: the remote side expands its own, never the laptop's
HOST_VARS = {"HOME", "USER", "LOGNAME", "PATH", "SHELL", "PWD", "TMPDIR", "HOSTNAME", "LANG"}

# run on the master's host: wait until every client node's address accepts TCP connections
_WAIT_PORTS = """
import socket, sys, time
deadline = time.time() + float(sys.argv[1])
for a in sys.argv[2:]:
    host, port = a.rsplit(':', 1)
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=2).close(); break
        except OSError:
            if time.time() > deadline: sys.exit('client node %s did not come up' % a)
            time.sleep(0.3)
"""


def project_root() -> Path:
    """The source checkout drtp runs from (deploy copies it); an error for a non-editable install."""
    import drtp

    root = Path(drtp.__file__).resolve().parents[1]
    if not (root / "setup.py").exists() or not (root / "master").is_dir():
        raise DrtpError(f"drtp deploy needs drtp installed from a source checkout (pip install -e); {root} is not one")
    return root


def project_files(root: Path) -> list[Path]:
    files = [root / f for f in PROJECT_FILES if (root / f).exists()]
    for d in PROJECT_DIRS:
        for p in sorted((root / d).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo"):
                files.append(p)
    return files


def env_refs(value) -> set[str]:
    """Names of the ``${VAR}``s used in a raw config value."""
    if isinstance(value, dict):
        return set().union(*(env_refs(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(env_refs(v) for v in value)) if value else set()
    return set(_ENV_REF.findall(value)) if isinstance(value, str) else set()


# -- the deployment ----------------------------------------------------------------------------------


@dataclass
class Layout:
    root: str  # absolute remote_dir
    venv: str
    exp: str  # root/exp/<name>

    @property
    def project(self) -> str:
        return f"{self.root}/project"

    @property
    def drtp(self) -> str:
        return f"{self.venv}/bin/drtp"


def _target(d: Deploy) -> SshHost:
    return SshHost(host=d.host, port=d.port, user=d.user, key_file=d.key_file, password=d.password)


def _client_target(h: SshHost, d: Deploy) -> SshHost:
    """A client host's SSH endpoint, with the deploy target's credentials where it gives none."""
    return SshHost(
        host=h.host,
        port=h.port,
        user=h.user or d.user,
        key_file=h.key_file or d.key_file,
        password=h.password or d.password,
    )


class Deployment:
    def __init__(self, config_path: Path, cfg: Config, name: str | None, out=sys.stdout) -> None:
        self.config_path = config_path
        self.cfg = cfg
        self.d: Deploy = cfg.require("deploy")
        self.name = name or f"deploy-{config_path.stem}"
        self.out = out
        self.raw = read_yaml_mapping(config_path)
        self.secrets = self._secret_env()
        # files of registries: entries and the events' programs beside the config, (local, remote)
        self.entry_files: list[tuple[Path, str]] = []
        self.mode = RUN

    def _secret_env(self) -> dict[str, str]:
        """The environment variables the config uses outside deploy: (tokens…), to pass on stdin."""
        rest = {k: v for k, v in self.raw.items() if k != "deploy"}
        return {v: os.environ[v] for v in sorted(env_refs(rest) - HOST_VARS) if v in os.environ}

    def _env_prefix(self) -> str:
        """Shell text that reads the secrets from stdin and exports deploy.env (shown, so no secrets)."""
        parts = ['while IFS= read -r _kv && [ -n "$_kv" ]; do export "$_kv"; done']
        for k, v in self.d.env.items():
            parts.append(f"export {k}={shlex.quote(v)}")
        return "; ".join(parts) + "; "

    def _stdin(self) -> str:
        return "".join(f"{k}={v}\n" for k, v in self.secrets.items()) + "\n"

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    # -- steps ------------------------------------------------------------------------------------

    def layout(self, r: Remote) -> Layout:
        _, root = r.run(f"mkdir -p {shlex.quote(self.d.remote_dir)} && cd {shlex.quote(self.d.remote_dir)} && pwd")
        root = root.strip().splitlines()[-1]
        venv = self.d.venv or f"{root}/venv"
        return Layout(root, venv, f"{root}/exp/{self.name}")

    def remote_config(self, lay: Layout, client_list: list[str] | None) -> dict:
        data = json.loads(json.dumps(self.raw))  # a deep copy
        data.pop("deploy", None)
        trace = data.get("trace") or {}
        trace["location"] = "traces"
        data["trace"] = trace
        warmup = data.setdefault("warmup", {})
        warmup["output"] = Path(self.cfg.warmup.output).name
        data["results"] = "results"
        if "slurm" in data:
            s = data["slurm"]
            s["workdir"] = "slurm-jobs"
            s["setup"] = list(s.get("setup", [])) + [f"source {shlex.quote(lay.venv)}/bin/activate"]
            s["drtp"] = "drtp"
        if client_list is not None:
            data.setdefault("client_info", {})["client_list"] = client_list
        if self.d.mode == "ssh":  # replayed here as it is: what a Slurm master would make of it
            data = run_config_data(data, each_registry_of(data))
            self.mode = replay_mode(data)
        self.entry_files = []

        def copied_into(folder: str) -> Callable[[str, str, int], str]:
            # each registry entry's files, and each event's program (a script beside the config), in a folder
            # of their own: two entries' "ca.pem" do not meet
            def remote(value: str, key: str, i: int) -> str:
                local = self.cfg.path(value)
                path = f"{lay.exp}/{folder}/{i}/{key}/{local.name}"
                self.entry_files.append((local, path))
                return path

            return remote

        map_entry_paths(data, copied_into("registries"))
        map_event_paths(data, copied_into("events"))
        return data

    def copy(self, r: Remote, lay: Layout, config_text: str) -> None:
        root = project_root()
        pairs = [(p, f"{lay.project}/{p.relative_to(root).as_posix()}") for p in project_files(root)]
        for local, name in zip(self.cfg.trace_paths(), self.cfg.require("trace").traces, strict=True):
            if not local.exists():
                raise DrtpError(f"trace file {local} not found (trace.location/trace.traces)")
            pairs.append((local, f"{lay.exp}/traces/{name}"))
        pairs += self.entry_files  # each checked before anything was copied (check_run_config)
        copied, skipped, sent = r.put_tree(pairs, self.d.python)
        self.say(f"copied {copied} files ({sent / 1e6:.1f} MB) to {r.name}:{lay.root}, {skipped} already there")
        r.run(f"mkdir -p {shlex.quote(lay.exp)}/logs {shlex.quote(lay.exp)}/results")
        with r.sftp.open(f"{lay.exp}/config.yaml", "w") as f:
            f.write(config_text)

    def install(self, r: Remote, lay: Layout) -> None:
        py = f"{shlex.quote(lay.venv)}/bin/python"
        has_venv = r.run(f"test -x {py}", check=False)[0] == 0
        importable = has_venv and r.run(f"{py} -c 'import drtp.cluster'", check=False)[0] == 0
        mode = self.d.install
        if mode == "never" or (mode == "auto" and importable):
            if not importable:
                raise DrtpError(f"deploy.install is never but {lay.venv} on {r.name} has no drtp")
            self.say(f"venv {lay.venv}: drtp importable, install skipped")
            return
        if not has_venv:
            flag = " --system-site-packages" if self.d.system_site_packages else ""
            cmd = f"{shlex.quote(self.d.python)} -m venv{flag} {shlex.quote(lay.venv)}"
            r.run(cmd, show=cmd)
        args = " ".join(shlex.quote(a) for a in self.d.pip_args)
        cmd = f"{py} -m pip install -q {args} -e {shlex.quote(lay.project)}"
        r.run(cmd, stream=True, show=cmd)

    def pull(self, r: Remote, remote_dir: str, run_name: str) -> Path:
        dest = (self.cfg.path(self.cfg.results) / run_name).resolve()
        n = r.get_tree(remote_dir, dest)
        self.say(f"pulled {n} files into {dest}/")
        return dest

    # -- modes -----------------------------------------------------------------------------------------

    def run_slurm(self, r: Remote, lay: Layout, run_name: str) -> int:
        exp = shlex.quote(lay.exp)
        cmd = f"cd {exp} && {shlex.quote(lay.drtp)} slurm submit -c config.yaml --name {shlex.quote(run_name)}"
        rc, _ = r.run(self._env_prefix() + cmd, stdin=self._stdin(), stream=True, check=False, show=cmd)
        results = f"{lay.exp}/results/{run_name}"
        if r.run(f"test -d {shlex.quote(results)}", check=False)[0] != 0:
            raise RunError(f"drtp slurm submit on {r.name} failed (exit {rc}) and left no results")
        self.pull(r, results, run_name)
        return rc

    def run_ssh(self, r: Remote, lay: Layout, run_name: str, addresses: list[str]) -> int:
        exp = shlex.quote(lay.exp)
        started: list[tuple[Remote, str]] = []
        base = self.cfg.client_info.port
        try:
            for i, h in enumerate(self.d.client_hosts):
                target = _client_target(h, self.d)
                same = (target.host, target.port, target.user) == (r.target.host, r.target.port, r.target.user)
                cr = r if same else None
                if cr is None:
                    cr = Remote(target, self.d, self.out)
                    clay = self.layout(cr)
                    self.copy_project_only(cr, clay)
                    self.install(cr, clay)
                else:
                    clay = lay
                port = base + i
                pidfile = f"{clay.exp}/logs/client-{port}.pid"
                log = f"{clay.exp}/logs/client-{port}.log"
                cmd = (
                    f"mkdir -p {shlex.quote(clay.exp)}/logs; setsid nohup {shlex.quote(clay.drtp)} client "
                    f"--host 0.0.0.0 --port {port} </dev/null >{shlex.quote(log)} 2>&1 & "
                    f"echo $! > {shlex.quote(pidfile)}"
                )
                cr.run(self._env_prefix() + cmd, stdin=self._stdin(), show=f"drtp client --port {port} (log {log})")
                started.append((cr, pidfile))
            py = f"{shlex.quote(lay.venv)}/bin/python"
            r.run(f"{py} -c {shlex.quote(_WAIT_PORTS)} 60 " + " ".join(addresses), show="wait for the client nodes")
            drtp = shlex.quote(lay.drtp)
            out_dir = f"results/{run_name}"
            if self.mode == EXPERIMENT:
                cmd = f"cd {exp} && {drtp} experiment -c config.yaml --out {out_dir}"
            else:
                cmd = f"cd {exp} && {drtp} warmup -c config.yaml && {drtp} run -c config.yaml --out {out_dir}"
            rc, _ = r.run(self._env_prefix() + cmd, stdin=self._stdin(), stream=True, check=False, show=cmd)
        finally:
            for cr, pidfile in started:
                cr.run(f"kill $(cat {shlex.quote(pidfile)}) 2>/dev/null; rm -f {shlex.quote(pidfile)}", check=False)
                if cr is not r:
                    cr.close()
        results = f"{lay.exp}/results/{run_name}"
        if r.run(f"test -d {shlex.quote(results)}", check=False)[0] != 0:
            raise RunError(f"the replay on {r.name} failed (exit {rc}) and left no results")
        dest = self.pull(r, results, run_name)
        r.get_tree(f"{lay.exp}/logs", dest / "logs")
        return rc

    def copy_project_only(self, r: Remote, lay: Layout) -> None:
        root = project_root()
        pairs = [(p, f"{lay.project}/{p.relative_to(root).as_posix()}") for p in project_files(root)]
        copied, skipped, sent = r.put_tree(pairs, self.d.python)
        self.say(f"copied {copied} files ({sent / 1e6:.1f} MB) to {r.name}:{lay.root}, {skipped} already there")

    def run(self, copy_only: bool = False) -> int:
        t0 = time.perf_counter()
        check_run_config(self.cfg, self.raw)  # before anything is copied: the remote would fail after the install
        r = Remote(_target(self.d), self.d, self.out)
        try:
            self.say(f"connected to {r.name}" + (f" through {self.d.jump.host}" if self.d.jump else ""))
            lay = self.layout(r)
            addresses = None
            if self.d.mode == "ssh":
                if not self.d.client_hosts:
                    raise DrtpError(f"{self.config_path}: deploy.mode is ssh but deploy.client_hosts is empty")
                base = self.cfg.client_info.port
                addresses = [f"{h.host}:{base + i}" for i, h in enumerate(self.d.client_hosts)]
            elif "slurm" not in self.raw:
                raise DrtpError(f"{self.config_path}: deploy.mode is slurm but the config has no slurm: section")
            text = yaml.safe_dump(self.remote_config(lay, addresses), sort_keys=False)
            self.copy(r, lay, text)
            self.install(r, lay)
            if copy_only:
                return 0
            run_name = "run-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
            if self.d.mode == "slurm":
                rc = self.run_slurm(r, lay, run_name)
            else:
                rc = self.run_ssh(r, lay, run_name, addresses)
            self.say(f"deploy {self.name}/{run_name} done in {time.perf_counter() - t0:.0f} s (exit {rc})")
            return rc
        finally:
            r.close()


def run_deploy(config_path: Path, name: str | None = None, copy_only: bool = False, out=sys.stdout) -> int:
    cfg = load_config(config_path)
    return Deployment(config_path, cfg, name, out).run(copy_only=copy_only)
