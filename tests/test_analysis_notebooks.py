"""The notebooks in analysis/notebooks/ execute headless (nbclient), so they cannot rot."""

from __future__ import annotations

from pathlib import Path

import pytest

from drtp.generate import GenerateOptions, generate
from drtp.trace import write_ibm
from tests.analysis_fixtures import fabricate_run

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "analysis" / "notebooks"


def run_notebook(name: str, cwd: Path):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    ).execute()
    return nb


def outputs(nb) -> str:
    text = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text.append(out.get("text", "") + str(out.get("data", {}).get("text/plain", "")))
            assert out.get("output_type") != "error", out
    return "\n".join(text)


def images(nb) -> int:
    return sum("image/png" in out.get("data", {}) for c in nb.cells for out in c.get("outputs", []))


def test_trace_notebook_runs(tmp_path, monkeypatch):
    trace = tmp_path / "t.json"
    write_ibm(trace, generate(GenerateOptions(requests=1200, span_s=1800, clients=10, repositories=15)))
    monkeypatch.setenv("DRTP_NB_TRACES", str(trace))
    nb = run_notebook("trace_characterization.ipynb", tmp_path)
    text = outputs(nb)
    assert "top-10 layers: share of GETs" in text and "'t': [" in text
    assert images(nb) >= 14  # 13 figures + the one redrawn from JSON


def test_results_notebook_runs_on_fabricated_runs(tmp_path, monkeypatch):
    a = fabricate_run(tmp_path / "run-a", requests=150, failures={404: 2})
    b = fabricate_run(tmp_path / "run-b", requests=100, seed=4, as_is=False)
    monkeypatch.setenv("DRTP_NB_RUNS", f"{a}:{b}")
    nb = run_notebook("replay_results.ipynb", tmp_path)
    text = outputs(nb)
    assert "run-a" in text and "run-b" in text
    assert images(nb) == 5
