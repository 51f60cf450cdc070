"""TEST FIXTURES ONLY: hand-made traces and fabricated replay run directories.

The replayer (``drtp run``) is built in parallel; until it exists, these
helpers write run directories in its documented format (``requests.csv`` with
the issue's columns plus an extra one the loader must tolerate, and
``summary.json``) with plausible, seeded numbers.  Nothing here is a
measurement.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import numpy as np
import pandas as pd

from drtp.records import TraceRecord

T0 = _dt.datetime(2017, 8, 1, tzinfo=_dt.timezone.utc)


def rec(
    t: float,
    method: str,
    uri: str,
    *,
    client: str = "c1",
    size: int = 0,
    duration: float = 0.01,
    status: int = 200,
    host: str = "h1",
    rid: str | None = None,
) -> TraceRecord:
    """One trace record ``t`` seconds after 2017-08-01T00:00Z."""
    return TraceRecord(
        host=host,
        duration=duration,
        method=method,
        client=client,
        uri=uri,
        status=status,
        size=size,
        id=rid or f"r{t:.3f}{method}{uri}{client}",
        timestamp=T0 + _dt.timedelta(seconds=t),
    )


def fabricate_run(
    run_dir: Path,
    *,
    requests: int = 400,
    seed: int = 0,
    as_is: bool = True,
    latency_scale: float = 0.02,
    failures: dict[int, int] | None = None,
    timeouts: int = 0,
    trace_ids: list[str] | None = None,
) -> Path:
    """A FAKE run directory shaped like the replayer's output (see the module docstring)."""
    rng = np.random.default_rng(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    kinds = rng.choice(
        ["GET blob", "GET manifest", "HEAD blob", "PUT blob", "PUT manifest"], requests, p=[0.45, 0.3, 0.1, 0.1, 0.05]
    )
    method = [k.split()[0] for k in kinds]
    kind = [k.split()[1] for k in kinds]
    intended = np.sort(rng.uniform(0, 20, requests))
    lateness = rng.exponential(0.0005, requests)
    start = intended + lateness
    latency = rng.lognormal(np.log(latency_scale), 0.6, requests)
    status = np.where(np.array(method) == "PUT", 201, 200)
    ok = np.ones(requests, dtype=bool)
    error = np.array([""] * requests, dtype=object)
    i = 0
    for code, count in (failures or {}).items():
        status[i : i + count] = code
        ok[i : i + count] = False
        i += count
    status[i : i + timeouts] = 0
    ok[i : i + timeouts] = False
    error[i : i + timeouts] = "timeout: read timed out"
    df = pd.DataFrame(
        {
            "client": [f"node{j % 2}" for j in range(requests)],
            "trace_id": trace_ids[:requests] if trace_ids else [f"t{j}" for j in range(requests)],
            "method": method,
            "kind": kind,
            "repository": "u/r",
            "reference": [f"ref{j}" for j in range(requests)],
            "digest": "",
            "size": rng.integers(500, 2_000_000, requests),
            "intended_s": intended if as_is else np.nan,
            "start_s": start,
            "latency_s": latency,
            "response_s": (start + latency - intended) if as_is else np.nan,
            "status": status,
            "ok": ok,
            "error": error,
            "auxiliary": np.where(np.array(method) == "PUT", 1, 0),
            "replayer_extra_column": "ignored",  # the loader must tolerate unknown columns
        }
    )
    df.to_csv(run_dir / "requests.csv", index=False)
    summary = {"requests": requests, "succeeded": int(ok.sum()), "failed": int((~ok).sum()), "fabricated": True}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir
