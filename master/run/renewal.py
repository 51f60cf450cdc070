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

from drtp.master.run.nodes import NodeLink
from drtp.registry.credentials import RETRY_S, CredentialError, CredentialSource, Secret
from drtp.replay.frames import Refusal
from drtp.replay.messages import RegistryAuth, SecretUpdate, registry_base

log = logging.getLogger(__name__)
IDLE_S = 60.0  # the longest the thread sleeps without a due renewal or a refusal


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
            try:
                wait = self._round()
            except Exception:  # noqa: BLE001 - the run goes on; a renewal thread that died would stop renewals
                log.exception("secret renewal: unexpected error (tried again in %g s)", RETRY_S)
                wait = RETRY_S
            self.wake.wait(wait)
            self.wake.clear()

    def _round(self) -> float:
        """Renew what was refused or is due and push what the nodes lack; seconds until the next round."""
        with self.lock:
            refusals, self.refusals = self.refusals, []
        stale: set[str] = set()  # registries a node still used an older secret of: pushed again
        retry: list[Refusal] = []
        for r in refusals:
            base = registry_base(r.registry)
            source = self.sources.get(base)
            if source is None:
                continue
            if source.secret.generation > r.generation:
                stale.add(base)  # the node missed a push (or it crossed the refusal): send the secret again
            elif not self._renew(source, r.generation):
                retry.append(r)  # asked again in RETRY_S: the node's reads would wait in vain otherwise
        for base, source in self.sources.items():
            due = source.due_in
            if due is not None and due <= 0:
                self._renew(source, None)
            if source.secret.generation > self.sent[base] or base in stale:
                self._push(base, source.secret)
        if retry:
            with self.lock:
                self.refusals[:0] = retry
            return RETRY_S
        dues = [d for d in (s.due_in for s in self.sources.values()) if d is not None]
        wait = min([IDLE_S, *dues])
        return max(wait, 0.05) if wait > 0 else RETRY_S

    def _renew(self, source: CredentialSource, refused: int | None) -> bool:
        """Whether the source answered (for a refusal: a secret newer than the refused one is in hand)."""
        try:
            source.renew(refused=refused, due=refused is None)
        except CredentialError as e:
            log.warning("%s (the secret in hand is kept)", e)
            return False
        return True

    def _push(self, base: str, secret: Secret) -> None:
        update = SecretUpdate(self.run, base, secret.generation, secret.username or "", secret.password or "")
        for link in self.links.values():
            if not link.dead:
                link.send_secret(update)
        self.sent[base] = secret.generation
