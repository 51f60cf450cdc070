"""Per-client concurrency and order: how late requests start beyond what the trace's order allows, and what
the per-client gate costs the nodes.

1. Lateness beyond the order (as is, ``wait: true``): a generated pull trace replayed behind a proxy that
   adds ``--latency`` to every blob GET (a registry farther away than loopback).  A request may start at its
   intended time, but not before every earlier request of its trace client that had ended before it started in
   the trace has ended in the replay; lateness beyond the order = actual start − that time.  A negative value
   beyond 1 ms is an order violation (it started before a request it may depend on had ended).  Variants:
   ``client_concurrency`` trace (the default), 1 (a client's requests one at a time, what the nodes did
   before), unlimited (no per-client order, per-request round-robin).
2. Node CPU per request in stress mode (event-loop engine, 2 nodes × 16 slots): the successful GETs of a
   generated trace; variants alternated round by round (A B C D, D C B A…): the nodes of the code before
   the gate (``--before`` checkout, default: ``git archive a69f2b7``; its nodes keep each client one at a
   time whatever the spec says, driven with per-request round-robin as before), and this code with
   ``client_concurrency`` unlimited, trace and 1.  The spread of each variant's rounds is the noise to judge
   the differences against.
3. The same in one process, without the master, the HTTP control plane and the other nodes (less noise on a
   shared machine): a ``LoopRun`` (the event-loop engine) of the code before and after, each in a fresh
   process importing its own tree, answering ``--gate-requests`` manifest GETs of 200 trace clients (404s
   from the real registry: the cheapest answer, so the scheduling is a larger part of the cost); CPU µs per
   request, variants alternated round by round.  ``trace``: each request overlapped the client's previous
   one in the trace and started after the one before that had ended (the gate's heap is used).

Usage: python bench/bench_client_order.py [--rounds 3] [--json]   (from a source checkout; needs docker-registry)
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests/faultproxy.py lives in the checkout, not in the package

from drtp.config import load_config  # noqa: E402
from drtp.master.commands.demo import start_nodes, stop_nodes  # noqa: E402
from drtp.master.run.replay import run_replay  # noqa: E402
from drtp.master.run.warmup import run_warmup  # noqa: E402
from drtp.registry.local import LocalRegistry  # noqa: E402
from drtp.trace.generate import GenerateOptions, generate  # noqa: E402
from drtp.trace.reader import TraceReader, write_ibm  # noqa: E402
from tests.faultproxy import FaultProxy  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from bench_replay import cpu_s  # noqa: E402

TOKEN = "bench-client-order-0123456789"
BEFORE_COMMIT = "a69f2b7"  # the nodes before the per-client gate
VIOLATION_S = 0.001


def config(work: Path, trace: Path, reg: str, nodes: list[str], name: str, **client_info) -> Path:
    ci = {"client_list": nodes, "threads": 16, "token": TOKEN, "batch": 200, "inflight": 2000, "route": False}
    ci.update(client_info)
    cfg = {
        "trace": {"location": str(trace.parent), "traces": [trace.name]},
        "registry": [reg],
        "client_info": ci,
        "warmup": {"output": str(work / f"{trace.stem}-map.jsonl"), "threads": 4},
        "results": str(work / "results"),
    }
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def before_tree(work: Path, commit: str) -> Path:
    """The code of ``commit`` laid out as an importable ``drtp`` package (PYTHONPATH): its nodes."""
    src = work / "before-src"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    pkg = work / "before-pkg"
    pkg.mkdir()
    (pkg / "drtp").symlink_to(src / "drtp")
    for part in ("client", "master", "analysis", "plugins", "slurm"):
        if (src / part).exists() and not (src / "drtp" / part).exists():
            (src / "drtp" / part).symlink_to(src / part)
    return pkg


def start(n: int, logdir: Path, pythonpath: Path | None = None):
    saved = os.environ.get("PYTHONPATH")
    try:
        if pythonpath is not None:
            os.environ["PYTHONPATH"] = str(pythonpath)
        return start_nodes(n, TOKEN, logdir)
    finally:
        if pythonpath is not None:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved


# -- 1. lateness beyond the order --------------------------------------------------------------------


def lateness_trace(path: Path, requests: int, span_s: float) -> Path:
    """A generated pull trace (manifest GETs, most followed by their layers): no pushes, so no request waits
    for another client's push (the master's holds, which this measure does not model)."""
    opts = GenerateOptions(
        requests=requests,
        seed=11,
        span_s=span_s,
        clients=12,
        repositories=8,
        max_layer_size=200_000,
        push_ratio=0.0,
        follow_rate=0.8,
    )
    write_ibm(path, generate(opts))
    return path


def lateness_beyond_order(trace: Path, run_dir: Path) -> dict:
    """Per trace request: actual start − the earliest start the trace's order allows (module docstring)."""
    spans = {r.id: (r.client, r.time, r.time + r.duration) for r in TraceReader([trace])}
    rows = pd.read_csv(run_dir / "requests.csv", keep_default_na=False, na_values=[""])
    rows = rows[~rows.auxiliary & rows.start_s.notna()]
    origin = min(s for _, s, _ in spans.values())
    per_client: dict[str, list] = defaultdict(list)
    for row in rows.itertuples():
        client, t0, t1 = spans[row.trace_id]
        per_client[client].append((t0 - origin, t1 - origin, row.intended_s, row.start_s, row.start_s + row.latency_s))
    late = []
    for reqs in per_client.values():
        reqs.sort(key=lambda r: r[0])
        # earlier requests by trace end: those that ended before a request started are its predecessors
        by_end = sorted(reqs, key=lambda r: r[1])
        ends = [r[1] for r in by_end]
        latest_done = list(itertools.accumulate((r[4] for r in by_end), max))
        for t0, _, intended, started, _ in reqs:
            k = bisect.bisect_right(ends, t0)
            allowed = max(intended, latest_done[k - 1]) if k else intended
            late.append(started - allowed)
    s = pd.Series(late) * 1000
    return {
        "requests": len(s),
        "p50_ms": s.quantile(0.5),
        "p99_ms": s.quantile(0.99),
        "max_ms": s.max(),
        "violations": int((s < -VIOLATION_S * 1000).sum()),
    }


