"""Warmup on a trace that tags each repository many times, at 8 threads: no failure, and the
minimal config blob written into each repository by one request, before its manifests."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import requests

from drtp.master.run.replay import run_replay
from drtp.master.run.warmup import load_map, plan_warmup, run_warmup
from drtp.registry.local import LocalRegistry
from drtp.registry.manifest import ACCEPT, CONFIG_DIGEST
from drtp.trace.reader import TraceReader
from tests.conftest import ibm_record, write_json
from tests.replay_support import many_tags_trace, write_config

pytestmark = pytest.mark.registry

THREADS = 8
WARMUPS = 3


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    path = many_tags_trace(tmp_path_factory.mktemp("many-tags") / "trace.json", requests=300, seed=1)
    plan = plan_warmup(TraceReader([path]), ["r"])
    tags = Counter(repo for _, repo, _ in plan.manifests)
    assert max(tags.values()) >= 5, f"the trace must tag a repository many times: {tags}"
    return path


HEXDIGEST = CONFIG_DIGEST.split(":")[1]  # an upload's closing PUT names the blob in its query, URL-encoded


def logged(log_path: Path) -> list[tuple[str, str, str, int]]:
    """(method, repository, target with its query, status) of every request the registry logged, in order,
    the preflight's own probe left out."""
    out = []
    for line in log_path.read_bytes().splitlines():
        if not line.startswith(b"{"):
            continue
        entry = json.loads(line)
        if not str(entry.get("msg", "")).startswith("response completed"):
            continue
        uri = str(entry["http.request.uri"])
        repo = re.sub(r"/(blobs|manifests)/.*$", "", uri.partition("/v2/")[2])
        if not repo.endswith("drtp-preflight"):
            out.append((entry["http.request.method"], repo, uri, int(entry["http.response.status"])))
    return out


def config_requests(log_path: Path) -> list[tuple[str, str, int]]:
    """(method, repository, status) of the requests naming the minimal config blob, in log order."""
    return [(method, repo, status) for method, repo, uri, status in logged(log_path) if HEXDIGEST in uri]


def assert_map_readable(url: str, map_path: Path) -> int:
    """Every manifest the warmup map lists is served by the registry, byte for byte as the map says."""
    manifests = [e for e in load_map(map_path) if e["kind"] == "manifest"]
    for e in manifests:
        r = requests.get(
            f"{url}/v2/{e['repository']}/manifests/{e['reference']}", headers={"Accept": ACCEPT}, timeout=10
        )
        assert r.status_code == 200, (e, r.text)
        assert r.headers["Docker-Content-Digest"] == e["digest"] and len(r.content) == e["size"], e
    return len(manifests)


@pytest.mark.parametrize("attempt", range(WARMUPS))
def test_warmup_of_many_tags_per_repository_never_fails(tmp_path, trace, attempt):
    """Many manifests of one repository pushed at once (8 threads), each warmup on a fresh registry."""
    with LocalRegistry(tmp_path / "registry") as reg:
        cfg = write_config(tmp_path, trace, [reg.host], ["127.0.0.1:1"])
        cfg.warmup.threads = THREADS
        stats = run_warmup(cfg, quiet=True)  # raises RunError when an object failed
        assert stats.failed == 0 and not stats.errors
        assert assert_map_readable(reg.url, cfg.path(cfg.warmup.output)) == stats.manifests > 0
        puts = [status for method, _, uri, status in logged(reg.log_path) if method == "PUT" and "/manifests/" in uri]
        assert len(puts) == stats.manifests and set(puts) == {201}


def test_config_blob_written_once_per_repository_before_its_manifests(tmp_path, trace):
    """One HEAD and one upload of the minimal config blob per repository, all before that repository's
    first manifest PUT; a second warmup only checks; a resumed one pushes it again where it is gone."""
    with LocalRegistry(tmp_path / "registry") as reg:
        cfg = write_config(tmp_path, trace, [reg.host], ["127.0.0.1:1"])
        cfg.warmup.threads = THREADS
        stats = run_warmup(cfg, quiet=True)
        map_path = cfg.path(cfg.warmup.output)
        repos = {e["repository"] for e in load_map(map_path) if e["kind"] == "manifest"}
        assert len(repos) >= 5 and stats.configs_pushed == len(repos)
        requests_for_config = config_requests(reg.log_path)
        per_repo = Counter((method, repo) for method, repo, _ in requests_for_config)
        assert per_repo == Counter({(m, r): 1 for r in repos for m in ("HEAD", "PUT")}), per_repo
        assert sorted({(m, s) for m, _, s in requests_for_config}) == [("HEAD", 404), ("PUT", 201)]
        # in each repository, the config is written before the first manifest PUT
        entries = logged(reg.log_path)
        for repo in repos:
            puts = [uri for m, r, uri, _ in entries if r == repo and m == "PUT"]
            writes = [uri for uri in puts if HEXDIGEST in uri or "/manifests/" in uri]
            assert HEXDIGEST in writes[0] and len(writes) > 1, (repo, writes[:2])

        # a second warmup: one HEAD per repository, no write
        size = reg.log_path.stat().st_size
        again = run_warmup(cfg, quiet=True)
        assert again.configs_pushed == 0 and again.manifests == 0
        tail = reg.log_path.read_bytes()[size:]
        assert b'"http.request.method":"PUT"' not in tail and b'"http.request.method":"POST"' not in tail

        # resumed after the blob phase, with the config blob gone from every repository: pushed again first
        blob_lines = [x for x in map_path.read_text().splitlines() if json.loads(x)["kind"] == "blob"]
        map_path.write_text("\n".join(blob_lines) + "\n")
        for repo in repos:
            r = requests.delete(f"{reg.url}/v2/{repo}/blobs/{CONFIG_DIGEST}", timeout=10)
            assert r.status_code == 202, r.text
        resumed = run_warmup(cfg, quiet=True)
        assert resumed.failed == 0 and resumed.configs_pushed == len(repos) and resumed.manifests == stats.manifests
        assert assert_map_readable(reg.url, map_path) == stats.manifests


