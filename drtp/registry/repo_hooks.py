"""Repository command hooks: ``create_repository:`` on a ``registries:`` entry.

Some registries create a repository only through their own API, never on a
first push: ECR (``aws ecr create-repository``), Docker Hub and GHCR for
private repositories, Harbor for projects.  An entry's ``create_repository``
is an argv list run on the master, without a shell, once per repository the
trace names (after ``repository_map``) and for the preflight's probe, before
the warmup pushes anything; ``{repository}`` in an argument becomes the
repository's name (always a Distribution name: lowercase letters, digits and
``._-/``, so it needs no quoting).  The hook inherits the master's
environment (that is how ``aws`` and ``gcloud`` find their credentials); its
standard output is discarded and the end of its standard error is what a
failure reports.

Repositories whose hook succeeded are appended to ``<warmup map>.repositories``
(JSON lines: registry, repository), so a resumed warmup does not run the hook
for them again; ``drtp warmup --fresh`` forgets them with the map.  ``drtp
bench`` keeps no such record: hooks should accept a repository that exists
(``docs/real-registries.md`` shows wrappers).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING

from drtp.config.upstreams import upstream_entry
from drtp.errors import ConfigError, RunError, one_line

if TYPE_CHECKING:
    from drtp.config import Config, RegistryEntry

log = logging.getLogger("drtp.registry.hooks")

HOOK_TIMEOUT_S = 300.0  # a hook still running after this long has failed (a hung CLI must not stall the study)
STDERR_SHOWN = 300  # characters of a failed hook's standard error that its message shows (the end of it)
MAX_THREADS = 8  # hooks at once at most: each is a process, often a cloud CLI


class HookError(RunError):
    """A repository hook failed: the registry's own API refused or could not be reached (exit 3)."""


def created_path(map_path: Path) -> Path:
    """Where a warmup records the repositories its hooks created: beside its warmup map."""
    return map_path.with_name(map_path.name + ".repositories")


def hook_argv(cfg: Config, argv: list[str], repository: str) -> list[str]:
    """The hook's argv for ``repository``; a program given as a relative path is relative to the config."""
    program = argv[0]
    if "/" in program:
        program = str(cfg.path(program))
    return [program, *(arg.replace("{repository}", repository) for arg in argv[1:])]


def run_hook(cfg: Config, entry: RegistryEntry, key: str, argv: list[str], repository: str) -> None:
    """Run one hook for one repository; raise HookError (it failed) or ConfigError (it cannot be started)."""
    where = f"{cfg.source}: registries[{entry.id}]"
    cmd = hook_argv(cfg, argv, repository)
    try:
        done = subprocess.run(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=HOOK_TIMEOUT_S
        )
    except FileNotFoundError:
        raise ConfigError(f"{where}: key '{key}': program {cmd[0]!r} not found") from None
    except PermissionError:
        raise ConfigError(f"{where}: key '{key}': program {cmd[0]!r} is not executable") from None
    except subprocess.TimeoutExpired:
        raise HookError(
            f"{where}: {key} for repository {repository!r} did not finish within {HOOK_TIMEOUT_S:.0f} s"
        ) from None
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip()
        tail = ("…" + err[-STDERR_SHOWN:]) if len(err) > STDERR_SHOWN else err
        raise HookError(
            f"{where}: {key} for repository {repository!r} failed (exit {done.returncode})"
            + (f": {one_line(tail)}" if tail else "")
        )


def create_repositories(cfg: Config, repositories: list[str], map_path: Path | None = None, quiet: bool = False) -> int:
    """Run the single registry entry's ``create_repository`` hook for each repository not created before.

    ``map_path``: the warmup map the record of created repositories sits beside
    (None: keep no record). Returns how many hooks ran; the first failure stops
    the others and raises.
    """
    if len(cfg.registries) != 1:
        return 0
    # a cache's warmup writes into its upstream: the upstream's hook creates the repositories there
    entry = upstream_entry(cfg.registries[0]) or cfg.registries[0]
    if not entry.create_repository:
        return 0
    registry = entry.url.rstrip("/")
    record = created_path(map_path) if map_path is not None else None
    done = _created_before(record, registry) if record is not None else set()
    todo = [r for r in repositories if r not in done]
    if not quiet:
        print(f"create_repository: {len(todo):,} repositories ({len(done & set(repositories)):,} created before)")
    if not todo:
        return 0
    lock = threading.Lock()
    out = None
    if record is not None:
        record.parent.mkdir(parents=True, exist_ok=True)
        out = open(record, "a")  # noqa: SIM115 (closed below, after the pool)

    def create(repository: str) -> None:
        run_hook(cfg, entry, "create_repository", entry.create_repository, repository)
        log.debug("create_repository: %s created", repository)
        if out is not None:
            with lock:
                out.write(json.dumps({"registry": registry, "repository": repository}) + "\n")
                out.flush()
                os.fsync(out.fileno())

    try:
        with ThreadPoolExecutor(min(MAX_THREADS, max(1, cfg.warmup.threads), len(todo))) as pool:
            futures = [pool.submit(create, r) for r in todo]
            finished, pending = wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((f for f in futures if f.done() and f.exception() is not None), None)
            if failed is not None:
                for f in pending:
                    f.cancel()
                raise failed.exception()
    finally:
        if out is not None:
            out.close()
    return len(todo)


def _created_before(record: Path, registry: str) -> set[str]:
    """The repositories of ``registry`` that earlier runs' hooks created (a torn last line is ignored)."""
    out: set[str] = set()
    try:
        lines = record.read_text().splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict) and entry.get("registry") == registry and isinstance(entry.get("repository"), str):
            out.add(entry["repository"])
    return out
