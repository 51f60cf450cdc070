"""The original trace player's cache and prefetch plugins beside drtp's, on the same generated trace.

Give the paths of the original plugin files (``cache.py``, ``prefetch.py`` of a
checkout of github.com/chalianwar/docker-performance).  Each is run through
drtp's original-contract plugin path (:mod:`drtp.plugins.legacy`, as
``drtp simulate`` with ``simulate.name: path/to/cache.py`` runs it); the files
are Python 2, so their ``print`` statements are turned into calls in a
temporary copy first (nothing else is changed).  Beside each, drtp's plugin
with ``compat: original`` (which must give the same numbers) and with its
default, the published study's design.  Prints one table per plugin (the
tables of docs/simulate.md).

    python bench/bench_original_plugins.py ORIG/cache.py ORIG/prefetch.py [--requests 50000] [--seed 1]
        [--span 1d] [--cache-gib 0.05 0.1 0.3] [--trace FILE]

Without ``--trace`` the trace is what ``drtp generate -o trace.json -n 50000 --seed 1 --span 1d`` writes.
The original prefetch plugin is slow (it runs 16 copies, each quadratic in the
pushes per repository): about a minute at 50,000 requests.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from drtp.plugins.base import find_plugin, parse_plugin_args
from drtp.plugins.legacy import legacy_requests, load_module, run_legacy
from drtp.trace.columns import TraceColumns
from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.reader import TraceReader, write_ibm
from drtp.units import parse_duration

SSD_MULTIPLIERS = (10, 15, 20)  # the three SSD sizes the original cache plugin simulates at once
_PRINT_STATEMENT = re.compile(r"^(\s*)print (.*)$", re.M)


def load_original(path: Path, tmp: Path) -> ModuleType:
    """The plugin file as Python 3: its print statements made calls, in a copy under ``tmp``."""
    copy = tmp / path.name
    copy.write_text(_PRINT_STATEMENT.sub(r"\1print(\2)", path.read_text()))
    return load_module(copy)


def run_plugin(name: str, trace: TraceColumns, **args) -> dict:
    cls = find_plugin(name)
    return cls(parse_plugin_args(cls, args)).run(trace).summary


def ratio(hits: int, misses: int) -> float | None:
    return hits / (hits + misses) if hits + misses else None


def cache_rows(module: ModuleType, path: Path, trace_path: Path, trace: TraceColumns, gib: float) -> list[dict]:
    """One row per SSD multiplier: the original's four counts, compat's, and drtp's default ratios."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        run_legacy(module, path, TraceReader([trace_path]), {"cache_size": gib})
    counts = {
        m[1]: int(m[2]) for m in re.finditer(r"^0 (\d+ (?:lmu|h) (?:hits|misses)): (\d+)$", printed.getvalue(), re.M)
    }
    capacity = int(gib * 2**30)  # the original's cache_size is in GiB
    rows = []
    for mult in SSD_MULTIPLIERS:
        original = {
            k: counts[f"{mult} {k.replace('_', ' ')}"] for k in ("lmu_hits", "lmu_misses", "h_hits", "h_misses")
        }
        compat = run_plugin("two-level", trace, capacity=capacity, ssd_multiplier=mult, compat="original")
        default = run_plugin("two-level", trace, capacity=capacity, ssd_multiplier=mult)
        rows.append(
            {
                "memory": f"{gib:g} GiB",
                "ssd": f"{mult}x",
                "original": original,
                "compat": {k: compat[k] for k in original},
                "default": default,
                "requests": (compat["requests"], default["requests"]),
            }
        )
    return rows