def lateness(work: Path, reg: LocalRegistry, nodes: list[str], latency_s: float, requests: int, span_s: float):
    trace = lateness_trace(work / "late.json", requests, span_s)
    run_warmup(load_config(config(work, trace, reg.host, nodes, "late-warm")), quiet=True)

    def slow_blobs(method: str, path: str) -> float:
        return latency_s if method == "GET" and "/blobs/" in path else 0.0

    out = []
    with FaultProxy(reg.host, latency=slow_blobs) as proxy:
        for mode in ("1", "trace", "unlimited"):
            value = int(mode) if mode.isdigit() else mode
            path = config(work, trace, proxy.address, nodes, f"late-{mode}", wait=True, client_concurrency=value)
            run_dir = work / f"late-{mode}"
            summary = run_replay(load_config(path), run_dir, quiet=True)
            row = {"client_concurrency": mode, "failed": summary["failed"]}
            out.append(row | lateness_beyond_order(trace, run_dir))
    return out


# -- 3. the event-loop engine alone, in a process of its own per variant ------------------------------------

LOOP_RUN = r"""
import json, resource, sys, time
tree, root, registry, n, clients, mode = sys.argv[1:7]
n, clients = int(n), int(clients)
import __editable___drtp_0_1_0_finder as finder
for name, path in list(finder.MAPPING.items()):
    if path.startswith(root):
        finder.MAPPING[name] = tree + path[len(root):]
import drtp
from drtp.client.loop_engine import LoopRun
from drtp.replay.messages import ReplayRequest, RunSpec
assert drtp.__file__.startswith(tree), drtp.__file__
extra = {}
if mode != "before":
    from drtp.replay.messages import ClientModel
    extra["client"] = ClientModel(concurrency={"trace": 0, "unlimited": -1, "1": 1}[mode])
reqs = []
for i in range(n):
    k = i // clients  # the client's k-th request: overlaps its previous one, not the one before that
    span = {} if mode == "before" else {"trace_start": k * 1.0, "trace_end": k * 1.0 + 1.5}
    reqs.append(ReplayRequest(i, f"t{i}", f"c{i % clients}", "GET", "manifest", "get", registry, "team/app", "v1",
                              0, 404, **span))
run = LoopRun(RunSpec(run="g", start_epoch=time.time(), threads=16, timeout=10.0, engine="loop",
                      registries=[registry], **extra))
r0 = resource.getrusage(resource.RUSAGE_SELF)
w0 = time.perf_counter()
run.submit(reqs)
run.end()
done = 0
while (item := run.results.get(timeout=120)) is not None:
    done += len(item) if isinstance(item, list) else 1
wall = time.perf_counter() - w0
r1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
print(json.dumps({"cpu_s": cpu, "wall_s": wall, "done": done}))
"""