def manifest_only_pushes(path: Path) -> Path:
    """Images pushed as a manifest alone (a retag through the API), 16 clients over two repositories, so the run
    names the minimal config blob there; and one image with its own layers and config, which does not."""

    def request(i: int, method: str, uri: str, status: int, size: int, client: str) -> dict:
        return ibm_record(i, **{"http.request.method": method, "http.request.uri": uri, "http.response.status": status,
                                "http.response.written": size, "http.request.remoteaddr": client})  # fmt: skip

    records = [
        request(i, "PUT", f"v2/team/{('app', 'web')[i % 2]}/manifests/v{i}", 201, 600, f"c{i}") for i in range(16)
    ]
    full = [("POST", "blobs/uploads/", 202, 0), ("PUT", "blobs/layer-a", 201, 100), ("POST", "blobs/uploads/", 202, 0),
            ("PUT", "blobs/config-a", 201, 90), ("PUT", "manifests/v1", 201, 700)]  # fmt: skip
    records += [
        request(16 + j, m, f"v2/team/full/{what}", st, size, "builder") for j, (m, what, st, size) in enumerate(full)
    ]
    return write_json(path, records)


def test_warmup_puts_the_config_where_the_runs_manifests_name_it(tmp_path, nodes):
    """The run's manifest PUTs that name the minimal config blob find it: warmup pushed it into their repositories
    (and only there), so no node pushes it while another node PUTs a manifest of the same repository."""
    trace = manifest_only_pushes(tmp_path / "trace.json")
    with LocalRegistry(tmp_path / "registry") as reg:
        cfg = write_config(tmp_path, trace, [reg.host], [n.address for n in nodes], wait=False)
        stats = run_warmup(cfg, quiet=True)
        assert stats.configs_pushed == 2 and stats.manifests == 0
        warmed = Counter((m, r) for m, r, _ in config_requests(reg.log_path))
        assert warmed == Counter({(m, r): 1 for r in ("team/app", "team/web") for m in ("HEAD", "PUT")}), warmed
        offset = reg.log_path.stat().st_size
        summary = run_replay(cfg, tmp_path / "run", quiet=True)
        assert summary["failed"] == 0
        with open(reg.log_path, "rb") as f:
            f.seek(offset)
            (tmp_path / "run.log").write_bytes(f.read())
        in_run = config_requests(tmp_path / "run.log")
    assert in_run and {(m, s) for m, _, s in in_run} == {("HEAD", 200)}, in_run  # found by every node, never pushed
    assert {r for _, r, _ in in_run} == {"team/app", "team/web"}
    df = pd.read_csv(tmp_path / "run" / "requests.csv", keep_default_na=False, na_values=[""])
    puts = df[(df.method == "PUT") & (df.kind == "manifest") & ~df.auxiliary]
    assert len(puts) == 17 and puts.ok.all()
    assert set(df[df.auxiliary].reference) == {"config blob check"}


def test_blobs_of_one_digest_are_written_into_a_repository_once(tmp_path, trace):
    """With ``warmup.random: false`` blobs of one size have one content, so several blob jobs push or mount the
    same digest into a repository: one writes it, the others find it there (8 threads)."""
    with LocalRegistry(tmp_path / "registry") as reg:
        cfg = write_config(tmp_path, trace, [reg.host], ["127.0.0.1:1"])
        cfg.warmup.threads = THREADS
        cfg.warmup.random = False
        stats = run_warmup(cfg, quiet=True)
        entries = list(load_map(cfg.path(cfg.warmup.output)))
        blobs = [e for e in entries if e["kind"] == "blob"]
        shared = Counter((e["repository"], e["digest"]) for e in blobs)
        assert max(shared.values()) >= 3, "the trace must give several blobs one digest in a repository"
        writes = Counter()
        for method, repo, uri, status in logged(reg.log_path):
            if status == 201 and ((method == "PUT" and "/blobs/uploads/" in uri) or "mount=" in uri):
                digest = re.search(r"(?:digest|mount)=sha256(?:%3A|:)([0-9a-f]{64})", uri).group(1)
                writes[(repo, "sha256:" + digest)] += 1
        assert stats.failed == 0 and writes and max(writes.values()) == 1, writes.most_common(3)
        assert {key for key in writes if key[1] != CONFIG_DIGEST} == set(shared)
