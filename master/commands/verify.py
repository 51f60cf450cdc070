"""``drtp verify``: read back what drtp's records say a registry holds, and check every byte of it.

A registry does not check a blob's digest when it serves it, and a garbage collection, a restore or a bad
disk can lose or damage objects without any request failing at the time.  So this fetches every manifest
and blob drtp's own records name — the warmup maps and push ledgers, and the ``requests.csv`` of runs given
with ``--run``, read by drtp.master.commands.clean_records as ``drtp clean`` reads them — minus the objects
the runs' trace deleted (a DELETE the registry accepted), and hashes each body while it streams in (never a
whole blob in memory), ``threads`` at a time.

Each object gets one class: ``ok``; ``missing`` (404); ``short`` (the answer ended before its
``Content-Length``: Distribution's in-memory blob descriptor cache answers so for a blob a collector deleted
until the registry restarts); ``corrupt`` (the bytes do not hash to the digest); ``unreadable`` (any other
status, or no answer).  Each object is also ``referenced`` or not: a manifest is when one of the tags drtp
pushed it under still names it, or names nothing any more (the tag was lost with it); a blob or a child
manifest is when a referenced manifest that could be read names it.  A referenced object missing, short or
corrupt is a loss (exit 1); an unreferenced one missing is what a collector may remove (exit 0).  Manifests
are read first: which blobs are referenced is known from their bodies.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from drtp.config import Config
from drtp.errors import RunError
from drtp.exit_codes import ExitCode
from drtp.master.commands.clean_records import (
    Pushed,
    given_runs,
    read_ledgers,
    read_maps,
    read_runs,
    targets,
    warmup_maps,
)
from drtp.progress import progress
from drtp.registry.calls import REGISTRY_ERRORS, RegistryCalls

CLASSES = ("ok", "missing", "short", "corrupt", "unreadable")
LOSSES = ("missing", "short", "corrupt")  # of a referenced object: exit 1
MANIFEST_KEPT = 4 << 20  # a manifest body is kept (to read what it names) up to this many bytes
SHOWN = 10  # objects named on the console per class and registry
BATCH = 1000  # objects handed to the thread pool at once


@dataclass
class Checked:
    """One object as the registry served it."""

    kind: str  # "manifest" or "blob"
    repository: str
    digest: str
    state: str  # one of CLASSES
    status: int  # the HTTP status (0: no complete answer)
    bytes: int  # body bytes read
    announced: int | None  # the answer's Content-Length
    error: str = ""  # why it is not ok
    referenced: bool = False
    tags: list[str] = field(default_factory=list)  # the tags drtp pushed a manifest under


@dataclass
class RegistryVerify:
    """One registry's checks, and whether it could be reached at all."""

    name: str
    url: str
    checked: list[Checked] = field(default_factory=list)
    tags_lost: list[str] = field(default_factory=list)  # repository:tag drtp pushed that names nothing now

    def counts(self) -> dict[str, int]:
        n = Counter(c.state for c in self.checked)
        return {k: n[k] for k in CLASSES}

    def losses(self) -> list[Checked]:
        return [c for c in self.checked if c.referenced and c.state in LOSSES]

    def to_json(self) -> dict:
        repos: dict[str, dict] = {}
        for c in sorted(self.checked, key=lambda c: (c.repository, c.kind, c.digest)):
            repo = repos.setdefault(c.repository, {k: 0 if k == "ok" else [] for k in CLASSES})
            if c.state == "ok":
                repo["ok"] += 1
            else:
                one = asdict(c)
                del one["repository"], one["state"]
                repo[c.state].append(one)
        return {
            "url": self.url,
            "counts": self.counts(),
            "referenced_lost": len(self.losses()),
            "tags_lost": self.tags_lost,
            "repositories": repos,
        }


# -- what to check ------------------------------------------------------------------------------------------------


def deleted_by_runs(run_dirs: list[Path]) -> set[tuple[str, str, str]]:
    """(kind, repository, digest) the runs' trace deleted: DELETEs the registry accepted (2xx)."""
    from drtp.analysis.results import read_run_files, rows

    out = set()
    for run_dir in run_dirs:
        if not (run_dir / "requests.csv").is_file():
            continue
        df, _ = read_run_files(run_dir)
        for row in rows(df):
            if row.method == "DELETE" and 200 <= row.status < 300 and row.digest and not row.auxiliary:
                out.add((row.kind, row.repository, row.digest))
    return out


