"""Shared fixtures: small trace files and a real local registry."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from drtp.registry.local import LocalRegistry
from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.reader import write_ibm


def ibm_record(i: int = 0, **over) -> dict:
    """A valid IBM-format record; keyword arguments override fields by their trace names."""
    rec = {
        "host": "579633fd",
        "http.request.duration": 0.25,
        "http.request.method": "GET",
        "http.request.remoteaddr": f"client{i % 3}",
        "http.request.uri": f"v2/user{i % 2}/repo{i % 4}/blobs/layer{i}",
        "http.request.useragent": "docker/17.04.0-ce go/go1.7.5",
        "http.response.status": 200,
        "http.response.written": 1000 + i,
        "id": f"id{i}",
        "timestamp": f"2017-07-01T01:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}Z",
    }
    rec.update(over)
    return rec


# One "response completed" line of Distribution's JSON access log (the keys drtp capture reads): a manifest GET.
REGISTRY_LOG_LINE = {
    "msg": "response completed",
    "time": "2024-01-01T00:00:01.5Z",
    "http.request.method": "GET",
    "http.request.uri": "/v2/library/alpine/manifests/latest",
    "http.request.remoteaddr": "10.0.0.1:5000",
    "http.request.host": "registry",
    "http.request.id": "r1",
    "http.response.status": 200,
    "http.response.written": 10,
    "http.response.duration": "1.5ms",
}


def registry_log_line(**over) -> str:
    """:data:`REGISTRY_LOG_LINE` as JSON text; keyword arguments override keys."""
    return json.dumps({**REGISTRY_LOG_LINE, **over})


def write_json(path: Path, records: list) -> Path:
    path.write_text(json.dumps(records, indent=1))
    return path


@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    return write_json(tmp_path / "small.json", [ibm_record(i) for i in range(50)])


@pytest.fixture(scope="session")
def generated_trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gen") / "gen.json"
    write_ibm(path, generate(GenerateOptions(requests=5000, seed=7, span_s=3600)))
    return path


@pytest.fixture
def registry(tmp_path: Path):
    with LocalRegistry(tmp_path / "registry") as reg:
        yield reg


@pytest.fixture(scope="session")
def real_runs(tmp_path_factory):
    """Two run directories of a real replay (stress and as is) with some real failures: tests/real_runs.py."""
    from tests.real_runs import replay_runs

    return replay_runs(tmp_path_factory.mktemp("real-runs"))


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """Two client nodes (``drtp client`` processes) shared by one test module."""
    from tests.replay_support import Node

    workdir = tmp_path_factory.mktemp("nodes")
    started = [Node(workdir), Node(workdir)]
    yield started
    for n in started:
        n.stop()


def pytest_configure(config) -> None:
    """The hostile-input corpus can be run alone: ``pytest -m hostile``."""
    config.addinivalue_line(
        "markers",
        "hostile: every command against the hostile-input corpus (tests/hostile_cases.py)",
    )


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on a read-only tmpfs: root passes every permission check, a read-only file system does not.

    Skips where this machine does not allow mounting one.
    """
    ro = tmp_path / "ro"
    ro.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only file system here: {mounted.stderr.decode().strip()}")
    try:
        yield ro
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            subprocess.run(["umount", str(ro)], check=True)


@contextlib.contextmanager
def hang_guard(seconds: int) -> Iterator[None]:
    """Fail the test instead of hanging the suite when the block runs ``seconds`` (SIGALRM: main thread only).

    The bound is far above what the block takes: it turns a hang into a failure, it does not time anything.
    """

    def alarm(signum, frame):
        raise AssertionError(f"no answer within {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
