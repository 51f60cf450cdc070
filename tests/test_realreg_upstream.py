"""A registry with an upstream, against real Distribution registries: an upstream and a pull-through cache
(``proxy: remoteurl:``) in front of it.

drtp warms the upstream (the cache refuses pushes), replays the trace through the cache, and sends the
trace's pushes to the upstream (``upstream_writes: upstream``) or skips and counts them (``skip``).  The
upstream's own log (Distribution's JSON lines, ``http.request.useragent``) is the ground truth: every request
drtp sent it straight carries ``drtp-direct``, what the cache fetched does not.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from drtp.analysis.results import load_requests
from drtp.config import load_config
from drtp.master.series.experiment import run_experiment
from drtp.registry.local import LocalRegistry
from drtp.registry.transport import DIRECT_USER_AGENT
from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.reader import write_ibm
from tests.realreg_support import PASSWORD, USER, Pki, TokenServer
from tests.registry_storage import layer_links, tag_dirs
from tests.replay_support import TOKEN

pytestmark = pytest.mark.registry

WRITES = ("POST", "PATCH", "PUT", "DELETE")


def small_trace(path: Path) -> Path:
    """40 requests over 4 repositories, about half of them pushes (uploads and manifest PUTs)."""
    opts = GenerateOptions(
        requests=40, seed=7, span_s=10, clients=6, repositories=4, max_layer_size=64_000, push_ratio=0.3
    )
    write_ibm(path, generate(opts))
    return path


def trace_writes(path: Path) -> int:
    """The trace's write requests, counted from the trace file itself."""
    return sum(r["http.request.method"] in WRITES for r in json.loads(path.read_text()))


def upstream_requests(reg: LocalRegistry) -> list[dict]:
    """The requests the upstream logged (Distribution's ``response completed`` JSON lines)."""
    out = []
    for line in reg.log_path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "http.request.method" in entry and "http.response.status" in entry:
            out.append(entry)
    return out


def config(d: Path, nodes, entry: dict, trace: Path, engine: str = "auto") -> Path:
    """A study of ``entry`` alone; ``engine``: the nodes' (auto: the event loop, as fast as possible)."""
    ci = {"client_list": [n.address for n in nodes], "threads": 4, "token": TOKEN, "batch": 10, "engine": engine}
    cfg = {
        "trace": {"location": str(trace.parent), "traces": [trace.name]},
        "client_info": ci,
        "warmup": {"output": "warmup.jsonl", "threads": 2},
        "results": "results",
        "registries": [entry],
    }
    path = d / "study.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def drtp_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "drtp.cli", *args], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return small_trace(tmp_path_factory.mktemp("trace") / "trace.json")


def pair(d: Path, **upstream_kw) -> tuple[LocalRegistry, LocalRegistry]:
    upstream = LocalRegistry(d / "upstream", **upstream_kw).start()
    cache = LocalRegistry(d / "cache", proxy={"remoteurl": upstream.url}).start()  # the upstream first
    return upstream, cache


def cache_entry(cache: LocalRegistry, upstream: LocalRegistry, **kw) -> dict:
    up = {"url": upstream.url, "insecure": True, "access_log": str(upstream.log_path)}
    return {"id": "cache", "url": cache.url, "insecure": True, "upstream": up, **kw}


@pytest.fixture(scope="module")
def pushed_upstream(tmp_path_factory, nodes, trace):
    """An experiment whose trace's pushes go to the upstream (the default)."""
    d = tmp_path_factory.mktemp("up")
    upstream, cache = pair(d)
    try:
        path = config(d, nodes, cache_entry(cache, upstream), trace)
        status = run_experiment(load_config(path), d / "exp", quiet=True)
        yield {"dir": d, "config": path, "status": status, "upstream": upstream, "cache": cache}
    finally:
        cache.close()
        upstream.close()


