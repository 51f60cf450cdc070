"""Real skopeo traffic captured as a trace, replayed against a fresh registry, and compared with it.

Used by the manifest tests and by bench/bench_fidelity.py: skopeo pushes small
real images (tests/images.py) to a Distribution registry, optionally copies one
into another repository of the same registry (a cross-repository mount), and
``drtp capture`` turns the registry's log into a trace with the real names kept.
The trace is then warmed up and replayed (two client nodes) against a fresh
registry, whose manifests, log and upload directories are read back.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.request import Request, urlopen

import pandas as pd

from drtp.registry.local import LocalRegistry
from drtp.registry.manifest import ACCEPT
from drtp.trace.anonymize import PlainNames
from drtp.trace.capture import capture_files
from drtp.trace.reader import TraceReader, write_ibm
from tests.images import build_image, random_files

REPO = "acme/webapp"
COPY_REPO = "acme/mirror"


def skopeo(*args: str) -> None:
    out = subprocess.run(["skopeo", *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        raise RuntimeError(f"skopeo {' '.join(args)} failed: {out.stderr.strip()}")


@dataclass
class Captured:
    """A captured skopeo session: the trace, and what was pushed (tag -> tests.images.build_image's dict)."""

    trace: Path
    images: dict[str, dict]  # "repository:tag" -> {"manifest", "config", "layers", "sizes"}


def capture_session(base: Path, copy: bool = False) -> Captured:
    """Push two images sharing a layer to REPO (tags one, two), re-tag one (stable); with ``copy``, also copy
    one into COPY_REPO; capture the registry's log as a trace (names kept, manifest sizes from the registry)."""
    shared = random_files(2, 20_000, seed=1)
    img1 = build_image(base / "img1", [shared, random_files(1, 30_000, seed=2)])
    img2 = build_image(base / "img2", [shared, random_files(3, 10_000, seed=3), random_files(1, 5_000, seed=4)])
    images = {f"{REPO}:one": img1, f"{REPO}:two": img2, f"{REPO}:stable": img1}
    with LocalRegistry(base / "registry") as reg:
        dest = f"docker://{reg.host}/{REPO}"
        skopeo("copy", "--dest-tls-verify=false", f"dir:{base / 'img1'}", f"{dest}:one")
        skopeo("copy", "--dest-tls-verify=false", f"dir:{base / 'img2'}", f"{dest}:two")
        skopeo("copy", "--src-tls-verify=false", "--dest-tls-verify=false", f"{dest}:one", f"{dest}:stable")
        if copy:
            target = f"docker://{reg.host}/{COPY_REPO}:one"
            skopeo("copy", "--src-tls-verify=false", "--dest-tls-verify=false", f"{dest}:one", target)
            images[f"{COPY_REPO}:one"] = img1
        # capture a copy: the size look-ups the capture sends to the registry must not join the trace
        log = base / "session.log"
        shutil.copyfile(reg.log_path, log)
        _, records = capture_files([log], PlainNames(), registry_url=reg.url)
        trace = base / "session.json"
        write_ibm(trace, records)
    return Captured(trace, images)


@dataclass
class Replayed:
    """A replay of a captured trace and what the fresh registry holds after it."""

    requests: pd.DataFrame  # requests.csv
    summary: dict
    manifests: dict[str, bytes]  # "repository:tag" -> the manifest the registry serves
    logged: list[dict]  # the registry's "response completed" log entries
    open_uploads: int  # upload sessions the registry still holds (never completed)


def replay_session(trace: Path, workdir: Path) -> Replayed:
    """Warm up and replay ``trace`` with two client nodes against a fresh registry."""
    from drtp.master.run.replay import run_replay
    from drtp.master.run.warmup import run_warmup
    from tests.replay_support import Node, write_config

    tags = {f"{r.repository}:{r.reference}" for r in TraceReader([trace]) if r.kind == "manifest"}
    nodes = [Node(workdir) for _ in range(2)]
    try:
        with LocalRegistry(workdir / "fresh") as reg:
            cfg = write_config(workdir, trace, [reg.host], [x.address for x in nodes], route=True)
            run_warmup(cfg, quiet=True)
            summary = run_replay(cfg, workdir / "run", quiet=True)
            manifests = {tag: _manifest(reg.url, tag) for tag in sorted(tags)}
            logged = _logged(reg.log_path)
            storage = workdir / "fresh" / "storage" / "docker" / "registry" / "v2" / "repositories"
            open_uploads = len(list(storage.glob("**/_uploads/*")))
    finally:
        for x in nodes:
            x.stop()
    df = pd.read_csv(workdir / "run" / "requests.csv", keep_default_na=False, na_values=[""])
    return Replayed(df, summary, {k: v for k, v in manifests.items() if v is not None}, logged, open_uploads)


def _manifest(base_url: str, tag: str) -> bytes | None:
    repo, ref = tag.rsplit(":", 1)
    req = Request(f"{base_url}/v2/{repo}/manifests/{ref}", headers={"Accept": ACCEPT})
    try:
        with urlopen(req, timeout=10) as r:  # noqa: S310 - a loopback test registry
            return r.read()
    except OSError:
        return None


def _logged(log: Path) -> list[dict]:
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    return [
        x
        for x in lines
        if x.get("msg", "").startswith("response completed")
        and re.search(r"/(manifests|blobs)/", x["http.request.uri"])
    ]


def pushed_blob_digests(run: Replayed) -> dict[tuple[str, str], str]:
    """(repository, trace reference) -> the digest the replay's push of that blob got."""
    df = run.requests
    pushes = df[(df.method == "PUT") & (df.kind == "blob") & ~df.auxiliary & df.ok]
    return {(r.repository, r.reference): r.digest for r in pushes.itertuples()}


def fidelity(trace: Path, run: Replayed) -> dict:
    """How closely a replay followed its trace: status match, bytes ratios, upload sessions left open."""
    df = run.requests
    main = df[~df.auxiliary]
    records = list(TraceReader([trace]))
    manifests = main[main.kind == "manifest"]
    blobs = main[main.kind == "blob"]
    trace_manifest_bytes = sum(r.size for r in records if r.kind == "manifest")
    trace_blob_bytes = sum(r.size for r in records if r.kind == "blob")
    puts = manifests[manifests.method == "PUT"]
    return {
        "requests": len(main),
        "status_match": float((main.status == main.expected_status).mean()),
        "manifest_bytes_ratio": float(manifests.bytes.sum() / trace_manifest_bytes),
        "manifest_put_bytes_ratio": float(puts.bytes.sum() / puts["size"].sum()),
        "blob_bytes_ratio": float(blobs.bytes.sum() / trace_blob_bytes),
        "open_uploads": run.open_uploads,
        "helper_requests": int(df.auxiliary.sum()),
    }