def loop_engine_cpu(
    work: Path, reg: LocalRegistry, before_src: Path | None, n: int, rounds: int, modes: tuple[str, ...]
) -> list[dict]:
    variants = [("after: trace", ROOT, "trace"), ("after: 1", ROOT, "1"), ("after: unlimited", ROOT, "unlimited")]
    variants = [v for v in variants if v[2] in modes]
    if before_src is not None:
        variants.insert(0, (f"before ({BEFORE_COMMIT})", before_src, "before"))
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in variants}
    for r in range(rounds):
        # A B C, C B A, …: no variant always runs first or last in a round
        for name, tree, mode in variants if r % 2 == 0 else variants[::-1]:
            args = [sys.executable, "-c", LOOP_RUN, str(tree), str(ROOT), reg.url, str(n), "200", mode]
            out = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=work)
            if out.returncode != 0:
                raise RuntimeError(f"{name}: {out.stderr[-2000:]}")
            res = json.loads(out.stdout.strip().splitlines()[-1])
            if res["done"] != n:
                raise RuntimeError(f"{name}: {res['done']} of {n} requests done")
            runs[name].append(res)
    rows = []
    for name, rs in runs.items():
        us = [r["cpu_s"] / n * 1e6 for r in rs]
        rows.append(
            {
                "variant": name,
                "cpu_us_per_req_median": statistics.median(us),
                "min": min(us),
                "max": max(us),
                "rps_median": statistics.median(n / r["wall_s"] for r in rs),
            }
        )
    return rows


# -- 2. node CPU per request in stress mode -----------------------------------------------------------------


def gets_trace(path: Path, n: int) -> Path:
    opts = GenerateOptions(requests=n * 3, seed=3, span_s=600, clients=100, repositories=50, max_layer_size=64_000)
    gets = (r for r in generate(opts) if r["http.request.method"] == "GET" and r["http.response.status"] == 200)
    write_ibm(path, itertools.islice(gets, n))
    return path


