"""Start-up and ``drtp inspect`` end to end: drtp executables side by side, rounds alternated.

Two parts, each a whole process per measure (interpreter start, imports, the work), so the
figure is what a user waits for:

* ``help`` — ``drtp --help`` of each executable, beside ``python -c pass`` (the floor:
  the interpreter and its site packages, which no change to drtp removes);
* ``inspect`` — ``drtp inspect`` of a generated trace (200k records by default) by each
  executable, beside the original player's method on the same file in a process of its own:
  ``json.load`` + a ``datetime.strptime`` of every timestamp, filtered and sorted
  (``bench_reader.original_method``, which imports nothing but the standard library).

Why alternated: on two shared cores a process's time moves with whatever else runs, so
every round runs each command once, in an order reversed from one round to the next
(A B C, C B A…), and the table gives each command's median and range (min–max) over its
rounds, wall and CPU (user + system of the process), and the ratio of the medians to
the first row.  The load average before and after is printed with the table.

Usage: python bench/bench_startup.py [--drtp PATH ...] [--rounds 20] [--part help inspect]
       [--requests 200000] [--trace FILE] [--json]
(``--drtp`` defaults to the ``drtp`` beside this Python; give two, e.g. the previous main's
and this checkout's, to compare them.)
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_reader import original_method  # noqa: E402  (a script beside this one)

ORIGINAL = (
    "import datetime as dt, json, sys\nfrom pathlib import Path\n\n"
    + inspect.getsource(original_method)
    + "\noriginal_method(Path(sys.argv[1]))\n"
)


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one run of ``argv``; its output is discarded, its failure raised."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def alternated(commands: dict[str, list[str]], rounds: int) -> list[dict]:
    """Each command once per round, the order reversed every other round; a row of figures per command."""
    names = list(commands)
    walls: dict[str, list[float]] = {n: [] for n in names}
    cpus: dict[str, list[float]] = {n: [] for n in names}
    for name in names:  # one unmeasured run each: page cache and bytecode caches warm for all alike
        timed(commands[name])
    for k in range(rounds):
        for name in names if k % 2 == 0 else reversed(names):
            wall, cpu = timed(commands[name])
            walls[name].append(wall)
            cpus[name].append(cpu)
    base = statistics.median(walls[names[0]])
    return [
        {
            "command": name,
            "wall_median_ms": statistics.median(walls[name]) * 1e3,
            "wall_min_ms": min(walls[name]) * 1e3,
            "wall_max_ms": max(walls[name]) * 1e3,
            "cpu_median_ms": statistics.median(cpus[name]) * 1e3,
            "vs_first": base / statistics.median(walls[name]),
        }
        for name in names
    ]


def print_table(title: str, rows: list[dict], rounds: int) -> None:
    print(f"{title} ({rounds} alternated rounds; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
    print(f"{'command':<58} {'wall median':>11} {'wall range':>17} {'cpu median':>10} {'1st ÷ this':>10}")
    for r in rows:
        spread = f"{r['wall_min_ms']:.0f}–{r['wall_max_ms']:.0f} ms"
        print(
            f"{r['command']:<58} {r['wall_median_ms']:>8.0f} ms {spread:>17} {r['cpu_median_ms']:>7.0f} ms "
            f"{r['vs_first']:>9.2f}x"
        )
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drtp", nargs="+", default=[str(Path(sys.executable).with_name("drtp"))], metavar="PATH")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--part", nargs="+", choices=("help", "inspect"), default=["help", "inspect"])
    ap.add_argument("--requests", type=int, default=200_000, help="records of the generated trace (inspect)")
    ap.add_argument("--trace", type=Path, help="inspect this trace instead of generating one")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = ap.parse_args()

    tables = {}
    if "help" in args.part:
        commands = {"python -c pass (floor)": [sys.executable, "-c", "pass"]}
        commands |= {f"{exe} --help": [exe, "--help"] for exe in args.drtp}
        tables["help"] = alternated(commands, args.rounds)
        print_table("drtp --help", tables["help"], args.rounds)
    if "inspect" in args.part:
        with tempfile.TemporaryDirectory() as tmp:
            trace = args.trace or Path(tmp) / "trace.json"
            if not args.trace:
                gen = [args.drtp[-1], "generate", "-o", str(trace), "-n", str(args.requests)]
                subprocess.run(gen, check=True, stdout=subprocess.DEVNULL)
            commands = {"original: json.load + strptime (own process)": [sys.executable, "-c", ORIGINAL, str(trace)]}
            commands |= {f"{exe} inspect": [exe, "inspect", str(trace)] for exe in args.drtp}
            tables["inspect"] = alternated(commands, args.rounds)
            size = trace.stat().st_size / 1e6
        what = args.trace.name if args.trace else f"{args.requests:,} generated records"
        print_table(f"drtp inspect of {what} ({size:.0f} MB)", tables["inspect"], args.rounds)
    if args.json:
        print(json.dumps(tables, indent=2))


if __name__ == "__main__":
    main()
