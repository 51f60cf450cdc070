"""Run directories from REAL replays, for the tests that analyse results.

A generated trace is warmed up on a local registry, then replayed through two
client nodes — once in stress mode and once as is — with a few extra trace
requests: GETs of tags that were never pushed, which the trace recorded as
200 and the registry answers 404 (real failures, outcome ``http``, without a
fault proxy), and layer PUTs by clients that never opened an upload, for
which the node first opens one with a helper (auxiliary) POST.  The extra
records are added only to the replayed trace, not the warmed one, so warmup
does not push the tags.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec

from drtp.master.run.replay import run_replay
from drtp.master.run.warmup import run_warmup
from drtp.registry.local import LocalRegistry
from drtp.trace.reader import TraceReader, write_ibm
from tests.replay_support import Node, make_trace, write_config

MISSING_TAGS = 6  # GET manifest requests the registry answers 404 (the trace: 200)
LONE_PUSHES = 2  # layer PUTs without a POST before them: each needs one helper POST


@dataclass
class RealRuns:
    trace: Path  # the replayed trace (with the requests for missing tags)
    stress: Path  # run directory, stress mode
    as_is: Path  # run directory, as-is mode (intended starts, lateness)
    missing_tags: int  # how many trace requests fail (404 instead of 200) in each run
    lone_pushes: int  # how many helper requests each run sends


def replayed_trace(warmed: Path, out: Path) -> Path:
    """``warmed``'s records plus GETs of never-pushed tags (recorded as 200) and lone layer PUTs, in time order."""
    records = list(TraceReader([warmed]))
    manifests = [r for r in records if r.method == "GET" and "/manifests/" in r.uri]
    layer_puts = [r for r in records if r.method == "PUT" and "/blobs/" in r.uri and "/uploads/" not in r.uri]
    step = max(1, len(manifests) // MISSING_TAGS)
    extra = [
        msgspec.structs.replace(r, uri=r.uri.rsplit("/", 1)[0] + f"/never-pushed-{i}", status=200, id=f"missing-{i}")
        for i, r in enumerate(manifests[::step][:MISSING_TAGS])
    ]
    extra += [
        msgspec.structs.replace(
            r, uri=r.uri.rsplit("/", 1)[0] + f"/10ne{i:06d}", client=f"lone-pusher-{i}", id=f"lone-push-{i}"
        )
        for i, r in enumerate(layer_puts[:LONE_PUSHES])
    ]
    assert len(extra) == MISSING_TAGS + LONE_PUSHES, "the generated trace has too few GET manifests or layer PUTs"
    write_ibm(out, sorted(records + extra, key=lambda r: r.timestamp))
    return out


def replay_runs(workdir: Path, requests: int = 240) -> RealRuns:
    """Warm up and replay a small generated trace twice (stress, as is) against a real registry."""
    warmed = make_trace(workdir / "warmed.json", requests=requests, span=20.0)
    trace = replayed_trace(warmed, workdir / "trace.json")
    nodes = [Node(workdir), Node(workdir)]
    try:
        with LocalRegistry(workdir / "registry") as reg:
            addresses = [n.address for n in nodes]
            run_warmup(write_config(workdir, warmed, [reg.host], addresses), quiet=True)
            runs = {}
            for name, wait in (("stress", False), ("as-is", True)):
                cfg = write_config(workdir, trace, [reg.host], addresses, wait=wait, speedup=10.0)
                runs[name] = workdir / "results" / name
                run_replay(cfg, runs[name], quiet=True)
    finally:
        for n in nodes:
            n.stop()
    return RealRuns(
        trace=trace, stress=runs["stress"], as_is=runs["as-is"], missing_tags=MISSING_TAGS, lone_pushes=LONE_PUSHES
    )
