"""A real containerd pulling from a real registry, and its pulls captured as a trace.

containerd is what a kubelet pulls with; ``ctr content fetch`` makes the same requests (a HEAD of
the manifest, a GET of it by digest, the config, then the layers, at most 3 at once, each on its
own connection).  :class:`Containerd` runs a private daemon: its own root, state and socket in a
temporary directory, only the plugins a content fetch needs, so it starts in about a second and
touches nothing of the machine's.  :func:`capture_pulls` pushes small real images with skopeo,
pulls them with ``ctr`` and turns the registry's log of the pulls (only the pulls) into a trace
with ``drtp capture``: a trace of one client whose layer GETs overlap as containerd's did.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from drtp.registry.local import LocalRegistry
from drtp.trace.anonymize import PlainNames
from drtp.trace.capture import capture_files
from drtp.trace.reader import write_ibm
from tests.images import build_image, random_files, skopeo

# plugins a content fetch does not use: without them the daemon needs no snapshotter, runtime or CNI
_DISABLED = [
    "io.containerd.grpc.v1.cri",
    "io.containerd.snapshotter.v1.aufs",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.internal.v1.opt",
    "io.containerd.tracing.processor.v1.otlp",
]
START_TIMEOUT_S = 30.0
FETCH_TIMEOUT_S = 120.0


def available() -> bool:
    """Whether containerd and ctr are installed (scripts/install.sh installs them)."""
    return shutil.which("containerd") is not None and shutil.which("ctr") is not None


class Containerd:
    """A private containerd daemon in ``workdir``; ``fetch`` pulls an image's content over plain HTTP."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.socket = workdir / "containerd.sock"
        self.log_path = workdir / "containerd.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Containerd:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "config.toml"
        config.write_text(
            "version = 2\n"
            f'root = "{self.workdir / "root"}"\n'
            f'state = "{self.workdir / "state"}"\n'
            f"disabled_plugins = {json.dumps(_DISABLED)}\n"
            "[grpc]\n"
            f'  address = "{self.socket}"\n'
            "[ttrpc]\n"
            f'  address = "{self.workdir / "ttrpc.sock"}"\n'
        )
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["containerd", "--config", str(config)], stdout=log, stderr=log, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"containerd exited with {self.proc.returncode}; see {self.log_path}")
            if self.socket.exists() and self._ctr("version", timeout=10).returncode == 0:
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"containerd did not answer within {START_TIMEOUT_S:g} s; see {self.log_path}")

    def _ctr(self, *args: str, timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ctr", "--address", str(self.socket), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def fetch(self, ref: str) -> None:
        """``ctr content fetch --plain-http REF`` (REF: host:port/name:tag): what a kubelet's pull downloads."""
        out = self._ctr("content", "fetch", "--plain-http", ref, timeout=FETCH_TIMEOUT_S)
        if out.returncode != 0:
            raise RuntimeError(f"ctr content fetch {ref} failed: {out.stderr.strip()[-500:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self) -> Containerd:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@dataclass
class CapturedPulls:
    """containerd's pulls captured as a trace: the trace, the images (``name:tag`` -> build_image's dict) and
    the registry log lines of the pulls (the ground truth the trace was made from)."""

    trace: Path
    images: dict[str, dict]
    log: Path


def push_images(base: Path, host: str, count: int, layers: int = 4, layer_size: int = 300_000) -> dict[str, dict]:
    """Push ``count`` images of ``layers`` random layers each (skopeo) to ``team/app<i>:v1`` on ``host``."""
    images = {}
    for i in range(count):
        parts = [random_files(1, layer_size, seed=100 * i + j) for j in range(layers)]
        image = build_image(base / f"img{i}", parts)
        ref = f"team/app{i}:v1"
        skopeo("copy", "--dest-tls-verify=false", f"dir:{base / f'img{i}'}", f"docker://{host}/{ref}")
        images[ref] = image
    return images


def capture_pulls(base: Path, count: int = 4, layers: int = 4, layer_size: int = 300_000) -> CapturedPulls:
    """Push ``count`` images, pull each with a real containerd, and capture only the pulls as a trace."""
    with LocalRegistry(base / "registry") as reg:
        images = push_images(base, reg.host, count, layers, layer_size)
        pushed_bytes = reg.log_path.stat().st_size
        with Containerd(base / "containerd") as ctrd:
            for ref in images:
                ctrd.fetch(f"{reg.host}/{ref}")
        with open(reg.log_path, "rb") as f:  # the log of the pulls alone: the pushes are not the trace
            f.seek(pushed_bytes)
            pulls = f.read()
        log = base / "pulls.log"
        log.write_bytes(pulls)
        _, records = capture_files([log], PlainNames(), registry_url=reg.url)
        trace = base / "pulls.json"
        write_ibm(trace, records)
    return CapturedPulls(trace, images, log)


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most of these (start, end) spans that were open at one time."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak
