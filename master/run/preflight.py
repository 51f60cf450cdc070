"""Preflight: before a warmup or run, check every registry is reachable, authenticated, and can push and pull.

Sends through the session the client nodes send with (drtp.registry.spec_session), so what passes
here is what the nodes will do: ``GET /v2/`` (answering a 401 challenge with
the configured credentials), then a push of a small random blob into
the probe repository (``drtp-preflight`` as the entry's ``repository_map`` names it:
``<prefix>drtp-preflight``, a name every registry takes) (POST + monolithic PUT) and a pull of it (GET,
bytes compared by count), then a DELETE of the probe, so that a check leaves
nothing behind where the registry deletes (a registry that refuses keeps it:
``drtp clean`` names that repository among what is left).  A pull-through cache refuses pushes: its
upstream gets the probe, the cache the ``/v2/`` check (:func:`preflight_all`).  A failure is one line
naming the registry and the missing or invalid credential; the password is never part of it.
"""

from __future__ import annotations

import os
import time
from urllib.parse import urlencode, urljoin

from drtp.errors import RunError
from drtp.registry.auth import masked
from drtp.registry.manifest import digest_of
from drtp.registry.repo_names import PROBE
from drtp.registry.spec_session import spec_session
from drtp.registry.transport import DIRECT_USER_AGENT
from drtp.replay.messages import ClientModel, RegistryAuth, RunSpec, registry_base

PROBE_SIZE = 1024


class PreflightError(RunError):
    """The registry is unreachable, refuses the credentials, or cannot push or pull: the run cannot start (exit 3)."""


def _why(r, name: str, auth: RegistryAuth | None, action: str) -> str:
    if r.status == 0:
        err = r.error
        if "CERTIFICATE_VERIFY_FAILED" in err or "SSL" in err:
            return f"registry {name}: TLS verification failed ({err}); set ca_file, or insecure: true"
        return f"registry {name} is not reachable: {err}"
    if r.status == 401:
        if r.error:  # the token server refused
            return f"registry {name}: {r.error}"
        if auth is None or not auth.username:
            return f"registry {name} requires authentication for {action}: set username and password"
        return f"registry {name} rejected the credentials of user {auth.username!r} for {action} (HTTP 401)"
    if r.status == 403:
        who = f"user {auth.username!r}" if auth and auth.username else "anonymous"
        return f"registry {name}: {who} is not allowed to {action} (HTTP 403)"
    return f"registry {name}: {action} failed: HTTP {r.status} {r.error}".rstrip()


def preflight(
    registry: str,
    auth: RegistryAuth | None,
    name: str = "",
    repository: str = PROBE,
    push: bool = True,
    agent: str = "",
) -> dict:
    """Check one registry; returns timings, raises PreflightError with one clear line.

    ``repository``: where the probe blob goes (:meth:`RepositoryMap.probe`).
    ``push=False`` checks only that ``/v2/`` answers (authenticated), writing nothing.
    ``agent``: the User-Agent of its requests ("": drtp's own).
    """
    name = name or registry
    base = registry_base(registry)
    spec = RunSpec(
        "preflight",
        time.time(),
        threads=1,
        timeout=15.0,
        auth=[auth] if auth else [],
        registries=[base],
        client=ClientModel(user_agent=agent),
    )
    session = spec_session(spec)
    repo = repository
    t0 = time.perf_counter()
    r = session.request("GET", f"{base}/v2/")
    if r.status != 200:
        raise PreflightError(_why(r, name, auth, "GET /v2/"))
    if not push:
        return {"registry": name, "checked": masked(auth) if auth else base, "seconds": time.perf_counter() - t0}
    data = os.urandom(PROBE_SIZE)
    digest = digest_of(data)
    r = session.request("POST", f"{base}/v2/{repo}/blobs/uploads/")
    if r.status != 202 or not r.header("location"):
        raise PreflightError(_why(r, name, auth, f"push to {repo}"))
    location = urljoin(base + "/", r.header("location"))
    sep = "&" if "?" in location else "?"
    headers = {"Content-Type": "application/octet-stream", "Content-Length": str(len(data))}
    r = session.request("PUT", location + sep + urlencode({"digest": digest}), body=data, headers=headers)
    if r.status != 201:
        raise PreflightError(_why(r, name, auth, f"push to {repo}"))
    r = session.request("GET", f"{base}/v2/{repo}/blobs/{digest}")
    if r.status != 200 or r.bytes != PROBE_SIZE:
        raise PreflightError(_why(r, name, auth, f"pull from {repo}") + f" ({r.bytes} of {PROBE_SIZE} bytes)")
    session.request("DELETE", f"{base}/v2/{repo}/blobs/{digest}")  # best effort: a refusal does not fail the check
    return {"registry": name, "checked": masked(auth) if auth else base, "seconds": time.perf_counter() - t0}


def preflight_all(
    registries: list[str],
    auths: list[RegistryAuth],
    names: dict[str, str] | None = None,
    repository: str = PROBE,
    upstreams: dict[str, str] | None = None,
) -> None:
    """Check each registry in turn; the first failure raises.

    Registries of ``registries:`` entries get the full check (push and pull of a probe blob); the
    plain ``registry:`` list keeps the original check (``/v2/`` answers), which writes nothing.
    ``upstreams`` (drtp.config.upstreams.upstreams: a cache's base URL → its upstream's): a pull-through
    cache refuses pushes, so a cache gets the ``/v2/`` check and its upstream the probe; every request sent
    straight to an upstream carries DIRECT_USER_AGENT (a warmup checks the upstreams it writes into).
    """
    from drtp.registry.auth import auth_for

    names = names or {}
    upstreams = upstreams or {}
    direct = set(upstreams.values())
    for reg in registries:
        auth = auth_for(reg, auths)
        base = registry_base(reg)
        up = upstreams.get(base)
        agent = DIRECT_USER_AGENT if base in direct else ""
        preflight(reg, auth, names.get(reg, ""), repository, push=auth is not None and up is None, agent=agent)
        if up is not None:
            up_auth = auth_for(up, auths)
            preflight(up, up_auth, names.get(up, ""), repository, push=up_auth is not None, agent=DIRECT_USER_AGENT)
