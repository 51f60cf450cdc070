"""Node CPU per request in stress mode: client profiles' connections per trace client vs connections per slot.

The event-loop engine (``LoopRun``, stress mode's) runs in a child process against a real local registry
(another process, not counted) and replays small manifest GETs of many trace clients; the child's CPU
time over the run ÷ requests is the figure.  Variants, alternated round by round so that drift of the
machine hits each alike:

* ``base``: the same engine from another source tree (``--base``, e.g. ``git archive main``): the reference;
* ``drtp``: this tree, profile drtp (connections per slot, today's path);
* ``containerd``: this tree, profile containerd (2 kept connections per trace client, 30 s idle timeout);
* ``trace-agent``: this tree, profile drtp, each request with the trace's own User-Agent.

Reported: the median µs per request of each variant over the rounds, its spread (min..max) and the
ratio of medians against ``base`` in the same run.

Usage: python bench/bench_client_profiles.py --base DIR [--rounds 5] [--requests 20000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Runs in the child: imports drtp from ``tree`` (the editable install's mapping pointed there), replays
# ``n`` manifest GETs of ``clients`` trace clients on a LoopRun and prints its CPU seconds.
CHILD = r"""
import json, resource, sys, time
tree, registry, n, clients, variant = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
import __editable___drtp_0_1_0_finder as finder
for name, path in list(finder.MAPPING.items()):
    finder.MAPPING[name] = tree + path[path.index("/", len("/work/") + 1):] if path.startswith("/work/") else path
from drtp.client.loop_engine import LoopRun
from drtp.replay.messages import ReplayRequest, RunSpec
import drtp
assert drtp.__file__.startswith(tree), drtp.__file__
extra = {}
if variant == "containerd":
    from drtp.replay.messages import ClientModel
    extra["client"] = ClientModel(connections=2, idle_timeout_s=30.0, user_agent="containerd/1.6.20")
agent = "docker/17.06.0-ce go/go1.8.3" if variant == "trace-agent" else None
reqs = [
    ReplayRequest(i, f"t{i}", f"c{i % clients}", "GET", "manifest", "get", registry, "team/app", "v1", 0, 404,
                  user_agent=agent)
    for i in range(n)
]
run = LoopRun(RunSpec(run="b", start_epoch=time.time(), threads=16, timeout=10.0, engine="loop",
                      registries=[registry], **extra))
r0 = resource.getrusage(resource.RUSAGE_SELF)
w0 = time.perf_counter()
run.submit(reqs)
run.end()
done = ok = 0
while (item := run.results.get(timeout=60)) is not None:
    for f in (item if isinstance(item, list) else [item]):
        done += 1
        ok += f.result.ok
wall = time.perf_counter() - w0
r1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
print(json.dumps({"cpu_s": cpu, "wall_s": wall, "done": done, "ok": ok}))
"""


def one(tree: Path, registry: str, n: int, clients: int, variant: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree), registry, str(n), str(clients), variant],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        cwd="/",
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    if r["done"] != n or r["ok"] != n:
        raise SystemExit(f"{variant}: {r['ok']} of {n} requests ok ({r['done']} done)")
    return {"us_per_req": r["cpu_s"] / n * 1e6, "rps": n / r["wall_s"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="source tree of the reference (e.g. main)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from drtp.registry.local import LocalRegistry

    variants = [("base", args.base.resolve()), ("drtp", ROOT), ("containerd", ROOT), ("trace-agent", ROOT)]
    figures: dict[str, list[dict]] = {v: [] for v, _ in variants}
    with tempfile.TemporaryDirectory(prefix="drtp-bench-profiles-") as tmp, LocalRegistry(Path(tmp) / "reg") as reg:
        for r in range(args.rounds):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]  # a different first each round
            for variant, tree in order:
                figures[variant].append(one(tree, reg.host, args.requests, args.clients, variant))
    base = statistics.median(x["us_per_req"] for x in figures["base"])
    table = {
        v: {
            "us_per_req_median": statistics.median(x["us_per_req"] for x in runs),
            "us_per_req_min": min(x["us_per_req"] for x in runs),
            "us_per_req_max": max(x["us_per_req"] for x in runs),
            "rps_median": statistics.median(x["rps"] for x in runs),
            "ratio_to_base": statistics.median(x["us_per_req"] for x in runs) / base,
        }
        for v, runs in figures.items()
    }
    if args.json:
        print(json.dumps({"rounds": args.rounds, "requests": args.requests, "variants": table}, indent=1))
        return
    print(f"node CPU per request, LoopRun, {args.requests} manifest GETs, {args.clients} clients, {args.rounds} rounds")
    print(f"{'variant':<12} {'µs/req median':>14} {'min..max':>16} {'req/s':>8} {'× base':>7}")
    for v, t in table.items():
        spread = f"{t['us_per_req_min']:.1f}..{t['us_per_req_max']:.1f}"
        median, rps, ratio = t["us_per_req_median"], t["rps_median"], t["ratio_to_base"]
        print(f"{v:<12} {median:>14.1f} {spread:>16} {rps:>8.0f} {ratio:>7.3f}")


if __name__ == "__main__":
    main()
