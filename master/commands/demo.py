"""``drtp demo``: the main job end to end on this machine.

Generates a small trace, summarises it, starts a real Distribution registry
and two client nodes (``drtp client`` processes) on loopback, warms the
registry up, replays the trace through the nodes (as fast as possible) and
prints the summary; the run's ``requests.csv`` and ``summary.json`` land in
``OUT/run``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

from drtp.cli_options import add_progress_options, apply_progress_options, positive_int
from drtp.outputs import prepare_output_dir


def registry_roundtrip(host: str, size: int = 300_000) -> dict:
    """Push and pull one blob through drtp.registry.calls; returns timings in seconds."""
    from drtp.registry.calls import RegistryCalls
    from drtp.registry.manifest import digest_of

    data = os.urandom(size)
    digest = digest_of(data)
    calls = RegistryCalls(host)
    t0 = time.perf_counter()
    calls.push_blob("drtp/demo", data, digest)  # bytes: one body with Content-Length
    t1 = time.perf_counter()
    pulled = calls.pull_blob("drtp/demo", digest)
    t2 = time.perf_counter()
    if pulled != data:
        raise RuntimeError("the registry returned different bytes than were pushed")
    return {"push_s": t1 - t0, "pull_s": t2 - t1, "bytes": size, "digest": digest}


def start_nodes(n: int, token: str, logdir: Path) -> list[tuple[subprocess.Popen, str]]:
    """``n`` client nodes on free loopback ports, answering their health check."""
    from drtp.master.run.nodes import NodeLink
    from drtp.registry.local import free_port

    nodes = []
    env = dict(os.environ, DRTP_TOKEN=token)
    for _ in range(n):
        port = free_port()
        with open(logdir / f"node-{port}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "drtp.cli", "client", "--port", str(port)],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        nodes.append((proc, f"127.0.0.1:{port}"))
    deadline = time.monotonic() + 20
    for proc, address in nodes:
        while True:
            try:
                NodeLink(address, token, None).check()
                break
            except Exception:
                if proc.poll() is not None or time.monotonic() > deadline:
                    stop_nodes(nodes)
                    raise RuntimeError(f"client node {address} did not start; see {logdir}") from None
                time.sleep(0.1)
    return nodes


def stop_nodes(nodes) -> None:
    for proc, _ in nodes:
        if proc.poll() is None:
            proc.terminate()
    for proc, _ in nodes:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def run_demo(out: Path, requests: int = 2000, seed: int = 1) -> int:
    # imported here, not at the top: every drtp command registers this module's parser on start-up
    import yaml

    from drtp.config import load_config
    from drtp.master.run.replay import run_replay
    from drtp.master.run.warmup import run_warmup
    from drtp.registry.local import LocalRegistry
    from drtp.trace.generate import GenerateOptions, generate
    from drtp.trace.reader import TraceReader, write_ibm
    from drtp.trace.summary import format_summary, summarize

    out.mkdir(parents=True, exist_ok=True)
    trace = out / "trace.json"
    opts = GenerateOptions(
        requests=requests, seed=seed, span_s=600, clients=20, repositories=30, max_layer_size=2 << 20
    )
    n = write_ibm(trace, generate(opts))
    print(f"[1/5] generated {n:,} requests → {trace}")
    summary = summarize(TraceReader([trace]).batches())
    (out / "trace-summary.json").write_text(json.dumps(summary, indent=2))
    print("[2/5] trace summary:")
    print("      " + format_summary(summary).replace("\n", "\n      "))
    token = secrets.token_hex(16)
    with LocalRegistry(out / "registry") as reg:
        rt = registry_roundtrip(reg.host)
        (out / "registry-check.json").write_text(json.dumps(rt, indent=2))
        nodes = start_nodes(2, token, out)
        print(f"[3/5] registry {reg.url}; client nodes {', '.join(a for _, a in nodes)}")
        try:
            config = {
                "trace": {"location": ".", "traces": [trace.name]},
                "registry": [reg.host],
                "client_info": {
                    "client_list": [a for _, a in nodes],
                    "threads": 16,
                    "wait": False,
                    "route": True,
                    "token": "${DRTP_TOKEN}",
                },
                "warmup": {"output": "warmup-map.jsonl", "threads": 8, "random": True},
                "results": ".",
            }
            (out / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
            os.environ["DRTP_TOKEN"] = token
            cfg = load_config(out / "config.yaml")
            (out / "warmup-map.jsonl").unlink(missing_ok=True)  # a new registry each demo
            print("[4/5] warmup:")
            run_warmup(cfg)
            print("[5/5] replay (as fast as possible, hash routing):")
            run_replay(cfg, out / "run")
        finally:
            stop_nodes(nodes)
    import matplotlib

    matplotlib.use("Agg")
    from drtp.analysis.results_analysis import analyze_results

    analyze_results([out / "run"], out / "analysis", [str(trace)], log=lambda *_: None)
    print(f"plots and report.html (measured beside the trace's own latencies) in {out / 'analysis'}/")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    apply_progress_options(args)
    prepare_output_dir(Path(args.out), "--out")
    return run_demo(Path(args.out), requests=args.requests, seed=args.seed)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the main job on a local registry: generate, start a registry, replay, summarise")
    p.add_argument("--out", default="results/demo", help="output directory (default results/demo)")
    p.add_argument("--requests", type=positive_int, default=2000, help="trace length (default 2000)")
    p.add_argument("--seed", type=int, default=1)
    add_progress_options(p)
    p.set_defaults(func=cmd_demo)