def test_pushes_go_to_the_upstream_and_reads_through_the_cache(pushed_upstream, trace):
    s = pushed_upstream
    assert s["status"]["cache"]["ok"], s["status"]
    run = s["dir"] / "exp" / "cache"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["upstream"]["cache"]["writes"] == {"to": "upstream", "skipped": 0}
    assert summary["complete"] and summary["requests"] == 40
    df = load_requests(run / "requests.csv")
    trace_rows = df[~df.auxiliary]
    writes = trace_rows[trace_rows.method.isin(WRITES)]
    reads = trace_rows[~trace_rows.method.isin(WRITES)]
    assert len(writes) == trace_writes(trace) > 0
    assert (trace_rows.status == trace_rows.expected_status).all(), trace_rows[["method", "status", "error"]]
    # the cache saw no write at all, and the trace's reads; the upstream took each manifest PUT of the trace,
    # from drtp directly
    at_cache = [e for e in upstream_requests(s["cache"]) if e["http.request.uri"] != "/v2/"]
    assert not [e for e in at_cache if e["http.request.method"] in WRITES]
    assert len(at_cache) >= len(reads) > 0
    put = {
        (e["http.request.uri"], e["http.request.useragent"])
        for e in upstream_requests(s["upstream"])
        if e["http.request.method"] == "PUT" and e["http.response.status"] == 201
    }
    manifests = writes[writes.kind == "manifest"]
    assert len(manifests) > 0
    for row in manifests.itertuples():
        assert (f"/v2/{row.repository}/manifests/{row.reference}", DIRECT_USER_AGENT) in put
    # the warmup's blobs and manifests, and the run's pushes, are in the upstream's storage
    warmed = [json.loads(line) for line in (s["dir"] / "warmup-cache.jsonl").read_text().splitlines()]
    assert warmed and {e["registry"] for e in warmed} == {s["upstream"].url}
    assert {(e["repository"], e["reference"]) for e in warmed if e["kind"] == "manifest"} <= tag_dirs(s["upstream"])


def test_the_upstream_log_tells_drtp_direct_requests_from_the_cache_fetches(pushed_upstream):
    logged = upstream_requests(pushed_upstream["upstream"])
    direct = [e for e in logged if e.get("http.request.useragent") == DIRECT_USER_AGENT]
    fetched = [e for e in logged if e.get("http.request.useragent") != DIRECT_USER_AGENT]
    # every write the upstream saw came straight from drtp (warmup, preflight probe, the trace's pushes)
    assert {e["http.request.method"] for e in logged if e["http.request.method"] in WRITES} <= {
        "POST",
        "PUT",
        "PATCH",
        "DELETE",
    }
    assert all(
        e.get("http.request.useragent") == DIRECT_USER_AGENT for e in logged if e["http.request.method"] in WRITES
    )
    assert {"POST", "PUT"} <= {e["http.request.method"] for e in direct}
    # the trace's reads reached the upstream only as the cache's fetches
    assert fetched and {e["http.request.method"] for e in fetched} <= {"GET", "HEAD"}


