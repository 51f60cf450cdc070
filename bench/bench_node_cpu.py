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

``stress`` and ``threads`` run each ``--mix``: ``manifest`` (GETs of one ~1 KB manifest by 500
trace clients), ``blob`` (GETs of one 300 KB blob) and ``mixed`` (the generated trace's GETs).
Beside them, in the same rounds (A B W, W B A…), ``wrk`` sends the same GETs over plain http to
the same registry at the same concurrency (32 connections, its CPU from ``getrusage`` of its
process) unless ``--no-wrk``: the table gives each commit's node CPU ÷ wrk's, the least CPU a
load generator needs per request on this machine.

Replayer health (the nodes' CPU and lag sampling, the master's CPU sampling) costs a tick every 10 ms per
node and one wake per interval on the master: ``--before`` a commit without it, ``--after`` one with it
shows whether it shows beyond the rounds' spread.

Usage: python bench/bench_node_cpu.py --before COMMIT [--after COMMIT] [--rounds 5] [--requests 6000]
       [--part result stress threads] [--mix manifest blob mixed] [--no-wrk] [--json]
       (from a source checkout; ``stress`` and ``threads`` need docker-registry, the wrk column wrk)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
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
    from layout import drtp_module

    from drtp.config import load_config

    start_nodes = drtp_module("drtp.master.commands.demo").start_nodes
    stop_nodes = drtp_module("drtp.master.commands.demo").stop_nodes
    run_replay = drtp_module("drtp.master.run.replay").run_replay

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

# the stress mixes: (trace URI, object size) of bench_replay's stress cases; None: the generated trace's GETs
MIXES = {
    "manifest": ("v2/bench/small/manifests/latest", 1000),
    "blob": ("v2/bench/big/blobs/layer300k", 300_000),
    "mixed": (None, None),
}
WRK_CONNECTIONS = 32  # the nodes' 2 × 16 slots


def alternate(rounds: int, *runs) -> list[list[dict]]:
    """``rounds`` of each runner, in order then reversed and so on (A B W, W B A…): none always runs first."""
    out: list[list[dict]] = [[] for _ in runs]
    pairs = list(zip(out, runs, strict=True))
    for i in range(rounds):
        for got, run in pairs if i % 2 == 0 else reversed(pairs):
            got.append(run())
    return out


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


def wrk_round(url: str, paths: list[str] | None, seconds: int) -> dict:
    """wrk's CPU µs per request (and rate) for the same GETs at the nodes' concurrency."""
    from bench_replay import wrk_run

    rps, us = wrk_run(url, WRK_CONNECTIONS, seconds, paths)
    return {"us_per_request": us, "rps": rps}


def with_wrk(r: dict, wrk: list[dict] | None) -> dict:
    """The row with wrk's median and spread and each side's median ÷ wrk's."""
    if not wrk:
        return r
    w = [x["us_per_request"] for x in wrk]
    med = statistics.median(w)
    return r | {
        "wrk_us": med,
        "wrk_spread": (min(w), max(w)),
        "before_x_wrk": r["before_us"] / med,
        "after_x_wrk": r["after_us"] / med,
    }


def measure(
    before: str, after: str, rounds: int, requests: int, parts: list[str], mixes: list[str], wrk: bool = True
) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="drtp-nodecpu-") as tmp:
        work = Path(tmp)
        trees = export(before, work / "before"), export(after, work / "after")
        if "result" in parts:
            runs = [lambda t=t: child(t, "result", str(requests * 5)) for t in trees]
            rows.append(row("result: result_of + frames (µs CPU/request)", *alternate(rounds, *runs)))
            print(format_rows(rows[-1:], before, after), file=sys.stderr)
        engines = [(p, e) for p, e in (("stress", "loop"), ("threads", "threads")) if p in parts]
        if not engines:
            return rows
        sys.path.insert(0, str(ROOT / "bench"))
        from bench_replay import case_trace, config, warm_map, wrk_run
        from layout import drtp_module

        from drtp.config import load_config

        run_warmup = drtp_module("drtp.master.run.warmup").run_warmup
        from drtp.registry.local import LocalRegistry
        from drtp.trace.reader import TraceReader

        if wrk and not shutil.which("wrk"):
            raise SystemExit("wrk is not installed (apt-get install -y wrk), or pass --no-wrk")
        with LocalRegistry(work / "registry") as reg:
            os.environ.setdefault("DRTP_TOKEN", os.urandom(16).hex())  # the config names it; no node here
            for mix in mixes:
                uri, size = MIXES[mix]
                mix_dir = work / f"mix-{mix}"
                mix_dir.mkdir()
                trace = mix_dir / f"stress-{mix}.json"
                case_trace(trace, requests, uri, size)
                cfg = load_config(config(mix_dir, trace, reg.host, ["127.0.0.1:1"], 16, wait=False))
                run_warmup(cfg, quiet=True)
                warm = str(cfg.path(cfg.warmup.output))
                mapping = warm_map(cfg)
                paths = sorted({_url_path(r, mapping) for r in TraceReader([trace])})
                url, wrk_paths = f"{reg.url}{paths[0]}", (paths if len(paths) > 1 else None)
                child(trees[0], "stress", reg.host, str(trace), warm, str(work))  # warm the registry's caches
                if wrk:
                    wrk_run(url, WRK_CONNECTIONS, 2, wrk_paths)
                seconds = 4 if mix == "manifest" else 6
                for part, engine in engines:
                    runs = [partial(child, t, "stress", reg.host, str(trace), warm, str(work), engine) for t in trees]
                    if wrk:
                        runs.append(partial(wrk_round, url, wrk_paths, seconds))
                    got = alternate(rounds, *runs)
                    w = got[2] if wrk else None
                    r = with_wrk(row(f"{part}: node CPU (µs/request, 2 nodes, {engine})", got[0], got[1]), w)
                    rows.append(r | {"mix": mix, "engine": engine, "who": "node"})
                    m = row(f"{part}: master CPU (µs/request, {engine})", got[0], got[1], key="master_us")
                    rows.append(m | {"mix": mix, "engine": engine, "who": "master"})
                    print(format_rows(rows[-2:], before, after), file=sys.stderr)
    return rows


