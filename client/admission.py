"""What a client node agrees to do: run specs and batches checked before anything is queued or sent.

Whoever holds the shared secret commands the node, so the node still keeps
each run to what it declared: the registries named in its :class:`RunSpec`
(``registries``) and nothing else, the replay's own methods with the operation
the master derives from them, and repository names, references and digests
of the Distribution grammar (drtp.registry.names) — no ``..``, no CR/LF, no query — so
every request addresses a ``/v2/`` object or upload endpoint of a declared
registry.  A batch is checked in one pass when it arrives; a bad request
refuses the whole batch, naming it, and nothing of that batch is queued.
"""

from __future__ import annotations

import math
import re

from drtp.registry.names import base_url_error, digest_error, name_error, reference_error, shown
from drtp.replay.client_profiles import agent_problem
from drtp.replay.messages import (
    KINDS,
    TRACE_ORDER,
    UNLIMITED,
    ReplayRequest,
    RunSpec,
    SecretUpdate,
    op_for,
    registry_base,
)
from drtp.trace.records import METHODS

MAX_THREADS = 1024
# A run id is part of the control URLs: short, and nothing a path or a log line could be bent by.
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# (method, kind) -> the only op the master derives for it
_OPS = {(m, k): op_for(m, k) for m in METHODS for k in KINDS}


MAX_KEPT = 1000  # idle connections a trace client may keep per registry (crane's is 50)


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def spec_error(spec: RunSpec) -> str | None:
    """None when the node can start ``spec``; otherwise what is wrong with it (one line)."""
    if not _RUN_ID.fullmatch(spec.run):
        return f"run id {spec.run[:80]!r} is not 1-64 characters of A-Z a-z 0-9 _ . -"
    if not 1 <= spec.threads <= MAX_THREADS:
        return f"threads must be 1..{MAX_THREADS}"
    if not _positive(spec.timeout) or not _positive(spec.connect_timeout):
        return "timeout and connect_timeout must be finite and positive"
    if spec.retries < 0:
        return "retries must be 0 or more"
    if not math.isfinite(spec.start_epoch):
        return "start_epoch must be finite"
    if not _positive(spec.stats_interval_s) or not (math.isfinite(spec.on_time_s) and spec.on_time_s >= 0):
        return "stats_interval_s must be finite and positive, on_time_s finite and 0 or more"
    if len(spec.node) > 300 or any(c in spec.node for c in "\r\n"):
        return "node (the master's name for this node) must be one line of at most 300 characters"
    client = spec.client
    if client.user_agent and (why := agent_problem(client.user_agent)) is not None:
        return f"client.user_agent {why}"
    idle = client.idle_timeout_s
    if not 0 <= client.connections <= MAX_KEPT or not (math.isfinite(idle) and idle >= 0):
        return f"client.connections must be 0..{MAX_KEPT}, client.idle_timeout_s finite and 0 or more"
    if not UNLIMITED <= client.concurrency <= MAX_THREADS:
        return f"client.concurrency must be {UNLIMITED} (unlimited), {TRACE_ORDER} (trace order) or 1..{MAX_THREADS}"
    if not (0 <= client.downloads <= MAX_THREADS and 0 <= client.uploads <= MAX_THREADS):
        return f"client.downloads and client.uploads must be 0..{MAX_THREADS}"
    if not spec.registries:
        return "the run names no registries (registries: the registries it may send to)"
    for entry in spec.registries:
        why = base_url_error(registry_base(entry))
        if why is not None:
            return f"registry {why}"
    return None


def allowed_targets(spec: RunSpec) -> frozenset[str]:
    """The base URLs a run's requests may address (checked by :func:`spec_error` first)."""
    return frozenset(registry_base(r) for r in spec.registries)


def request_error(req: ReplayRequest, targets: frozenset[str]) -> str | None:
    """None when ``req`` is a replay request the run allows; otherwise what is wrong with it."""
    op = _OPS.get((req.method, req.kind))
    if op is None:
        return f"method {req.method[:20]!r} on kind {req.kind[:20]!r} is not a replay request"
    if op != req.op:
        return f"op {req.op!r} does not go with {req.method} of a {req.kind} (expected {op!r})"
    if registry_base(req.registry) not in targets:
        return f"registry {shown(req.registry)!r} is not one of this run's registries"
    why = name_error(req.repository) or reference_error(req.reference)
    if why is None and req.digest is not None:
        why = digest_error(req.digest)
    blobs = req.layers if req.config is None else [*req.layers, req.config]
    for layer in blobs:
        if why is not None:
            break
        why = digest_error(layer.digest)
    if why is None and (req.mount is not None or req.mount_from is not None):
        why = _mount_error(req)
    if why is not None:
        return why
    if req.size < 0 or any(layer.size < 0 for layer in blobs):
        return "negative size"
    if req.at is not None and not (math.isfinite(req.at) and req.at >= 0):
        return f"start time {req.at!r} is not a finite offset"
    if req.user_agent is not None and (why := agent_problem(req.user_agent)) is not None:
        return f"user_agent {why}"
    return None


def _mount_error(req: ReplayRequest) -> str | None:
    """None when a mount's fields are a digest and a repository name on an upload open."""
    if req.op != "upload-open" or req.mount is None:
        return "a mount (mount, mount_from) is an upload open's, with the digest to mount"
    why = digest_error(req.mount)
    if why is None and req.mount_from is not None:
        why = name_error(req.mount_from)
    return None if why is None else f"mount: {why}"


def batch_error(requests: list[ReplayRequest], targets: frozenset[str]) -> str | None:
    """None when every request of a batch is allowed; otherwise the first bad one: its seq and why."""
    for req in requests:
        why = request_error(req, targets)
        if why is not None:
            return f"request seq {req.seq}: {why}"
    return None


MAX_SECRET = 64 << 10  # characters of a renewed username or password (a GCR JSON key is a few KiB)


def secret_error(update: SecretUpdate, spec: RunSpec) -> str | None:
    """None when ``update`` may replace a secret of the run ``spec``: a registry the spec declared with
    credentials the master renews, a username of one line and a password (a JSON key may span lines) of
    bounded length; otherwise what is wrong."""
    base = registry_base(update.registry)
    declared = next((a for a in spec.auth if registry_base(a.registry) == base), None)
    if declared is None or not declared.username:
        return f"registry {shown(update.registry)!r} has no credentials in this run's spec"
    if not declared.renewable:
        return f"the secret of registry {shown(update.registry)!r} is not renewed in this run"
    if update.generation < 1:
        return "generation must be 1 or more"
    if not update.username or len(update.username) > MAX_SECRET or any(c in update.username for c in "\r\n"):
        return f"username must be one line of 1 to {MAX_SECRET} characters"
    if not update.password or len(update.password) > MAX_SECRET:
        return f"password must be 1 to {MAX_SECRET} characters"
    return None