def records(cfg: Config, only: str | None, runs: list[Path]) -> tuple[dict[str, Pushed], list[Path]]:
    """What drtp's records say each registry holds (``drtp clean``'s reading) and the run folders read for
    the trace's deletes (those given, and those the ledgers name that are still there)."""
    pushed = targets(cfg, only)
    maps = warmup_maps(cfg, pushed)
    _, ledger_runs = read_ledgers(maps, pushed)
    read_maps(cfg, pushed, maps, required=not runs)
    read_runs(cfg, runs, pushed, only)
    seen = list(dict.fromkeys([*runs, *(Path(r) for r in sorted(ledger_runs) if r and Path(r).is_dir())]))
    return pushed, seen


# -- reading back -------------------------------------------------------------------------------------------------


def check_one(calls: RegistryCalls, kind: str, repo: str, digest: str) -> tuple[Checked, bytes]:
    """Fetch one object, hashing it as it streams in: its class, and a manifest's body (b"" for a blob)."""
    algorithm, _, expected = digest.partition(":")
    h = hashlib.new(algorithm) if algorithm in hashlib.algorithms_available else hashlib.sha256()
    kept: list[bytes] = []
    size = [0]

    def sink(data: bytes) -> None:
        h.update(data)
        size[0] += len(data)
        if kind == "manifest" and size[0] <= MANIFEST_KEPT:
            kept.append(data)

    r = calls.read(kind, repo, digest, sink)
    length = r.header("content-length") if r.status else None
    announced = int(length) if length and length.isdigit() else None
    c = Checked(kind, repo, digest, "ok", r.status, size[0] if r.status in (0, 200) else r.bytes, announced)
    if r.status == 200:
        if announced is not None and size[0] < announced:
            c.state, c.error = "short", f"{size[0]} of {announced} bytes"
        elif h.hexdigest() != expected:
            c.state, c.error = "corrupt", f"the {size[0]} bytes served hash to {algorithm}:{h.hexdigest()}"
    elif r.status == 404:
        c.state, c.error = "missing", "HTTP 404"
    elif r.outcome == "truncated":
        c.state, c.error = "short", r.error
    else:
        c.state = "unreadable"
        c.error = f"{r.outcome}: {r.error}" if r.outcome else f"HTTP {r.status}"
    return c, b"".join(kept) if c.state == "ok" and kind == "manifest" else b""


def named_by(body: bytes) -> list[tuple[str, str]]:
    """(kind, digest) a manifest names: its config and layers (blobs), an index's manifests."""
    try:
        doc = json.loads(body)
    except ValueError:
        return []
    if not isinstance(doc, dict):
        return []
    out = []
    for key, kind in (("config", "blob"), ("layers", "blob"), ("manifests", "manifest")):
        items = doc.get(key)
        for item in [items] if isinstance(items, dict) else items if isinstance(items, list) else []:
            if isinstance(item, dict) and isinstance(item.get("digest"), str):
                out.append((kind, item["digest"]))
    return out


