"""A registries entry's ``upstream:``: its checks (one line naming the key, exit 2), the upstream as an entry of its
own, and where the planner sends (or skips) a cache's writes."""

from __future__ import annotations

import datetime as _dt
import subprocess
import sys
from pathlib import Path

import pytest

from drtp.config import ConfigError, load_config
from drtp.config.checks import check_access_logs
from drtp.config.upstreams import all_entries, upstream_entry, write_routes
from drtp.master.run.plan import Planner, is_write, registry_for, upstream_writes, write_targets
from drtp.registry.auth import config_auth, registry_names
from drtp.registry.transport import DIRECT_USER_AGENT
from drtp.trace.records import TraceRecord

CACHE = "registries:\n  - id: mirror\n    url: http://127.0.0.1:5000\n    insecure: true\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("upstream", "message"),
    [
        ("    upstream: {insecure: true}\n", "missing key 'registries[0].upstream.url'"),
        (
            "    upstream: {url: 'http://127.0.0.1:6000', password: a, password_file: b}\n",
            "key 'registries[0].upstream.password_file': mirror's upstream already has password",
        ),
        ("    upstream: {url: 'http://127.0.0.1:6000/v2/x'}\n", "key 'registries[0].upstream.url'"),
        ("    upstream: {url: 'ftp://127.0.0.1:6000'}\n", "key 'registries[0].upstream.url'"),
        ("    upstream: {url: 'http://127.0.0.1:5000'}\n", "upstream is the registry itself"),
        ("    upstream: {url: 'http://127.0.0.1:6000', credential_helper: 'a b'}\n", "upstream.credential_helper'"),
        (
            "    upstream: {url: 'http://127.0.0.1:6000', repository: 'org/'}\n",
            "key 'registries[0].upstream.repository'",
        ),
        ("    upstream: {url: 'http://127.0.0.1:6000', metrics: 'x'}\n", "key 'registries[0].upstream.metrics'"),
        ("    upstream: {url: 'http://127.0.0.1:6000', colour: red}\n", "registries[0].upstream"),
        ("    upstream_writes: skip\n", "key 'registries[0].upstream_writes': mirror has no upstream"),
        ("    upstream: {url: 'http://127.0.0.1:6000'}\n    upstream_writes: later\n", "registries[0].upstream_writes"),
    ],
)
def test_bad_upstreams_name_the_key(tmp_path, upstream, message):
    path = write(tmp_path, CACHE + upstream)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert message in text and str(path) in text and "\n" not in text


def test_an_upstreams_id_is_its_own(tmp_path):
    text = CACHE + "    upstream: {url: 'http://127.0.0.1:6000', insecure: true}\n"
    text += "  - {id: mirror-upstream, url: 'http://127.0.0.1:7000', insecure: true}\n"
    with pytest.raises(ConfigError, match=r"registries\[0\].upstream': its upstream is named mirror-upstream"):
        load_config(write(tmp_path, text))


