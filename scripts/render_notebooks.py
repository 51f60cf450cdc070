"""Render the notebooks in analysis/notebooks/ with outputs from a real ``drtp demo`` run, in place.

The notebooks are committed with their outputs, so a reader sees tables and
figures without running anything.  This makes those outputs: a demo run (a
generated trace replayed against a real Distribution registry on loopback),
then both notebooks executed headless (nbclient) against it, from a working
directory where the run is ``results/demo`` and the trace ``demo/trace.json``
(the paths the outputs show).  PNG outputs are re-encoded with a small palette.
Run it again whenever a notebook, a figure or the run's files change:

    .venv/bin/python scripts/render_notebooks.py
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbclient
import nbformat
from PIL import Image

NOTEBOOKS = Path(__file__).resolve().parent.parent / "analysis" / "notebooks"
DEMO = Path("demo")  # `drtp demo --out` (its trace.json), relative to the working directory the notebooks run in
RUN = Path("results") / "demo"  # the demo's run directory, moved here so the notebooks label it "demo"
PNG_COLORS = 16  # figures are lines, bars and a few fills: a 16-colour palette keeps them sharp at a third of the size


def execute(path: Path, cwd: Path, timeout_s: int = 300) -> nbformat.NotebookNode:
    """The notebook at ``path`` executed from a clean state: every output it holds is made by this run."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    client = nbclient.NotebookClient(
        nb, timeout=timeout_s, kernel_name="python3", record_timing=False, resources={"metadata": {"path": str(cwd)}}
    )
    client.execute()
    nb.metadata.pop("widgets", None)
    return nb


def shrink_images(nb: nbformat.NotebookNode) -> None:
    """Every PNG output re-encoded with a small palette, so the committed notebooks stay a few hundred kB."""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/png" in data:
                image = Image.open(io.BytesIO(base64.b64decode(data["image/png"]))).convert("RGB")
                buf = io.BytesIO()
                image.quantize(colors=PNG_COLORS, method=Image.Quantize.MEDIANCUT).save(buf, "PNG", optimize=True)
                data["image/png"] = base64.b64encode(buf.getvalue()).decode("ascii")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="the demo trace's length (default 2000)")
    parser.add_argument("--workdir", type=Path, help="where the demo run goes (default: a temporary directory)")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="drtp-notebooks-"))
    demo = subprocess.run(
        [sys.executable, "-m", "drtp.cli", "demo", "--out", str(workdir / DEMO), "--requests", str(args.requests)],
        capture_output=True,
        text=True,
    )
    if demo.returncode:
        sys.exit(f"drtp demo failed (exit {demo.returncode}): {demo.stderr.strip()[-2000:]}")
    (workdir / RUN).parent.mkdir(parents=True, exist_ok=True)
    shutil.move(workdir / DEMO / "run", workdir / RUN)
    os.environ["DRTP_NB_RUNS"] = str(RUN)
    os.environ["DRTP_NB_TRACE"] = os.environ["DRTP_NB_TRACES"] = str(DEMO / "trace.json")
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = execute(path, workdir)
        shrink_images(nb)
        nbformat.write(nb, path)
        print(f"{path.relative_to(NOTEBOOKS.parent.parent)}: {path.stat().st_size / 1000:,.0f} kB")
    print(f"demo run in {workdir / RUN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