def verify_registry(
    target: Pushed, deleted: set[tuple[str, str, str]], threads: int, quiet: bool = False
) -> RegistryVerify:
    """Check one registry's objects: manifests first (what they name is referenced), then blobs.

    Raises RunError when the registry cannot be reached at all."""
    calls = RegistryCalls(target.registry, target.auth, timeout=120)
    try:
        calls.ping()
    except REGISTRY_ERRORS as e:
        raise RunError(f"registry {target.name}: cannot be reached ({e})") from None
    out = RegistryVerify(target.name, target.registry)
    wanted = {k: sorted(tags) for k, tags in target.objects.items() if k not in deleted}
    # which manifest each recorded tag names now: a tag that names nothing was lost with its manifest
    current: dict[tuple[str, str], str | None] = {}
    for (kind, repo, _), tags in wanted.items():
        if kind == "manifest":
            current.update(((repo, t), None) for t in tags)
    kinds = [[k for k in sorted(wanted) if k[0] == kind] for kind in ("manifest", "blob")]
    with (
        ThreadPoolExecutor(threads) as pool,
        progress(total=len(wanted) + len(current), desc=f"verify {target.name}", unit="obj", quiet=quiet) as bar,
    ):

        def tag_of(key: tuple[str, str]) -> tuple[tuple[str, str], str | None, bool]:
            """(repository, tag), the digest it names (None: unknown), whether it is gone (404)."""
            try:
                return key, calls.manifest(*key)[0], False
            except REGISTRY_ERRORS as e:  # unknown: its manifests count as referenced, as if it were lost
                return key, None, getattr(e, "status", 0) == 404

        for key, digest, gone in pool.map(tag_of, sorted(current)):
            current[key] = digest
            if gone:
                out.tags_lost.append(f"{key[0]}:{key[1]}")
            bar.update(1)
        referenced: set[tuple[str, str, str]] = set()
        for (kind, repo, digest), tags in wanted.items():
            if kind == "manifest" and any(current[(repo, t)] in (digest, None) for t in tags):
                referenced.add((kind, repo, digest))
        failed = 0
        for keys in kinds:
            batches = (keys[i : i + BATCH] for i in range(0, len(keys), BATCH))  # a bounded queue of futures
            for c, body in (one for batch in batches for one in pool.map(lambda k: check_one(calls, *k), batch)):
                key = (c.kind, c.repository, c.digest)
                c.tags = wanted[key]
                if body and key in referenced:
                    referenced.update((kind, c.repository, d) for kind, d in named_by(body))
                out.checked.append(c)
                failed += c.state != "ok"
                bar.set_failed(failed)
                bar.update(1)
        for c in out.checked:  # a child manifest is known referenced only once its index was read
            c.referenced = (c.kind, c.repository, c.digest) in referenced
    return out


# -- the command ------------------------------------------------------------------------------------------------


def run_verify(
    cfg: Config,
    runs: list[Path],
    registry: str | None,
    threads: int = 8,
    output: Path | None = None,
    quiet: bool = False,
) -> int:
    """Verify each registry of the config (or ``registry``); write verify.json, print a line per class (unless
    ``quiet``); the exit code: 0 nothing referenced lost, 1 a referenced object missing, short or corrupt
    (3: unreachable, raised as RunError)."""
    runs = given_runs(runs)
    pushed, read = records(cfg, registry, runs)
    deleted = deleted_by_runs(read)
    path = output or default_output(cfg, pushed, runs)
    results = [verify_registry(target, deleted, threads, quiet) for target in pushed.values()]
    code = ExitCode.TOO_MANY_FAILED if any(r.losses() for r in results) else ExitCode.OK
    doc = {
        "config": cfg.source,
        "runs": [str(r) for r in read],
        "deleted_by_trace": len(deleted),
        "exit_code": int(code),
        "registries": {r.name: r.to_json() for r in results},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    for r in results:
        for line in report(r) if not quiet else []:
            print(line, flush=True)
    if not quiet:
        print(f"drtp verify: {path}")
    return int(code)


def default_output(cfg: Config, pushed: dict[str, Pushed], runs: list[Path]) -> Path:
    """verify.json: in the last run given with ``--run``, else beside the (first) warmup map."""
    if runs:
        return runs[-1] / "verify.json"
    maps = warmup_maps(cfg, pushed)
    return (next(iter(maps)).parent if maps else cfg.path(".")) / "verify.json"


def report(r: RegistryVerify) -> list[str]:
    """One line per class, and the objects of each class that is not ok (at most :data:`SHOWN`)."""
    n = r.counts()
    head = f"verify {r.name}"
    lines = []
    for state in CLASSES:
        of = [c for c in r.checked if c.state == state]
        kinds = Counter(c.kind for c in of)
        what = f"{n[state]} ({kinds['manifest']} manifests, {kinds['blob']} blobs)"
        if state != "ok":
            refd = sum(c.referenced for c in of)
            what += f": {refd} referenced" + (" (lost)" if state in LOSSES and refd else "")
            what += f", {len(of) - refd} unreferenced"
        lines.append(f"{head}: {state} {what}")
        if state == "ok":
            continue
        for c in sorted(of, key=lambda c: (not c.referenced, c.repository, c.digest))[:SHOWN]:
            ref = "referenced" if c.referenced else "unreferenced"
            lines.append(f"  {state} {c.kind} {c.repository}@{c.digest} ({ref}): {c.error}")
    if r.tags_lost:
        lines.append(f"{head}: {len(r.tags_lost)} tags drtp pushed name nothing now: {', '.join(r.tags_lost[:SHOWN])}")
    return lines
