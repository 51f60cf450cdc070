"""``drtp clean`` against real Distribution registries, after a real experiment (warmup + run per registry).

Two registries run the same generated trace through two client nodes: ``open`` (deletes enabled, repository
prefix ``team/``) and ``locked`` (deletes disabled: every DELETE is answered 405 UNSUPPORTED).  Images someone
else pushed (skopeo; python-dxf for a tag on one of drtp's own manifests) sit beside drtp's.  The registries'
storage is the ground truth (tests/registry_storage.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dxf import DXF

from drtp.analysis.results import load_requests, rows
from drtp.cli import main
from drtp.config import load_config
from drtp.master.run.plan import registry_for
from drtp.master.run.push_ledger import CONFIG_PUSH, MOUNT_FALLBACK, pushed_by_rows
from drtp.master.run.replay import run_replay
from drtp.master.run.warmup import load_map, run_warmup
from drtp.master.series.experiment import run_experiment
from drtp.registry.calls import RegistryCalls
from drtp.registry.local import LocalRegistry
from drtp.registry.manifest import CONFIG_DIGEST
from drtp.replay.messages import RegistryAuth
from drtp.replay.result_row import ResultRow
from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.reader import write_ibm
from tests.conftest import ibm_record, write_json
from tests.images import build_image, random_files, skopeo
from tests.realreg_support import PASSWORD, USER, Pki, TokenServer, write_htpasswd
from tests.registry_storage import every_file, layer_links, tag_dirs
from tests.replay_support import TOKEN, make_trace, write_config

pytestmark = pytest.mark.registry


def clean(config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "drtp.cli", "clean", "-c", str(config), *args],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def push_foreign(base: Path, reg: LocalRegistry, ref: str, seed: int) -> dict:
    """An image someone else pushes with skopeo (two layers of its own)."""
    image = build_image(base / f"img-{seed}", [random_files(1, 5000, seed), random_files(1, 7000, seed + 1)])
    skopeo("copy", "--dest-tls-verify=false", f"dir:{base / f'img-{seed}'}", f"docker://{reg.host}/{ref}")
    return image


def pulls(base: Path, reg: LocalRegistry, ref: str, image: dict) -> bool:
    out = base / f"pulled-{ref.replace('/', '_').replace(':', '_')}"
    skopeo("copy", "--src-tls-verify=false", f"docker://{reg.host}/{ref}", f"dir:{out}")
    return all((out / d.split(":")[1]).exists() for d in image["layers"])


@pytest.fixture(scope="module")
def study(tmp_path_factory, nodes):
    """One experiment over both registries; the config, the registries, the run directories."""
    d = tmp_path_factory.mktemp("clean")
    trace = make_trace(d / "trace.json", requests=300)
    with LocalRegistry(d / "open") as open_reg, LocalRegistry(d / "locked", delete=False) as locked:
        cfg = {
            "trace": {"location": str(d), "traces": [trace.name]},
            "client_info": {"client_list": [n.address for n in nodes], "threads": 8, "token": TOKEN, "batch": 50},
            "warmup": {"output": "warmup.jsonl", "threads": 4},
            "results": "results",
            "registries": [
                {"id": "open", "url": open_reg.url, "insecure": True, "repository": "team/"},
                {"id": "locked", "url": locked.url, "insecure": True},
            ],
        }
        path = d / "study.yaml"
        path.write_text(yaml.safe_dump(cfg))
        status = run_experiment(load_config(path), d / "exp", quiet=True)
        assert all(s["ok"] for s in status.values()), status
        yield {"dir": d, "config": path, "data": cfg, "open": open_reg, "locked": locked, "exp": d / "exp"}


def drtp_objects(study: dict, rid: str) -> tuple[set, set, set]:
    """(repository, tag), (repository, manifest digest) and (repository, blob digest) of drtp's records of ``rid``."""
    tags, manifests, blobs = set(), set(), set()
    for e in load_map(study["dir"] / f"warmup-{rid}.jsonl"):
        if e["kind"] == "manifest":
            tags.add((e["repository"], e["reference"]))
            manifests.add((e["repository"], e["digest"]))
            blobs.add((e["repository"], CONFIG_DIGEST))
        else:
            blobs.add((e["repository"], e["digest"]))
    for kind, repo, digest, tag in pushed_by_rows(rows(load_requests(study["exp"] / rid / "requests.csv"))):
        if kind == "manifest":
            tags.add((repo, tag))
            manifests.add((repo, digest))
        else:
            blobs.add((repo, digest))
    return tags, manifests, blobs


