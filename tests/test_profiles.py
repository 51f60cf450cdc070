"""Round trip per workload profile: generate a trace, `drtp analyze trace` it, meet the profile's targets."""

from __future__ import annotations

import json

import pytest

from drtp.cli import main
from drtp.trace.generate import generate
from drtp.trace.profiles import builtin_profiles, load_profile, options_for
from drtp.trace.reader import write_ibm

N = 20_000  # the trace length the targets are stated for (configs/profiles/*.yaml)


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    base = tmp_path_factory.mktemp("profiles")
    names = builtin_profiles()
    files = []
    for name in names:
        path = base / f"{name}.json"
        write_ibm(path, generate(options_for(load_profile(name), N, seed=1)))
        files.append(str(path))
    out = base / "analysis"
    assert main(["analyze", "trace", *files, "--label", *names, "--out", str(out)]) == 0
    return json.loads((out / "characterization.json").read_text()), out


@pytest.mark.parametrize("name", builtin_profiles())
def test_profile_reproduces_its_targets(analyzed, name):
    characterization, _ = analyzed
    rows = characterization[name]["targets"]
    assert {r["target"] for r in rows} == set(load_profile(name)["targets"])
    missed = [
        f"{r['target']}: {r['measured']:.3f} not in [{r['low']:.3g}, {r['high']:.3g}]" for r in rows if not r["within"]
    ]
    assert not missed, missed
    assert characterization[name]["request_types"]["requests"] == N


def test_targets_table_is_written(analyzed):
    _, out = analyzed
    table = (out / "targets.csv").read_text()
    for name in builtin_profiles():
        assert name in table
