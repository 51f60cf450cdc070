"""Client profiles: how each trace client of a run behaves, as the real client it stands for would.

A trace's client is a remote address: a Docker daemon, a kubelet's containerd, a CI job running
skopeo or crane.  Each opens its own connections, keeps some of them idle for a while, downloads and
uploads a few layers at once and names itself in ``User-Agent``.  ``client_info.profile`` picks one
of these behaviours for every trace client; ``client_info.client_concurrency``, ``idle_timeout`` and
``user_agent`` override parts of it.  :func:`client_model` turns the config into the
:class:`~drtp.replay.messages.ClientModel` each node gets in its run spec.

The values are the clients' default settings, read in their source code (see docs/client-profiles.md
for each value's source).
"""

from __future__ import annotations

from dataclasses import dataclass

from drtp import __version__
from drtp.replay.messages import TRACE_ORDER, UNLIMITED, ClientModel


@dataclass(frozen=True)
class Profile:
    """One real client's defaults (0: no limit of its own, drtp's behaviour)."""

    downloads: int  # layer downloads at once
    uploads: int  # layer uploads at once
    connections: int  # idle keep-alive connections kept per registry host
    idle_timeout_s: float  # an idle connection is dropped after this long
    user_agent: str


DRTP_AGENT = f"drtp/{__version__}"

# Each value and the source line it comes from: docs/client-profiles.md.  Go's net/http keeps
# DefaultMaxIdleConnsPerHost (2) idle connections per host unless the client sets MaxIdleConnsPerHost;
# containerd, Docker and containers/image (skopeo) do not, go-containerregistry (crane) sets 50.
PROFILES: dict[str, Profile] = {
    "drtp": Profile(downloads=0, uploads=0, connections=0, idle_timeout_s=0.0, user_agent=DRTP_AGENT),
    "docker": Profile(
        downloads=3,
        uploads=5,
        connections=2,
        idle_timeout_s=30.0,
        user_agent="docker/27.5.1 go/go1.22.11 git-commit/4c9b3b0 kernel/6.1.0 os/linux arch/amd64",
    ),
    "containerd": Profile(downloads=3, uploads=3, connections=2, idle_timeout_s=30.0, user_agent="containerd/1.6.20"),
    "skopeo": Profile(downloads=6, uploads=6, connections=2, idle_timeout_s=90.0, user_agent="skopeo/1.13.3"),
    "crane": Profile(
        downloads=4,
        uploads=4,
        connections=50,
        idle_timeout_s=90.0,
        user_agent="crane/v0.21.9 go-containerregistry/v0.21.9",
    ),
}

# A User-Agent goes into a request's header block as is: one line of visible ASCII, bounded.
MAX_AGENT = 512


def agent_problem(agent: str) -> str | None:
    """None when ``agent`` can be sent as a User-Agent header; else what is wrong with it."""
    if len(agent) > MAX_AGENT:
        return f"longer than {MAX_AGENT} characters"
    if not all(" " <= ch <= "~" for ch in agent):
        return "holds characters other than visible ASCII and spaces (a line break, a control character)"
    return None


def header_safe(agent: str) -> str | None:
    """A trace's user agent as a header value: its visible ASCII (others become '?'), bounded; None if empty.

    A trace is input: a user agent with a line break must not add a header to the replayed request."""
    if not agent:
        return None
    if agent_problem(agent) is None:
        return agent
    return "".join(ch if " " <= ch <= "~" else "?" for ch in agent[:MAX_AGENT])


def client_model(ci) -> ClientModel:
    """The per-client behaviour of a run from its ``client_info`` (a :class:`drtp.config.ClientInfo`)."""
    profile = PROFILES[ci.profile]
    explicit = ci.client_concurrency
    if explicit is None or explicit == "trace":
        concurrency = TRACE_ORDER
    elif explicit == "unlimited":
        concurrency = UNLIMITED
    else:
        concurrency = int(explicit)
    # an explicit client_concurrency overrides the profile's parallel downloads and uploads
    downloads, uploads = (profile.downloads, profile.uploads) if explicit is None else (0, 0)
    idle = ci.idle_timeout if ci.idle_timeout is not None else profile.idle_timeout_s
    agent = ci.user_agent if ci.user_agent not in (None, "trace") else profile.user_agent
    return ClientModel(
        concurrency=concurrency,
        downloads=downloads,
        uploads=uploads,
        connections=profile.connections,
        idle_timeout_s=float(idle),
        user_agent=agent,
    )
