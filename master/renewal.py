"""Renewed registry secrets during a run: asked for on the master, handed to every client node.

A secret from a credential helper or a ``password_command`` expires (an ECR
password after 12 h, a GCR token after 1 h), so a long run asks its
:class:`~drtp.registry.credentials.CredentialSource` again before
``credential_ttl`` runs out, and once when a node reports that the registry
refused a secret that had worked (a :class:`~drtp.replay.frames.Refusal` in its
result stream).  Each new secret goes to every live node in a signed, once-only
``POST /runs/<run>/secret``.  The helpers run here, in the master's process,
never on the nodes.
"""

from __future__ import annotations

import logging
import threading

from drtp.master.nodes import NodeLink
from drtp.registry.credentials import CredentialError, CredentialSource, Secret
from drtp.replay.frames import Refusal
from drtp.replay.messages import RegistryAuth, SecretUpdate, registry_base

log = logging.getLogger(__name__)
IDLE_S = 60.0  # the longest the thread sleeps without a due renewal or a refusal
RETRY_S = 5.0  # after a failed renewal, the next try (the secret in hand is kept meanwhile)


class SecretRenewal:
    """One thread per run that keeps the nodes' copies of the renewable secrets current."""

    def __init__(
        self, sources: list[CredentialSource], auths: list[RegistryAuth], links: dict[str, NodeLink], run: str
    ) -> None:
        self.sources = {registry_base(a.registry): s for a, s in zip(auths, sources, strict=True) if s.renewable}
        self.sent = {base: s.secret.generation for base, s in self.sources.items()}  # what the nodes hold
        self.links = links
        self.run = run
        self.refusals: list[Refusal] = []
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stopped = False
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        if self.sources:
            self.thread = threading.Thread(target=self._loop, name="drtp-secret-renewal", daemon=True)
            self.thread.start()

    def stop(self) -> None:
        self.stopped = True
        self.wake.set()
        if self.thread is not None:
            self.thread.join(timeout=5)

    def refused(self, refusals: list[Refusal]) -> None:
        """A node's report: the registry refused these secrets; each is renewed once."""
        with self.lock:
            self.refusals.extend(refusals)
        self.wake.set()

    def _loop(self) -> None:
        while not self.stopped:
            with self.lock:
                refusals, self.refusals = self.refusals, []
            for r in refusals:
                source = self.sources.get(registry_base(r.registry))
                if source is not None:
                    self._renew(source, r.generation)
            for base, source in self.sources.items():
                due = source.due_in
                if due is not None and due <= 0:
                    self._renew(source, None)
                if source.secret.generation > self.sent[base]:
                    self._push(base, source.secret)
            dues = [d for d in (s.due_in for s in self.sources.values()) if d is not None]
            wait = min([IDLE_S, *dues])
            self.wake.wait(max(wait, 0.05) if wait > 0 else RETRY_S)
            self.wake.clear()

    def _renew(self, source: CredentialSource, refused: int | None) -> None:
        try:
            source.renew(refused=refused)
        except CredentialError as e:
            log.warning("%s (the secret in hand is kept)", e)

    def _push(self, base: str, secret: Secret) -> None:
        update = SecretUpdate(self.run, base, secret.generation, secret.username or "", secret.password or "")
        for link in self.links.values():
            if not link.dead:
                link.send_secret(update)
        self.sent[base] = secret.generation
