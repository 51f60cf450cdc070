"""How often ``drtp warmup`` fails on a valid trace: N warmups, each on a fresh registry.

The trace is a generated one whose repositories each get several warmed tags
(tests/replay_support.py ``many_tags_trace``): the last ``--requests`` records of a generated
trace ten times longer (six repositories, many pushes, pulls of older images), so that pulls of
images pushed before the window make warmup push many manifests into one repository at once.
Every warmup runs on a fresh local Distribution registry with ``warmup.threads`` threads; a
warmup counts as failed when any object failed, or when a manifest its map lists cannot be
read back from the registry.  "config uploads" counts the uploads of drtp's minimal config
blob into the trace's repositories (the registry's log; the preflight's own push left out):
one per repository is the least a fresh registry needs.

For each failure the bench prints what the registry logged for the refused requests
(status, error code and the blob digest it names), so the cause is read from the
registry, not guessed; a digest equal to drtp's minimal config blob is marked ``(config)``.

Usage: python bench/bench_warmup_race.py [--runs 20] [--threads 8] [--requests 300] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drtp.master.run.warmup import Warmup, load_map, plan_warmup  # noqa: E402
from drtp.registry.calls import RegistryCalls  # noqa: E402
from drtp.registry.local import LocalRegistry, registry_binary  # noqa: E402
from drtp.registry.manifest import ACCEPT, CONFIG_DIGEST  # noqa: E402
from drtp.trace.reader import TraceReader  # noqa: E402
from tests.replay_support import many_tags_trace, write_config  # noqa: E402


def refused_in_log(log_path: Path) -> list[str]:
    """The registry's own account of each request it refused with 400: method, path, error code, detail."""
    out = []
    for line in log_path.read_bytes().splitlines():
        if not line.startswith(b"{"):
            continue
        entry = json.loads(line)
        if entry.get("http.response.status") != 400:
            continue
        detail = str(entry.get("err.detail", ""))
        mark = " (config)" if detail == CONFIG_DIGEST else ""
        uri = str(entry.get("http.request.uri", "")).split("?", 1)[0]
        out.append(f"{entry.get('http.request.method')} {uri}: {entry.get('err.code')} {detail}{mark}")
    return out


def unreadable_manifests(registry: str, map_path: Path) -> int:
    """Manifests the warmup map lists that the registry does not serve (a map entry must be true)."""
    client = RegistryCalls(registry)
    entries = [e for e in load_map(map_path) if e["kind"] == "manifest"]
    return sum(client.size("manifest", e["repository"], e["digest"], accept=ACCEPT) != e["size"] for e in entries)


def one_warmup(workdir: Path, trace: Path, threads: int) -> dict:
    with LocalRegistry(workdir / "registry") as reg:
        cfg = write_config(workdir, trace, [reg.host], ["127.0.0.1:1"])
        cfg.warmup.threads = threads
        w = Warmup(cfg, quiet=True)
        stats = w.run()
        unreadable = unreadable_manifests(reg.host, cfg.path(cfg.warmup.output))
        refused = refused_in_log(reg.log_path)
        config_puts = sum(
            1
            for line in reg.log_path.read_bytes().splitlines()
            if line.startswith(b"{")
            and (e := json.loads(line)).get("http.request.method") == "PUT"
            and "/blobs/uploads/" in str(e.get("http.request.uri", ""))
            and CONFIG_DIGEST.split(":")[1] in str(e.get("http.request.uri", ""))
            and "drtp-preflight/" not in str(e.get("http.request.uri", ""))  # the preflight's own push
        )
    return {
        "failed_objects": stats.failed,
        "unreadable": unreadable,
        "errors": stats.errors,
        "refused": refused,
        "manifests": stats.manifests,
        "config_puts": config_puts,
        "elapsed": w.elapsed,
    }


def measure(runs: int, threads_list: list[int], requests: int, seed: int, verbose: bool = True) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="drtp-warmup-race-") as tmp:
        d = Path(tmp)
        trace = many_tags_trace(d / "trace.json", requests, seed)
        plan = plan_warmup(TraceReader([trace]), ["r"])
        tags = Counter(repo for _, repo, _ in plan.manifests)
        if verbose:
            print(
                f"trace: last {requests} of {10 * requests} generated records (seed {seed}); warmup plan: "
                f"{len(plan.blobs)} blobs, {len(plan.manifests)} manifests in {len(tags)} repositories, "
                f"tags per repository {sorted(tags.values(), reverse=True)}"
            )
        for threads in threads_list:
            failed = 0
            config_puts = []
            for i in range(runs):
                r = one_warmup(d / f"t{threads}-{i}", trace, threads)
                bad = r["failed_objects"] > 0 or r["unreadable"] > 0
                failed += bad
                config_puts.append(r["config_puts"])
                if verbose:
                    state = "FAILED" if bad else "ok"
                    print(
                        f"  threads {threads} run {i + 1:2d}: {state}: {r['failed_objects']} objects failed, "
                        f"{r['unreadable']} listed manifests unreadable, {r['manifests']} manifests, "
                        f"{r['config_puts']} config blob uploads, {r['elapsed']:.1f} s"
                    )
                    if bad:
                        for err in r["errors"][:3]:
                            print(f"      warmup: {err}")
                        for line in r["refused"][:3]:
                            print(f"      registry log: 400 {line}")
            rows.append(
                {
                    "threads": threads,
                    "runs": runs,
                    "failed": failed,
                    "config_uploads_min": min(config_puts),
                    "config_uploads_max": max(config_puts),
                    "repositories": len(tags),
                }
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20, help="warmups per configuration, each on a fresh registry")
    ap.add_argument("--threads", type=int, nargs="+", default=[8], help="warmup.threads values to try")
    ap.add_argument("--requests", type=int, default=300, help="records in the trace")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the table as JSON")
    args = ap.parse_args()
    head = subprocess.run(["git", "log", "-1", "--format=%h %s"], capture_output=True, text=True, check=False)
    version = subprocess.run([registry_binary(), "--version"], capture_output=True, text=True, check=False)
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, check=False
    ).stdout.split()[1::2]
    print(f"tree: {head.stdout.strip()[:100]}" + (f" + uncommitted changes to {', '.join(changed)}" if changed else ""))
    print(f"registry: {version.stdout.strip()}; {time.strftime('%Y-%m-%d %H:%M:%S')}")
    rows = measure(args.runs, args.threads, args.requests, args.seed)
    if args.json:
        print(json.dumps(rows))
        return
    print("\n| warmup threads | warmups | failed | config uploads per warmup | repositories with manifests |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        uploads = f"{r['config_uploads_min']}–{r['config_uploads_max']}"
        print(f"| {r['threads']} | {r['runs']} | {r['failed']} | {uploads} | {r['repositories']} |")


if __name__ == "__main__":
    main()
