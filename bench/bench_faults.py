"""Replay under faults: the same generated trace, clean and with ~10 % faults, through the fault proxy.

Both runs go through ``tests/faultproxy.py`` (the clean one with no faults),
so the proxy's own cost is in both and the ratio shows only what the faults
cost: duration (first start → last end) faulted ÷ clean.  And whether the
faults show honestly: per class, the faults the proxy injected against the
failed rows drtp recorded for them, and whether the registry's log has each
POST/PATCH/PUT as often as drtp says it sent it (nothing re-sent).

Usage: python bench/bench_faults.py [--requests 1000] [--rate 0.1]   (runs from a source checkout)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from unittest.mock import patch

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
from drtp.trace.reader import write_ibm  # noqa: E402
from tests.faultproxy import FaultPlan, FaultProxy, Mixed, can_cause, fault_class, is_replayed, no_faults  # noqa: E402
from tests.registry_log import logged_requests  # noqa: E402

WRITES = ("POST", "PATCH", "PUT")
NEVER_SENT = ("not-sent", "lost")


def write_config(work: Path, name: str, trace: Path, registry: str, nodes: list[str], timeout: float) -> Path:
    cfg = {
        "trace": {"location": str(trace.parent), "traces": [trace.name]},
        "registry": [registry],
        "client_info": {
            "client_list": nodes,
            "threads": 8,
            "token": "${DRTP_TOKEN}",
            "batch": 100,
            "inflight": 400,
            "timeout": timeout,
        },
        "warmup": {"output": str(work / "warmup-map.jsonl"), "threads": 4},
        "results": str(work / "results"),
    }
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def one_run(work: Path, name: str, trace: Path, reg: LocalRegistry, nodes: list[str], plan: FaultPlan, a) -> dict:
    """Replay ``trace`` through a proxy running ``plan``; the run's numbers and its three witnesses compared."""
    offset = reg.log_path.stat().st_size
    with FaultProxy(reg.host, plan, delay_s=a.delay) as proxy:
        cfg = load_config(write_config(work, name, trace, proxy.address, nodes, a.timeout))
        t0 = time.perf_counter()
        summary = run_replay(cfg, work / name, quiet=True)
        wall = time.perf_counter() - t0
        injected = proxy.injected
        proxy_errors = proxy.errors
    logged = Counter(x.method for x in logged_requests(reg.log_path, offset) if is_replayed(x.method, x.path))
    rows = pd.read_csv(work / name / "requests.csv", keep_default_na=False, na_values=[""])
    failed = rows[rows.outcome != "ok"]
    caused = failed[failed.outcome.combine(failed.status, can_cause).astype(bool)]
    sent = rows[~rows.outcome.isin(NEVER_SENT)]
    return {
        "requests": int((~rows.auxiliary).sum()),
        "auxiliary": int(rows.auxiliary.sum()),
        "duration_s": summary["duration_s"],
        "wall_s": wall,
        "failed": summary["failed"],
        "injected": Counter(fault_class(f.outcome, f.status) for f in injected),
        "recorded": Counter(fault_class(o, s) for o, s in zip(caused.outcome, caused.status, strict=True)),
        "other_failed": Counter(fault_class(o, s) for o, s in zip(failed.outcome, failed.status, strict=True))
        - Counter(fault_class(o, s) for o, s in zip(caused.outcome, caused.status, strict=True)),
        "writes_logged": {m: logged[m] for m in WRITES},
        "writes_sent": {m: int((sent.method == m).sum()) for m in WRITES},
        "proxy_errors": proxy_errors,
    }


def measure(requests: int = 1000, rate: float = 0.1, seed: int = 11, timeout: float = 1.0, delay: float = 1.5) -> dict:
    """Start a registry and two client nodes on loopback, warm up, replay clean then faulted; the comparison.

    Rows (``classes``): one per fault class, injected vs recorded.  ``timeout`` is the client's
    (client_info.timeout), ``delay`` how long a delay fault holds an answer (past the timeout).
    """
    a = argparse.Namespace(timeout=timeout, delay=delay)
    token = os.urandom(16).hex()
    with patch.dict(os.environ, {"DRTP_TOKEN": token}):  # the nodes and the config read it; restored after
        with tempfile.TemporaryDirectory(prefix="drtp-bench-faults-") as tmp:
            work = Path(tmp)
            trace = work / "trace.json"
            opts = GenerateOptions(
                requests=requests, seed=7, span_s=60.0, clients=20, repositories=12, max_layer_size=64_000
            )
            write_ibm(trace, generate(opts))
            with LocalRegistry(work / "registry") as reg:
                nodes = start_nodes(2, token, work)
                try:
                    addrs = [addr for _, addr in nodes]
                    run_warmup(load_config(write_config(work, "warmup", trace, reg.host, addrs, timeout)), quiet=True)
                    clean = one_run(work, "clean", trace, reg, addrs, no_faults, a)
                    faulted = one_run(work, "faulted", trace, reg, addrs, Mixed(rate=rate, seed=seed), a)
                finally:
                    stop_nodes(nodes)
    classes = [
        {"class": c, "injected": faulted["injected"][c], "recorded": faulted["recorded"][c]}
        for c in sorted(set(faulted["injected"]) | set(faulted["recorded"]))
    ]
    return {
        "requests": requests,
        "rate": rate,
        "timeout_s": timeout,
        "delay_s": delay,
        "clean": clean,
        "faulted": faulted,
        "duration_ratio": faulted["duration_s"] / clean["duration_s"],
        "classes": classes,
        "honest": all(r["injected"] == r["recorded"] for r in classes)
        and faulted["writes_logged"] == faulted["writes_sent"]
        and clean["failed"] == 0,
    }


def print_report(res: dict) -> None:
    c, f = res["clean"], res["faulted"]
    print(f"{res['requests']:,} trace requests, ~{res['rate']:.0%} faulted, client timeout {res['timeout_s']:g} s")
    print(f"  clean:   {c['duration_s']:.2f} s, failed {c['failed']}")
    print(f"  faulted: {f['duration_s']:.2f} s, failed {f['failed']} (trace rows)")
    print(f"  duration faulted ÷ clean: {res['duration_ratio']:.2f}×")
    print(f"  {'class':<12} {'injected':>8} {'recorded':>8}")
    for r in res["classes"]:
        print(f"  {r['class']:<12} {r['injected']:>8} {r['recorded']:>8}")
    print(f"  other failures (follow-ons: reads of pushes that failed, requests never sent): {dict(f['other_failed'])}")
    print(f"  POST/PATCH/PUT: registry log {f['writes_logged']}, drtp sent {f['writes_sent']}")
    print(f"  honest: {'yes' if res['honest'] else 'NO'}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--json", type=Path, help="also write the result here")
    a = ap.parse_args(argv)
    if not shutil.which("docker-registry") and not os.environ.get("DRTP_REGISTRY_BIN"):
        sys.exit("needs the Distribution registry (apt-get install docker-registry)")
    res = measure(a.requests, a.rate, a.seed)
    print_report(res)
    if a.json:
        a.json.write_text(json.dumps(res, indent=2, default=dict) + "\n")


if __name__ == "__main__":
    main()
