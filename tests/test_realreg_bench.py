"""``drtp bench``: synthetic push/pull/manifest against the real registry (htpasswd + TLS); the rows' layer
counts and sizes match the request, the registry stored what was pushed, and the results are replay-format.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from drtp.cli import main
from drtp.master.commands.bench import Bench, append_dataset
from drtp.master.outputs.results import COLUMNS
from drtp.registry.local import LocalRegistry
from drtp.registry.manifest import CONFIG_DIGEST
from drtp.replay.messages import RegistryAuth
from drtp.trace.reader import TraceReader
from tests.realreg_support import PASSWORD, USER, Pki, write_htpasswd

pytestmark = pytest.mark.registry

SIZES = [300_000, 5_000_000]  # the second is streamed (over 4 MiB)


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench")
    pki = Pki(d / "pki")
    with LocalRegistry(d / "reg", tls=(pki.cert, pki.key), htpasswd=write_htpasswd(d / "htpasswd")) as reg:
        reg.auth = RegistryAuth(reg.url, USER, PASSWORD, pki.ca.read_text())
        reg.ca = pki.ca
        yield reg


def _rows(out):
    df = pd.read_csv(out / "requests.csv", keep_default_na=False, na_values=[""])
    assert tuple(df.columns) == COLUMNS
    return df


@pytest.mark.parametrize("chunk", [0, 2_000_000], ids=["monolithic", "chunked"])
def test_push_sends_the_layers_asked_for(tmp_path, registry, chunk):
    offset = registry.log_path.stat().st_size
    bench = Bench(registry.url, registry.auth, "push", SIZES, layers=3, iterations=4, concurrency=2, chunk=chunk)
    summary = bench.run(tmp_path / "out")
    df = _rows(tmp_path / "out")
    assert df.ok.all(), df[~df.ok].to_string()
    layers = df[(df.method == "HEAD") & (df.reference != CONFIG_DIGEST)]
    assert len(layers) == 3 * 4
    assert sorted(layers["size"]) == sorted([300_000, 5_000_000, 300_000] * 4)
    assert (df[(df.method == "PUT") & (df.kind == "manifest")].status == 201).sum() == 4
    if chunk:  # 300 kB: one PATCH; 5 MB: three of 2 MB
        assert (df.method == "PATCH").sum() == 4 * (1 + 3 + 1)
        assert df[df.method == "PATCH"].bytes.sum() == 4 * sum([300_000, 5_000_000, 300_000])
    else:
        puts = df[(df.method == "PUT") & (df.kind == "blob") & (df.reference != CONFIG_DIGEST)]
        assert sorted(puts.bytes) == sorted([300_000, 5_000_000, 300_000] * 4)
    assert summary["requests"] == len(df) and summary["failed"] == 0
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["mode"] == "bench-push"
    # the registry's own log saw the manifests pushed, authenticated (no 401 left unanswered)
    with open(registry.log_path, "rb") as f:
        f.seek(offset)
        (tmp_path / "reg.log").write_bytes(f.read())
    logged = [r for r in TraceReader([tmp_path / "reg.log"], fmt="registry-log") if r.status < 400]
    assert sum(1 for r in logged if r.method == "PUT" and r.kind == "manifest") == 4


def test_pull_and_manifest_modes(tmp_path, registry):
    pull = Bench(registry.url, registry.auth, "pull", [200_000], layers=2, iterations=3, concurrency=3)
    pull.run(tmp_path / "pull")
    df = _rows(tmp_path / "pull")
    assert df.ok.all()
    gets = df[(df.method == "GET") & (df.kind == "blob")]
    assert len(gets) == 6 and (gets.bytes == 200_000).all()
    assert ((df.method == "GET") & (df.kind == "manifest")).sum() == 3
    assert set(df.method) == {"GET"}  # the setup pushes are not measured

    man = Bench(registry.url, registry.auth, "manifest", [1000], layers=2, iterations=2)
    man.run(tmp_path / "man")
    df = _rows(tmp_path / "man")
    assert df.ok.all() and sorted(df.method) == ["GET", "GET", "HEAD", "HEAD", "PUT", "PUT"]


def test_cli_appends_runs_to_one_dataset(tmp_path, registry, monkeypatch, capsys):
    monkeypatch.setenv("DRTP_REGISTRY_PASSWORD", PASSWORD)
    dataset = tmp_path / "dataset.csv"
    for n in (1, 2):
        args = ["bench", "pull", "--registry", registry.url, "--username", USER, "--ca-file", str(registry.ca)]
        args += ["--size", "10KB", "--layers", "2", "--out", str(tmp_path / f"run{n}"), "--append", str(dataset)]
        assert main(args) == 0
    df = pd.read_csv(dataset)
    assert list(df.columns) == ["run", *COLUMNS]
    assert df.groupby("run").size().to_dict() == {"run1": 3, "run2": 3}
    assert PASSWORD not in capsys.readouterr().out
    assert append_dataset(dataset, "again", tmp_path / "run1" / "requests.csv") == 3
