"""``drtp verify`` against a real Distribution registry: what a garbage collection, a flipped byte and an
unreachable registry do to what drtp's records say the registry holds.

One registry serves the module; each test uses repositories of its own (its own trace), and verify reads
only its own config's records.  The collector is Debian's ``docker-registry garbage-collect`` run on the
registry's own config while it serves (:func:`collect`), then the registry is restarted: until then its
in-memory blob descriptor cache still answers for collected blobs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from drtp.config import load_config
from drtp.master.run.warmup import load_map, run_warmup
from drtp.master.series.experiment import run_experiment
from drtp.registry.local import LocalRegistry, registry_binary
from tests.conftest import ibm_record, write_json
from tests.faultproxy import FaultProxy
from tests.replay_support import TOKEN, make_trace, write_config

pytestmark = pytest.mark.registry


class PackagedRegistry(LocalRegistry):
    """Distribution as Debian configures it: the in-memory blob descriptor cache on."""

    def _config_text(self) -> str:
        cache = "storage:\n  cache:\n    blobdescriptor: inmemory\n"
        return super()._config_text().replace("storage:\n", cache, 1)


@pytest.fixture(scope="module")
def reg(tmp_path_factory):
    with PackagedRegistry(tmp_path_factory.mktemp("verify-registry")) as r:
        yield r


def verify(config: Path, *args: str) -> tuple[int, dict, str]:
    """``drtp verify`` as a user runs it: (exit code, verify.json, stdout)."""
    out = config.parent / "verify.json"
    p = subprocess.run(
        [sys.executable, "-m", "drtp.cli", "verify", "-c", str(config), "-o", str(out), *args],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    doc = json.loads(out.read_text()) if out.is_file() else {}
    return p.returncode, doc, p.stdout + p.stderr


def collect(reg: LocalRegistry, *flags: str) -> str:
    """The maintenance step: Distribution's garbage collector on the registry's own storage, while it serves."""
    p = subprocess.run(
        [registry_binary(), "garbage-collect", str(reg.workdir / "config.yml"), *flags],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return p.stdout + p.stderr


def warmed(reg: LocalRegistry | FaultProxy, d: Path, seed: int, shape: str = "images") -> Path:
    """A generated trace (repositories of its own, by ``seed``) warmed into ``reg`` (or through a fault proxy
    in front of it); its config's path."""
    trace = make_trace(d / "trace.json", requests=150, seed=seed)
    host = reg.address if isinstance(reg, FaultProxy) else reg.host
    cfg = write_config(d, trace, [host], ["127.0.0.1:1"])
    data = yaml.safe_load(Path(cfg.source).read_text())
    data["warmup"]["shape"] = shape
    Path(cfg.source).write_text(yaml.safe_dump(data))
    run_warmup(load_config(cfg.source), quiet=True)
    return Path(cfg.source)


def lost(doc: dict) -> list[tuple[str, str, str, str, bool]]:
    """(state, kind, repository, digest, referenced) of every object verify.json lists as not ok."""
    out = []
    for entry in doc["registries"].values():
        for repo, classes in entry["repositories"].items():
            for state, objects in classes.items():
                if state != "ok":
                    out += [(state, o["kind"], repo, o["digest"], o["referenced"]) for o in objects]
    return out


def test_a_flipped_byte_is_corrupt(reg, tmp_path):
    config = warmed(reg, tmp_path, seed=21)
    code, doc, out = verify(config)
    assert code == 0, out
    counts = next(iter(doc["registries"].values()))["counts"]
    assert counts["ok"] > 0 and sum(counts.values()) == counts["ok"]
    blob = next(e for e in load_map(config.parent / "warmup-map.jsonl") if e["kind"] == "blob")
    hexd = blob["digest"].split(":")[1]
    data = reg.workdir / "storage/docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    code, doc, out = verify(config)
    assert code == 1, out
    assert ("corrupt", "blob", blob["repository"], blob["digest"], True) in lost(doc)
    assert {state for state, *_ in lost(doc)} == {"corrupt"}
    assert f"corrupt blob {blob['repository']}@{blob['digest']} (referenced)" in out


class Armed:
    """The fault proxy's plan: no fault until a test names the (method, path) that gets one."""

    def __init__(self) -> None:
        self.faults: dict[tuple[str, str], str] = {}

    def __call__(self, index: int, method: str, path: str) -> str | None:
        return self.faults.get((method, path))


def test_a_cut_answer_is_short_and_a_refusal_unreadable(reg, tmp_path):
    plan = Armed()
    with FaultProxy(reg.host, plan) as proxy:
        config = warmed(proxy, tmp_path, seed=61)
        blobs = [e for e in load_map(config.parent / "warmup-map.jsonl") if e["kind"] == "blob"]
        cut, refused = blobs[0], next(e for e in blobs if e["digest"] != blobs[0]["digest"])
        for e, kind in ((cut, "reset"), (refused, "503")):
            plan.faults[("GET", f"/v2/{e['repository']}/blobs/{e['digest']}")] = kind
        code, doc, out = verify(config)
        assert not proxy.errors
    assert code == 1, out  # a referenced blob came short
    got = {(state, repo, digest) for state, kind, repo, digest, _ in lost(doc)}
    assert got == {
        ("short", cut["repository"], cut["digest"]),
        ("unreadable", refused["repository"], refused["digest"]),
    }


