"""``drtp demo`` does the whole job: a real registry, two client nodes, warmup, replay, results."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from drtp.cli import main

pytestmark = pytest.mark.registry


def test_demo_replays_through_two_nodes(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--requests", "200", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    assert "[5/5] replay" in out and "GET manifest" in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    rows = pd.read_csv(tmp_path / "run" / "requests.csv")
    assert summary["requests"] == 200 == int((~rows.auxiliary).sum())
    assert summary["failed"] == 0
    assert len(summary["per_node"]) == 2
