"""The master's CPU per request when neither the registry nor the nodes limit it.

The client nodes are stand-ins: real ``drtp client`` services (the real control
plane, signature checks, batches, the real result stream and its encoder) whose
run engine finishes every request at once with a made-up success instead of
sending it to a registry.  The master is the real ``drtp run`` (trace reader,
planner, router, results writer, summary, stats history), in this process; its
CPU over the run ÷ the trace's requests is the figure.  The stand-ins run in
their own processes, so their CPU is not counted.

Rows: 1, 2 and 4 stand-in nodes at full speed, and the stand-ins paced to a
total of ``--rates`` requests/s (a slow registry's rate), to show the cost per
request stays flat (no fixed cost per frame or per event that grows when frames
carry few results).

With ``--before COMMIT [--after COMMIT]`` it compares two commits of drtp instead: each exported into a folder of
its own (``git archive``, as ``bench_node_cpu.py`` does) and run from there (``PYTHONPATH``), its master and
stand-ins both, in alternated rounds (A B, B A, …) on one trace and one registry stand-in, so both sides see
the same machine; per side the master's CPU µs per dispatched request and the requests/s one master core
keeps up with (10⁶ ÷ µs), median and range over the rounds, and the load average before and after.  With
``--instructions`` also the instructions the master executes per request (valgrind's callgrind, a run of
``--requests`` less one of a fifth of them, so start-up drops out): they repeat where CPU times on a shared
machine do not.

With ``--live-rounds N`` it measures instead what live metrics (``--metrics-port``) cost: N rounds with
them off and N with them on, alternated (off, on, off, on, …) on the same trace and stand-ins, the
master's CPU per request (the exporter listens, and the master adds the frames' parts) and the stand-ins'
(their frame builders count the parts), so the difference can be read against the spread of the rounds.

Usage: python bench/bench_master.py [--requests 100000] [--nodes 1 2 4] [--rates 20000 2000]
       python bench/bench_master.py --live-rounds 3 [--requests 100000] [--nodes 2] [--rates 2000]
       python bench/bench_master.py --before COMMIT [--after HEAD] [--rounds 7] [--requests 100000] [--nodes 1]
                                    [--instructions]   (callgrind: needs valgrind; minutes per side)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from unittest.mock import patch

import yaml
from prometheus_client.parser import text_string_to_metric_families

# from a source checkout; appended, so that a round of --before/--after runs its own tree (PYTHONPATH) first
sys.path.append(str(Path(__file__).resolve().parents[1]))

from drtp.registry.local import free_port  # noqa: E402
from drtp.trace.generate import GenerateOptions, generate  # noqa: E402
from drtp.trace.reader import TraceReader, write_ibm  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_replay import cpu_s  # noqa: E402
from layout import drtp_module  # noqa: E402

run_replay = drtp_module("drtp.master.run.replay").run_replay

TOKEN = "bench-master-token-0123456789abcdef"

STAND_IN = r"""
import sys, threading, time, logging
from collections import deque
from drtp.client import server, scheduler
from drtp.replay.messages import ReplayResult

try:
    from drtp.replay.frames import Finished
except ImportError:  # an older tree: the stream takes bare results
    Finished = None

RATE = float(sys.argv[2])  # requests/s this stand-in finishes; 0: at once


class InstantRun(scheduler.RunBook):
    # finishes every request with a made-up success: no registry, no HTTP
    def __init__(self, spec):
        super().__init__(spec)
        self.lock = threading.Lock()
        self.todo = deque()
        self.ready = deque()
        if RATE:
            threading.Thread(target=self._pace, daemon=True).start()

    def submit(self, requests):
        now = self.clock()
        if not RATE:
            out = [self._finish(req, now) for req in requests]
            with self.lock:
                self.done += len(out)
                for item in out:
                    self.results.put(item)
            return
        with self.lock:
            self.todo.extend(requests)
            self.queued += len(requests)

    def _finish(self, req, now):
        res = ReplayResult(req.seq, req.expected_status, True, now, 0.0005, bytes=req.size)
        return Finished(req, res) if Finished else res

    def _pace(self):
        t0 = time.monotonic()
        sent = 0
        while True:
            due = int((time.monotonic() - t0) * RATE) - sent
            with self.lock:
                take = [self.todo.popleft() for _ in range(min(due, len(self.todo)))]
                self.queued -= len(take)
            if take:
                now = self.clock()
                batch = [self._finish(r, now) for r in take]
                self.results.put(batch)
                sent += len(take)
                with self.lock:
                    self.done += len(take)
            elif self.ended and not self.todo:
                break
            else:
                if not self.todo:
                    t0, sent = time.monotonic(), 0  # idle: no catching up for the time nothing was queued
                time.sleep(0.002)
        self.results.put(None)

    def end(self):
        self.ended = True
        if not RATE:
            self.results.put(None)

    def cancel(self):
        self.end()


