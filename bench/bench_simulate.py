"""Simulation speed: drtp's lru and two-level beside libCacheSim's LRU on the same trace, in the same run.

A generated trace (1M requests by default) is read and converted once into
compact arrays; then each policy runs over its GET layer requests at the same
capacities.  Rates are given per GET layer request (what the cache sees) and
per trace request (the trace's length over the time taken).  The ratio column
compares with libCacheSim's LRU (fed request by request through its Python
binding, as drtp does to know each request's outcome); libCacheSim's own C
loop over a CSV of the same requests is shown too.  Last, the
5-size × 3-multiplier two-level sweep of the IBM Cloud registry workload study
(Anwar et al., FAST '18) is timed with 2 worker processes.

    python bench/bench_simulate.py [--requests 1000000] [--trace FILE] [--jobs 2] [--out bench/out/simulate.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from drtp.plugins.base import find_plugin, parse_plugin_args
from drtp.plugins.policies import LRU, LibCacheSim, TwoLevel
from drtp.plugins.sweep import run_sweep
from drtp.trace.columns import TraceColumns
from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.reader import TraceReader, write_ibm


def best_time(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def libcachesim_c_loop(ids: np.ndarray, sizes: np.ndarray, capacity: int, csv: Path) -> tuple[float, float]:
    """libCacheSim's LRU in its own C loop (process_trace) over a CSV of the same requests: (seconds, hit ratio).

    Only the aggregate miss ratio comes back, so drtp cannot use this path (it needs each request's
    outcome for the warm-up and per-level counts); it is here as the fastest baseline."""
    import libcachesim as lcs

    if not csv.exists():
        np.savetxt(csv, np.column_stack([np.arange(len(ids)), ids + 1, sizes[ids]]), fmt="%d", delimiter=",")
    params = lcs.ReaderInitParam(
        has_header=False, has_header_set=True, ignore_size_zero_req=False, obj_id_is_num=True, obj_id_is_num_set=True
    )
    params.time_field, params.obj_id_field, params.obj_size_field = 1, 2, 3
    reader = lcs.TraceReader(str(csv), lcs.TraceType.CSV_TRACE, params)
    cache = lcs.LRU(cache_size=capacity)
    t0 = time.perf_counter()
    miss_ratio, _ = cache.process_trace(reader)
    return time.perf_counter() - t0, 1.0 - miss_ratio


def measure(path: Path, repeat: int = 3, pcts: tuple = (2, 10), jobs: int = 2, sweep: bool = True, log=print) -> dict:
    """Time the policies on the trace at ``path``; {requests, layer_requests, read_s, load_s, rows, sweep_*}."""
    t0 = time.perf_counter()
    records = sum(len(b) for b in TraceReader([path]).batches())
    read_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    trace = TraceColumns.from_batches(TraceReader([path]).batches())
    load_s = time.perf_counter() - t0

    csv_dir = tempfile.TemporaryDirectory()
    n = len(trace)
    gets = trace.layer_gets()
    sizes = trace.object_sizes(gets).tolist()
    ids = trace.obj[gets].tolist()
    ingress = trace.ingress_bytes()
    log(f"trace: {n:,} requests, {len(gets):,} GET layer requests, {len(set(ids)):,} layers, ingress {ingress:,} B")
    log(f"read (TraceReader) {read_s:.2f} s = {records / read_s:,.0f} req/s; read + compact {load_s:.2f} s")
    log()

    rows = []
    for pct in pcts:
        cap = max(1, int(ingress * pct / 100))
        policies = {
            "libcachesim LRU (baseline)": lambda cap=cap: LibCacheSim("LRU", cap),
            "drtp lru": lambda cap=cap: LRU(cap),
            "drtp two-level (SSD 10x)": lambda cap=cap: TwoLevel(cap, cap * 10, 100 << 20),
        }
        secs = min(
            libcachesim_c_loop(np.asarray(ids), np.asarray(sizes), cap, Path(csv_dir.name) / "lcs.csv")[0]
            for _ in range(repeat)
        )
        _, c_ratio = libcachesim_c_loop(np.asarray(ids), np.asarray(sizes), cap, Path(csv_dir.name) / "lcs.csv")
        c_row = {
            "policy": "libcachesim LRU, C loop from CSV",
            "capacity": f"{pct}% ingress",
            "seconds": secs,
            "layer_req_per_s": len(ids) / secs,
            "trace_req_per_s": n / secs,
            "hit_ratio": c_ratio,
        }
        base_rate = None
        for name, make in policies.items():
            secs, out = best_time(lambda make=make: make().run(ids, sizes), repeat)
            rate = len(ids) / secs
            base_rate = base_rate or rate
            rows.append(
                {
                    "policy": name,
                    "capacity": f"{pct}% ingress",
                    "seconds": secs,
                    "layer_req_per_s": rate,
                    "trace_req_per_s": n / secs,
                    "hit_ratio": float((out.level > 0).mean()),
                    "vs_libcachesim": rate / base_rate,
                }
            )
        c_row["vs_libcachesim"] = c_row["layer_req_per_s"] / base_rate
        rows.append(c_row)
        # the whole plugin (selection, interning, per-level tables) on the compact trace
        for plugin_name, args in (("lru", {"capacity": f"{pct}%"}), ("two-level", {"capacity": f"{pct}%"})):
            cls = find_plugin(plugin_name)
            plugin = cls(parse_plugin_args(cls, args))
            secs, result = best_time(lambda plugin=plugin: plugin.run(trace), repeat)
            rows.append(
                {
                    "policy": f"plugin {plugin_name} (incl. tables)",
                    "capacity": f"{pct}% ingress",
                    "seconds": secs,
                    "layer_req_per_s": len(ids) / secs,
                    "trace_req_per_s": n / secs,
                    "hit_ratio": result.summary["hit_ratio"],
                    "vs_libcachesim": len(ids) / secs / base_rate,
                }
            )
    csv_dir.cleanup()
    out = {"requests": n, "layer_requests": len(gets), "read_s": read_s, "load_s": load_s, "rows": rows}
    if sweep:
        sweep_args = {"capacity": ["2%", "4%", "6%", "8%", "10%"], "ssd_multiplier": [10, 15, 20], "per_server": True}
        t0 = time.perf_counter()
        table = run_sweep(find_plugin("two-level"), sweep_args, trace, jobs=jobs)
        out.update({"sweep_points": len(table), "sweep_jobs": jobs, "sweep_s": time.perf_counter() - t0})
    return out


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM).  Not ru_maxrss: Linux carries that over fork and exec,
    so a child started from a large parent reports the parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def rss_child(path: str) -> None:
    """``drtp simulate``'s path (read + compact, then the lru plugin) over a trace; print peak RSS (MB) as JSON."""

    start = time.perf_counter()
    trace = TraceColumns.from_batches(TraceReader([path]).batches())
    cls = find_plugin("lru")
    cls(parse_plugin_args(cls, {"capacity": "10%"})).run(trace)
    rss_mb = peak_rss_mb()
    n = len(trace)
    print(json.dumps({"requests": n, "peak_rss_mb": rss_mb, "rate": n / (time.perf_counter() - start)}))


