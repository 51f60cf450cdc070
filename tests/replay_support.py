"""Shared helpers of the replay tests: a generated trace, client nodes as real processes, configs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import yaml

from drtp.config import load_config
from drtp.master.run.nodes import NodeLink
from drtp.registry.local import free_port
from drtp.replay.messages import ReplayRequest
from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.reader import TraceReader, write_ibm

TOKEN = "test-secret-0123456789"
DIGEST = "sha256:" + "ab" * 32


def blob_get(seq: int = 0, **over) -> ReplayRequest:
    """A valid replay request (a blob GET of ``registry``, 127.0.0.1:5000 unless given); keywords override any field."""
    fields = dict(
        seq=seq,
        trace_id=f"t{seq}",
        client="c1",
        method="GET",
        kind="blob",
        op="get",
        registry="127.0.0.1:5000",
        repository="library/alpine",
        reference="layer0",
        size=10,
        expected_status=200,
        digest=DIGEST,
    )
    fields.update(over)
    return ReplayRequest(**fields)


def make_trace(path: Path, requests: int = 300, seed: int = 7, span: float = 30.0) -> Path:
    opts = GenerateOptions(
        requests=requests, seed=seed, span_s=span, clients=20, repositories=12, max_layer_size=64_000
    )
    write_ibm(path, generate(opts))
    return path


def many_tags_trace(path: Path, requests: int = 300, seed: int = 1) -> Path:
    """The last ``requests`` records of a generated trace ten times longer over six repositories, with
    many pushes and pulls of older images: the images pushed before the window are pulled in it, so
    warmup pushes many tags into each repository (the case where its manifest PUTs of one repository
    run at once)."""
    opts = GenerateOptions(
        requests=10 * requests,
        seed=seed,
        span_s=600,
        repositories=6,
        clients=20,
        push_ratio=0.3,
        old_image_rate=0.8,
        max_layer_size=64_000,
    )
    write_ibm(path, list(generate(opts))[-requests:])
    return path


class Node:
    """``drtp client`` as a subprocess on a free loopback port."""

    def __init__(self, workdir: Path, token: str = TOKEN, token_file: Path | None = None) -> None:
        """``token_file``: the node reads the secret from that file (``$DRTP_TOKEN`` is not set then)."""
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log = workdir / f"node-{self.port}.log"
        env = dict(os.environ, DRTP_TOKEN=token)
        args = [sys.executable, "-m", "drtp.cli", "client", "--port", str(self.port)]
        if token_file is not None:
            env.pop("DRTP_TOKEN")
            args += ["--token-file", str(token_file)]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                args,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        deadline = time.monotonic() + 20
        while True:
            try:
                NodeLink(self.address, token, None).check()
                return
            except Exception:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"client node did not start: {self.log.read_text()[-2000:]}") from None
                time.sleep(0.1)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        terminate(self.proc)


def terminate(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """Stop a process the tests started: SIGTERM, then SIGKILL if it is still there after ``grace_s``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def write_config(workdir: Path, trace: Path, registries: list[str], nodes: list[str], **client_info):
    ci = {"client_list": nodes, "threads": 8, "token": TOKEN, "batch": 50, "inflight": 200}
    ci.update(client_info)
    cfg = {
        "trace": {"location": str(trace.parent), "traces": [trace.name]},
        "registry": registries,
        "client_info": ci,
        "warmup": {"output": str(workdir / "warmup-map.jsonl"), "threads": 4},
        "results": str(workdir / "results"),
    }
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return load_config(path)


def log_tail(log_path: Path, offset: int, out: Path) -> list:
    """The registry's requests logged after byte ``offset``, as trace records."""
    time.sleep(0.3)  # the registry logs a request just after answering it
    with open(log_path, "rb") as f:
        f.seek(offset)
        out.write_bytes(f.read())
    return list(TraceReader([out], fmt="registry-log"))


def method_kind_counts(records) -> Counter:
    return Counter((r.method, r.kind) for r in records)
