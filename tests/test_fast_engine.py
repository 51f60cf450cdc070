"""Stress mode's event loop on every kind of registry: real ``drtp client`` nodes, a real registry.

Plain http, https with the entry's CA file, basic auth, the bearer-token flow with a real token
server, and blob reads redirected to a storage server: each trace GET/HEAD runs on the node's
event loop and nothing but the pushes on its thread pool — the count each node logs at the end
of a run says where every request went.  The registry's own log and the storage server's record
are the judges of what was sent (and that no credentials reached the storage server).
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import yaml

from drtp.config import Config, load_config
from drtp.master.run.replay import run_replay
from drtp.master.run.warmup import run_warmup
from drtp.master.series.experiment import registry_config
from drtp.registry.local import LocalRegistry
from drtp.replay.messages import RegistryAuth, ReplayRequest, RunSpec
from drtp.trace.reader import TraceReader
from tests.realreg_support import PASSWORD, USER, Pki, TokenServer, write_htpasswd
from tests.redirect_support import RedirectingRegistry
from tests.registry_log import logged_requests
from tests.replay_support import TOKEN, make_trace

pytestmark = pytest.mark.registry

THREADS = 8  # per node
RUN_LINE = re.compile(rb"run (\w+): (\d+) requests on the event loop, (\d+) on the thread pool \((\d+) auth challenges")


@dataclass(frozen=True)
class Where:
    """Where a run's trace requests were sent, summed over the nodes (from their logs)."""

    loop: int
    pool: int
    challenges: int


@dataclass(frozen=True)
class Replayed:
    rows: pd.DataFrame  # requests.csv without helper rows
    where: Where
    reads: int  # trace GETs and HEADs
    others: int  # trace pushes (POST, PATCH, PUT)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def run_counts(nodes, offsets: list[int]) -> Where:
    """The run-end lines the nodes logged after ``offsets`` (one per node); waits for them, as a node writes
    its line just after the result stream ended (the bound turns a missing line into a failure)."""
    deadline = time.monotonic() + 20
    while True:
        found = []
        for node, offset in zip(nodes, offsets, strict=True):
            found += RUN_LINE.findall(node.log.read_bytes()[offset:])
        if len(found) >= len(nodes) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(found) == len(nodes), f"{len(found)} run-end lines from {len(nodes)} nodes"
    return Where(*(sum(int(f[i]) for f in found) for i in (1, 2, 3)))


def refused_methods(log_path: Path, offset: int) -> list[str]:
    """The methods of the requests the registry refused for their credentials (it logs those apart, as warnings)."""
    time.sleep(0.3)  # the registry logs just after answering
    with open(log_path, "rb") as f:
        f.seek(offset)
        entries = [json.loads(line) for line in f if line.startswith(b"{")]
    return [e["http.request.method"] for e in entries if e.get("msg", "").startswith("error authorizing context")]


def warmed(tmp_path: Path, nodes, trace: Path, url: str, **entry) -> Config:
    """The stress-mode config (engine auto) of ``trace`` against the registry at ``url``, warmed up; ``entry``:
    its ``registries:`` entry's credentials and trust (none: a plain ``registry:`` host)."""
    cfg = {
        "trace": {"location": str(trace.parent), "traces": [trace.name]},
        "client_info": {"client_list": [n.address for n in nodes], "threads": THREADS, "token": TOKEN, "batch": 50},
        "warmup": {"output": str(tmp_path / "warmup-map.jsonl"), "threads": 4},
        "results": str(tmp_path / "results"),
    }
    if entry:
        cfg["registries"] = [{"id": "reg", "url": url, **entry}]
    else:
        cfg["registry"] = [url.split("//", 1)[-1]]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    config = load_config(path)
    if entry:
        config = registry_config(config, config.registries[0])
    run_warmup(config, quiet=True)
    return config