def prefetch_rows(module: ModuleType, path: Path, trace_path: Path, trace: TraceColumns, tmp: Path) -> dict:
    """The original's counts (one prefetch_cache over its request list: without timeouts all 16 it runs agree),
    the lines its init writes, compat's and drtp's default summaries."""
    outfile = tmp / "prefetch_out.csv"
    with contextlib.redirect_stdout(io.StringIO()):
        run_legacy(module, path, TraceReader([trace_path]), {"outfile": str(outfile)})
        requests = legacy_requests(r for batch in TraceReader([trace_path]).batches() for r in batch)
        single = module.prefetch_cache()
        for request in module.extract(requests):
            single.put(request)
        single.flush()
    written = {line for line in outfile.read_text().splitlines() if line}
    return {
        "original": single.get_info(),
        "written": written,
        "compat": run_plugin("prefetch", trace, compat="original"),
        "default": {t: run_plugin("prefetch", trace, lm_thresh=t, ml_thresh=t) for t in ("1h", "1d")},
    }


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def print_cache(rows: list[dict]) -> None:
    print("two-level cache: memory hit ratio after the memory's first eviction (the original's lmu) and")
    print("combined hit ratio after the SSD's first eviction (h); drtp default: both after the first eviction")
    print(
        "| memory | SSD | original lmu | compat lmu | default memory | original h | compat h | default combined "
        "| equal |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        o, c, d = r["original"], r["compat"], r["default"]
        print(
            f"| {r['memory']} | {r['ssd']} | {fmt(ratio(o['lmu_hits'], o['lmu_misses']))} "
            f"({o['lmu_hits']:,}/{o['lmu_misses']:,}) | {fmt(ratio(c['lmu_hits'], c['lmu_misses']))} "
            f"({c['lmu_hits']:,}/{c['lmu_misses']:,}) | {fmt(d['hit_ratio_memory_warm'])} "
            f"| {fmt(ratio(o['h_hits'], o['h_misses']))} ({o['h_hits']:,}/{o['h_misses']:,}) "
            f"| {fmt(ratio(c['h_hits'], c['h_misses']))} ({c['h_hits']:,}/{c['h_misses']:,}) "
            f"| {fmt(d['hit_ratio_warm'])} | {'yes' if o == c else 'NO'} |"
        )
    r = rows[0]
    print(
        f"(requests: original/compat {r['requests'][0]:,}, drtp default {r['requests'][1]:,}; hits/misses in brackets)"
    )


def print_prefetch(p: dict) -> None:
    o, c = p["original"], p["compat"]
    d1, dd = p["default"]["1h"], p["default"]["1d"]
    original = {
        "hits": o["hits"],
        "misses": o["misses"],
        "prefetches": o["good prefetch"] + o["bad prefetch"],
        "used": o["good prefetch"],
        "unused": o["bad prefetch"],
        "hits/prefetch": o["hits"] / (o["good prefetch"] + o["bad prefetch"]),
        "max size (B)": o["max size"],
    }

    def drtp(s: dict) -> dict:
        return {
            "hits": s["prefetch_hits"],
            "misses": s.get("misses"),
            "prefetches": s["prefetches"],
            "used": s["used_prefetches"],
            "unused": s["unused_prefetches"],
            "hits/prefetch": s["hits_per_prefetch"],
            "max size (B)": s["peak_memory_bytes"],
        }

    compat = drtp(c)
    print("prefetch (the original: no timeouts, so all 16 of its LM/ML settings give the same line)")
    print("| | original | compat: original | default 1h/1h | default 1d/1d |")
    print("|---|---|---|---|---|")
    for key in original:
        cells = [original[key], compat[key], drtp(d1)[key], drtp(dd)[key]]
        print(
            f"| {key} | "
            + " | ".join("-" if v is None else f"{v:,.4f}" if isinstance(v, float) else f"{v:,}" for v in cells)
            + " |"
        )
    line = f"{original['hits/prefetch']},{original['max size (B)']}"
    same_line = p["written"] == {line}
    print(f"original's output file: {sorted(p['written'])} (16 lines, {'= ' if same_line else 'NOT '}the counts above)")
    print(f"equal: {'yes' if original == compat else 'NO'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plugins", nargs="+", type=Path, help="the original cache.py and/or prefetch.py")
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--span", default="1d")
    ap.add_argument("--cache-gib", type=float, nargs="+", default=[0.05, 0.1, 0.3], help="memory sizes, GiB")
    ap.add_argument("--trace", type=Path, help="an existing trace file instead of generating one")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        trace_path = a.trace
        if trace_path is None:
            trace_path = tmp / "trace.json"
            opts = GenerateOptions(requests=a.requests, seed=a.seed, span_s=parse_duration(a.span))
            write_ibm(trace_path, generate(opts))
            print(f"trace: drtp generate -o trace.json -n {a.requests} --seed {a.seed} --span {a.span}\n")
        trace = TraceColumns.from_batches(TraceReader([trace_path]).batches())
        for path in a.plugins:
            module = load_original(path, tmp)
            if hasattr(module, "complex_cache"):
                print_cache([row for gib in a.cache_gib for row in cache_rows(module, path, trace_path, trace, gib)])
            elif hasattr(module, "prefetch_cache"):
                print_prefetch(prefetch_rows(module, path, trace_path, trace, tmp))
            else:
                sys.exit(f"{path}: neither the original cache plugin (complex_cache) nor its prefetch plugin")
            print()


if __name__ == "__main__":
    main()
