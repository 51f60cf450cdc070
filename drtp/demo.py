"""``drtp demo``: the main job end to end on this machine.

Generates a small trace, checks it, starts a real Distribution registry on
loopback and checks it answers a push and a pull through python-dxf.  Grows
into the full replay (warmup + run through two client nodes) with the
replay issue.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from drtp.analysis.trace_summary import format_summary, summarize
from drtp.generate import GenerateOptions, generate
from drtp.registry import LocalRegistry
from drtp.trace import TraceReader, write_ibm


def registry_roundtrip(host: str, size: int = 300_000) -> dict:
    """Push and pull one blob through python-dxf; returns timings in seconds."""
    import hashlib
    import os

    from dxf import DXF

    data = os.urandom(size)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    dxf = DXF(host, "drtp/demo", insecure=True)
    t0 = time.perf_counter()
    dxf.push_blob(data=data, digest=digest)  # bytes: one body with Content-Length
    t1 = time.perf_counter()
    pulled = b"".join(dxf.pull_blob(digest))
    t2 = time.perf_counter()
    if pulled != data:
        raise RuntimeError("the registry returned different bytes than were pushed")
    return {"push_s": t1 - t0, "pull_s": t2 - t1, "bytes": size, "digest": digest}


def run_demo(out: Path, requests: int = 2000, seed: int = 1) -> int:
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "trace.json"
    opts = GenerateOptions(
        requests=requests, seed=seed, span_s=600, clients=20, repositories=30, max_layer_size=2 << 20
    )
    n = write_ibm(trace, generate(opts))
    print(f"[1/3] generated {n:,} requests → {trace}")
    summary = summarize(TraceReader([trace]).batches())
    (out / "trace-summary.json").write_text(json.dumps(summary, indent=2))
    print("[2/3] trace summary:")
    print("      " + format_summary(summary).replace("\n", "\n      "))
    with LocalRegistry(out / "registry") as reg:
        rt = registry_roundtrip(reg.host)
        print(
            f"[3/3] registry {reg.url} (Distribution, loopback): pushed and pulled a "
            f"{rt['bytes'] // 1000} KB blob in {rt['push_s'] * 1000:.1f} ms / {rt['pull_s'] * 1000:.1f} ms"
        )
    (out / "registry-check.json").write_text(json.dumps(rt, indent=2))
    print(f"results in {out}/")
    return 0
