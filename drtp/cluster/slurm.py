"""Talking to Slurm: render the sbatch templates, submit, read job states, cancel.

Only the Slurm commands are used (``sbatch``, ``scontrol``, ``scancel``); states are read with
``scontrol show job <id> -o`` (one line of ``Key=Value``), which works without accounting
(no ``sacct``).  The job's environment carries secrets such as ``DRTP_TOKEN``; the scripts never do.
"""

from __future__ import annotations

import importlib.resources
import re
import shlex
import subprocess
from dataclasses import dataclass

from drtp.config import Slurm
from drtp.errors import DrtpError
from drtp.progress import DEFAULT_INTERVAL_S

# states after which a job will not run again (scontrol's JobState)
TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "SPECIAL_EXIT",
    "REVOKED",
}
# states of a job that is (or will be) running; anything else means it is ending or over
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "REQUEUED", "RESIZING", "RESV_DEL_HOLD"}
_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def template(name: str) -> str:
    """The text of ``slurm/<name>.sbatch``."""
    return importlib.resources.files("drtp.slurm").joinpath(f"{name}.sbatch").read_text()


def render(text: str, values: dict[str, object]) -> str:
    """Fill ``{{ key }}`` placeholders; a placeholder without a value is a bug, not a blank."""

    def sub(m: re.Match) -> str:
        key = m.group(1)
        if key not in values:
            raise KeyError(f"sbatch template: no value for {{{{ {key} }}}}")
        return str(values[key])

    return _PLACEHOLDER.sub(sub, text)


def sbatch_lines(s: Slurm) -> str:
    """``#SBATCH`` lines for partition, account and the config's extra options."""
    lines = []
    if s.partition:
        lines.append(f"#SBATCH --partition={s.partition}")
    if s.account:
        lines.append(f"#SBATCH --account={s.account}")
    for opt in s.extra:
        opt = opt.strip()
        lines.append(opt if opt.startswith("#SBATCH") else f"#SBATCH {opt}")
    return "\n".join(lines)


def _common(s: Slurm, exp_dir: str, job_name: str) -> dict[str, object]:
    if re.search(r"\s", exp_dir):
        raise DrtpError(f"slurm.workdir: the experiment folder {exp_dir!r} has white space (sbatch cannot take it)")
    return {
        "job_name": job_name,
        "exp_dir": exp_dir,
        "sbatch_lines": sbatch_lines(s),
        "setup": "\n".join(s.setup),
        "drtp": shlex.quote(s.drtp),
    }


def render_clients(s: Slurm, exp_dir: str, job_name: str) -> str:
    values = _common(s, exp_dir, job_name)
    values.update(
        nodes=s.nodes,
        tasks_per_node=s.tasks_per_node,
        cpus_per_task=s.cpus_per_task,
        time=s.time,
        client_port=s.client_port,
        bind=shlex.quote(s.bind),
    )
    return render(template("clients"), values)


def replay_command(mode: str, resume: bool) -> str:
    """The master job's replay of ``$DRTP_EXP/run-config.yaml`` into ``$DRTP_EXP/run`` (mode: runconfig's)."""
    cfg, out, progress = '-c "$DRTP_EXP/run-config.yaml"', '--out "$DRTP_EXP/run"', '"${progress[@]}"'
    again = " --resume" if resume else ""
    if mode == "experiment":
        return f"$DRTP_CMD experiment {cfg} {out}{again} {progress}"
    return f"{{ $DRTP_CMD warmup {cfg} {progress} && $DRTP_CMD run {cfg} {out}{again} {progress}; }}"


def render_master(
    s: Slurm, exp_dir: str, job_name: str, client_job: str, mode: str = "run", resume: bool = False
) -> str:
    values = _common(s, exp_dir, job_name)
    values.update(master_cpus=s.master_cpus, master_time=s.master_time or s.time, client_job=client_job)
    values["replay"] = replay_command(mode, resume)
    values["progress_interval"] = f"{DEFAULT_INTERVAL_S:g}"  # the job's log is no terminal: plain progress lines
    return render(template("master"), values)


def _run(args: list[str], env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(args, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=60)
    except FileNotFoundError:
        raise DrtpError(f"{args[0]} not found: run this on a Slurm login node (or use 'drtp deploy')") from None
    except subprocess.TimeoutExpired:
        raise DrtpError(f"{' '.join(args[:2])} did not answer within 60 s (is slurmctld up?)") from None
    if check and proc.returncode != 0:
        raise DrtpError(f"{' '.join(args[:3])} failed: {(proc.stderr or proc.stdout).strip()[:300]}")
    return proc


def sbatch(script_path: str, env: dict[str, str]) -> str:
    """Submit a script; the job id."""
    out = _run(["sbatch", "--parsable", script_path], env=env).stdout.strip()
    job_id = out.split(";")[0]
    if not job_id.isdigit():
        raise DrtpError(f"sbatch answered {out!r}, not a job id")
    return job_id


def scancel(job_ids: list[str]) -> None:
    if job_ids:
        _run(["scancel", *job_ids], check=False)


@dataclass
class JobInfo:
    job_id: str
    state: str  # JobState, or "UNKNOWN" when Slurm no longer knows the job
    reason: str = ""
    exit_code: str = ""
    nodes: str = ""
    log: str = ""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL or self.state == "UNKNOWN"


def parse_oneliner(line: str) -> dict[str, str]:
    """``Key=Value Key2=Value with spaces…`` (scontrol -o) as a dict; a value runs to the next ``Key=``."""
    fields: dict[str, str] = {}
    for m in re.finditer(r"(?:^|\s)([A-Za-z][\w:/]*)=(.*?)(?=\s[A-Za-z][\w:/]*=|$)", line.strip()):
        fields[m.group(1)] = m.group(2)
    return fields


def job_info(job_id: str) -> JobInfo:
    proc = _run(["scontrol", "show", "job", job_id, "-o"], check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        if "Invalid job id" in proc.stderr:
            return JobInfo(job_id, "UNKNOWN")
        raise DrtpError(f"scontrol show job {job_id} failed: {proc.stderr.strip()[:300]}")
    f = parse_oneliner(proc.stdout.splitlines()[0])
    return JobInfo(
        job_id,
        f.get("JobState", "UNKNOWN"),
        reason=f.get("Reason", ""),
        exit_code=f.get("ExitCode", ""),
        nodes=f.get("NodeList", ""),
        log=f.get("StdOut", ""),
    )


def node_address(node: str) -> str | None:
    """The address Slurm reaches a node by (NodeAddr), or None if scontrol does not know it."""
    proc = _run(["scontrol", "show", "node", node, "-o"], check=False)
    if proc.returncode != 0:
        return None
    return parse_oneliner(proc.stdout).get("NodeAddr") or None