def test_clean_deletes_what_drtp_pushed_and_keeps_the_rest(study, tmp_path):
    reg, exp = study["open"], study["exp"]
    tags, manifests, blobs = drtp_objects(study, "open")
    # the run itself pushed manifests and layers: the records of warmup and run are both used
    df = load_requests(exp / "open" / "requests.csv")
    assert ((df.method == "PUT") & (df.kind == "manifest") & (df.status == 201)).any()
    assert ((df.method == "PUT") & (df.kind == "blob") & (df.status == 201) & ~df.auxiliary).any()
    assert tags <= tag_dirs(reg) and blobs <= layer_links(reg)  # drtp's objects are there before the clean
    # the preflight deleted its probe blob after pulling it
    assert not [link for repo, link in layer_links(reg) if repo == "team/drtp-preflight"]

    # someone else's images: one in a repository drtp pushed to, one elsewhere, and a tag of their own on one of
    # drtp's manifests (that manifest and its blobs are theirs too now)
    shared_repo, drtp_tag = sorted(tags)[0]
    mine = push_foreign(tmp_path, reg, f"{shared_repo}:foreign", 1)
    other = push_foreign(tmp_path, reg, "other/app:v1", 3)
    dxf = DXF(reg.host, shared_repo, insecure=True)
    dxf.set_manifest("kept", dxf.get_manifest(drtp_tag))
    client = RegistryCalls(reg.url, RegistryAuth(reg.url, insecure=True))
    kept_digest, kept_doc = client.manifest(shared_repo, "kept")
    kept_blobs = {(shared_repo, p["digest"]) for p in [kept_doc["config"], *kept_doc["layers"]]}
    # drtp's own tags on that manifest stay too: a manifest goes by digest, with every tag on it (tags alone
    # cannot be deleted in Distribution 2.8)
    kept_drtp_tags = {(r, t) for r, t in tags if r == shared_repo and client.manifest(r, t)[0] == kept_digest}
    assert (shared_repo, drtp_tag) in kept_drtp_tags
    foreign_tags = {(shared_repo, "foreign"), ("other/app", "v1"), (shared_repo, "kept")}
    foreign_links = (
        {(shared_repo, d) for d in [mine["config"], *mine["layers"]]}
        | {("other/app", d) for d in [other["config"], *other["layers"]]}
        | kept_blobs
    )

    before = every_file(reg)
    dry = clean(study["config"], "--registry", "open", "--run", str(exp / "open"))
    assert dry.returncode == 0, dry.stderr
    assert every_file(reg) == before  # a dry run deletes nothing
    assert "would delete" in dry.stdout and "registry open" in dry.stdout and "MB" in dry.stdout + "kB"
    assert "registry locked" not in dry.stdout  # --registry: that one only

    done = clean(study["config"], "--registry", "open", "--run", str(exp / "open"), "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    kept_line = next(line for line in done.stdout.splitlines() if ": kept " in line)
    assert f"images drtp has no record of pushing reference (in {shared_repo})" in kept_line, done.stdout

    # no tag and no blob link drtp made remains (but on the manifest someone else tagged); all of theirs does
    assert tag_dirs(reg) == foreign_tags | kept_drtp_tags
    assert layer_links(reg) == foreign_links
    for repo, tag in tags - kept_drtp_tags:
        assert tag not in client.tags(repo)
    for repo, digest in sorted(blobs - kept_blobs)[:20]:
        assert not client.exists("blob", repo, digest)
    assert client.exists("manifest", shared_repo, kept_digest)
    assert pulls(tmp_path, reg, f"{shared_repo}:foreign", mine)
    assert pulls(tmp_path, reg, "other/app:v1", other)
    assert pulls(tmp_path, reg, f"{shared_repo}:kept", {"layers": [p["digest"] for p in kept_doc["layers"]]})

    # a second clean finds it all gone: nothing left, exit 0
    again = clean(study["config"], "--registry", "open", "--run", str(exp / "open"), "--yes")
    kept = ({(shared_repo, kept_digest)} & manifests) | (kept_blobs & blobs)
    gone = len(manifests) + len(blobs) - len(kept)
    assert f"deleted 0 manifests and 0 blob links; {gone} already gone" in again.stdout, again.stdout
    assert again.returncode == 0


def test_a_registry_that_refuses_delete(study, tmp_path):
    reg, exp = study["locked"], study["exp"]
    _, manifests, blobs = drtp_objects(study, "locked")
    repos = {r for r, _ in manifests | blobs}
    shared_repo = sorted(repos)[0]
    push_foreign(tmp_path, reg, f"{shared_repo}:foreign", 5)
    before = every_file(reg)

    # no hook: every object is left, one line names each repository with its counts, exit 1
    plain = clean(study["config"], "--registry", "locked", "--run", str(exp / "locked"), "--yes")
    assert plain.returncode == 1, plain.stdout + plain.stderr
    left = [line for line in plain.stdout.splitlines() if ": left " in line]
    assert len(left) == 1, plain.stdout
    assert f"left {len(manifests) + len(blobs)} objects in {len(repos) + 1} repositories" in left[0], left[0]
    for repo in sorted(repos)[:20]:
        assert f"{repo} (" in left[0]
    assert "drtp-preflight (the preflight's probe blobs)" in left[0]
    assert every_file(reg) == before

    # with a delete_repository hook: it runs once per repository drtp pushed to (and the preflight's), never
    # where someone else's image is
    hook_log = tmp_path / "hook.log"
    hook = tmp_path / "delete-repo.sh"
    hook.write_text(f'#!/bin/sh\necho "$@" >> {hook_log}\n')
    hook.chmod(0o755)
    data = yaml.safe_load(study["config"].read_text())
    data["registries"][1]["delete_repository"] = [str(hook), "--repository", "{repository}"]
    hooked_cfg = study["dir"] / "hooked.yaml"
    hooked_cfg.write_text(yaml.safe_dump(data))
    hooked = clean(hooked_cfg, "--registry", "locked", "--run", str(exp / "locked"), "--yes")
    calls = hook_log.read_text().splitlines()
    assert sorted(calls) == sorted(f"--repository {r}" for r in (repos - {shared_repo}) | {"drtp-preflight"})
    assert hooked.returncode == 1  # the repository with someone else's image keeps drtp's objects
    n_shared = sum(r == shared_repo for r, _ in manifests | blobs)
    assert f": left {n_shared} objects in 1 repository: {shared_repo} (" in hooked.stdout, hooked.stdout
    assert "holds images drtp has no record of pushing: no delete_repository)" in hooked.stdout
    assert "removed with delete_repository" in hooked.stdout


def test_bad_input_is_one_line(study, tmp_path):
    cases = [
        (["--registry", "nope"], "--registry nope: not a registry of"),
        (["--run", str(tmp_path / "missing")], "not a directory"),
    ]
    bad_run = tmp_path / "bad-run"
    bad_run.mkdir()
    (bad_run / "requests.csv").write_text("not,a\nrequests,file\n")
    cases.append((["--run", str(bad_run)], "missing column"))
    for args, message in cases:
        r = clean(study["config"], *args)
        assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
    data = yaml.safe_load(study["config"].read_text())
    data["warmup"]["output"] = "elsewhere.jsonl"
    moved = study["dir"] / "moved.yaml"
    moved.write_text(yaml.safe_dump(data))
    r = clean(moved, "--registry", "open")
    assert r.returncode == 2 and "elsewhere-open.jsonl: warmup map of registry open not found" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    # with a run to clean, a missing map is said, not refused (a run without warmup has none)
    r = clean(moved, "--registry", "open", "--run", str(study["exp"] / "open"))
    assert r.returncode == 0 and "no warmup map" in r.stdout and "elsewhere-open.jsonl" in r.stdout, r.stdout
    # a map entry that is not a name and a digest is never sent to a registry
    data["warmup"]["output"] = "forged.jsonl"
    forged = study["dir"] / "forged.yaml"
    forged.write_text(yaml.safe_dump(data))
    entry = {"registry": study["open"].url, "repository": "a/b", "kind": "blob", "reference": "x", "size": 1}
    (study["dir"] / "forged-open.jsonl").write_text(json.dumps({**entry, "digest": "sha256:../../v2"}) + "\n")
    r = clean(forged, "--registry", "open")
    assert r.returncode == 2, r.stderr
    assert "forged-open.jsonl: entry 1: digest 'sha256:../../v2' is not algorithm:hex" in r.stderr
    # a push ledger with a corrupt line before its last: one line naming the file and the line, exit 2
    (study["dir"] / "forged-open.jsonl").write_text("")
    ledger = study["dir"] / f"forged-open.pushes-{study['open'].host.replace(':', '_')}.jsonl"
    push = {
        "event": "push",
        "registry": study["open"].url,
        "kind": "blob",
        "repository": "a/b",
        "digest": CONFIG_DIGEST,
    }
    ledger.write_text(json.dumps(push) + "\n" + "{not json\n" + json.dumps(push) + "\n")
    r = clean(forged, "--registry", "open")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"{ledger}: line 2: not a push ledger record" in r.stderr, r.stderr


def traced(i: int, method: str, uri: str, status: int = 200, size: int = 0, client: str = "client0") -> dict:
    over = {"http.request.method": method, "http.request.uri": uri, "http.response.status": status}
    return ibm_record(i, **over, **{"http.response.written": size, "http.request.remoteaddr": client})


def test_a_registry_list_with_refused_mounts_and_config_pushes(tmp_path, nodes):
    """A plain registry: list of two: the run's rows go to each by repository; a mount the target registry
    refuses (its source is on the other one) leaves a blob uploaded instead (clean finds it in the helper rows),
    and a manifest over one layer or none names the minimal config blob, which warmup put into its repository
    beforehand (no map entry, no row): clean removes it with the manifest."""
    with LocalRegistry(tmp_path / "a") as a, LocalRegistry(tmp_path / "b") as b:
        hosts = [a.host, b.host]

        def on(reg: str, stem: str) -> str:
            return next(f"team/{stem}{i}" for i in range(99) if registry_for(f"team/{stem}{i}", hosts) == reg)

        source, target, solo, same = on(a.host, "s"), on(b.host, "t"), on(b.host, "solo"), on(a.host, "m")
        records = [
            traced(0, "GET", f"v2/{source}/blobs/L1", 200, 5000),
            traced(1, "POST", f"v2/{target}/blobs/uploads/?mount=L1&from={source}", 201),
            traced(2, "GET", f"v2/{target}/blobs/L1", 200, 5000),
            traced(3, "PUT", f"v2/{solo}/manifests/v1", 201, 600, client="c2"),
            traced(4, "GET", f"v2/{source}/manifests/latest", 200, 700, client="c3"),
            traced(5, "POST", f"v2/{same}/blobs/uploads/?mount=L1&from={source}", 201, client="c4"),  # mounted
        ]
        trace = write_json(tmp_path / "trace.json", records)
        cfg = write_config(tmp_path, trace, hosts, [n.address for n in nodes])
        run_warmup(cfg, quiet=True)
        run_replay(cfg, tmp_path / "run", quiet=True)
        df = load_requests(tmp_path / "run" / "requests.csv")
        aux = df[df.auxiliary & (df.status == 201)]
        assert set(aux.reference) == {MOUNT_FALLBACK}, df.to_string()  # the nodes found the config in place
        assert (target, CONFIG_DIGEST) not in layer_links(b) and (solo, CONFIG_DIGEST) in layer_links(b)
        mounted = df[(df.method == "POST") & (df.repository == same)]
        assert list(mounted.status) == [201] and {r for r, _ in layer_links(a)} >= {source, same}
        assert layer_links(a) and layer_links(b) and tag_dirs(a) and tag_dirs(b)

        done = clean(tmp_path / "config.yaml", "--run", str(tmp_path / "run"), "--yes")
        assert done.returncode == 0, done.stdout + done.stderr
        assert layer_links(a) == layer_links(b) == set()
        assert tag_dirs(a) == tag_dirs(b) == set()


def test_a_folder_of_repetitions_over_a_registry_list_is_cleaned_whole(tmp_path, nodes):
    """``drtp run --repeat 2`` over a plain registry list of two: each repetition puts a trace repository on
    the same registry (spread by the trace's name, not the ``rep<k>-`` one), and ``drtp clean --set repeat=2
    --run OUT`` reads OUT's rep-<k>/ runs and each repetition's warmup map, leaving both registries empty."""
    trace = make_trace(tmp_path / "trace.json", requests=40, span=5.0)
    with LocalRegistry(tmp_path / "a") as a, LocalRegistry(tmp_path / "b") as b:
        write_config(tmp_path, trace, [a.host, b.host], [n.address for n in nodes])
        out = tmp_path / "run"
        assert main(["run", "-c", str(tmp_path / "config.yaml"), "--repeat", "2", "--out", str(out), "-q"]) == 0
        placed = {}
        for reg in (a, b):
            for repo, _tag in tag_dirs(reg) | layer_links(reg):
                k, _, name = repo.partition("-")
                placed.setdefault(k, set()).add((reg.host, name))
        assert set(placed) == {"rep1", "rep2"} and placed["rep1"] == placed["rep2"]
        assert {host for host, _ in placed["rep1"]} == {a.host, b.host}  # spread over both

        done = clean(tmp_path / "config.yaml", "--set", "repeat=2", "--run", str(out), "--yes")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "in the requests.csv of 2 runs" in done.stdout
        assert layer_links(a) == layer_links(b) == set()
        assert tag_dirs(a) == tag_dirs(b) == set()


def test_tags_are_listed_and_next_pages_followed(registry):
    """Every tag of a repository is read (none for an unknown one). Distribution 2.8 answers the whole list
    at once (it ignores ``n`` on tag lists); registries that page (Docker Hub, Harbor, GHCR) send a
    ``Link: <…>; rel="next"`` header as the Distribution API defines, which is followed."""
    from drtp.registry.calls import _next_page
    from drtp.registry.manifest import CONFIG_BLOB, build_manifest

    client = RegistryCalls(registry.url, RegistryAuth(registry.url, insecure=True))
    client.push_blob("team/paged", CONFIG_BLOB, CONFIG_DIGEST)
    tags = [f"t{i}" for i in range(5)]
    for i, tag in enumerate(tags):
        client.put_manifest("team/paged", tag, build_manifest([], 400 + i))
    listed = client.tags("team/paged", page=2)
    assert sorted(listed) == tags and len(listed) == len(tags)
    assert client.tags("team/none") == []
    base = "https://registry.example"
    link = '</v2/library/alpine/tags/list?last=3.1&n=100>; rel="next"'
    assert _next_page(base, link) == f"{base}/v2/library/alpine/tags/list?last=3.1&n=100"
    assert _next_page(base, None) is None and _next_page(base, '</v2/x/tags/list?n=1>; rel="prev"') is None


def test_a_run_of_another_registry_is_left_out_and_said(study):
    r = clean(study["config"], "--registry", "open", "--run", str(study["exp"] / "locked"))
    assert r.returncode == 0, r.stderr
    assert f"{study['exp'] / 'locked'} ran against {study['locked'].url}, not --registry open: left out" in r.stdout


@pytest.mark.parametrize("scheme", ["basic", "token"])
def test_a_registry_with_credentials(scheme, tmp_path, monkeypatch):
    """https with the entry's CA, htpasswd or bearer tokens: the DELETEs authenticate like every other
    request; refused credentials are one line naming the registry and the user, never the password."""
    from drtp.master.run.warmup import run_warmup
    from drtp.master.series.experiment import registry_config

    pki = Pki(tmp_path / "pki")
    server = TokenServer(tmp_path, pki) if scheme == "token" else None
    login = {"token": server.registry_config} if server else {"htpasswd": write_htpasswd(tmp_path / "htpasswd")}
    monkeypatch.setenv("CLEAN_PASSWORD", PASSWORD)
    try:
        with LocalRegistry(tmp_path / "reg", tls=(pki.cert, pki.key), **login) as reg:
            entry = {"id": "hosted", "url": reg.url, "repository": "lab/", "username": USER,
                     "password": "${CLEAN_PASSWORD}", "ca_file": str(pki.ca)}  # fmt: skip
            trace = make_trace(tmp_path / "trace.json", requests=120)
            cfg = {
                "trace": {"location": str(tmp_path), "traces": [trace.name]},
                "warmup": {"output": "warmup.jsonl", "threads": 4},
                "registries": [entry],
            }
            path = tmp_path / "hosted.yaml"
            path.write_text(yaml.safe_dump(cfg))
            loaded = load_config(path)
            run_warmup(registry_config(loaded, loaded.registries[0]), quiet=True)
            assert layer_links(reg) and tag_dirs(reg)

            cfg["registries"][0]["password"] = "wrong-password"
            wrong = tmp_path / "wrong.yaml"
            wrong.write_text(yaml.safe_dump(cfg))
            refused = clean(wrong, "--yes")
            assert refused.returncode == 3, refused.stdout + refused.stderr
            assert len(refused.stderr.strip().splitlines()) == 1 and "registry hosted" in refused.stderr
            assert layer_links(reg) and tag_dirs(reg)  # nothing was deleted

            done = clean(path, "--yes")
            assert done.returncode == 0, done.stdout + done.stderr
            assert layer_links(reg) == set() and tag_dirs(reg) == set()
            assert PASSWORD not in done.stdout + done.stderr + refused.stdout + refused.stderr
    finally:
        if server is not None:
            server.stop()


def _row(method: str, kind: str, reference: str, status: int, digest: str = "", auxiliary: bool = False) -> ResultRow:
    return ResultRow(
        "client0", "node", "t1", method, kind, "team/app", reference, digest, 0, 0, None, 0.0, 0.001, None,
        status, 0 if auxiliary else 201, 200 <= status < 300, "ok" if 200 <= status < 300 else "http", 1, "",
        auxiliary,
    )  # fmt: skip


def test_rows_name_the_config_blob_a_node_pushed_and_the_one_a_manifest_names():
    """A node's helper push of the minimal config blob is drtp's even when the manifest PUT after it failed;
    a manifest PUT that succeeded names the minimal config blob too (warmup may have put it there, unrecorded)."""
    manifest = "sha256:" + "ab" * 32
    failed_put = [_row("PUT", "manifest", "v1", 400), _row("PUT", "blob", CONFIG_PUSH, 201, auxiliary=True)]
    assert list(pushed_by_rows(failed_put)) == [("blob", "team/app", CONFIG_DIGEST, "")]
    stored = [_row("PUT", "manifest", "v2", 201, manifest)]
    assert list(pushed_by_rows(stored)) == [
        ("manifest", "team/app", manifest, "v2"),
        ("blob", "team/app", CONFIG_DIGEST, ""),
    ]


def test_the_config_blob_warmup_put_where_only_the_run_pushes_is_cleaned_from_the_map(tmp_path):
    """A repository the trace only pushes to holds nothing of the warmup's but the minimal config blob its
    manifest PUTs will name: the map records it, so a clean of the warmup alone (no run given) removes it."""
    records = [traced(0, "PUT", "v2/team/solo/manifests/v1", 201, 600, client="c2")]
    trace = write_json(tmp_path / "trace.json", records)
    with LocalRegistry(tmp_path / "r") as reg:
        cfg = write_config(tmp_path, trace, [reg.host], ["127.0.0.1:1"])
        assert run_warmup(cfg, quiet=True).configs_recorded == 1
        assert layer_links(reg) == {("team/solo", CONFIG_DIGEST)}
        done = clean(tmp_path / "config.yaml", "--yes")
        assert done.returncode == 0, done.stdout + done.stderr
        assert layer_links(reg) == set()


# -- the push ledger: a clean with no --run -------------------------------------------------------------------


def pushy_trace(path: Path, requests: int = 80) -> Path:
    """A short trace of which a third pushes (new images over few repositories): each run pushes tags and layers
    of its own, which no warmup map records."""
    opts = GenerateOptions(
        requests=requests, seed=3, span_s=8, clients=10, repositories=4, push_ratio=0.3, max_layer_size=20_000
    )
    write_ibm(path, generate(opts))
    return path


@pytest.mark.parametrize("command", ["run", "experiment --repeat 2", "ramp"])
def test_a_clean_with_no_run_given_removes_what_the_runs_pushed(command, tmp_path, nodes):
    """Each way of running writes every push the registry accepted to the ledger beside the warmup map, as the
    results arrive; ``drtp clean -c CONFIG --yes`` alone (the results moved away) then leaves no tag and no blob
    link drtp made in the registry's storage, keeps the images skopeo pushed (one in a repository drtp pushed
    to), and says what it read.  A second clean finds nothing left in the ledger to ask for."""
    trace = pushy_trace(tmp_path / "trace.json")
    with LocalRegistry(tmp_path / "reg") as reg:
        cfg = {
            "trace": {"location": str(tmp_path), "traces": [trace.name]},
            "client_info": {"client_list": [n.address for n in nodes], "threads": 8, "token": TOKEN, "batch": 20},
            "warmup": {"output": "maps/warmup.jsonl", "threads": 4},
            "results": "results",
        }
        if command == "ramp":  # a ramp replays a registry: list
            cfg["registry"] = [reg.host]
        else:
            cfg["registries"] = [{"id": "lab", "url": reg.url, "insecure": True, "repository": "lab/"}]
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump(cfg))
        if command == "ramp":
            assert main(["warmup", "-c", str(config), "-q"]) == 0
            argv = ["ramp", "-c", str(config), "--from", "20", "--step", "20", "--to", "40", "--step-duration", "1"]
            argv += ["--slo", "p99<60s"]
        else:
            argv = command.split() + ["-c", str(config)]
        assert main([*argv, "-q"]) == 0
        shutil.move(tmp_path / "results", tmp_path / "moved")  # results are moved: the clean must not need them
        runs = sorted(p.parent for p in (tmp_path / "moved").rglob("requests.csv"))
        assert len(runs) == 2 if command != "run" else len(runs) == 1
        pushed = [push for run in runs for push in pushed_by_rows(rows(load_requests(run / "requests.csv")))]
        run_tags = {(repo, tag) for kind, repo, _, tag in pushed if kind == "manifest" and ":" not in tag}
        run_links = {(repo, digest) for kind, repo, digest, _ in pushed if kind == "blob"}
        assert len(run_tags) >= 3 and len(run_links) >= 6, pushed  # the runs pushed: no warmup map names these
        # (the minimal config blob is recorded with each manifest PUT in case warmup put it there: it may not be)
        assert run_tags <= tag_dirs(reg) and {link for link in run_links if link[1] != CONFIG_DIGEST} <= layer_links(
            reg
        )
        assert sorted(p.name for p in (tmp_path / "maps").glob("*.pushes-*")) == sorted(
            {f"{Path(m).stem}.pushes-{reg.host.replace(':', '_')}.jsonl" for m in _maps(tmp_path / "maps")}
        )

        shared = sorted(run_tags)[0][0]
        mine = push_foreign(tmp_path, reg, f"{shared}:foreign", 11)
        other = push_foreign(tmp_path, reg, "other/app:v1", 13)
        done = clean(config, "--yes")
        assert done.returncode == 0, done.stdout + done.stderr
        head = done.stdout.splitlines()[0]
        n_runs = len(runs)
        assert f", {len(pushed)} push ledger entries of {n_runs} run{'s' if n_runs > 1 else ''}, 0 pushes" in head, head
        assert "no warmup map" not in done.stdout and "no push ledger" not in done.stdout, done.stdout
        assert tag_dirs(reg) == {(shared, "foreign"), ("other/app", "v1")}
        assert layer_links(reg) == {(shared, d) for d in [mine["config"], *mine["layers"]]} | {
            ("other/app", d) for d in [other["config"], *other["layers"]]
        }
        assert pulls(tmp_path, reg, f"{shared}:foreign", mine) and pulls(tmp_path, reg, "other/app:v1", other)

        again = clean(config, "--yes")
        assert again.returncode == 0, again.stdout + again.stderr
        assert "0 push ledger entries of 0 runs" in again.stdout.splitlines()[0], again.stdout
        assert "deleted 0 manifests and 0 blob links" in again.stdout


def _maps(folder: Path) -> list[Path]:
    """The warmup maps in ``folder`` (not their ledgers)."""
    return [p for p in folder.glob("*.jsonl") if ".pushes-" not in p.name]
