"""``drtp selfbench``: drtp's own speed beside its baselines, in one table.

The benchmarks live in the source checkout's ``bench/`` folder (they are scripts
people also run alone); this command finds that folder next to the package,
imports ``bench/suite.py`` and runs it at the chosen size.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

from drtp.errors import DrtpError
from drtp.outputs import prepare_output_dir

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
PARTS = ("ingest", "replay", "simulate", "scale", "analyze", "faults", "fidelity", "prodreg", "master")


def load_suite(bench_dir: Path = BENCH_DIR) -> ModuleType:
    """Import ``bench/suite.py`` from the checkout (it is not part of the installed package)."""
    path = bench_dir / "suite.py"
    if not path.is_file():
        raise DrtpError(f"{path}: not found; `drtp selfbench` runs from a source checkout with its bench/ folder")
    spec = importlib.util.spec_from_file_location("drtp_bench_suite", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def cmd_selfbench(args: argparse.Namespace) -> int:
    parts = tuple(args.only or PARTS)
    if {"replay", "prodreg"} & set(parts) and not shutil.which("wrk"):
        raise DrtpError("wrk is not installed (apt-get install -y wrk); or leave out the replay rows with --only")
    if "fidelity" in parts and not shutil.which("skopeo"):
        raise DrtpError("skopeo is not installed (apt-get install -y skopeo); or leave out the fidelity rows (--only)")
    out = Path(args.out) if args.out else BENCH_DIR / "out"
    prepare_output_dir(out, "--out")
    suite = load_suite()
    doc = suite.run_suite(args.size, out, parts, log=print if not args.quiet else (lambda *a, **k: None))
    print(suite.format_table(doc))
    print(f"wrote {out / f'selfbench-{args.size}.csv'} and {out / f'selfbench-{args.size}.json'}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "selfbench",
        help="benchmark drtp itself beside its baselines (reader, replay vs wrk, timing, simulation, memory, analysis)",
        description="Run bench/ at a size preset on this machine (starts a loopback registry and client nodes) "
        "and print one table of drtp ÷ baseline ratios; also written as CSV and JSON.",
    )
    p.add_argument(
        "--size",
        choices=("tiny", "small", "full"),
        default="small",
        help="tiny: seconds (smoke test); small: a few minutes; full: the sizes targets are judged at (1M records)",
    )
    p.add_argument("--out", help="directory for selfbench-<size>.csv/.json (default bench/out)")
    p.add_argument("--only", nargs="+", choices=PARTS, help="run only these parts")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_selfbench)
