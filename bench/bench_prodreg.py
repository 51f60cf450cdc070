"""Stress mode against registries that ask for credentials, side by side with wrk: rate and CPU per request.

Production registries speak https with basic or bearer-token auth.  For each kind of registry — plain http
(no auth), https + basic auth (htpasswd, bcrypt: the registry checks the password on every request, which
makes it slow and hides the client's cost) and https + bearer tokens (the real token server of the test
suite; a token check is cheap, so the client's cost shows) — and each request mix (one ~1 KB manifest, one
300 KB blob, the successful GETs of a generated trace), drtp's stress mode (2 client nodes × 16 slots, the
nodes' event-loop engine) and ``wrk -t2 -c32`` alternate on the same registry and URLs, A B A B.

Figures per case: the rate of each (best of the rounds), and the CPU per request taken mid-run — over the
middle half of each run (drtp: from 25 % to 75 % of its rows in requests.csv, both client nodes' user +
system CPU; wrk: from 25 % to 75 % of its time), so connection, TLS and token set-up stay outside, as do
the master's start and end.  wrk gets the Authorization header a client would send (Basic, or a Bearer token
fetched for every repository of the case beforehand); drtp's nodes answer the registry's challenges
themselves.

Usage: python bench/bench_prodreg.py [--requests 5000] [--rounds 2] [--kinds plain basic bearer]
(needs wrk and docker-registry; a source checkout: the PKI and the token server come from tests/).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from unittest.mock import patch

import yaml

BENCH_DIR = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH_DIR), str(BENCH_DIR.parent)]

from bench_replay import WRK_LIST_SCRIPT, case_trace, cpu_s, warmed_paths  # noqa: E402

from drtp.config import load_config  # noqa: E402
from drtp.master.commands.demo import start_nodes, stop_nodes  # noqa: E402
from drtp.master.run.replay import run_replay  # noqa: E402
from drtp.master.series.experiment import registry_config  # noqa: E402
from drtp.registry.auth import Authenticator  # noqa: E402
from drtp.registry.local import LocalRegistry  # noqa: E402
from drtp.registry.manifest import ACCEPT  # noqa: E402
from drtp.replay.messages import RegistryAuth  # noqa: E402

KINDS = ("plain", "basic", "bearer")
KIND_NAMES = {"plain": "plain http", "basic": "https + basic auth", "bearer": "https + bearer token"}
CASES = (
    ("GET manifest (~1 KB)", "v2/bench/small/manifests/latest", 1000),
    ("GET blob (300 KB)", "v2/bench/big/blobs/layer300k", 300_000),
    ("mixed trace (GETs)", None, None),
)
NODES, SLOTS = 2, 16  # drtp's concurrency; wrk gets as many connections
SAMPLE_S = 0.05


@dataclass(frozen=True)
class Registry:
    """A running registry as a config entry and as wrk sees it."""

    reg: LocalRegistry
    entry: dict  # the ``registries:`` entry (url, credentials, trust); empty: a plain ``registry:`` host
    wrk_auth: object  # the Authorization header wrk sends for a list of paths: callable(paths) -> str


def config(work: Path, trace: Path, r: Registry, nodes: list[str]) -> object:
    cfg = {
        "trace": {"location": str(work), "traces": [trace.name]},
        "client_info": {
            "client_list": nodes,
            "threads": SLOTS,
            "wait": False,
            "route": False,
            "token": "${DRTP_TOKEN}",
            "batch": 200,
            "inflight": 2000,
        },
        "warmup": {"output": str(work / f"{trace.stem}-map.jsonl"), "threads": 4},
        "results": str(work / "results"),
    }
    if r.entry:
        cfg["registries"] = [{"id": "reg", **r.entry}]
    else:
        cfg["registry"] = [r.reg.host]
    path = work / f"{trace.stem}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    loaded = load_config(path)
    return registry_config(loaded, loaded.registries[0]) if r.entry else loaded


def rows_in(path: Path, state: dict) -> int:
    """Lines written to ``path`` so far, read incrementally (``state`` keeps the file and the count)."""
    if "f" not in state:
        if not path.exists():
            return 0
        state["f"], state["n"] = open(path, "rb"), 0  # noqa: SIM115 (closed by the sampler)
    while chunk := state["f"].read(1 << 20):
        state["n"] += chunk.count(b"\n")
    return state["n"]


def middle_half(samples: list[tuple[int, float]], total: int) -> float:
    """CPU µs per row between the samples at 25 % and 75 % of ``total`` rows; ``samples``: (rows, CPU s)."""
    lo = next((s for s in samples if s[0] >= total * 0.25), None)
    hi = next((s for s in samples if s[0] >= total * 0.75), None)
    if lo is None or hi is None or hi[0] <= lo[0] or hi[1] <= lo[1]:
        return float("nan")  # no samples there, or too short a stretch for /proc's 10 ms CPU ticks
    return (hi[1] - lo[1]) / (hi[0] - lo[0]) * 1e6


def drtp_run(cfg, run_dir: Path, pids: list[int]) -> dict:
    """One stress replay, the nodes' CPU sampled as its rows reach requests.csv: {rps, cpu_us, requests}."""
    samples: list[tuple[int, float]] = [(0, cpu_s(pids))]
    stop = threading.Event()
    state: dict = {}

    def sample() -> None:
        while not stop.wait(SAMPLE_S):
            samples.append((rows_in(run_dir / "requests.csv", state), cpu_s(pids)))
        if "f" in state:
            state["f"].close()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        s = run_replay(cfg, run_dir, quiet=True)
    finally:
        stop.set()
        sampler.join()
    samples.append((s["requests"], cpu_s(pids)))
    if s["failed"]:
        raise RuntimeError(f"{run_dir.name}: {s['failed']} of {s['requests']} requests failed")
    mid = middle_half(samples, s["requests"])
    if mid != mid:  # too short a run to measure its middle half (tiny sizes): the whole run's CPU instead
        mid = (samples[-1][1] - samples[0][1]) / max(1, s["requests"]) * 1e6
    return {"rps": s["throughput_rps"], "cpu_us": mid, "requests": s["requests"]}


