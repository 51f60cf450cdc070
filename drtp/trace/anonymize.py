"""Names in a captured trace: keyed hashes of repositories, references, clients and hosts.

``drtp capture`` hashes every name with BLAKE2b keyed by a secret salt, so one
capture's names are stable (same name, same token) and captures made with
another salt cannot be linked to it.  ``drtp convert`` keeps the names
(:class:`PlainNames`).
"""

from __future__ import annotations

import hashlib
import os

from drtp.errors import DrtpError


class Anonymizer:
    """Keyed hashes (BLAKE2b with the salt as key): same name → same token; other salt → unlinkable."""

    def __init__(self, salt: str) -> None:
        if not salt:
            raise DrtpError("capture needs a salt (--salt or DRTP_CAPTURE_SALT) to anonymize names")
        self.key = hashlib.blake2b(salt.encode(), digest_size=32).digest()

    def token(self, kind: str, value: str, length: int = 8) -> str:
        h = hashlib.blake2b(value.encode(), key=self.key, person=kind.encode()[:16], digest_size=16)
        return h.hexdigest()[:length]

    def name(self, name: str) -> str:
        """``user/repo``: the first component is the user (``library`` for one-part names)."""
        user, _, repo = name.partition("/")
        if not repo:
            user, repo = "library", user
        return f"{self.token('user', user)}/{self.token('repo', repo)}"

    def reference(self, ref: str) -> str:
        """Digests map alike wherever they appear (blob, manifest by digest); tags separately."""
        if ":" in ref:
            return self.token("digest", ref, 16)
        return self.token("tag", ref)

    def client(self, remoteaddr: str) -> str:
        """The client host without its port (one host = one client, as in the IBM traces)."""
        host = remoteaddr.rsplit(":", 1)[0] if remoteaddr.count(":") == 1 else remoteaddr
        if remoteaddr.startswith("["):  # [ipv6]:port
            host = remoteaddr[1:].split("]")[0]
        return self.token("client", host)


class PlainNames(Anonymizer):
    """The same interface without hashing: for converting a log to a trace (``drtp convert``)."""

    def __init__(self) -> None:
        pass

    def token(self, kind: str, value: str, length: int = 8) -> str:
        return value

    def name(self, name: str) -> str:
        return name

    def reference(self, ref: str) -> str:
        return ref


def salt_from(value: str | None) -> str:
    salt = value or os.environ.get("DRTP_CAPTURE_SALT", "")
    if not salt:
        raise DrtpError("capture needs a salt: --salt SECRET or the environment variable DRTP_CAPTURE_SALT")
    return salt
