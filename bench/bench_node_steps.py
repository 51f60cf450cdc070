"""A client node's per-request steps on and off: one engine in one process, CPU µs per request.

What a node does per trace request in stress mode, without the control plane and the master: a run of
the engine under test (``LoopRun`` or the threads engine's ``NodeRun``) gets batches of GETs as the
master sends them (200 a batch, at most 2,000 out), sends them to a real registry on loopback and
hands its results to a stand-in of the node's result stream (client/server.py ``results``: ``gather``,
``FrameBuilder.frame`` with the health parts, msgpack).  The process's CPU (user + system, every
thread, ``time.process_time``) from the first batch to the stream's last frame ÷ requests.

Variants, each a switch a run has (``client``: the client model) or a step switched off here only, to
see what it costs (bench-only stand-ins, never how a run behaves):

* ``as-is`` — the tree's node as a run uses it (``client_concurrency: trace``, the default);
* ``unlimited`` — ``client_concurrency: unlimited`` (no per-client order);
* ``no-health`` — replayer health's ticks not started (no lag ticks, no sampler thread);
* ``no-spans`` — the requests without their trace spans (``trace_start``/``trace_end``: every request
  overlaps nothing, as a trace without durations);
* ``agent`` — a client profile's User-Agent on every request (``user_agent`` of the client model);
* ``pools`` — connections per trace client (``connections: 1``, as the containerd profile);
* ``live`` — live-metric parts in every frame (``RunSpec.live``, as with ``--metrics-port``).

Rounds alternate the variants (in order, then reversed…); the table gives each one's median, min–max
and its median − ``as-is``'s.  ``--callgrind`` instead runs each variant once at ``--requests`` and
at twice that under valgrind's callgrind and gives the instructions per request (the difference ÷
``--requests``: start-up cancels out), which a loaded machine does not move.

Usage: python bench/bench_node_steps.py [--engine loop threads] [--kind manifest blob] [--requests 4000]
       [--rounds 5] [--variants as-is unlimited ...] [--callgrind]   (needs docker-registry; valgrind for
       --callgrind)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("as-is", "unlimited", "no-health", "no-spans", "agent", "pools", "live")
BATCH = 200
INFLIGHT = 2000


def requests_of(kind: str, n: int, host: str, digest: str | None) -> list:
    """``n`` GETs of the bench's one manifest or blob by 500 trace clients, spans as a generated trace's."""
    from drtp.replay.messages import ReplayRequest

    repo, ref, size = ("bench/small", "latest", 1000) if kind == "manifest" else ("bench/big", "layer300k", 300_000)
    return [
        ReplayRequest(i, f"r{i}", f"c{i % 500:05d}", "GET", kind, "get", host, repo, ref, size, 200,
                      digest=digest, object_size=None, trace_start=i * 0.001, trace_end=i * 0.001 + 0.001)
        for i in range(n)
    ]  # fmt: skip


def one_run(engine: str, kind: str, n: int, host: str, digest: str | None, variant: str) -> float:
    """One run of ``n`` requests under ``variant``: CPU µs per request."""
    from drtp.client.loop_engine import LoopRun
    from drtp.client.scheduler import NodeRun
    from drtp.replay.frames import gather
    from drtp.replay.messages import UNLIMITED, ClientModel, RunSpec

    live = {"live": True} if variant == "live" else {}  # (an older tree's RunSpec has no ``live``)

    model = ClientModel()
    if variant == "unlimited":
        model = ClientModel(concurrency=UNLIMITED)
    elif variant == "agent":
        model = ClientModel(user_agent="containerd/v1.7.0")
    elif variant == "pools":
        model = ClientModel(connections=1)
    spec = RunSpec(f"steps-{variant}", time.time(), threads=16, engine=engine, client=model, timeout=30, **live)
    reqs = requests_of(kind, n, host, digest)
    if variant == "no-spans":
        reqs = [msgspec.structs.replace(r, trace_start=None, trace_end=None) for r in reqs]
    if variant == "no-health":
        from drtp.client.health import HealthMeter

        HealthMeter.start_on_loop = lambda self, loop: None  # bench-only: no ticks
        HealthMeter.start_thread = lambda self, name: None
    cpu0 = time.process_time()
    run = LoopRun(spec) if engine == "loop" else NodeRun(spec)
    sizes = []
    framed = threading.Condition()  # a frame went: the feeder looks whether a batch fits (no polling to count)

    def stream() -> None:  # client/server.py ``results``, without the HTTP response around it
        frames, health, last_sent = run.frames, getattr(run, "health", None), 0.0  # (an older tree has no health)
        while True:
            item = run.results.get()
            finished, ended = gather(item, run.results, last_sent, False)
            if finished:
                sizes.append(len(frames.frame(finished, health.take()) if health else frames.frame(finished)))
                last_sent = time.monotonic()
                with framed:
                    framed.notify()
            if ended:
                if health:
                    health.finish()
                sizes.append(len(frames.last(health.take()) if health else frames.last()))
                return

    reader = threading.Thread(target=stream)
    reader.start()
    sent = 0
    while sent < n:  # as the master's feeder: a whole batch once it fits under the cap (looked at after each frame)
        with framed:
            framed.wait_for(lambda s=sent: s - run.done <= INFLIGHT - BATCH)
        run.submit(reqs[sent : sent + BATCH])
        sent += BATCH
    run.end()
    reader.join()
    cpu = time.process_time() - cpu0
    return cpu / n * 1e6


def child_main(args: list[str]) -> None:
    engine, kind, n, host, digest, variant = args
    print(json.dumps({"us": one_run(engine, kind, int(n), host, digest or None, variant)}))


def run_child(engine: str, kind: str, n: int, host: str, digest: str, variant: str, callgrind: bool) -> float:
    """One variant in a fresh process: µs per request, or instructions (callgrind's total) when ``callgrind``."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", engine, kind, str(n), host, digest, variant]
    if callgrind:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "cg.out"
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *cmd]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
            if proc.returncode:
                raise RuntimeError(proc.stderr[-3000:])
            m = re.search(r"^summary:\s*(\d+)", out.read_text(), re.M)
            return float(m.group(1))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])["us"]