def wrk_run(url: str, seconds: float, auth: str, paths: list[str] | None) -> dict:
    """wrk -t2 at drtp's concurrency for ``seconds``; its CPU over the middle half of the time: {rps, cpu_us}."""
    cmd = ["wrk", "-t2", f"-c{NODES * SLOTS}", f"-d{round(seconds)}s", "-H", f"Accept: {ACCEPT}"]
    if auth:
        cmd += ["-H", f"Authorization: {auth}"]
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lua:
        if paths:
            lua.write(WRK_LIST_SCRIPT % ", ".join(json.dumps(p) for p in paths))
            cmd += ["-s", lua.name]
    try:
        p = subprocess.Popen(cmd + [url], stdout=subprocess.PIPE, text=True)
        time.sleep(round(seconds) * 0.25)
        c0 = cpu_s([p.pid])
        time.sleep(round(seconds) * 0.5)
        c1 = cpu_s([p.pid])
        out = p.stdout.read()
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    finally:
        os.unlink(lua.name)
    m = re.search(r"Requests/sec:\s*([0-9.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    if not m or not total or "Non-2xx" in out or p.returncode:
        raise RuntimeError(f"wrk failed:\n{out}")
    rps = float(m.group(1))
    if c1 > c0:
        return {"rps": rps, "cpu_us": (c1 - c0) / (rps * round(seconds) * 0.5) * 1e6}
    # too short a run for the clock ticks of /proc (tiny sizes): the whole run's CPU instead
    return {"rps": rps, "cpu_us": (usage.ru_utime + usage.ru_stime) / max(1, int(total.group(1))) * 1e6}


def case_rows(
    work: Path, r: Registry, nodes: list[tuple], n: int, rounds: int, kind: str, wrk_min_s: float
) -> list[dict]:
    addrs, pids = [a for _, a in nodes], [p.pid for p, _ in nodes]
    rows = []
    for name, uri, size in CASES:
        trace = work / f"{kind}-{size or 'mixed'}.json"
        case_trace(trace, n, uri, size)
        cfg = config(work, trace, r, addrs)
        paths = warmed_paths(cfg, trace)
        auth = r.wrk_auth(paths)
        wrk_paths = paths if len(paths) > 1 else None
        url = f"{r.reg.url}{paths[0]}"
        # a fresh registry is slower for its first thousands of answers: warm it with the same requests
        drtp_run(cfg, work / f"run-{trace.stem}-warm", pids)
        drtp_runs, wrk_runs = [], []
        for i in range(rounds):
            drtp_runs.append(drtp_run(cfg, work / f"run-{trace.stem}-{i}", pids))
            secs = max(wrk_min_s, drtp_runs[-1]["requests"] / drtp_runs[-1]["rps"])
            wrk_runs.append(wrk_run(url, secs, auth, wrk_paths))
        best, wbest = max(drtp_runs, key=lambda x: x["rps"]), max(wrk_runs, key=lambda x: x["rps"])
        node_us = statistics.median(x["cpu_us"] for x in drtp_runs)
        wrk_us = statistics.median(x["cpu_us"] for x in wrk_runs)
        rows.append(
            {
                "registry": KIND_NAMES[kind],
                "case": name,
                "concurrency": NODES * SLOTS,
                "requests": best["requests"],
                "distinct_urls": len(paths),
                "drtp_rps": best["rps"],
                "wrk_rps": wbest["rps"],
                "ratio": best["rps"] / wbest["rps"],
                "node_cpu_us_per_req": node_us,
                "wrk_cpu_us_per_req": wrk_us,
                "cpu_ratio": node_us / wrk_us,
                "node_cpu_rounds": [round(x["cpu_us"]) for x in drtp_runs],
                "wrk_cpu_rounds": [round(x["cpu_us"]) for x in wrk_runs],
            }
        )
    return rows


def token_header(server, pki_ca: Path) -> object:
    """wrk's Authorization for ``paths``: one Bearer token with pull access to all of their repositories,
    fetched by drtp's own Authenticator (its realm carries one ``scope`` parameter per repository)."""

    def header(paths: list[str]) -> str:
        repos = sorted({p[len("/v2/") :].rsplit("/", 2)[0] for p in paths})
        scopes = "&".join(f"scope=repository:{name}:pull" for name in repos)
        auth = RegistryAuth("", server.user, server.password, pki_ca.read_text())
        params = dict(server.registry_config, realm=server.registry_config["realm"] + "?" + scopes)
        return "Bearer " + Authenticator(auth).fetch_token(params)[0]

    return header


def measure(n: int = 5000, rounds: int = 2, kinds: tuple = KINDS, wrk_min_s: float = 4.0) -> list[dict]:
    """Start each kind of registry and two client nodes on loopback; one row per (registry, case).  wrk runs as
    long as drtp's last round took, at least ``wrk_min_s``."""
    if not shutil.which("wrk"):
        raise RuntimeError("wrk is not installed (apt-get install -y wrk)")
    from tests.realreg_support import PASSWORD, USER, Pki, TokenServer, write_htpasswd

    token = os.urandom(16).hex()
    rows = []
    with patch.dict(os.environ, {"DRTP_TOKEN": token}), tempfile.TemporaryDirectory(prefix="drtp-prodreg-") as tmp:
        work = Path(tmp)
        pki = Pki(work / "pki")
        basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        nodes = start_nodes(NODES, token, work)
        try:
            for kind in kinds:
                d = work / kind
                d.mkdir()
                server = TokenServer(d, pki) if kind == "bearer" else None
                opts: dict = {}
                if kind != "plain":
                    opts["tls"] = (pki.cert, pki.key)
                if kind == "basic":
                    opts["htpasswd"] = write_htpasswd(d / "htpasswd")
                if server:
                    opts["token"] = server.registry_config
                try:
                    with LocalRegistry(d / "registry", **opts) as reg:
                        creds = {"username": USER, "password": PASSWORD, "ca_file": str(pki.ca)}
                        entry = {"url": reg.url, **creds} if kind != "plain" else {}
                        fixed = basic if kind == "basic" else ""
                        wrk_auth = token_header(server, pki.ca) if server else (lambda _paths, h=fixed: h)
                        rows += case_rows(d, Registry(reg, entry, wrk_auth), nodes, n, rounds, kind, wrk_min_s)
                finally:
                    if server:
                        server.stop()
        finally:
            stop_nodes(nodes)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=5000, help="trace requests per drtp round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    ap.add_argument("--wrk-min-s", type=float, default=4.0, help="wrk's shortest run (s)")
    ap.add_argument("--json", help="also write the rows to this file")
    a = ap.parse_args()
    rows = measure(a.requests, a.rounds, tuple(a.kinds), a.wrk_min_s)
    print(f"{'registry':<21} {'case':<21} {'drtp req/s':>10} {'wrk req/s':>9} {'ratio':>5} "
          f"{'node µs/req':>11} {'wrk µs/req':>10} {'CPU ×':>5}  rounds node / wrk (µs)")  # fmt: skip
    for r in rows:
        print(f"{r['registry']:<21} {r['case']:<21} {r['drtp_rps']:>10.0f} {r['wrk_rps']:>9.0f} {r['ratio']:>5.2f} "
              f"{r['node_cpu_us_per_req']:>11.0f} {r['wrk_cpu_us_per_req']:>10.0f} {r['cpu_ratio']:>5.2f}  "
              f"{r['node_cpu_rounds']} / {r['wrk_cpu_rounds']}")  # fmt: skip
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
