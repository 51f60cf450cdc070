"""The same seeded run, before and after a change: requests.csv and summary.json's counts compared.

A change that means no behaviour change (a refactor) must leave what a run does alone: each request
sent, answered and classed as before, and the same counts in ``summary.json``.  Timing cannot be
compared (two shared cores), everything else can.  Each commit is exported as ``bench_node_cpu.py``
exports it (``git archive`` into a folder laid out as the installed package) and run from there
through its own command line only (``python -m drtp.cli``: client nodes, ``warmup``, ``run``), so the
comparison needs nothing of either tree's internals.  Per commit and mode: a fresh real
Distribution registry on loopback (``drtp.registry.local.LocalRegistry``), warmed by that commit's
``drtp warmup``, two client nodes of that commit, and that commit's ``drtp run`` of the same
generated trace (fixed seed; pulls and pushes).

Modes (``--mode``):

* ``stress`` — as fast as possible, the nodes' event-loop engine;
* ``rate`` — rate mode, poisson arrivals with a fixed ``--seed``, the threads engine;
* ``fail`` — as ``stress``, with failures: GETs of a repository that was never pushed (the
  registry answers 404 where the trace expects 200) added to the trace, and every replayed manifest
  GET of some repositories (chosen by a hash of the name, so the same requests whatever the
  arrival order) answered 503 by the test suite's fault proxy (``tests/faultproxy.py``).

What is compared, per mode: ``requests.csv``'s rows in trace order (by the record's position in
the trace, found from its ``trace_id``; a helper row after its trace request's, in the order they
were sent) and column by column, except the columns in :data:`DROPPED` (measured times), with two
columns made run-independent first (:data:`NORMALISED`: the node by its place in the client list,
a digest by the row it first appears on); and ``summary.json``'s counts (:func:`summary_counts`), not its
latencies, rates or durations.  Exit 1 when anything differs, 0 when all matched.

Usage: python bench/bench_same_run.py --before COMMIT [--after HEAD] [--mode stress rate fail]
       [--requests 300] [--rate 150] [--seed 7] [--keep DIR] [--json FILE]
       (from a source checkout: needs docker-registry, and tests/faultproxy.py for ``fail``)
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import yaml

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for _p in (BENCH, ROOT):  # bench_node_cpu beside this file; tests/faultproxy.py in the checkout
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from bench_node_cpu import export  # noqa: E402

from drtp.master.commands.demo import stop_nodes  # noqa: E402
from drtp.registry.local import LocalRegistry, free_port  # noqa: E402
from drtp.trace.generate import GenerateOptions, generate  # noqa: E402
from drtp.trace.reader import TraceReader, write_ibm  # noqa: E402

# requests.csv columns left out of the comparison, and why
DROPPED: dict[str, str] = {
    "start_s": "measured: when the request started, seconds after the run's start",
    "latency_s": "measured: how long the registry took",
    "response_s": "measured: latency from the intended start (rate mode), includes the measured lateness",
}
# columns compared after a run-independent renaming, and why
NORMALISED: dict[str, str] = {
    "node": "the node's address has a free port picked per run: compared as its place in the client list "
    "(round-robin over trace clients in trace order gives each trace client the same place every run)",
    "digest": "pushed and warmed blobs have random content, so each run's digests differ: a digest is compared "
    "as '@<trace_id>', the row it first appears on in trace order (which requests address the same object is "
    "compared; a new digest changes only the rows that name it)",
}
FAIL_EVERY = 20  # fail mode: a never-pushed GET after every 20th pull of the trace
FAULT_BUCKETS = 4  # fail mode: manifest GETs of repositories whose crc32 % 4 == 0 get a 503


@dataclass(frozen=True)
class Mode:
    engine: str
    rate: bool = False  # rate mode with poisson arrivals, else as fast as possible
    fail: bool = False  # missing objects in the trace, a 503 fault plan at a proxy


MODES = {
    "stress": Mode("loop"),
    "rate": Mode("threads", rate=True),
    "fail": Mode("loop", fail=True),
}


# -- the runs -------------------------------------------------------------------------------------------


class ManifestFaults:
    """A fault plan for ``tests/faultproxy.FaultProxy``: 503 for every manifest GET of the repositories
    whose name hashes into bucket 0, whatever the arrival order (the index is not used)."""

    def __call__(self, index: int, method: str, path: str) -> str | None:
        if method != "GET" or "/manifests/" not in path:
            return None
        repository = path.split("/v2/", 1)[-1].split("/manifests/", 1)[0]
        return "503" if zlib.crc32(repository.encode()) % FAULT_BUCKETS == 0 else None


def make_traces(work: Path, requests: int, seed: int) -> tuple[Path, Path]:
    """The generated trace, and the same with never-pushed GETs added (fail mode)."""
    trace = work / "trace.json"
    opts = GenerateOptions(
        requests=requests, seed=seed, span_s=600.0, clients=20, repositories=12, max_layer_size=256_000
    )
    write_ibm(trace, generate(opts))
    records = json.loads(trace.read_text())
    out, pulls = [], 0
    for rec in records:
        out.append(rec)
        if rec["http.request.method"] == "GET" and rec["http.response.status"] == 200:
            pulls += 1
            if pulls % FAIL_EVERY == 0:
                uri = rec["http.request.uri"].replace("v2/", "v2/never-pushed/", 1)
                out.append(rec | {"http.request.uri": uri, "id": rec["id"] + "-missing"})
    failing = work / "trace-fail.json"
    failing.write_text(json.dumps(out))
    return trace, failing


def start_nodes(tree: Path, env: dict, logdir: Path, n: int = 2) -> list[tuple[subprocess.Popen, str]]:
    """``n`` client nodes of ``tree``'s drtp (``python -m drtp.cli client``), once their port answers."""
    nodes = []
    for i in range(n):
        port = free_port()
        with open(logdir / f"node-{i}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "drtp.cli", "client", "--port", str(port)],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=tree,
            )
        nodes.append((proc, f"127.0.0.1:{port}"))
    deadline = time.monotonic() + 30
    for proc, address in nodes:
        host, port = address.rsplit(":", 1)
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    stop_nodes(nodes)
                    raise RuntimeError(f"client node {address} did not start; see {logdir}") from None
                time.sleep(0.1)
    return nodes


