"""A client node's CPU per request, before and after a change: two commits of drtp side by side, rounds alternated.

Why two commits in one run: on two shared cores a CPU figure moves with whatever else
runs, so a figure from yesterday's run says little about today's change.  Each commit is
exported (``git archive``) into a folder of its own laid out as the installed package
(``drtp/master`` → ``master/``…) and run from there (``PYTHONPATH``), in alternated
rounds (A B, B A, A B…), so both see the same machine; the table gives each side's
median and spread (min–max) over its rounds and the ratio of the medians.

Two parts:

* ``result`` — the node's own work per finished request, in one process: the result
  made from the registry's answer (``client.executor.result_of``) and the result frames
  (``drtp.replay.frames.FrameBuilder``: rows, CSV text, the node's results model, the
  per-interval figures), frames of up to 1,024 results as a busy stress run sends them;
  CPU µs per request (``time.process_time``), no network.  2 % of the answers are 404s
  of requests that expected 200 (failed), the rest 200s.
* ``stress`` — ``drtp run`` in stress mode (event-loop engine, 2 nodes × 16 slots) of
  the successful GETs of a generated trace against one real registry on loopback,
  warmed once; nodes and master of the commit under test; both nodes' user + system CPU
  over the run (``/proc``) ÷ requests, and the master's (this round's own process CPU
  over ``run_replay``) ÷ requests;
* ``threads`` — the same with the threads engine (the as-is engine, here without waits):
  its per-node sampler thread (replayer health) is that engine's own cost.

Replayer health (the nodes' CPU and lag sampling, the master's CPU sampling) costs a tick every 10 ms per
node and one wake per interval on the master: ``--before`` a commit without it, ``--after`` one with it
shows whether it shows beyond the rounds' spread.

Usage: python bench/bench_node_cpu.py --before COMMIT [--after COMMIT] [--rounds 5] [--requests 6000]
       [--part result stress threads] [--json]   (from a source checkout; ``stress`` needs docker-registry)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("master", "client", "plugins", "analysis")  # top-level folders installed as drtp.<name> (setup.py)


def export(commit: str, dest: Path) -> Path:
    """``commit``'s tree in ``dest``, importable as the installed package is (``PYTHONPATH=dest``)."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    for part in PARTS:
        (dest / "drtp" / part).symlink_to(dest / part, target_is_directory=True)
    (dest / "drtp" / "slurm").symlink_to(dest / "slurm", target_is_directory=True)
    return dest


