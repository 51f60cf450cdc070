"""One SSH connection to a host of a deployment (paramiko, optionally through a jump host): run commands, copy files.

``drtp deploy`` (drtp.cluster.deploy) decides what to copy and run where; this module only carries it
out over SSH: connecting with the configured keys, agent or password and host-key policy, running a
shell command with its secrets on stdin (never on the command line), streaming its output, and copying
file trees both ways — a file whose size and SHA-256 already match on the remote side is skipped.
It is apart from the deployment's steps so that those read as steps, and the SSH details in one place.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import stat
import sys
from pathlib import Path, PurePosixPath

import paramiko

from drtp.config import Deploy, SshHost
from drtp.errors import DrtpError, RunError

# run on the remote side by deploy.python: sizes and SHA-256 of the files named on stdin (JSON)
_HASH_SCRIPT = """
import hashlib, json, os, sys
out = {}
for p in json.load(sys.stdin):
    try:
        size = os.path.getsize(p)
    except OSError:
        continue
    h = hashlib.sha256()
    with open(p, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            h.update(chunk)
    out[p] = [size, h.hexdigest()]
json.dump(out, sys.stdout)
"""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Remote:
    """One SSH connection (optionally through a jump host): run commands, copy files."""

    def __init__(self, target: SshHost, d: Deploy, out=sys.stdout) -> None:
        self.target = target
        self.deploy = d
        self.out = out
        self.jump_ssh: paramiko.SSHClient | None = None
        self.ssh = self._connect(target, sock=self._jump_sock(target))
        self.sftp = self.ssh.open_sftp()
        self.name = f"{target.user + '@' if target.user else ''}{target.host}:{target.port}"

    def _new_ssh(self) -> paramiko.SSHClient:
        c = paramiko.SSHClient()
        c.load_system_host_keys()
        kh = self.deploy.known_hosts
        if kh and Path(os.path.expanduser(kh)).exists():
            c.load_host_keys(os.path.expanduser(kh))
        c.set_missing_host_key_policy(
            paramiko.AutoAddPolicy() if self.deploy.accept_new_host_keys else paramiko.RejectPolicy()
        )
        return c

    def _connect(self, h: SshHost, sock=None) -> paramiko.SSHClient:
        c = self._new_ssh()
        key = os.path.expanduser(h.key_file) if h.key_file else None
        try:
            c.connect(
                h.host,
                port=h.port,
                username=h.user,
                key_filename=key,
                password=h.password,
                look_for_keys=key is None,
                allow_agent=True,
                sock=sock,
                timeout=20,
                banner_timeout=20,
                auth_timeout=20,
            )
        except paramiko.AuthenticationException:
            who = f"{h.user}@{h.host}" if h.user else h.host
            raise DrtpError(f"ssh {who}:{h.port}: authentication failed (key, agent or password)") from None
        except paramiko.SSHException as e:
            raise RunError(f"ssh {h.host}:{h.port}: {e}") from None
        except OSError as e:
            raise RunError(f"ssh {h.host}:{h.port}: cannot connect ({e.strerror or e})") from None
        if self.deploy.known_hosts:
            c.save_host_keys(os.path.expanduser(self.deploy.known_hosts))
        return c

    def _jump_sock(self, target: SshHost):
        j = self.deploy.jump
        if j is None:
            return None
        self.jump_ssh = self._connect(j)
        transport = self.jump_ssh.get_transport()
        try:
            return transport.open_channel("direct-tcpip", (target.host, target.port), ("127.0.0.1", 0))
        except paramiko.ChannelException as e:
            raise RunError(f"jump host {j.host} cannot reach {target.host}:{target.port}: {e}") from None

    def close(self) -> None:
        self.sftp.close()
        self.ssh.close()
        if self.jump_ssh is not None:
            self.jump_ssh.close()

    def run(
        self, command: str, stdin: str = "", stream: bool = False, check: bool = True, show: str | None = None
    ) -> tuple[int, str]:
        """Run a shell command; its exit status and output (stdout and stderr together).

        ``stdin`` (e.g. secrets) is written to the command and never shown; ``stream`` prints the
        output as it comes; ``show`` is what is printed instead of the command (None: nothing).
        """
        if show:
            print(f"[{self.target.host}] $ {show}", file=self.out, flush=True)
        chan = self.ssh.get_transport().open_session()
        chan.set_combine_stderr(True)
        chan.exec_command(command)
        if stdin:
            chan.sendall(stdin.encode())
        chan.shutdown_write()
        chunks: list[bytes] = []
        pending = b""
        while True:
            data = chan.recv(65536)
            if not data:
                break
            chunks.append(data)
            if stream:
                pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    print(f"  | {line.decode(errors='replace').rstrip()}", file=self.out, flush=True)
        if stream and pending.strip():
            print(f"  | {pending.decode(errors='replace').rstrip()}", file=self.out, flush=True)
        rc = chan.recv_exit_status()
        output = b"".join(chunks).decode(errors="replace")
        if check and rc != 0:
            what = show or command.split()[0]
            raise RunError(f"[{self.target.host}] {what} failed (exit {rc}): {output[-500:].strip()}")
        return rc, output

    def put_tree(self, pairs: list[tuple[Path, str]], python: str) -> tuple[int, int, int]:
        """Copy (local, remote) files whose size or hash differ; (copied, skipped, bytes copied)."""
        remote_paths = [r for _, r in pairs]
        _, text = self.run(f"{shlex.quote(python)} -c {shlex.quote(_HASH_SCRIPT)}", stdin=json.dumps(remote_paths))
        there = json.loads(text)
        todo = []
        for local, remote in pairs:
            have = there.get(remote)
            size = local.stat().st_size
            if have and have[0] == size and have[1] == sha256(local):
                continue
            todo.append((local, remote))
        dirs = sorted({str(PurePosixPath(r).parent) for _, r in todo})
        if dirs:
            self.run("mkdir -p " + " ".join(shlex.quote(d) for d in dirs))
        sent = 0
        for local, remote in todo:
            self.sftp.put(str(local), remote)
            self.sftp.chmod(remote, stat.S_IMODE(local.stat().st_mode))
            sent += local.stat().st_size
        return len(todo), len(pairs) - len(todo), sent

    def get_tree(self, remote_dir: str, local_dir: Path) -> int:
        """Copy a remote folder into ``local_dir`` (recursively); how many files."""
        n = 0
        local_dir.mkdir(parents=True, exist_ok=True)
        for entry in self.sftp.listdir_attr(remote_dir):
            src = f"{remote_dir}/{entry.filename}"
            if stat.S_ISDIR(entry.st_mode):
                n += self.get_tree(src, local_dir / entry.filename)
            else:
                self.sftp.get(src, str(local_dir / entry.filename))
                n += 1
        return n