def replay(tmp_path: Path, nodes, config: Config, trace: Path) -> Replayed:
    offsets = [n.log.stat().st_size for n in nodes]
    summary = run_replay(config, tmp_path / "run", quiet=True)
    assert summary["requests"] == summary["trace_requests"]
    df = pd.read_csv(tmp_path / "run" / "requests.csv", keep_default_na=False, na_values=[""])
    records = list(TraceReader([trace]))
    reads = sum(r.method in ("GET", "HEAD") for r in records)
    return Replayed(df[~df.auxiliary], run_counts(nodes, offsets), reads, len(records) - reads)


def assert_all_ok_on_the_loop(run: Replayed) -> None:
    bad = run.rows[~run.rows.ok]
    assert bad.empty, bad[["method", "kind", "status", "outcome", "error"]].head().to_string()
    assert run.reads > 0 and run.others > 0
    assert (run.where.loop, run.where.pool) == (run.reads, run.others)  # every read on the loop, pushes on the pool
    got = run.rows[(run.rows.method == "GET") & (run.rows.kind == "blob")]
    assert len(got) and (got.bytes == got["size"]).all()  # every blob byte read


def test_plain_http(tmp_path, nodes, registry):
    trace = make_trace(tmp_path / "trace.json", requests=150)
    run = replay(tmp_path, nodes, warmed(tmp_path, nodes, trace, registry.url), trace)
    assert_all_ok_on_the_loop(run)
    assert run.where.challenges == 0


def test_https_with_the_entrys_ca_file(tmp_path, nodes, pki):
    trace = make_trace(tmp_path / "trace.json", requests=150)
    with LocalRegistry(tmp_path / "reg", tls=(pki.cert, pki.key)) as reg:
        run = replay(tmp_path, nodes, warmed(tmp_path, nodes, trace, reg.url, ca_file=str(pki.ca)), trace)
    assert_all_ok_on_the_loop(run)
    assert run.where.challenges == 0


def test_https_with_basic_auth(tmp_path, nodes, pki):
    htpasswd = write_htpasswd(tmp_path / "htpasswd")
    trace = make_trace(tmp_path / "trace.json", requests=150)
    with LocalRegistry(tmp_path / "reg", tls=(pki.cert, pki.key), htpasswd=htpasswd) as reg:
        config = warmed(tmp_path, nodes, trace, reg.url, username=USER, password=PASSWORD, ca_file=str(pki.ca))
        offset = reg.log_path.stat().st_size
        run = replay(tmp_path, nodes, config, trace)
        refused_reads = sum(m in ("GET", "HEAD") for m in refused_methods(reg.log_path, offset))
    assert_all_ok_on_the_loop(run)
    # the first reads met the challenge; once it was answered, every read carried the credentials
    assert 0 < run.where.challenges <= 2 * THREADS * len(nodes)
    assert run.where.challenges <= refused_reads <= run.where.challenges + run.others  # (+ the pushes' HEADs)
    for node in nodes:
        assert PASSWORD not in node.log.read_text(errors="replace")


def test_bearer_token_flow_with_a_real_token_server(tmp_path, nodes, pki):
    server = TokenServer(tmp_path, pki)
    trace = make_trace(tmp_path / "trace.json", requests=150)
    try:
        with LocalRegistry(tmp_path / "reg", tls=(pki.cert, pki.key), token=server.registry_config) as reg:
            config = warmed(tmp_path, nodes, trace, reg.url, username=USER, password=PASSWORD, ca_file=str(pki.ca))
            issued_before = server.issued
            run = replay(tmp_path, nodes, config, trace)
    finally:
        server.stop()
    assert_all_ok_on_the_loop(run)
    read = {r.repository for r in TraceReader([trace]) if r.method in ("GET", "HEAD")}
    # tokens are per repository: the loop met a challenge and fetched a token for each repository it read
    assert run.where.challenges >= len(read)
    assert server.issued - issued_before >= len(read)


