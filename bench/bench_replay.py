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

import yaml
from drtp.master.run import run_replay
from drtp.master.warmup import run_warmup

from drtp.config import load_config
from drtp.demo import start_nodes, stop_nodes
from drtp.manifest import ACCEPT
from drtp.records import format_timestamp
from drtp.registry import LocalRegistry
from drtp.trace import write_ibm

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


def config(work: Path, trace: Path, reg: str, nodes: list[str], threads: int, wait: bool) -> Path:
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
        },
        "warmup": {"output": str(work / f"{trace.stem}-map.jsonl"), "threads": 4},
        "results": str(work / "results"),
    }
    path = work / f"{trace.stem}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def wrk_rate(url: str, connections: int, seconds: int) -> float:
    out = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "-H", f"Accept: {ACCEPT}", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    m = re.search(r"Requests/sec:\s*([0-9.]+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if not m or non2xx:
        raise RuntimeError(f"wrk failed:\n{out}")
    return float(m.group(1))


def stress(work: Path, reg: LocalRegistry, nodes: list[str], threads: int, n: int, wrk_s: int) -> list[dict]:
    rows = []
    cases = [
        ("GET manifest (~1 KB)", "v2/bench/small/manifests/latest", 1000),
        ("GET blob (300 KB)", "v2/bench/big/blobs/layer300k", 300_000),
    ]
    for name, uri, size in cases:
        trace = work / f"stress-{size}.json"
        uniform_trace(trace, n, uri, size, 0.001, clients=500)
        cfg = load_config(config(work, trace, reg.host, nodes, threads, wait=False))
        run_warmup(cfg, quiet=True)
        mapping = {e["reference"]: e["digest"] for e in map(json.loads, open(cfg.path(cfg.warmup.output)))}
        ref = uri.rsplit("/", 1)[1]
        target = uri.rsplit("/", 1)[0] + "/" + (mapping[ref] if "/blobs/" in uri else ref)
        s = run_replay(cfg, work / f"run-stress-{size}", quiet=True)
        assert s["failed"] == 0, s
        drtp = s["throughput_rps"]
        wrk = wrk_rate(f"{reg.url}/{target}", len(nodes) * threads, wrk_s)
        rows.append({"case": name, "concurrency": len(nodes) * threads, "drtp_rps": drtp, "wrk_rps": wrk})
    return rows


def as_is(work: Path, reg: LocalRegistry, nodes: list[str], seconds: float) -> dict:
    rate = 200
    trace = work / "asis.json"
    uniform_trace(trace, int(rate * seconds), "v2/bench/small/manifests/latest", 1000, 1 / rate, clients=500)
    cfg = load_config(config(work, trace, reg.host, nodes, 16, wait=True))
    run_warmup(cfg, quiet=True)
    s = run_replay(cfg, work / "run-asis", quiet=True)
    return {
        "requests": s["requests"],
        "failed": s["failed"],
        "lateness_p50_ms": s["lateness_s"]["p50"] * 1000,
        "lateness_p99_ms": s["lateness_s"]["p99"] * 1000,
        "lateness_max_ms": s["lateness_s"]["max"] * 1000,
        "on_time_ratio": s["on_time_ratio"],
    }


# -- master memory: the pipeline without the network ------------------------------------------------


def rss_child(trace: str, out: str) -> None:
    """Run the master's per-request path over a trace; print peak RSS (MB) as JSON."""
    from drtp.master.plan import Planner
    from drtp.master.results import RunResults

    from drtp.replay_types import ReplayResult
    from drtp.trace import TraceReader

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
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"requests": seq, "peak_rss_mb": rss_mb, "rate": seq / (time.perf_counter() - start)}))


def master_rss(work: Path, sizes: list[int]) -> list[dict]:
    rows = []
    for n in sizes:
        trace = work / f"gen-{n}.json"
        subprocess.run(
            [sys.executable, "-m", "drtp.cli", "generate", "-o", str(trace), "-n", str(n), "--span", "7d"],
            check=True,
            capture_output=True,
        )
        out = work / f"rss-{n}"
        out.mkdir()
        r = subprocess.run(
            [sys.executable, __file__, "--rss-child", str(trace), str(out)], check=True, capture_output=True, text=True
        )
        rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
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
    threads = 16
    token = os.urandom(16).hex()
    os.environ["DRTP_TOKEN"] = token
    with tempfile.TemporaryDirectory(prefix="drtp-bench-") as tmp:
        work = Path(tmp)
        with LocalRegistry(work / "registry") as reg:
            nodes = start_nodes(2, token, work)
            try:
                stress_rows = stress(work, reg, [a for _, a in nodes], threads, n, wrk_s)
                late = as_is(work, reg, [a for _, a in nodes], asis_s)
            finally:
                stop_nodes(nodes)
        rss_rows = [] if args.skip_rss else master_rss(work, [100_000, 1_000_000])

    print("\nStress mode vs wrk (same registry, same concurrency, side by side)")
    print(f"{'case':24} {'conc':>5} {'drtp req/s':>11} {'wrk req/s':>10} {'ratio':>6}")
    for r in stress_rows:
        ratio = r["drtp_rps"] / r["wrk_rps"]
        print(f"{r['case']:24} {r['concurrency']:>5} {r['drtp_rps']:>11.0f} {r['wrk_rps']:>10.0f} {ratio:>6.2f}")
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
