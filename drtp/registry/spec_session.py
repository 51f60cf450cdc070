"""The registry session a run spec asks for: its credentials, timeouts, retry rule and client profile.

One definition for everyone that sends a run's requests: the client node's
thread engine (client/executor.py) and the master's own checks that must behave
as the nodes do — the preflight (drtp.master.run.preflight) and ``drtp bench``
(drtp.master.commands.bench).  What passes there passes on the nodes, because
the session is the same.
"""

from __future__ import annotations

from drtp.registry.session import Session
from drtp.registry.transport import USER_AGENT
from drtp.replay.messages import RunSpec


def spec_session(spec: RunSpec) -> Session:
    """A :class:`Session` with ``spec``'s credentials and TLS trust, timeouts and retries, and its client profile's
    User-Agent and per-client connections (``spec.client``)."""
    model = spec.client
    return Session(
        spec.auth,
        spec.timeout,
        spec.connect_timeout,
        spec.retries,
        agent=model.user_agent or USER_AGENT,
        keep=model.connections,
        idle_timeout=model.idle_timeout_s,
    )