def node_cpu(work: Path, reg: LocalRegistry, after, before, n: int, rounds: int) -> list[dict]:
    trace = gets_trace(work / "gets.json", n)
    after_addr = [a for _, a in after]
    run_warmup(load_config(config(work, trace, reg.host, after_addr, "cpu-warm")), quiet=True)
    variants = [("after: trace", after, "trace"), ("after: 1", after, 1), ("after: unlimited", after, "unlimited")]
    if before:
        variants.insert(0, (f"before ({BEFORE_COMMIT})", before, "unlimited"))
    results: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in variants}
    # one unmeasured run first: a fresh registry is slower for its first thousands of answers
    run_replay(load_config(config(work, trace, reg.host, after_addr, "cpu-first")), work / "cpu-first", quiet=True)
    for r in range(rounds):
        for name, procs, mode in variants if r % 2 == 0 else variants[::-1]:  # no variant always first
            addrs, pids = [a for _, a in procs], [p.pid for p, _ in procs]
            cfg = load_config(config(work, trace, reg.host, addrs, f"cpu-{r}", client_concurrency=mode))
            cpu0 = cpu_s(pids)
            s = run_replay(cfg, work / f"cpu-{r}-{name.split(':')[0].split()[0]}-{mode}", quiet=True)
            if s["failed"]:
                raise RuntimeError(f"{name}: {s['failed']} of {s['requests']} failed")
            results[name].append(((cpu_s(pids) - cpu0) / s["requests"] * 1e6, s["throughput_rps"]))
    rows = []
    for name, runs in results.items():
        us = [u for u, _ in runs]
        rows.append(
            {
                "variant": name,
                "node_cpu_us_per_req_median": statistics.median(us),
                "min": min(us),
                "max": max(us),
                "rps_median": statistics.median(r for _, r in runs),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=6000, help="GETs per stress round")
    ap.add_argument("--latency", type=float, default=0.1, help="seconds added to blob GETs (lateness part)")
    ap.add_argument("--late-requests", type=int, default=800)
    ap.add_argument("--late-span", type=float, default=20.0, help="seconds the lateness trace spans")
    ap.add_argument("--before", default=BEFORE_COMMIT, help="commit of the nodes before ('' : none)")
    ap.add_argument("--gate-requests", type=int, default=20000, help="requests per in-process loop-engine round")
    ap.add_argument("--loop-modes", default="trace,1,unlimited", help="client_concurrency values of the loop part")
    ap.add_argument("--only", choices=("lateness", "cpu", "loop"), default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    os.environ["DRTP_TOKEN"] = TOKEN
    res: dict = {}
    with tempfile.TemporaryDirectory(prefix="drtp-order-") as tmp, LocalRegistry(Path(tmp) / "registry") as reg:
        work = Path(tmp)
        after = start(2, work)
        before_pkg = before_tree(work, args.before) if args.before and args.only != "lateness" else None
        before = start(2, work, before_pkg) if before_pkg is not None and args.only in (None, "cpu") else []
        try:
            addrs = [a for _, a in after]
            if args.only in (None, "lateness"):
                res["lateness"] = lateness(work, reg, addrs, args.latency, args.late_requests, args.late_span)
            if args.only in (None, "cpu"):
                t0 = time.monotonic()
                res["node_cpu"] = node_cpu(work, reg, after, before, args.requests, args.rounds)
                res["node_cpu_wall_s"] = time.monotonic() - t0
            if args.only in (None, "loop"):
                src = work / "before-src" if before_pkg is not None else None
                modes = tuple(args.loop_modes.split(","))
                res["loop_engine_cpu"] = loop_engine_cpu(work, reg, src, args.gate_requests, args.rounds, modes)
        finally:
            stop_nodes(after + before)
    if args.json:
        print(json.dumps(res, indent=2, default=float))
        return
    if "lateness" in res:
        print(f"lateness beyond the order (as is, blob GETs +{args.latency * 1000:.0f} ms), ms")
        print(f"{'client_concurrency':<20}{'requests':>9}{'p50':>9}{'p99':>9}{'max':>9}{'violations':>12}{'failed':>8}")
        for r in res["lateness"]:
            print(
                f"{r['client_concurrency']:<20}{r['requests']:>9}{r['p50_ms']:>9.1f}{r['p99_ms']:>9.1f}"
                f"{r['max_ms']:>9.1f}{r['violations']:>12}{r['failed']:>8}"
            )
    if "loop_engine_cpu" in res:
        print(f"event-loop engine alone, CPU per request ({args.rounds} alternated rounds), µs")
        print(f"{'variant':<24}{'median':>9}{'min':>9}{'max':>9}{'req/s':>9}")
        for r in res["loop_engine_cpu"]:
            print(
                f"{r['variant']:<24}{r['cpu_us_per_req_median']:>9.1f}{r['min']:>9.1f}{r['max']:>9.1f}"
                f"{r['rps_median']:>9.0f}"
            )
    if "node_cpu" in res:
        print(f"node CPU per request, stress mode, loop engine ({args.rounds} alternated rounds), µs")
        print(f"{'variant':<24}{'median':>9}{'min':>9}{'max':>9}{'req/s':>9}")
        for r in res["node_cpu"]:
            print(
                f"{r['variant']:<24}{r['node_cpu_us_per_req_median']:>9.0f}{r['min']:>9.0f}{r['max']:>9.0f}"
                f"{r['rps_median']:>9.0f}"
            )


if __name__ == "__main__":
    main()