def test_bad_upstream_exits_2_with_one_line(tmp_path):
    path = write(tmp_path, CACHE + "    upstream: {url: 'http://127.0.0.1:6000', password: a, password_file: b}\n")
    r = subprocess.run(
        [sys.executable, "-m", "drtp.cli", "clean", "-c", str(path)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "registries[0].upstream.password_file" in r.stderr


def test_an_upstream_over_http_needs_insecure_as_an_entry_does(tmp_path):
    cfg = load_config(write(tmp_path, CACHE + "    upstream: {url: 'http://127.0.0.1:6000'}\n"))
    with pytest.raises(ConfigError, match=r"registries\[mirror-upstream\]: plain http .* 'insecure: true'"):
        config_auth(cfg)


def test_an_unreadable_ca_file_of_the_upstream_names_it(tmp_path):
    up = "    upstream: {url: 'https://127.0.0.1:6000', ca_file: missing.pem}\n"
    cfg = load_config(write(tmp_path, CACHE + up))
    with pytest.raises(ConfigError, match=r"registries\[mirror-upstream\]: cannot read ca_file missing.pem"):
        config_auth(cfg)


def test_an_unreadable_access_log_is_one_line_naming_the_entry(tmp_path):
    up = "    upstream: {url: 'http://127.0.0.1:6000', insecure: true, access_log: gone.log}\n"
    cfg = load_config(write(tmp_path, CACHE + up))  # loads: the log is read by a run, checked when it starts
    with pytest.raises(ConfigError) as err:
        check_access_logs(cfg)
    text = str(err.value)
    assert "key 'registries[0].upstream.access_log': mirror's upstream log" in text and "gone.log" in text
    assert "\n" not in text
    (tmp_path / "gone.log").write_text("")
    check_access_logs(cfg)  # readable now


def test_the_upstream_is_an_entry_of_its_own(tmp_path):
    up = "    upstream: {url: 'http://127.0.0.1:6000/', insecure: true, username: u, password: p}\n"
    cfg = load_config(write(tmp_path, CACHE + "    repository: org/\n" + up))
    entry = upstream_entry(cfg.registries[0])
    assert entry is not None and entry.id == "mirror-upstream" and entry.repository == "org/"
    assert [e.id for e in all_entries(cfg)] == ["mirror", "mirror-upstream"]
    auths = config_auth(cfg)
    assert [(a.registry, a.name, a.username) for a in auths] == [
        ("http://127.0.0.1:5000", "mirror", None),
        ("http://127.0.0.1:6000", "mirror-upstream", "u"),
    ]
    assert registry_names(cfg)["http://127.0.0.1:6000"] == "mirror-upstream"
    assert write_routes(cfg) == {"http://127.0.0.1:5000": "http://127.0.0.1:6000"}


@pytest.mark.parametrize(
    ("method", "kind", "ref", "write"),
    [
        ("GET", "blob", "abc", False),
        ("HEAD", "manifest", "latest", False),
        ("POST", "blob", "uploads", True),
        ("PATCH", "blob", "uploads/1", True),
        ("GET", "blob", "uploads/1", True),  # an upload's status: the session lives on the upstream
        ("PUT", "manifest", "latest", True),
        ("DELETE", "manifest", "latest", True),
    ],
)
def test_what_is_a_write(method, kind, ref, write):
    assert is_write(method, kind, ref) is write


def test_upstream_writes_block_sits_beside_other_keys(tmp_path):
    up = "    upstream: {url: 'http://127.0.0.1:6000', insecure: true}\n    upstream_writes: skip\n"
    cfg = load_config(write(tmp_path, "registry: ['http://127.0.0.1:5000']\n" + CACHE + up))
    planner = Planner(cfg.registry, writes=write_routes(cfg))
    assert planner.routes == {"http://127.0.0.1:5000": None}
    summary = {"upstream": {"mirror": {"requests": {}}}}
    upstream_writes(summary, cfg, {"http://127.0.0.1:5000": 7})
    assert summary == {"upstream": {"mirror": {"requests": {}, "writes": {"to": "skip", "skipped": 7}}}}


def test_a_job_finds_the_upstreams_files_as_an_entrys(tmp_path):
    """A submitted or deployed job names an upstream's files as an entry's: made absolute, copied apart."""
    from drtp.cluster.runconfig import absolute_entry_paths, map_entry_paths

    data = {"registries": [{"id": "m", "ca_file": "ca.pem", "upstream": {"url": "u", "ca_file": "ca.pem"}}]}
    absolute_entry_paths(data, tmp_path)
    entry = data["registries"][0]
    assert entry["ca_file"] == entry["upstream"]["ca_file"] == str(tmp_path / "ca.pem")
    keys = []
    map_entry_paths(data, lambda value, key, i: keys.append(key) or value)
    assert keys == ["ca_file", "upstream.ca_file"]  # deploy copies each into a folder of its key


def _rec(method: str, uri: str, status: int = 200) -> TraceRecord:
    return TraceRecord("h", 0.01, method, "c1", uri, status, 10, "id", _dt.datetime(2017, 8, 1, tzinfo=_dt.UTC))


def test_the_planner_sends_a_caches_writes_to_its_upstream_as_drtp_direct():
    p = Planner(["http://cache:5000"], writes={"http://cache:5000": "http://origin:5000"})
    read = p.plan(_rec("GET", "v2/a/x/manifests/latest"), 0, None)
    assert read.registry == "http://cache:5000" and read.user_agent is None
    for seq, (method, uri) in enumerate(
        [("POST", "v2/a/x/blobs/uploads/"), ("PUT", "v2/a/x/blobs/L1"), ("PUT", "v2/a/x/manifests/latest")], 1
    ):
        req = p.plan(_rec(method, uri, 201), seq, None)
        assert (req.registry, req.user_agent) == ("http://origin:5000", DIRECT_USER_AGENT), (method, uri)
    assert write_targets(p.routes) == ["http://origin:5000"]


def test_the_planner_skips_and_counts_a_caches_writes_with_upstream_writes_skip():
    p = Planner(["http://cache:5000", "http://plain:5000"], writes={"http://cache:5000": None})
    repo = next(f"r{i}" for i in range(100) if registry_for(f"r{i}", p.registries) == "http://cache:5000")
    other = next(f"r{i}" for i in range(100) if registry_for(f"r{i}", p.registries) == "http://plain:5000")
    skipped = [_rec("PUT", f"v2/{repo}/manifests/t", 201), _rec("PATCH", f"v2/{repo}/blobs/uploads/1", 202)]
    kept = [_rec("GET", f"v2/{repo}/manifests/t"), _rec("PUT", f"v2/{other}/manifests/t", 201)]
    assert [p.skips(r, r.parts) for r in skipped + kept] == [True, True, False, False]
    assert dict(p.skipped) == {"http://cache:5000": 2} and write_targets(p.routes) == []