server.NodeRun = InstantRun
server.LoopRun = InstantRun
logging.basicConfig(level=logging.WARNING)
svc = server.NodeService(sys.argv[3])
svc.serve("127.0.0.1", int(sys.argv[1]))
"""


class _Ok(BaseHTTPRequestHandler):
    """The registry the preflight check asks (``GET /v2/``): nothing else reaches it."""

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format, *args) -> None:  # noqa: A002
        pass


def stand_ins(n: int, rate: float) -> tuple[list[str], list[subprocess.Popen]]:
    ports = [free_port() for _ in range(n)]
    procs = [
        subprocess.Popen([sys.executable, "-c", STAND_IN, str(p), str(rate / n if rate else 0), TOKEN]) for p in ports
    ]
    import socket

    for p in ports:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", p), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
    return [f"127.0.0.1:{p}" for p in ports], procs


def one_run(work: Path, trace: Path, registry: str, n_nodes: int, rate: float, live: bool | None = None) -> dict:
    """One run; ``live`` True/False: with live metrics on/off (None: a tree without them, no argument given)."""
    nodes, procs = stand_ins(n_nodes, rate)
    exporter = None
    try:
        name = f"n{n_nodes}-r{int(rate)}" + ("" if live is None else f"-live{int(live)}")
        cfg = {
            "trace": {"location": str(trace.parent), "traces": [trace.name]},
            "registry": [registry],
            "client_info": {"client_list": nodes, "wait": False, "token": TOKEN, "threads": 16},
            "warmup": {"output": str(work / "map.jsonl")},
            "results": str(work / "results"),
        }
        path = work / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        from drtp.config import load_config

        extra = {}
        if live:
            live_metrics = drtp_module("drtp.master.outputs.live_metrics")
            LiveMetrics, LiveSettings = live_metrics.LiveMetrics, live_metrics.LiveSettings

            exporter = LiveMetrics(LiveSettings(free_port(), linger_s=0))
            exporter.start()
            extra["live"] = exporter
        nodes_before = cpu_s([p.pid for p in procs])
        before = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        s = run_replay(load_config(path), work / f"run-{name}", quiet=True, **extra)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_SELF)
        nodes_cpu = cpu_s([p.pid for p in procs]) - nodes_before
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if exporter is not None:  # the exporter counted every request the run did
            page = urllib.request.urlopen(exporter.settings.url, timeout=10).read().decode()
            counted = sum(
                sample.value
                for family in text_string_to_metric_families(page)
                for sample in family.samples
                if sample.name == "drtp_requests_total"
            )
            assert counted == s["requests"], (counted, s["requests"])
        return {
            "nodes": n_nodes,
            "paced_rps": rate or None,
            "live": live,
            "requests": s["requests"],
            "failed": s["failed"],
            "rate_rps": s["requests"] / wall,
            "master_cpu_us_per_req": cpu / max(1, s["requests"]) * 1e6,
            "nodes_cpu_us_per_req": nodes_cpu / max(1, s["requests"]) * 1e6,
        }
    finally:
        if exporter is not None:
            exporter.stop()
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()


def reading_us(trace: Path) -> float:
    """CPU µs per record of reading ``trace`` with drtp's TraceReader (best of three passes)."""
    best = float("inf")
    for _ in range(3):
        t0, n = time.process_time(), 0
        for batch in TraceReader([trace]).batches():
            n += len(batch)
        best = min(best, (time.process_time() - t0) / max(1, n) * 1e6)
    return best


def measure(requests: int = 100_000, nodes: tuple = (1, 2, 4), rates: tuple = (20_000, 2_000),
            paced_requests: int = 20_000) -> dict:  # fmt: skip
    """{"runs": one row per run, "read_us_per_req": the baseline}: ``nodes`` stand-ins at full speed over
    ``requests``, then two stand-ins paced to each of ``rates`` (total req/s) over ``paced_requests``.  The
    baseline is the CPU per record of reading the same trace (drtp's TraceReader, best of three passes): the
    least any master must spend per request."""
    rows = []
    with stand_in_registry("drtp-bench-master-", requests, paced_requests) as (work, registry, full, paced):
        read_us = reading_us(full)
        for n in nodes:
            rows.append(one_run(work, full, registry, n, 0))
        for rate in rates:
            rows.append(one_run(work, paced, registry, 2, rate))
    return {"runs": rows, "read_us_per_req": read_us}