def drtp(tree: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    """``drtp ARGS`` of ``tree``'s code."""
    return subprocess.run(
        [sys.executable, "-m", "drtp.cli", *args], env=env, cwd=tree, capture_output=True, text=True, timeout=600
    )


def write_config(path: Path, trace: Path, registry: str, nodes: list[str], mode: Mode, warm_map: Path) -> Path:
    cfg = {
        "trace": {"location": str(trace.parent), "traces": [trace.name]},
        "registry": [registry],
        "client_info": {
            "client_list": nodes,
            "threads": 8,
            "wait": False,
            "route": False,
            "token": "${DRTP_TOKEN}",
            "engine": mode.engine,
        },
        "warmup": {"output": str(warm_map), "threads": 4},
        "results": str(path.parent / "results"),
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


@dataclass(frozen=True)
class Replayed:
    """One finished run: its folder (requests.csv, summary.json) and the client list it ran with, in order."""

    run: Path
    nodes: list[str]


def replay(tree: Path, mode: Mode, trace: Path, fail_trace: Path, work: Path, rate: float, seed: int) -> Replayed:
    """One seeded run of ``tree``'s drtp in ``mode`` (``rate``, ``seed``: rate mode's requests/s and seed)."""
    work.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(tree), DRTP_TOKEN=secrets.token_hex(16))
    with LocalRegistry(work / "registry") as reg:
        nodes = start_nodes(tree, env, work)
        try:
            addrs = [addr for _, addr in nodes]
            warm = write_config(work / "warmup.yaml", trace, reg.host, addrs, mode, work / "warmup-map.jsonl")
            done = drtp(tree, env, "warmup", "-c", str(warm), "-q")
            if done.returncode:
                raise RuntimeError(f"warmup under {tree} exited {done.returncode}:\n{done.stderr[-3000:]}")
            opts = ["--max-failed", "100%", "-q"]
            if mode.rate:
                opts += ["--rate", str(rate), "--arrivals", "poisson", "--seed", str(seed)]
            if mode.fail:
                from tests.faultproxy import FaultProxy

                with FaultProxy(reg.host, ManifestFaults()) as proxy:
                    cfg = write_config(
                        work / "run.yaml", fail_trace, proxy.address, addrs, mode, work / "warmup-map.jsonl"
                    )
                    done = drtp(tree, env, "run", "-c", str(cfg), "--out", str(work / "run"), *opts)
            else:
                cfg = write_config(work / "run.yaml", trace, reg.host, addrs, mode, work / "warmup-map.jsonl")
                done = drtp(tree, env, "run", "-c", str(cfg), "--out", str(work / "run"), *opts)
            if done.returncode:
                raise RuntimeError(f"run under {tree} exited {done.returncode}:\n{done.stderr[-3000:]}")
        finally:
            stop_nodes(nodes)
    return Replayed(work / "run", addrs)


# -- the comparison -------------------------------------------------------------------------------------


def trace_order(trace: Path) -> dict[str, int]:
    """Each record's ``trace_id`` → its position in the trace as the master reads it (its ``seq``)."""
    order: dict[str, int] = {}
    for seq, rec in enumerate(TraceReader([trace])):
        if rec.id in order:
            raise SystemExit(f"{trace}: trace id {rec.id!r} is not unique; rows cannot be matched by it")
        order[rec.id] = seq
    return order


Key = tuple[int, str, int]  # (the record's place in the trace, its trace_id, 0 or the n-th helper row after it)


def comparable_rows(run: Path, order: dict[str, int], nodes: list[str]) -> tuple[list[str], dict[Key, dict]]:
    """``requests.csv``'s header, and its rows by :data:`Key` in trace order with :data:`DROPPED` left out and
    :data:`NORMALISED` renamed.

    A helper row follows the row of the trace request it was sent for and keeps its place among that request's
    helpers (the order they were sent); a digest is named after the first row in that order that holds it."""
    with open(run / "requests.csv", newline="") as f:
        reader = csv.DictReader(f)
        header = list(reader.fieldnames or [])
        rows = list(reader)
    keyed: dict[Key, dict] = {}
    helpers: dict[str, int] = {}
    for r in rows:
        tid = r["trace_id"]
        n = 0
        if r["auxiliary"] == "True":
            n = helpers[tid] = helpers.get(tid, 0) + 1
        keyed[(order.get(tid, len(order)), tid, n)] = r
    place = {addr: f"node{i}" for i, addr in enumerate(nodes)}
    names: dict[str, str] = {}
    out: dict[Key, dict] = {}
    for key in sorted(keyed):
        r = keyed[key]
        r["node"] = place.get(r["node"], r["node"])
        if r["digest"]:
            r["digest"] = names.setdefault(r["digest"], f"@{key[1]}/{key[2]}" if key[2] else f"@{key[1]}")
        out[key] = {c: v for c, v in r.items() if c not in DROPPED}
    return header, out


# summary.json's keys left out of the comparison (a key and everything under it), and why; every other value
# is compared: the counts (requests, failed, lost, per outcome class, per method and kind, per node…), the
# flags and the run's settings it echoes
SUMMARY_DROPPED: dict[str, str] = {
    "duration_s": "measured: first start to last end",
    "wall_s": "measured",
    "throughput_rps": "measured",
    "achieved_rps": "measured",
    "latency_s": "measured latencies",
    "response_s": "measured latencies from the intended start",
    "lateness_s": "measured: how late each start was after its intended start (rate mode)",
    "on_time_ratio": "measured: the share of starts within on_time_ms of their intended start (rate mode)",
    "behind": "a verdict on the measured lateness (rate mode: whether the replayer fell behind)",
    "started_at": "the clock when the run started",
    "start_epoch": "the clock when the run started",
    "nodes": "the client nodes' addresses: a free port per run (per_node's counts are compared, by place)",
    "registries": "the registry's address: a free port per run",
    "replayer": "the replayer's measured health: CPU, event-loop lag, peak in flight, intervals seen",
    "replayer_limited": "a verdict on the replayer's measured health (CPU, lag)",
    "stats_history_late": "interval parts that reached the master after their interval was written: timing",
}


def summary_counts(run: Path, nodes: list[str]) -> dict[str, object]:
    """``summary.json`` flattened to dotted keys, :data:`SUMMARY_DROPPED` left out and a node's address under
    ``per_node`` given as its place in the client list (``node0``…)."""
    summary = json.loads((run / "summary.json").read_text())
    place = {addr: f"node{i}" for i, addr in enumerate(nodes)}
    out: dict[str, object] = {}

    def walk(path: list[str], value: object) -> None:
        if path and path[-1] in SUMMARY_DROPPED:
            return
        if isinstance(value, dict):
            for k, v in value.items():
                walk([*path, place.get(k, k) if path[-1:] == ["per_node"] else str(k)], v)
        else:
            out[".".join(path)] = value

    walk([], summary)
    return out


@dataclass
class Check:
    mode: str
    what: str
    before: str
    after: str
    same: bool


def compare(mode: str, before: Replayed, after: Replayed, order: dict[str, int]) -> list[Check]:
    """One :class:`Check` per compared column of requests.csv and per count of summary.json."""
    (run_b, nodes_b), (run_a, nodes_a) = (before.run, before.nodes), (after.run, after.nodes)
    head_b, rows_b = comparable_rows(run_b, order, nodes_b)
    head_a, rows_a = comparable_rows(run_a, order, nodes_a)
    checks = [
        Check(mode, "requests.csv header", f"{len(head_b)} columns", _columns_diff(head_b, head_a), head_b == head_a),
        Check(mode, "requests.csv rows", str(len(rows_b)), str(len(rows_a)), len(rows_b) == len(rows_a)),
    ]
    only_b, only_a = rows_b.keys() - rows_a.keys(), rows_a.keys() - rows_b.keys()
    checks.append(Check(mode, "requests.csv rows of one side only", _keys(only_b), _keys(only_a), not only_b | only_a))
    both = sorted(rows_b.keys() & rows_a.keys())
    for col in [c for c in head_b if c not in DROPPED] + [c for c in head_a if c not in DROPPED and c not in head_b]:
        diff = [k for k in both if rows_b[k].get(col, "—") != rows_a[k].get(col, "—")]
        first = ""
        if diff:
            k = diff[0]
            first = f" (first: trace_id {k[1]} row {k[2]}: {rows_b[k].get(col, '—')!r} vs {rows_a[k].get(col, '—')!r})"
        checks.append(Check(mode, f"requests.csv {col}", f"{len(both)} rows", f"{len(diff)} differ{first}", not diff))
    sb, sa = summary_counts(run_b, nodes_b), summary_counts(run_a, nodes_a)
    for key in sorted(sb.keys() | sa.keys()):
        b, a = sb.get(key, "—"), sa.get(key, "—")
        checks.append(Check(mode, f"summary {key}", str(b), str(a), b == a))
    return checks


def _keys(keys: set[Key]) -> str:
    """Rows of one side only, by trace_id (and helper number): the first few."""
    shown = [f"{tid}/{n}" if n else tid for _, tid, n in sorted(keys)[:3]]
    return f"{len(keys)}" + (f": {', '.join(shown)}{'…' if len(keys) > 3 else ''}" if keys else "")


def _columns_diff(before: list[str], after: list[str]) -> str:
    if before == after:
        return "the same"
    gone, new = [c for c in before if c not in after], [c for c in after if c not in before]
    return f"{len(after)} columns; without {gone}, new {new}" if gone or new else "another order"


def format_checks(checks: list[Check], before: str, after: str) -> str:
    lines = [
        f"before = {before}, after = {after}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        "",
        "| mode | compared | before | after | same |",
        "|---|---|---|---|---|",
    ]
    for c in checks:
        b = c.before if len(c.before) <= 60 else c.before[:57] + "..."
        a = c.after if len(c.after) <= 90 else c.after[:87] + "..."
        lines.append(f"| {c.mode} | {c.what} | {b} | {a} | {'yes' if c.same else '**NO**'} |")
    differ = [c for c in checks if not c.same]
    lines.append("")
    lines.append(f"{len(checks) - len(differ)} of {len(checks)} matched; {len(differ)} differ")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the commit before the change")
    ap.add_argument("--after", default="HEAD", help="the commit with the change (default HEAD: commit it first)")
    ap.add_argument("--mode", nargs="+", choices=tuple(MODES), default=list(MODES))
    ap.add_argument("--requests", type=int, default=300, help="requests of the generated trace")
    ap.add_argument("--trace-seed", type=int, default=5, help="the generator's seed")
    ap.add_argument("--rate", type=float, default=150.0, help="rate mode: requests per second")
    ap.add_argument("--seed", type=int, default=7, help="rate mode: the poisson arrivals' seed")
    ap.add_argument("--keep", type=Path, help="keep the runs in this folder (default: a temporary one)")
    ap.add_argument("--json", type=Path, help="also write the checks to this JSON file")
    a = ap.parse_args()
    for opt, commit in (("--before", a.before), ("--after", a.after)):
        known = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--verify", "-q", f"{commit}^{{commit}}"], capture_output=True
        )
        if known.returncode:
            ap.exit(2, f"{ap.prog}: {opt} {commit}: not a commit of {ROOT}\n")
    if a.keep and a.keep.exists() and any(a.keep.iterdir()):
        ap.exit(2, f"{ap.prog}: --keep {a.keep}: not empty (give a new folder)\n")
    if a.requests < 20 or a.rate <= 0:
        ap.exit(2, f"{ap.prog}: --requests must be at least 20 and --rate above 0\n")
    with tempfile.TemporaryDirectory(prefix="drtp-samerun-") as tmp:
        work = a.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        trees = export(a.before, work / "tree-before"), export(a.after, work / "tree-after")
        trace, fail_trace = make_traces(work, a.requests, a.trace_seed)
        checks: list[Check] = []
        for name in a.mode:
            mode = MODES[name]
            runs = [
                replay(tree, mode, trace, fail_trace, work / f"{name}-{side}", a.rate, a.seed)
                for tree, side in zip(trees, ("before", "after"), strict=True)
            ]
            order = trace_order(fail_trace if mode.fail else trace)
            got = compare(name, *runs, order)
            print(format_checks(got, a.before, a.after), file=sys.stderr)
            checks += got
    print(format_checks(checks, a.before, a.after))
    if a.json:
        a.json.write_text(json.dumps([c.__dict__ for c in checks], indent=1))
    return 0 if all(c.same for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
