"""Benchmark: ``drtp analyze trace`` on a 1M-record generated trace vs a naive per-record pass.

The baseline is what one writes first: iterate the records (same TraceReader)
and update dicts and lists per record.  It computes a subset of the
characterization (request types, pull ratio, manifest/layer shares,
requests per minute, layer/repository/client top-10, inter-arrival p99,
idle periods, GET manifest → GET layer follow-ups); the columnar path
computes the same subset, the numbers are checked to agree, and then the
whole characterization and the full command (figures and report included)
are timed too.

    python bench/bench_analyze.py [--requests 1000000] [--trace FILE] [--keep]
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections import Counter, defaultdict, deque
from pathlib import Path

import numpy as np

from drtp.analysis import characterize as ch
from drtp.analysis.trace_analysis import analyze_traces
from drtp.analysis.trace_frame import load_trace
from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.parquet import write_parquet
from drtp.trace.reader import TraceReader, write_ibm
from drtp.trace.records import parse_uri

SESSION_S = 60.0


def naive(path: Path) -> dict:
    """The per-record baseline: one Python pass with dicts, then a little arithmetic."""
    methods: Counter[str] = Counter()
    get_m = put_m = 0
    pull = Counter()
    push = Counter()
    minutes: Counter[int] = Counter()
    layers: Counter[str] = Counter()
    repos: Counter[str] = Counter()
    clients: Counter[str] = Counter()
    inter: list[float] = []
    idle = 0
    busy_until = -math.inf
    prev = None
    first = None
    pending: dict[tuple[str, str], deque] = defaultdict(deque)  # (client, repo) → [[time, follow count]]
    follows: list[list] = []
    for r in TraceReader([path]):
        t = r.timestamp.timestamp()
        if first is None:
            first = t
        parts = parse_uri(r.uri)
        methods[r.method] += 1
        repos[parts.repository] += 1
        clients[r.client] += 1
        minutes[int((t - first) // 60)] += 1
        if prev is not None:
            inter.append(t - prev)
            if t > busy_until:
                idle += 1
        prev = t
        busy_until = max(busy_until, t + r.duration)
        if r.method == "GET":
            pull[parts.kind] += 1
            if parts.kind == "manifest":
                get_m += 1
                entry = [t, 0]
                follows.append(entry)
                pending[(r.client, parts.repository)].append(entry)
            else:
                layers[parts.reference] += 1
                q = pending.get((r.client, parts.repository))
                if q:
                    while q and t - q[0][0] > SESSION_S:
                        q.popleft()
                    for entry in q:
                        if entry[0] < t:
                            entry[1] += 1
        elif r.method in ("PUT", "HEAD"):
            push[parts.kind] += 1
            put_m += r.method == "PUT" and parts.kind == "manifest"
    n_min = max(minutes) + 1
    per_min = [minutes.get(i, 0) for i in range(n_min)]
    total_layers = sum(layers.values())
    return {
        "by_method": dict(methods),
        "pull_ratio": get_m / (get_m + put_m),
        "pull_manifest_share": pull["manifest"] / sum(pull.values()),
        "push_manifest_share": push["manifest"] / sum(push.values()),
        "rpm_p50": float(np.quantile(per_min, 0.5)),
        "layers_top10": sum(c for _, c in layers.most_common(10)) / total_layers,
        "repos_top10": sum(c for _, c in repos.most_common(10)) / sum(repos.values()),
        "clients_top1": clients.most_common(1)[0][1] / sum(clients.values()),
        "inter_p99": float(np.quantile(inter, 0.99)),
        "idle_periods": idle,
        "not_followed": sum(1 for _, c in follows if c == 0) / len(follows),
    }


def columnar(path: Path) -> dict:
    """The same subset through drtp.analysis (columns + vectorised functions)."""
    df = load_trace([path])
    rt = ch.request_types(df)
    ml = ch.manifest_layer_share(df)
    pop = ch.popularity(df)
    return {
        "by_method": rt["by_method"],
        "pull_ratio": rt["pull_ratio"],
        "pull_manifest_share": ml["pull"]["manifest"],
        "push_manifest_share": ml["push"]["manifest"],
        "rpm_p50": ch.requests_per_minute(df)["p50"],
        "layers_top10": pop["layers"]["top10_share"],
        "repos_top10": pop["repositories"]["top10_share"],
        "clients_top1": pop["clients"]["top_shares"][0],
        "inter_p99": ch.arrivals(df)["inter_arrival"]["p99"],
        "idle_periods": ch.arrivals(df)["idle_periods"],
        "not_followed": ch.follow_ups(df, SESSION_S)["all"]["not_followed"],
    }


def agree(a: dict, b: dict) -> list[str]:
    bad = []
    for k in a:
        x, y = a[k], b[k]
        same = x == y if isinstance(x, dict) else math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-3)
        if not same:
            bad.append(f"{k}: naive {x} vs columnar {y}")
    return bad


def timed(f, *args):
    t0 = time.perf_counter()
    out = f(*args)
    return time.perf_counter() - t0, out


def measure(trace: Path, work: Path, parquet: bool = True) -> dict:
    """Time each stage on ``trace`` (outputs under ``work``): {records, rows: [{stage, drtp_s, naive_s}], ...}."""
    t_read, count = timed(lambda: sum(len(b) for b in TraceReader([trace]).batches()))
    t_naive, ref = timed(naive, trace)
    t_col, got = timed(columnar, trace)
    problems = agree(ref, got)
    t_load, df = timed(load_trace, [trace])
    t_char, _ = timed(ch.characterize, df)
    del df
    out = work / "out"
    t_full, _ = timed(lambda: analyze_traces({"bench": [str(trace)]}, out, log=lambda *_: None))

    if parquet:
        pq = work / "trace.parquet"  # the same trace as `drtp convert -o trace.parquet` writes it
        t_conv, _ = timed(write_parquet, pq, TraceReader([trace]).batches())
        t_naive_pq, ref_pq = timed(naive, pq)
        t_col_pq, got_pq = timed(columnar, pq)
        problems += agree(ref_pq, got_pq)
        t_load_pq, _ = timed(load_trace, [pq])

    rows = [
        ("read records only (TraceReader)", t_read, None),
        ("subset of characterization numbers (read + compute)", t_col, t_naive),
        ("load columns", t_load, None),
        ("full characterization (every number)", t_char, None),
        ("drtp analyze trace end to end (+13 PNGs, report)", t_full, None),
    ]
    if parquet:
        rows += [
            (f"Parquet input (converted once in {t_conv:.1f} s):", None, None),
            ("  subset of characterization numbers (read + compute)", t_col_pq, t_naive_pq),
            ("  load columns", t_load_pq, None),
        ]
    return {
        "records": count,
        "problems": problems,
        "subset": got,
        "rows": [{"stage": n, "drtp_s": t, "naive_s": b} for n, t, b in rows],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--trace", type=Path, help="use this trace instead of generating one")
    ap.add_argument("--keep", action="store_true", help="keep the output directory")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="drtp-bench-analyze-"))
    trace = args.trace
    if trace is None:
        trace = work / "trace.json"
        opts = GenerateOptions(requests=args.requests, seed=7, span_s=7 * 86400.0)
        t_gen, n = timed(write_ibm, trace, generate(opts))
        print(f"generated {n:,} records in {t_gen:.1f} s → {trace}")

    res = measure(trace, work)
    count, problems, got = res["records"], res["problems"], res["subset"]
    rows = [(r["stage"], r["drtp_s"], r["naive_s"]) for r in res["rows"]]
    print(f"\n{count:,} records; baseline = naive per-record Python pass over the same TraceReader\n")
    print(f"{'stage':<52} {'drtp (s)':>9} {'naive (s)':>10} {'speed-up':>9}")
    for name, t, base in rows:
        if t is None:
            print(name)
            continue
        b = f"{base:10.2f}" if base is not None else f"{'—':>10}"
        r = f"{base / t:8.1f}×" if base is not None else f"{'—':>9}"
        print(f"{name:<52} {t:9.2f} {b} {r}")
    print(f"\nsubset numbers agree: {'yes' if not problems else 'NO'}")
    for p in problems:
        print("  " + p)
    print(json.dumps({k: v for k, v in got.items() if k != "by_method"}, indent=None))
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"outputs kept in {work}")


if __name__ == "__main__":
    main()