@contextlib.contextmanager
def stand_in_registry(prefix: str, requests: int, paced_requests: int):
    """(work dir, the address of a registry stand-in answering 200 to everything, a trace of ``requests`` for
    full speed, one of ``paced_requests`` for paced runs), the stand-in shut down after."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp, patch.dict(os.environ, {"DRTP_TOKEN": TOKEN}):
        work = Path(tmp)
        (work / "map.jsonl").write_text("")
        srv = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            full = work / "full.json"
            write_ibm(full, generate(GenerateOptions(requests=requests, seed=1, span_s=3600.0)))
            paced = work / "paced.json"
            write_ibm(paced, generate(GenerateOptions(requests=paced_requests, seed=2, span_s=3600.0)))
            yield work, f"127.0.0.1:{srv.server_port}", full, paced
        finally:
            srv.shutdown()


def measure_live(requests: int, nodes: tuple, rates: tuple, paced_requests: int, rounds: int) -> list[dict]:
    """Rows of alternated rounds, live metrics off then on, for each of ``nodes`` stand-ins at full speed and
    two stand-ins paced to each of ``rates``."""
    rows = []
    with stand_in_registry("drtp-bench-live-", requests, paced_requests) as (work, registry, full, paced):
        cases = [(full, n, 0.0) for n in nodes] + [(paced, 2, r) for r in rates]
        for trace, n, rate in cases:
            for i in range(rounds):
                for live in (False, True):
                    row = one_run(work, trace, registry, n, rate, live=live)
                    row["round"] = i + 1
                    rows.append(row)
    return rows


def print_live(rows: list[dict]) -> None:
    """Per case: each round's µs/req off and on, the medians, and the on/off ratio against the rounds' spread."""
    import statistics

    print(f"{'nodes':>5} {'paced':>6} {'who':>7} {'off µs/req (rounds)':>28} {'on µs/req (rounds)':>28} {'on/off':>7}")
    cases = sorted({(r["nodes"], r["paced_rps"] or 0) for r in rows}, key=lambda c: (c[1] != 0, c))
    for nodes, paced in cases:
        mine = [r for r in rows if r["nodes"] == nodes and (r["paced_rps"] or 0) == paced]
        for who, key in (("master", "master_cpu_us_per_req"), ("nodes", "nodes_cpu_us_per_req")):
            off = [r[key] for r in mine if not r["live"]]
            on = [r[key] for r in mine if r["live"]]
            shown = " ".join(f"{v:.1f}" for v in off), " ".join(f"{v:.1f}" for v in on)
            ratio = statistics.median(on) / statistics.median(off)
            print(f"{nodes:>5} {paced or 'full':>6} {who:>7} {shown[0]:>28} {shown[1]:>28} {ratio:>7.3f}")


def tree_round(tree: Path, work: Path, trace: Path, registry: str, n_nodes: int, callgrind: bool = False) -> dict:
    """One full-speed run under ``tree``'s drtp (master and stand-ins), in a process of its own; its row.
    ``callgrind``: the master's process runs under valgrind's callgrind (not the stand-ins), and the row
    gets ``instructions``, all the process executed, start-up included."""
    work.mkdir()
    (work / "map.jsonl").write_text("")
    wrap = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={work / 'callgrind.out'}"] if callgrind else []
    proc = subprocess.run(
        [
            *wrap,
            sys.executable,
            str(Path(__file__).resolve()),
            "--round",
            str(work),
            str(trace),
            registry,
            str(n_nodes),
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(tree)),
        cwd=tree,
        timeout=3600 if callgrind else 900,
    )
    if proc.returncode:
        raise RuntimeError(f"round under {tree} failed:\n{proc.stderr[-3000:]}")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    if not row["drtp"].startswith(str(tree)):
        raise RuntimeError(f"the round under {tree} imported drtp from {row['drtp']}")
    if callgrind:  # valgrind's last lines: "==pid== Collected : 1,234"
        collected = [line for line in proc.stderr.splitlines() if "Collected :" in line]
        row["instructions"] = int(collected[-1].rsplit(":", 1)[1].replace(",", ""))
    return row


def compare(before: str, after: str, rounds: int, requests: int, nodes: int, instructions: bool = False) -> dict:
    """Alternated rounds (A B, B A, …) of ``before`` and ``after`` at full speed against ``nodes`` stand-ins:
    {"rows": one per round, "load": the load averages before and after}; with ``instructions`` also
    {"instructions": per side, the instructions the master executes per request}, which on a shared machine
    repeat where CPU times do not: callgrind counts a run of ``requests`` and one of a fifth of them, and
    the difference ÷ the difference in requests leaves start-up out."""
    from bench_node_cpu import export

    rows = []
    per_request = {}
    load_before = os.getloadavg()
    small = max(1, requests // 5)
    with stand_in_registry("drtp-bench-master-ab-", requests, small) as (work, registry, full, short):
        commits = {"before": before, "after": after}
        trees = {side: export(commit, work / f"tree-{side}") for side, commit in commits.items()}
        for i in range(rounds):
            for side in ("before", "after") if i % 2 == 0 else ("after", "before"):
                row = tree_round(trees[side], work / f"round-{i}-{side}", full, registry, nodes)
                rows.append({**row, "side": side, "commit": commits[side], "round": i + 1})
        if instructions:
            for side, tree in trees.items():
                big = tree_round(tree, work / f"callgrind-{side}-full", full, registry, nodes, callgrind=True)
                low = tree_round(tree, work / f"callgrind-{side}-small", short, registry, nodes, callgrind=True)
                per_request[side] = (big["instructions"] - low["instructions"]) / (big["requests"] - low["requests"])
    res = {"rows": rows, "load": {"before": load_before, "after": os.getloadavg()}}
    if instructions:
        res["instructions"] = per_request
    return res


def print_compare(res: dict) -> None:
    """Per side: each round's µs per dispatched request, the median and range, and req/s per master core."""
    rows = res["rows"]
    print(f"{'side':>6} {'commit':>10} {'µs/req median (range)':>24} {'req/s per core median (range)':>32}  rounds")
    medians = {}
    for side in ("before", "after"):
        mine = [r for r in rows if r["side"] == side]
        us = [r["master_cpu_us_per_req"] for r in mine]
        med = medians[side] = statistics.median(us)
        rps = f"{1e6 / med:,.0f} ({1e6 / max(us):,.0f}–{1e6 / min(us):,.0f})"
        shown = " ".join(f"{v:.1f}" for v in us)
        print(f"{side:>6} {mine[0]['commit']:>10} {f'{med:.2f} ({min(us):.2f}–{max(us):.2f})':>24} {rps:>32}  {shown}")
    print(f"after ÷ before (medians): {medians['after'] / medians['before']:.3f}")
    if "instructions" in res:
        ins = res["instructions"]
        print(
            f"instructions per request (callgrind, master process): before {ins['before']:,.0f}, "
            f"after {ins['after']:,.0f}, after ÷ before {ins['after'] / ins['before']:.3f}"
        )
    load = res["load"]
    print(
        "load average before: {:.2f} {:.2f} {:.2f}; after: {:.2f} {:.2f} {:.2f}".format(*load["before"], *load["after"])
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--rates", type=float, nargs="+", default=[20_000, 2_000], help="paced total rates (req/s)")
    ap.add_argument("--paced-requests", type=int, default=20_000, help="trace length of the paced runs")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--live-rounds", type=int, help="measure live metrics off vs on: this many alternated rounds each")
    ap.add_argument("--before", help="compare two commits, alternated: the one before the change")
    ap.add_argument("--after", default="HEAD", help="the commit with the change (default HEAD: commit it first)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds per commit with --before")
    ap.add_argument(
        "--instructions", action="store_true", help="with --before: also count instructions per request (callgrind)"
    )
    ap.add_argument("--round", nargs=4, metavar=("WORK", "TRACE", "REGISTRY", "NODES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.round:  # one round of --before/--after, under the tree PYTHONPATH names
        import drtp

        work, trace, registry, n = args.round
        row = one_run(Path(work), Path(trace), registry, int(n), 0)
        print(json.dumps({**row, "drtp": str(Path(drtp.__file__).resolve().parent)}))
        return
    if args.before:
        res = compare(args.before, args.after, args.rounds, args.requests, args.nodes[0], args.instructions)
        print_compare(res)
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=2))
        return
    if args.live_rounds:
        rows = measure_live(args.requests, tuple(args.nodes), tuple(args.rates), args.paced_requests, args.live_rounds)
        print_live(rows)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=2))
        return
    res = measure(args.requests, tuple(args.nodes), tuple(args.rates), args.paced_requests)
    rows = res["runs"]
    print(f"reading the trace alone: {res['read_us_per_req']:.2f} µs/req")
    print(f"{'nodes':>5} {'paced req/s':>11} {'requests':>9} {'failed':>6} {'req/s':>9} {'master µs/req':>13}")
    for r in rows:
        paced = f"{r['paced_rps']:.0f}" if r["paced_rps"] else "full"
        print(f"{r['nodes']:>5} {paced:>11} {r['requests']:>9} {r['failed']:>6} {r['rate_rps']:>9.0f} "
              f"{r['master_cpu_us_per_req']:>13.1f}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
