"""Shared fixtures: small trace files and a real local registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drtp.generate import GenerateOptions, generate
from drtp.registry import LocalRegistry
from drtp.trace import write_ibm


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