def _url_path(rec, mapping: dict) -> str:
    from bench_replay import url_path

    return url_path(rec, mapping)


def _spread(lo: float, hi: float) -> str:
    return f"{lo:.1f}–{hi:.1f}"


def format_rows(rows: list[dict], before: str, after: str) -> str:
    """A markdown table: commit × engine × mix → CPU µs per request (median, min–max) and ÷ wrk's median."""
    lines = [
        f"before = {before}, after = {after}; CPU µs per request, median of the rounds [min–max]; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        "",
        "| part | mix | commit | median µs | range | ÷ wrk | req/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mix = r.get("mix", "")
        for side, commit in (("before", before), ("after", after)):
            lo, hi = r[f"{side}_spread"]
            x = f"{r[f'{side}_x_wrk']:.2f}×" if f"{side}_x_wrk" in r else ""
            rps = f"{r[f'{side}_rps']:.0f}" if f"{side}_rps" in r else ""
            med = r[f"{side}_us"]
            lines.append(f"| {r['part']} | {mix} | {commit} | {med:.1f} | {_spread(lo, hi)} | {x} | {rps} |")
        if "wrk_us" in r:
            lines.append(f"| {r['part']} | {mix} | wrk | {r['wrk_us']:.1f} | {_spread(*r['wrk_spread'])} | 1.00× | |")
        lines.append(f"| {r['part']} | {mix} | after ÷ before | {r['ratio']:.3f} | | | |")
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
    ap.add_argument("--mix", nargs="+", choices=tuple(MIXES), default=["manifest", "blob"])
    ap.add_argument("--no-wrk", action="store_true", help="leave wrk's column out")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = measure(a.before, a.after, a.rounds, a.requests, a.part, a.mix, wrk=not a.no_wrk)
    print(json.dumps(rows, indent=1) if a.json else format_rows(rows, a.before, a.after))


if __name__ == "__main__":
    main()
