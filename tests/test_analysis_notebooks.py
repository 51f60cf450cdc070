"""The notebooks in analysis/notebooks/ execute headless (nbclient), so they cannot rot.

Each is executed from a clean state (every committed output removed first),
so what is checked is what this run of the notebook printed and drew; the
outputs committed with them (scripts/render_notebooks.py, from a demo run)
are checked apart.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.reader import write_ibm

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
from scripts.render_notebooks import execute  # noqa: E402  (needs nbclient: imported after the skip)

NOTEBOOKS = Path(__file__).resolve().parent.parent / "analysis" / "notebooks"
COMMITTED_KB = 700  # both notebooks with their outputs: a reader's clone stays small


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
    nb = execute(NOTEBOOKS / "trace_characterization.ipynb", tmp_path)
    text = outputs(nb)
    assert "top-10 layers: share of GETs" in text and "'t': [" in text
    assert images(nb) >= 14  # 13 figures + the one redrawn from JSON


@pytest.mark.registry
def test_results_notebook_runs_on_real_runs(real_runs, tmp_path, monkeypatch):
    monkeypatch.setenv("DRTP_NB_RUNS", f"{real_runs.stress}:{real_runs.as_is}")
    monkeypatch.setenv("DRTP_NB_TRACE", str(real_runs.trace))
    nb = execute(NOTEBOOKS / "replay_results.ipynb", tmp_path)
    text = outputs(nb)
    assert "Runs(stress, as-is)" in text and "ibm-trace-data" in text
    assert "latency_p99_ms" in text and "latency_ms" in text
    assert f"failed trace requests: {2 * real_runs.missing_tags}" in text  # both runs' 404s, from the rows
    assert "failed helper requests: 0" in text
    assert "never-pushed-0" in text  # the failed rows, as requests.csv holds them
    assert "stress: " in text and "intervals" in text  # the per-interval stats of each run
    assert images(nb) == 6  # the stats history, then the five figures of `drtp analyze results`


@pytest.mark.parametrize("name", ["replay_results.ipynb", "trace_characterization.ipynb"])
def test_committed_notebooks_hold_the_outputs_of_one_clean_run(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))  # top to bottom, in one kernel
    text = outputs(nb)
    assert images(nb) >= (6 if name.startswith("replay") else 14)
    if name.startswith("replay"):
        assert "['results/demo']" in text and "Runs(demo)" in text and "ibm-trace-data" in text


def test_committed_notebooks_stay_small():
    sizes = {p.name: p.stat().st_size for p in NOTEBOOKS.glob("*.ipynb")}
    assert sum(sizes.values()) < COMMITTED_KB * 1000, sizes
    for path in NOTEBOOKS.glob("*.ipynb"):
        json.loads(path.read_text(encoding="utf-8"))  # valid JSON, as nbformat writes it
