"""Replay speed against the local registry, side by side with wrk, and the master's memory.

1. Stress mode: the replayer's request rate vs ``wrk`` at the same concurrency
   (nodes × threads = wrk connections) on the same registry and request mix:
   small manifest GETs, then ~300 KB blob GETs.  Ratio = drtp / wrk.
2. As-is mode at 200 requests/s: p99 lateness (actual − intended start).
3. Master peak RSS for 100k vs 1M generated requests: the master's pipeline
   (trace reader → planner → results writer and running summary) in a fresh
   process per size, results answered in-process instead of by a registry
   (replaying 1M requests for real takes longer than this benchmark may).

Usage: python bench/bench_replay.py [--quick]   (needs wrk: apt-get install -y wrk)
"""

from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest.mock import patch

import yaml
from layout import drtp_module

from drtp.config import load_config
from drtp.registry.local import LocalRegistry
from drtp.registry.manifest import ACCEPT
from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.reader import TraceReader, write_ibm
from drtp.trace.records import format_timestamp

start_nodes = drtp_module("drtp.master.commands.demo").start_nodes
stop_nodes = drtp_module("drtp.master.commands.demo").stop_nodes
run_replay = drtp_module("drtp.master.run.replay").run_replay
run_warmup = drtp_module("drtp.master.run.warmup").run_warmup

T0 = _dt.datetime(2017, 8, 1, tzinfo=_dt.timezone.utc)


def uniform_trace(path: Path, n: int, uri: str, size: int, gap_s: float, clients: int) -> None:
    """``n`` GETs of one object by ``clients`` clients, ``gap_s`` apart."""
    write_ibm(
        path,
        (
            {
                "host": "h",
                "http.request.duration": 0.001,
                "http.request.method": "GET",
                "http.request.remoteaddr": f"c{i % clients:05d}",
                "http.request.uri": uri,
                "http.response.status": 200,
                "http.response.written": size,
                "id": f"r{i}",
                "timestamp": format_timestamp(T0 + _dt.timedelta(seconds=i * gap_s)),
            }
            for i in range(n)
        ),
    )


def config(work: Path, trace: Path, reg: str, nodes: list[str], threads: int, wait: bool, engine: str = "auto") -> Path:
    cfg = {
        "trace": {"location": str(work), "traces": [trace.name]},
        "registry": [reg],
        "client_info": {
            "client_list": nodes,
            "threads": threads,
            "wait": wait,
            "route": False,
            "token": "${DRTP_TOKEN}",
            "batch": 200,
            "inflight": 2000,
            "engine": engine,
        },
        "warmup": {"output": str(work / f"{trace.stem}-map.jsonl"), "threads": 4},
        "results": str(work / "results"),
    }
    path = work / f"{trace.stem}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds used so far by these processes (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


WRK_LIST_SCRIPT = """
local paths = {%s}
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", paths[(i %% #paths) + 1])
end
"""


def pin(pids: list[int], cpus: set[int]) -> None:
    """Run every thread of these processes on ``cpus`` only (threads they start later inherit it)."""
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                os.sched_setaffinity(int(tid), cpus)
            except (ProcessLookupError, FileNotFoundError):
                pass  # a thread that just ended


