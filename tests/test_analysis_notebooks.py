"""The notebooks in analysis/notebooks/ execute headless (nbclient), so they cannot rot."""

from __future__ import annotations

from pathlib import Path

import pytest

from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.reader import write_ibm

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


@pytest.mark.registry
def test_results_notebook_runs_on_real_runs(real_runs, tmp_path, monkeypatch):
    monkeypatch.setenv("DRTP_NB_RUNS", f"{real_runs.stress}:{real_runs.as_is}")
    monkeypatch.setenv("DRTP_NB_TRACE", str(real_runs.trace))
    nb = run_notebook("replay_results.ipynb", tmp_path)
    text = outputs(nb)
    assert "stress" in text and "as-is" in text and "ibm-trace-data" in text
    assert "never-pushed-0" in text  # the failed rows, as requests.csv holds them
    assert images(nb) == 5