def child(tree: Path, *args: str) -> dict:
    """This script's ``--child`` mode under ``tree``'s drtp; its JSON answer."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
        timeout=900,
    )
    if proc.returncode:
        raise RuntimeError(f"round under {tree} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- the child: one round under one commit's drtp ----------------------------------------------------------


def result_round(n: int) -> dict:
    """CPU µs per request of making results and frames for ``n`` answers (after one warm-up pass)."""
    import drtp
    from drtp.client.executor import result_of
    from drtp.registry.transport import Response
    from drtp.replay.frames import Finished, FrameBuilder
    from drtp.replay.messages import ReplayRequest, RunSpec

    reqs = [
        ReplayRequest(i, f"id{i}", f"10.0.{i % 250}.1", "GET", "blob" if i % 3 else "manifest", "get",
                      "127.0.0.1:5000", f"repo{i % 50}", f"ref{i}", 4096, 200, digest=f"sha256:{i:064x}")
        for i in range(n)
    ]  # fmt: skip
    headers = {"content-length": "4096", "docker-content-digest": "sha256:" + "0" * 64}
    answers = [Response(404 if i % 50 == 0 else 200, headers, 0 if i % 50 == 0 else 4096) for i in range(n)]

    def once() -> float:
        builder = FrameBuilder(RunSpec("bench", 0.0, node="n1", stats_interval_s=1.0))
        t0 = time.process_time()
        batch = []
        for i, (req, r) in enumerate(zip(reqs, answers, strict=True)):
            batch.append(Finished(req, result_of(req, r, i * 1e-4, 0.002 + (i % 97) * 1e-5, req.digest, [])))
            if len(batch) == 1024:
                builder.frame(batch)
                batch = []
        if batch:
            builder.frame(batch)
        builder.last()
        return (time.process_time() - t0) / n * 1e6

    once()
    return {"us_per_request": once(), "drtp": str(Path(drtp.__file__).parent)}


def stress_round(registry: str, trace: str, warm_map: str, work: str, engine: str = "loop") -> dict:
    """One stress replay under this commit's master and nodes: the nodes' and the master's CPU µs per request
    and the rate."""
    import shutil

    import yaml

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_replay import cpu_s

    from drtp.config import load_config
    from drtp.master.demo import start_nodes, stop_nodes
    from drtp.master.run import run_replay

    token = os.urandom(16).hex()
    os.environ["DRTP_TOKEN"] = token
    work_dir = Path(tempfile.mkdtemp(prefix="round-", dir=work))
    nodes = start_nodes(2, token, work_dir)
    try:
        shutil.copy(warm_map, work_dir / "warmup-map.jsonl")
        cfg = {
            "trace": {"location": str(Path(trace).parent), "traces": [Path(trace).name]},
            "registry": [registry],
            "client_info": {
                "client_list": [a for _, a in nodes],
                "threads": 16,
                "wait": False,
                "route": False,
                "token": "${DRTP_TOKEN}",
                "batch": 200,
                "inflight": 2000,
                "engine": engine,
            },
            "warmup": {"output": str(work_dir / "warmup-map.jsonl"), "threads": 4},
            "results": str(work_dir / "results"),
        }
        (work_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
        pids = [p.pid for p, _ in nodes]
        cpu0 = cpu_s(pids)
        master0 = time.process_time()
        s = run_replay(load_config(work_dir / "config.yaml"), work_dir / "run", quiet=True)
        master_us = (time.process_time() - master0) / max(1, s["requests"]) * 1e6
        node_us = (cpu_s(pids) - cpu0) / max(1, s["requests"]) * 1e6
    finally:
        stop_nodes(nodes)
    if s["failed"]:
        raise RuntimeError(f"{s['failed']} of {s['requests']} requests failed")
    return {"us_per_request": node_us, "master_us": master_us, "rps": s["throughput_rps"], "requests": s["requests"]}


# -- the parent: exports, the registry, alternated rounds, the table ----------------------------------------


def alternate(rounds: int, run_before, run_after) -> tuple[list[dict], list[dict]]:
    """``rounds`` of each, A B then B A and so on: neither side always runs first after the other."""
    before, after = [], []
    for i in range(rounds):
        pair = ((before, run_before), (after, run_after))
        for out, run in pair if i % 2 == 0 else reversed(pair):
            out.append(run())
    return before, after


def row(part: str, before: list[dict], after: list[dict], key: str = "us_per_request") -> dict:
    b = [r[key] for r in before]
    a = [r[key] for r in after]
    out = {
        "part": part,
        "rounds": len(b),
        "before_us": statistics.median(b),
        "before_spread": (min(b), max(b)),
        "after_us": statistics.median(a),
        "after_spread": (min(a), max(a)),
        "ratio": statistics.median(a) / statistics.median(b),
        "within_spread": min(b) <= statistics.median(a) <= max(b) or statistics.median(a) <= statistics.median(b),
    }
    if "rps" in before[0]:
        out["before_rps"] = statistics.median(r["rps"] for r in before)
        out["after_rps"] = statistics.median(r["rps"] for r in after)
    return out


def measure(before: str, after: str, rounds: int, requests: int, parts: list[str]) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="drtp-nodecpu-") as tmp:
        work = Path(tmp)
        trees = export(before, work / "before"), export(after, work / "after")
        if "result" in parts:
            runs = [lambda t=t: child(t, "result", str(requests * 5)) for t in trees]
            rows.append(row("result: result_of + frames (µs CPU/request)", *alternate(rounds, *runs)))
            print(format_rows(rows[-1:], before, after), file=sys.stderr)
        if "stress" in parts or "threads" in parts:
            sys.path.insert(0, str(ROOT / "bench"))
            from bench_replay import config, mixed_trace

            from drtp.config import load_config
            from drtp.master.warmup import run_warmup
            from drtp.registry.local import LocalRegistry

            with LocalRegistry(work / "registry") as reg:
                trace = work / "stress.json"
                mixed_trace(trace, requests)
                os.environ.setdefault("DRTP_TOKEN", os.urandom(16).hex())  # the config names it; no node here
                cfg = load_config(config(work, trace, reg.host, ["127.0.0.1:1"], 16, wait=False))
                run_warmup(cfg, quiet=True)
                warm = str(cfg.path(cfg.warmup.output))
                child(trees[0], "stress", reg.host, str(trace), warm, str(work))  # warm the registry's caches
                for part, engine in (("stress", "loop"), ("threads", "threads")):
                    if part not in parts:
                        continue
                    runs = [
                        lambda t=t, e=engine: child(t, "stress", reg.host, str(trace), warm, str(work), e)
                        for t in trees
                    ]
                    got = alternate(rounds, *runs)
                    rows.append(row(f"{part}: node CPU (µs/request, 2 nodes, {engine})", *got))
                    rows.append(row(f"{part}: master CPU (µs/request, {engine})", *got, key="master_us"))
                    print(format_rows(rows[-2:], before, after), file=sys.stderr)
    return rows


def format_rows(rows: list[dict], before: str, after: str) -> str:
    lines = [f"before = {before}, after = {after}; median of the rounds [min–max]"]
    for r in rows:
        lines.append(
            f"{r['part']}: before {r['before_us']:.2f} [{r['before_spread'][0]:.2f}–{r['before_spread'][1]:.2f}], "
            f"after {r['after_us']:.2f} [{r['after_spread'][0]:.2f}–{r['after_spread'][1]:.2f}], "
            f"ratio {r['ratio']:.3f}, {r['rounds']} rounds each"
            + (f"; req/s {r['before_rps']:.0f} → {r['after_rps']:.0f}" if "before_rps" in r else "")
        )
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, *args = sys.argv[2:]
        out = result_round(int(args[0])) if kind == "result" else stress_round(*args)
        print(json.dumps(out))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the commit before the change")
    ap.add_argument("--after", default="HEAD", help="the commit with the change (default HEAD: commit it first)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=6000, help="requests of a stress round (×5 for result)")
    ap.add_argument(
        "--part", nargs="+", choices=("result", "stress", "threads"), default=["result", "stress", "threads"]
    )
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = measure(a.before, a.after, a.rounds, a.requests, a.part)
    print(json.dumps(rows, indent=1) if a.json else format_rows(rows, a.before, a.after))


if __name__ == "__main__":
    main()