@pytest.mark.parametrize(("shape", "missing"), [("images", False), ("loose", True)])
def test_a_collection_after_warmup(reg, tmp_path, shape, missing):
    """Warmed as images, a collection keeps every blob; warmed loose, it deletes the blobs no manifest names."""
    config = warmed(reg, tmp_path, seed=31 if shape == "images" else 32, shape=shape)
    collect(reg, "--delete-untagged")
    reg.restart()
    code, doc, out = verify(config)
    assert code == 0, out
    gone = lost(doc)
    assert not [g for g in gone if g[4]], out  # nothing referenced is missing
    assert bool(gone) == missing, out
    assert {state for state, *_ in gone} <= {"missing"}


def test_an_unreachable_registry_exits_3(reg, tmp_path):
    config = warmed(reg, tmp_path, seed=41)
    reg.stop()
    try:
        code, _, out = verify(config)
    finally:
        reg.start()
    assert code == 3, out
    assert "cannot be reached" in out


# -- a collection on a writable registry while the trace pushes --------------------------------------------------

GAP_S = 8  # between the trace's layer upload and its manifest PUT: the collector runs in between


def push_trace(path: Path, repo: str) -> Path:
    """A client pushes one image: its layer, and ``GAP_S`` later the manifest naming it (as-is timing)."""
    t = "2017-07-01T01:00:{:06.3f}Z"
    uri = f"v2/{repo}"
    records = [
        ibm_record(0, **{"http.request.method": "HEAD", "http.request.uri": f"{uri}/blobs/layer1"})
        | {"http.response.status": 404, "http.response.written": 0, "timestamp": t.format(0.1)},
        ibm_record(1, **{"http.request.method": "POST", "http.request.uri": f"{uri}/blobs/uploads/"})
        | {"http.response.status": 202, "http.response.written": 0, "timestamp": t.format(0.2)},
        ibm_record(2, **{"http.request.method": "PUT", "http.request.uri": f"{uri}/blobs/layer1"})
        | {"http.response.status": 201, "http.response.written": 20000, "timestamp": t.format(0.3)},
        # the client checks the layer once more (as a second push of the image would): the registry's
        # in-memory blob descriptor cache learns it, and answers for it after the collector deleted it
        ibm_record(3, **{"http.request.method": "HEAD", "http.request.uri": f"{uri}/blobs/layer1"})
        | {"http.response.status": 200, "http.response.written": 0, "timestamp": t.format(0.5)},
        ibm_record(4, **{"http.request.method": "PUT", "http.request.uri": f"{uri}/manifests/v1"})
        | {"http.response.status": 201, "http.response.written": 900, "timestamp": t.format(0.3 + GAP_S)},
    ]
    return write_json(path, [r | {"http.request.remoteaddr": "pusher"} for r in records])  # one client's image


def layer_checked(reg: LocalRegistry, repo: str) -> bool:
    """Whether the registry logged the trace's HEAD of its uploaded layer (200): the collector may run."""
    if not reg.log_path.is_file():
        return False
    for line in reg.log_path.read_text().splitlines():
        if line.startswith("{") and f"/v2/{repo}/blobs/sha256:" in line:
            entry = json.loads(line)
            if entry.get("http.request.method") == "HEAD" and entry.get("http.response.status") == 200:
                return True
    return False


@pytest.mark.parametrize("collected", [True, False])
def test_a_collection_while_the_trace_pushes_loses_the_layer(reg, nodes, tmp_path, collected):
    repo = f"pushes/collected-{str(collected).lower()}"
    trace = push_trace(tmp_path / "trace.json", repo)
    cfg = write_config(tmp_path, trace, [reg.host], [n.address for n in nodes], wait=True)
    config = Path(cfg.source)
    run_warmup(cfg, quiet=True)  # the minimal config blob the run's one-layer manifest names
    run = subprocess.Popen(
        [sys.executable, "-m", "drtp.cli", "run", "-c", str(config), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not layer_checked(reg, repo) and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert layer_checked(reg, repo), "the trace's layer upload and check did not reach the registry"
        report = collect(reg) if collected else ""
        out, _ = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, out  # the manifest PUT was accepted (201), the run saw nothing wrong
    if collected:
        assert "blob eligible for deletion" in report, report  # the collector ran before the manifest PUT
    reg.restart()
    code, doc, text = verify(config)
    layer = [g for g in lost(doc) if g[1] == "blob" and g[2] == repo]
    if collected:
        assert code == 1, text
        assert layer and all(state == "missing" and referenced for state, _, _, _, referenced in layer), text
        assert f"missing blob {repo}@{layer[0][3]} (referenced)" in text
    else:
        assert code == 0, text
        assert not lost(doc), text


def test_an_experiment_with_verify_checks_each_registry_after_its_run(reg, nodes, tmp_path):
    trace = make_trace(tmp_path / "trace.json", requests=120, seed=51)
    cfg = {
        "trace": {"location": str(tmp_path), "traces": [trace.name]},
        "client_info": {"client_list": [n.address for n in nodes], "threads": 4, "token": TOKEN, "batch": 50},
        "warmup": {"output": "warmup.jsonl", "threads": 4},
        "results": "results",
        "registries": [{"id": "one", "url": reg.url, "insecure": True}],
        "verify": True,
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(cfg))
    status = run_experiment(load_config(path), tmp_path / "exp", quiet=True)
    assert status["one"]["ok"] and status["one"]["verify"] == {"exit_code": 0, "file": "verify.json"}, status
    doc = json.loads((tmp_path / "exp" / "one" / "verify.json").read_text())
    counts = doc["registries"]["one"]["counts"]
    assert counts["ok"] > 0 and sum(counts.values()) == counts["ok"], counts