def prepare(work: Path, reg) -> str:
    """Push the bench's manifest and blob (drtp warmup of bench_replay's two stress cases); the blob's digest."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_replay import case_trace, config, warm_map

    from drtp.config import load_config
    from drtp.master.run.warmup import run_warmup

    os.environ.setdefault("DRTP_TOKEN", os.urandom(16).hex())
    digest = ""
    for uri, size in (("v2/bench/small/manifests/latest", 1000), ("v2/bench/big/blobs/layer300k", 300_000)):
        sub = work / str(size)
        sub.mkdir()
        trace = sub / "t.json"
        case_trace(trace, 10, uri, size)
        cfg = load_config(config(sub, trace, reg.host, ["127.0.0.1:1"], 16, wait=False))
        run_warmup(cfg, quiet=True)
        if size > 1000:
            digest = warm_map(cfg)[("bench/big", "blob", "layer300k")]
    return digest


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", nargs="+", choices=("loop", "threads"), default=["loop", "threads"])
    ap.add_argument("--kind", nargs="+", choices=("manifest", "blob"), default=["manifest", "blob"])
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    ap.add_argument("--callgrind", action="store_true", help="instructions per request under callgrind instead")
    a = ap.parse_args()
    from drtp.registry.local import LocalRegistry

    with tempfile.TemporaryDirectory(prefix="drtp-steps-") as tmp, LocalRegistry(Path(tmp) / "reg") as reg:
        digest = prepare(Path(tmp), reg)
        unit = "instructions/request" if a.callgrind else "CPU µs/request"
        import drtp

        tree = Path(drtp.__file__).resolve().parent.parent
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {unit}; drtp of {tree}")
        print("| engine | kind | variant | median | range | − as-is |")
        print("|---|---|---|---|---|---|")
        for engine in a.engine:
            for kind in a.kind:
                blob_digest = digest if kind == "blob" else ""
                got: dict[str, list[float]] = {v: [] for v in a.variants}
                if a.callgrind:
                    for v in a.variants:
                        one = run_child(engine, kind, a.requests, reg.host, blob_digest, v, True)
                        two = run_child(engine, kind, 2 * a.requests, reg.host, blob_digest, v, True)
                        got[v].append((two - one) / a.requests)
                else:
                    run_child(engine, kind, a.requests, reg.host, blob_digest, "as-is", False)  # warm the registry
                    for i in range(a.rounds):
                        for v in a.variants if i % 2 == 0 else reversed(a.variants):
                            got[v].append(run_child(engine, kind, a.requests, reg.host, blob_digest, v, False))
                base = statistics.median(got["as-is"]) if "as-is" in got else None
                for v, xs in got.items():
                    med = statistics.median(xs)
                    delta = f"{med - base:+.1f}" if base is not None else ""
                    spread = f"{min(xs):.1f}–{max(xs):.1f}"
                    print(f"| {engine} | {kind} | {v} | {med:.1f} | {spread} | {delta} |", flush=True)
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
