"""A real Slurm cluster (munge, slurmctld, two slurmd) and sshd on loopback, for the cluster tests.

It is brought up by the project's own scripts/slurm-cluster-up.sh (as root) and stopped by
scripts/slurm-cluster-down.sh, which stops exactly the daemons it started.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UP = ROOT / "scripts" / "slurm-cluster-up.sh"
DOWN = ROOT / "scripts" / "slurm-cluster-down.sh"
NEEDED = ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch", "/usr/sbin/munged", "/usr/sbin/sshd")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass
class Cluster:
    ci_dir: Path
    slurm_conf: Path
    ssh_port: int
    ssh_key: Path
    proctrack: str

    def env(self, **extra: str) -> dict[str, str]:
        return dict(os.environ, SLURM_CONF=str(self.slurm_conf), **extra)


def why_not() -> str | None:
    """Why the cluster cannot be brought up here (None: it can)."""
    if os.geteuid() != 0:
        return "the Slurm daemons (slurmctld, slurmd, munged) and sshd need root to start"
    if not all(Path(b).exists() for b in NEEDED) and not shutil.which("apt-get"):
        return "Slurm/munge/openssh-server are not installed and apt-get is not available"
    return None


def free_port_run(n: int) -> int:
    """A port p with p .. p+n-1 all free, below the ephemeral range (32768+).

    The kernel hands out ephemeral ports for other programs' connections and bind(0) calls, so a port
    picked there can be taken between this check and the daemon's start (a slurmd once lost its port
    to the slurmctld port picked the same way).
    """
    rng = random.Random()
    while True:
        p = rng.randrange(20000, 32000)
        if all(port_free(p + i) for i in range(n)):
            return p


def free_port_pair() -> int:
    return free_port_run(2)


class InstallFailed(RuntimeError):
    pass


PORT_CLASH = 4  # slurm-cluster-up.sh's exit code when a daemon's port was taken


def cluster_up(ci_dir: Path, attempts: int = 3) -> Cluster:
    install = "0" if all(Path(b).exists() for b in NEEDED) else "1"
    for attempt in range(1, attempts + 1):
        ssh_port = 2222 if port_free(2222) else free_port()
        base = free_port_run(3)  # slurmctld on base, the two slurmds on base+1, base+2
        env = dict(
            os.environ,
            CI_DIR=str(ci_dir),
            INSTALL=install,
            SSH_PORT=str(ssh_port),
            CTLD_PORT=str(base),
            SLURMD_PORT_BASE=str(base),
            NODE_PREFIX="t",
        )
        proc = subprocess.run(["bash", str(UP)], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode == 0:
            break
        cluster_down(ci_dir)
        if install == "1" and "packages installed" not in proc.stdout:
            raise InstallFailed(f"apt-get could not install Slurm/munge/openssh-server: {proc.stderr[-500:]}")
        if proc.returncode != PORT_CLASH or attempt == attempts:
            raise RuntimeError(f"slurm-cluster-up.sh failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        install = "0"
    return Cluster(
        ci_dir=ci_dir,
        slurm_conf=ci_dir / "etc" / "slurm.conf",
        ssh_port=ssh_port,
        ssh_key=ci_dir / "id_ed25519",
        proctrack=(ci_dir / "proctrack").read_text().strip(),
    )


def cluster_down(ci_dir: Path) -> None:
    subprocess.run(["bash", str(DOWN)], env=dict(os.environ, CI_DIR=str(ci_dir)), capture_output=True, check=False)