def wrk_run(
    url: str, connections: int, seconds: int, paths: list[str] | None = None, cpus: set[int] | None = None
) -> tuple[float, float]:
    """wrk at ``connections`` against ``url`` (or cycling through ``paths`` on its host): (req/s, CPU µs/request)."""
    cmd = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "-H", f"Accept: {ACCEPT}"]
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lua:
        if paths:
            lua.write(WRK_LIST_SCRIPT % ", ".join(json.dumps(p) for p in paths))
    try:
        if paths:
            cmd += ["-s", lua.name]
        cpu0 = children_cpu_s()
        pre = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        out = subprocess.run(cmd + [url], capture_output=True, text=True, check=True, preexec_fn=pre).stdout
        cpu = children_cpu_s() - cpu0
    finally:
        os.unlink(lua.name)
    m = re.search(r"Requests/sec:\s*([0-9.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if not m or not total or non2xx:
        raise RuntimeError(f"wrk failed:\n{out}")
    return float(m.group(1)), cpu / max(1, int(total.group(1))) * 1e6


def wrk_rate(url: str, connections: int, seconds: int) -> float:
    return wrk_run(url, connections, seconds)[0]


def warm_map(cfg) -> dict:
    """(repository, kind, reference) → digest, from the warmup map."""
    with open(cfg.path(cfg.warmup.output)) as f:
        return {(e["repository"], e["kind"], e["reference"]): e["digest"] for e in map(json.loads, f)}


def url_path(rec, mapping: dict) -> str:
    """The path a GET of this trace record is replayed to: blobs and digest manifests by their warmed digest."""
    ref = rec.reference
    if ref.startswith("sha256:") or rec.kind == "blob":
        ref = mapping[(rec.repository, rec.kind, rec.reference)]
    sep = "manifests" if rec.kind == "manifest" else "blobs"
    return f"/v2/{rec.repository}/{sep}/{ref}"


def mixed_trace(path: Path, n: int, seed: int = 3) -> None:
    """The successful GETs of a generated trace (manifests and layers up to 1 MB), ``n`` of them."""
    opts = GenerateOptions(requests=n * 3, seed=seed, span_s=600, clients=500, repositories=50, max_layer_size=1 << 20)
    gets = (r for r in generate(opts) if r["http.request.method"] == "GET" and r["http.response.status"] == 200)
    write_ibm(path, itertools.islice(gets, n))


def case_trace(path: Path, n: int, uri: str | None, size: int | None) -> None:
    """A stress case's trace: ``n`` GETs of ``uri`` (``size`` bytes), or the mixed trace when ``uri`` is None."""
    if uri:
        uniform_trace(path, n, uri, size, 0.001, clients=500)
    else:
        mixed_trace(path, n)


def warmed_paths(cfg, trace: Path) -> list[str]:
    """Warm the registry up for ``trace``; the distinct URL paths its GETs are replayed to (what wrk cycles)."""
    run_warmup(cfg, quiet=True)
    mapping = warm_map(cfg)
    return sorted({url_path(r, mapping) for r in TraceReader([trace])})


def replay_once(
    work: Path, trace: Path, reg: LocalRegistry, nodes: list[str], threads: int, engine: str, pids, what: str
) -> tuple[dict, float]:
    """One stress replay of ``trace``: (summary, the nodes' CPU µs per request)."""
    cfg = load_config(config(work, trace, reg.host, nodes, threads, wait=False, engine=engine))
    cpu0 = cpu_s(pids) if pids else 0.0
    s = run_replay(cfg, work / f"run-{trace.stem}-{engine}-{time.monotonic_ns()}", quiet=True)
    node_us = (cpu_s(pids) - cpu0) / max(1, s["requests"]) * 1e6 if pids else float("nan")
    if s["failed"]:
        raise RuntimeError(f"{what}: {s['failed']} of {s['requests']} requests failed")
    return s, node_us


def stress(
    work: Path,
    reg: LocalRegistry,
    nodes: list[str],
    threads: int,
    n: int,
    wrk_s: int,
    pids: list[int] | None = None,
    rounds: int = 2,
) -> list[dict]:
    """Stress-mode rows: drtp vs wrk req/s at the same concurrency (best of ``rounds`` alternated runs each),
    the nodes' thread engine once, and CPU µs per request of nodes and wrk."""
    rows = []
    cases = [
        ("GET manifest (~1 KB)", "v2/bench/small/manifests/latest", 1000),
        ("GET blob (300 KB)", "v2/bench/big/blobs/layer300k", 300_000),
        ("mixed trace (GETs)", None, None),
    ]
    for name, uri, size in cases:
        trace = work / f"stress-{size or 'mixed'}.json"
        case_trace(trace, n, uri, size)
        cfg = load_config(config(work, trace, reg.host, nodes, threads, wait=False))
        paths = warmed_paths(cfg, trace)
        # a fresh registry is slower for its first thousands of answers (Go heap growth, caches), and whatever
        # runs first after a pause pays for it: warm the registry with the same requests, then alternate
        # drtp and wrk (A B A B) and keep each side's best round
        wrk_args = (f"{reg.url}{paths[0]}", len(nodes) * threads)
        wrk_paths = paths if len(paths) > 1 else None
        wrk_run(*wrk_args, max(1, wrk_s // 2), wrk_paths)
        loop_runs, wrk_runs = [], []
        for i in range(rounds):
            loop_runs.append(replay_once(work, trace, reg, nodes, threads, "auto", pids, f"{name} round {i + 1}"))
            wrk_runs.append(wrk_run(*wrk_args, wrk_s, wrk_paths))
        threads_run = replay_once(work, trace, reg, nodes, threads, "threads", pids, f"{name} (threads)")
        pinned = {}
        if pids and len(os.sched_getaffinity(0)) >= 2 and reg.proc is not None:
            # as on separate machines: the registry alone on one CPU, the load generator (drtp's master and
            # nodes, or wrk) on another, so neither takes CPU from the registry
            everything = os.sched_getaffinity(0)
            reg_cpu, gen_cpu = sorted(everything)[:2]
            pin([reg.proc.pid], {reg_cpu})
            pin([os.getpid(), *pids], {gen_cpu})
            try:
                ps, pus = replay_once(work, trace, reg, nodes, threads, "auto", pids, f"{name} (pinned)")
                pw, _ = wrk_run(*wrk_args, wrk_s, wrk_paths, cpus={gen_cpu})
                pinned = {"pinned_drtp_rps": ps["throughput_rps"], "pinned_wrk_rps": pw, "pinned_node_us": pus}
            finally:
                pin([reg.proc.pid, os.getpid(), *pids], everything)
        s, node_us = max(loop_runs, key=lambda r: r[0]["throughput_rps"])
        s_threads, threads_us = threads_run
        wrk, wrk_us = max(wrk_runs)
        rows.append(
            {
                "case": name,
                "concurrency": len(nodes) * threads,
                "requests": s["requests"],
                "distinct_urls": len(paths),
                "drtp_rps": s["throughput_rps"],
                "wrk_rps": wrk,
                "ratio": s["throughput_rps"] / wrk,
                "node_cpu_us_per_req": node_us,
                "threads_rps": s_threads["throughput_rps"],
                "threads_ratio": s_threads["throughput_rps"] / wrk,
                "threads_node_cpu_us_per_req": threads_us,
                "wrk_cpu_us_per_req": wrk_us,
                **pinned,
            }
        )
    return rows


def sleep_loop_lateness(rate: float, seconds: float) -> dict:
    """Baseline for as-is timing: one Python thread sleeping until each intended start, sending nothing."""
    n = max(1, int(rate * seconds))
    late = []
    t0 = time.perf_counter() + 0.05
    for i in range(n):
        at = t0 + i / rate
        d = at - time.perf_counter()
        if d > 0:
            time.sleep(d)
        late.append(time.perf_counter() - at)
    late.sort()
    return {
        "lateness_p50_ms": late[len(late) // 2] * 1000,
        "lateness_p99_ms": late[min(len(late) - 1, int(len(late) * 0.99))] * 1000,
        "lateness_max_ms": late[-1] * 1000,
    }


def as_is(work: Path, reg: LocalRegistry, nodes: list[str], seconds: float, rate: float = 200) -> dict:
    """As-is mode at ``rate`` requests/s for ``seconds``: lateness (actual − intended start) percentiles."""
    trace = work / f"asis-{rate:g}.json"
    uniform_trace(trace, int(rate * seconds), "v2/bench/small/manifests/latest", 1000, 1 / rate, clients=500)
    cfg = load_config(config(work, trace, reg.host, nodes, 16, wait=True))
    run_warmup(cfg, quiet=True)
    s = run_replay(cfg, work / f"run-asis-{rate:g}", quiet=True)
    return {
        "rate": rate,
        "seconds": seconds,
        "requests": s["requests"],
        "failed": s["failed"],
        "lateness_p50_ms": s["lateness_s"]["p50"] * 1000,
        "lateness_p99_ms": s["lateness_s"]["p99"] * 1000,
        "lateness_max_ms": s["lateness_s"]["max"] * 1000,
        "on_time_ratio": s["on_time_ratio"],
    }


def measure(
    n: int = 8000, wrk_s: int = 8, asis_s: float = 20, rates: tuple = (200,), threads: int = 16, nodes_n: int = 2
) -> dict:
    """Start a registry and ``nodes_n`` client nodes on loopback; return {"stress": rows, "asis": rows}.

    Each as-is row carries the sleep-loop baseline measured right after it (``baseline_*`` keys)."""
    if not shutil.which("wrk"):
        raise RuntimeError("wrk is not installed (apt-get install -y wrk)")
    token = os.urandom(16).hex()
    with patch.dict(os.environ, {"DRTP_TOKEN": token}):  # the nodes and the config read it; restored after
        with tempfile.TemporaryDirectory(prefix="drtp-bench-") as tmp:
            work = Path(tmp)
            with LocalRegistry(work / "registry") as reg:
                nodes = start_nodes(nodes_n, token, work)
                try:
                    addrs = [a for _, a in nodes]
                    stress_rows = stress(work, reg, addrs, threads, n, wrk_s, [p.pid for p, _ in nodes])
                    late = []
                    for rate in rates:
                        row = as_is(work, reg, addrs, asis_s, rate)
                        base = sleep_loop_lateness(rate, min(asis_s, 5))
                        row.update({f"baseline_{k}": v for k, v in base.items()})
                        late.append(row)
                finally:
                    stop_nodes(nodes)
    return {"stress": stress_rows, "asis": late}


# -- master memory: the pipeline without the network ------------------------------------------------


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM).  Not ru_maxrss: Linux carries that over fork and exec,
    so a child started from a large parent reports the parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def rss_child(trace: str, out: str) -> None:
    """Run the master's per-request path over a trace; print peak RSS (MB) as JSON."""
    from drtp.master.outputs.results import RunResults
    from drtp.master.run.plan import Planner
    from drtp.replay.messages import ReplayResult
    from drtp.trace.reader import TraceReader

    planner = Planner(["127.0.0.1:5000"])
    results = RunResults(Path(out), timed=True, on_time_s=0.01)
    t0 = None
    seq = 0
    start = time.perf_counter()
    for records in TraceReader([trace]).batches():
        for rec in records:
            t0 = t0 if t0 is not None else rec.time
            req = planner.plan(rec, seq, rec.time - t0)
            digest = f"sha256:{seq:064x}" if req.op == "upload-close" else req.digest
            res = ReplayResult(seq, rec.status, True, req.at, 0.001 + (seq % 97) / 1e4, rec.size, digest)
            planner.done(req, res)
            results.add("node", req, res)
            seq += 1
    results.close()
    rss_mb = peak_rss_mb()
    print(json.dumps({"requests": seq, "peak_rss_mb": rss_mb, "rate": seq / (time.perf_counter() - start)}))


def rss_of(trace: Path, out: Path) -> dict:
    """The master's pipeline over ``trace`` in a fresh process: {requests, peak_rss_mb, rate}."""
    out.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        [sys.executable, __file__, "--rss-child", str(trace), str(out)], check=True, capture_output=True, text=True
    )
    return json.loads(r.stdout.strip().splitlines()[-1])


def master_rss(work: Path, sizes: list[int]) -> list[dict]:
    rows = []
    for n in sizes:
        trace = work / f"gen-{n}.json"
        subprocess.run(
            [sys.executable, "-m", "drtp.cli", "generate", "-o", str(trace), "-n", str(n), "--span", "7d"],
            check=True,
            capture_output=True,
        )
        rows.append(rss_of(trace, work / f"rss-{n}"))
        trace.unlink()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller runs")
    ap.add_argument("--rss-child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--skip-rss", action="store_true")
    args = ap.parse_args()
    if args.rss_child:
        rss_child(*args.rss_child)
        return
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (apt-get install -y wrk)")
    n, wrk_s, asis_s = (3000, 5, 10) if args.quick else (8000, 8, 20)
    res = measure(n, wrk_s, asis_s, rates=(200,))
    stress_rows, late = res["stress"], res["asis"][0]
    with tempfile.TemporaryDirectory(prefix="drtp-bench-") as tmp:
        rss_rows = [] if args.skip_rss else master_rss(Path(tmp), [100_000, 1_000_000])

    print("\nStress mode vs wrk (same registry, same concurrency, side by side)")
    print(
        f"{'case':24} {'conc':>5} {'drtp req/s':>11} {'wrk req/s':>10} {'ratio':>6} "
        f"{'node µs/req':>12} {'wrk µs/req':>11} {'threads ratio':>14} {'threads µs/req':>15}"
    )
    for r in stress_rows:
        print(
            f"{r['case']:24} {r['concurrency']:>5} {r['drtp_rps']:>11.0f} {r['wrk_rps']:>10.0f} {r['ratio']:>6.2f} "
            f"{r['node_cpu_us_per_req']:>12.0f} {r['wrk_cpu_us_per_req']:>11.0f} {r['threads_ratio']:>14.2f} "
            f"{r['threads_node_cpu_us_per_req']:>15.0f}"
        )
        if "pinned_drtp_rps" in r:
            print(
                f"{'  separate CPUs':24} {r['concurrency']:>5} {r['pinned_drtp_rps']:>11.0f} "
                f"{r['pinned_wrk_rps']:>10.0f} {r['pinned_drtp_rps'] / r['pinned_wrk_rps']:>6.2f}"
            )
    print(f"\nAs-is mode at 200 req/s for {asis_s} s ({late['requests']} requests, {late['failed']} failed)")
    print(
        f"lateness p50 {late['lateness_p50_ms']:.2f} ms, p99 {late['lateness_p99_ms']:.2f} ms "
        f"(target ≤ 2 ms), max {late['lateness_max_ms']:.2f} ms; on time (≤10 ms) {late['on_time_ratio']:.1%}"
    )
    if rss_rows:
        print("\nMaster pipeline peak RSS (reader → planner → results; no network)")
        print(f"{'requests':>10} {'peak RSS MB':>12} {'req/s':>10}")
        for r in rss_rows:
            print(f"{r['requests']:>10,} {r['peak_rss_mb']:>12.1f} {r['rate']:>10,.0f}")
        print(f"ratio 1M/100k: {rss_rows[-1]['peak_rss_mb'] / rss_rows[0]['peak_rss_mb']:.2f}")


if __name__ == "__main__":
    main()