def rss_of(path: Path) -> dict:
    """:func:`rss_child` in a fresh process: {requests, peak_rss_mb, rate}."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, __file__, "--rss-child", str(path)], check=True, capture_output=True, text=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--trace", help="an existing trace file instead of generating one")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="bench/out/simulate.json")
    ap.add_argument("--rss-child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rss_child:
        rss_child(a.rss_child)
        return

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(a.trace) if a.trace else Path(tmp) / "trace.json"
        if not a.trace:
            t0 = time.perf_counter()
            write_ibm(path, generate(GenerateOptions(requests=a.requests, seed=a.seed, span_s=7 * 86400)))
            print(f"generated {a.requests:,} requests in {time.perf_counter() - t0:.1f} s")
        out = measure(path, a.repeat, jobs=a.jobs)
    rows = out["rows"]

    header = f"{'policy':<34} {'capacity':<13} {'seconds':>8} {'layer req/s':>13} {'trace req/s':>13}"
    header += f" {'hit ratio':>9} {'ratio':>6}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['policy']:<34} {r['capacity']:<13} {r['seconds']:>8.3f} {r['layer_req_per_s']:>13,.0f} "
            f"{r['trace_req_per_s']:>13,.0f} {r['hit_ratio']:>9.4f} {r['vs_libcachesim']:>5.2f}x"
        )
    print()
    print(f"two-level sweep 5 sizes x 3 SSD multipliers, per server, {a.jobs} processes: {out['sweep_s']:.2f} s")
    print(
        f"  (+ {out['load_s']:.2f} s to read and compact the trace once: "
        f"{out['sweep_s'] + out['load_s']:.2f} s end to end)"
    )
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