def test_blob_reads_redirected_to_storage_get_no_credentials(tmp_path, nodes, pki):
    htpasswd = write_htpasswd(tmp_path / "htpasswd")
    trace = make_trace(tmp_path / "trace.json", requests=150)
    with RedirectingRegistry(tmp_path / "redirecting", tls=(pki.cert, pki.key), htpasswd=htpasswd) as rr:
        reg = rr.registry
        config = warmed(tmp_path, nodes, trace, reg.url, username=USER, password=PASSWORD, ca_file=str(pki.ca))
        store_before = len(rr.store.requests)
        offset = reg.log_path.stat().st_size
        run = replay(tmp_path, nodes, config, trace)
        logged = logged_requests(reg.log_path, offset)
        stored = rr.store.requests[store_before:]
    assert_all_ok_on_the_loop(run)
    rows = run.rows
    found = rows[(rows.kind == "blob") & rows.method.isin(["GET", "HEAD"]) & (rows.status == 200)]
    redirected = [r for r in logged if r.status == 307]
    of_trace = Counter(r.method for r in redirected if "/drtp-preflight/" not in r.path)  # not the run's preflight
    assert of_trace["GET"] == (found.method == "GET").sum() > 0
    assert of_trace["HEAD"] == (found.method == "HEAD").sum() > 0
    # the storage server got each redirected read, none of them with the registry's credentials
    assert Counter(r.method for r in stored) == Counter(r.method for r in redirected)
    assert all(r.authorization is None for r in stored)


def test_a_certificate_the_entrys_ca_did_not_sign_fails_as_tls(tmp_path, pki):
    """In-process LoopRun against a TLS registry, trusting another CA: every read fails as ``tls``, on the loop."""
    from drtp.client.loop_engine import LoopRun

    other = Pki(tmp_path / "other-pki")
    with LocalRegistry(tmp_path / "reg", tls=(pki.cert, pki.key)) as reg:
        auth = RegistryAuth(reg.url, None, None, other.ca.read_text())
        spec = RunSpec(run="r", start_epoch=time.time(), threads=2, timeout=5.0, engine="loop", auth=[auth])
        run = LoopRun(spec)
        reqs = [
            ReplayRequest(i, f"id{i}", f"c{i % 3}", "GET", "manifest", "get", reg.url, "t/x", "v1", 100, 200)
            for i in range(6)
        ]
        run.submit(reqs)
        run.end()
        results = []
        while (item := run.results.get(timeout=30)) is not None:
            results.extend(f.result for f in (item if isinstance(item, list) else [item]))  # Finished: request, result
    assert sorted(r.seq for r in results) == list(range(6))
    assert all((r.ok, r.status, r.outcome) == (False, 0, "tls") for r in results), results[0]
    assert all("certificate verify failed" in r.error for r in results)
    assert (run.on_loop, run.on_pool) == (6, 0)


def test_the_loop_ends_when_the_end_came_while_requests_were_queued(registry):
    """One trace client's three reads on four workers, the end sent at once: the idle workers wait for queued
    requests they can never take (one trace client's go one at a time); they must still end with the run."""
    from drtp.client.loop_engine import LoopRun

    spec = RunSpec(run="r", start_epoch=time.time(), threads=4, timeout=5.0, engine="loop")
    run = LoopRun(spec)
    host = registry.url.split("//", 1)[-1]
    run.submit(
        [ReplayRequest(i, f"id{i}", "c1", "GET", "manifest", "get", host, "t/x", "v1", 100, 404) for i in range(3)]
    )
    run.end()
    results = []
    while (item := run.results.get(timeout=30)) is not None:
        results.extend(f.result for f in (item if isinstance(item, list) else [item]))  # Finished: request, result
    assert [r.status for r in results] == [404, 404, 404]
    run.thread.join(timeout=30)  # the bound turns a loop that never ends into a failure
    assert not run.thread.is_alive()