def test_clean_deletes_from_the_upstream_what_was_pushed_there(pushed_upstream):
    s = pushed_upstream
    upstream = s["upstream"]
    assert tag_dirs(upstream)
    before = len(upstream_requests(upstream))
    # a run's requests.csv names its pushes to the upstream too (--run): the upstream is what is cleaned
    dry = drtp_cli("clean", "-c", str(s["config"]), "--run", str(s["dir"] / "exp" / "cache"), "--registry", "cache")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "registry cache-upstream" in dry.stdout and "registry cache " not in dry.stdout, dry.stdout
    assert re.search(r"[1-9][0-9]* pushes in the requests.csv of 1 run", dry.stdout), dry.stdout
    r = drtp_cli("clean", "-c", str(s["config"]), "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cache-upstream" in r.stdout
    assert not [link for link in layer_links(upstream) if not link[0].endswith("drtp-preflight")]
    deletes = [e for e in upstream_requests(upstream)[before:] if e["http.request.method"] == "DELETE"]
    assert deletes and all(e["http.request.useragent"] == DIRECT_USER_AGENT for e in deletes)


def test_skipped_writes_are_counted_and_not_sent(tmp_path, nodes, trace):
    upstream, cache = pair(tmp_path)
    with upstream, cache:
        path = config(tmp_path, nodes, cache_entry(cache, upstream, upstream_writes="skip"), trace)
        status = run_experiment(load_config(path), tmp_path / "exp", quiet=True)
        run = tmp_path / "exp" / "cache"
        summary = json.loads((run / "summary.json").read_text())
        n = trace_writes(trace)
        assert summary["upstream"]["cache"]["writes"] == {"to": "skip", "skipped": n}
        assert summary["complete"] and summary["not_sent"] == 0
        assert summary["requests"] == summary["trace_requests"] - n == 40 - n
        df = load_requests(run / "requests.csv")
        assert not df.method.isin(WRITES).any() and len(df) == 40 - n
        # the upstream saw no write but drtp's own (warmup and the preflight's probe)
        logged = upstream_requests(upstream)
        assert all(
            e["http.request.useragent"] == DIRECT_USER_AGENT for e in logged if e["http.request.method"] in WRITES
        )
        # reads of what the trace pushed now find nothing: failed, and the run exits 1 as for any failure
        assert status["cache"]["exit_code"] == (1 if (~df.ok).any() else 0)


def test_an_upstream_that_refuses_the_warmup_is_one_line_exit_3(tmp_path, trace):
    upstream, cache = pair(tmp_path, readonly=True)  # a read-only registry answers pushes with 405
    with upstream, cache:
        path = config(tmp_path, [], cache_entry(cache, upstream), trace)
        data = yaml.safe_load(path.read_text())
        data["registry"] = [cache.url]
        path.write_text(yaml.safe_dump(data))
        r = drtp_cli("warmup", "-c", str(path))
        assert r.returncode == 3, r.stdout + r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "cache-upstream" in lines[0] and "405" in lines[0], r.stderr


def test_a_token_auth_upstream_with_credentials(tmp_path, nodes, trace, monkeypatch):
    """Distribution passes credentials only to a token-auth upstream: the cache gets ``proxy: username/password``
    and drtp the same in ``upstream:``.  The nodes' thread engine this time."""
    pki = Pki(tmp_path / "pki")
    tokens = TokenServer(tmp_path, pki)
    upstream = LocalRegistry(tmp_path / "upstream", tls=(pki.cert, pki.key), token=tokens.registry_config).start()
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))  # the cache (a Go process) trusts the upstream's CA
    proxy = {"remoteurl": upstream.url, "username": USER, "password": PASSWORD}
    cache = LocalRegistry(tmp_path / "cache", proxy=proxy).start()
    monkeypatch.delenv("SSL_CERT_FILE")
    try:
        up = {"url": upstream.url, "username": USER, "password": PASSWORD, "ca_file": str(pki.ca)}
        entry = {"id": "cache", "url": cache.url, "insecure": True, "upstream": up}
        path = config(tmp_path, nodes, entry, trace, engine="threads")  # the other engine routes pushes too
        status = run_experiment(load_config(path), tmp_path / "exp", quiet=True)
        assert status["cache"]["ok"], status
        df = load_requests(tmp_path / "exp" / "cache" / "requests.csv")
        writes = df[df.method.isin(WRITES) & ~df.auxiliary]
        assert len(writes) == trace_writes(trace) and (writes.status < 400).all()
        assert not [e for e in upstream_requests(cache) if e["http.request.method"] in WRITES]
        assert tokens.issued > 0 and tokens.refused == 0
        assert any("push" in scope for scope in tokens.scopes)  # drtp's own pushes, with upstream:'s credentials
        logged = upstream_requests(upstream)
        assert [e for e in logged if e["http.request.method"] in WRITES]
        assert all(
            e["http.request.useragent"] == DIRECT_USER_AGENT for e in logged if e["http.request.method"] in WRITES
        )
    finally:
        cache.close()
        upstream.close()
        tokens.stop()


def test_an_unreadable_access_log_stops_an_experiment_before_anything_is_sent(tmp_path, trace):
    upstream, cache = pair(tmp_path)
    with upstream, cache:
        entry = cache_entry(cache, upstream)
        entry["upstream"]["access_log"] = str(tmp_path / "no-such.log")
        before = len(upstream_requests(upstream))
        r = drtp_cli("experiment", "-c", str(config(tmp_path, [], entry, trace)), "--out", str(tmp_path / "exp"))
        assert r.returncode == 2, r.stdout + r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "registries[0].upstream.access_log" in lines[0] and "no-such.log" in lines[0]
        assert len(upstream_requests(upstream)) == before  # nothing was sent
