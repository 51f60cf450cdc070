"""The shared secret between the master and its client nodes (HMAC-SHA256).

Every control request is signed: ``X-Drtp-Time`` (epoch seconds) and
``X-Drtp-Signature`` = HMAC-SHA256(token, "METHOD\\nPATH\\nTIME\\n" + body).
The token itself never travels, a captured request cannot be altered, and a
stale one (clock skew beyond :data:`MAX_SKEW_S`) is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time

from drtp.errors import DrtpError

MAX_SKEW_S = 300.0
TIME_HEADER = "X-Drtp-Time"
SIGNATURE_HEADER = "X-Drtp-Signature"


def _mac(token: str, method: str, path: str, stamp: str, body: bytes) -> str:
    msg = f"{method.upper()}\n{path}\n{stamp}\n".encode() + body
    return hmac.new(token.encode(), msg, hashlib.sha256).hexdigest()


def sign(token: str, method: str, path: str, body: bytes = b"") -> dict[str, str]:
    """Headers that authenticate one request to a client node."""
    stamp = f"{time.time():.3f}"
    return {TIME_HEADER: stamp, SIGNATURE_HEADER: _mac(token, method, path, stamp, body)}


def verify(token: str, method: str, path: str, body: bytes, headers) -> str | None:
    """None when the request is signed with ``token``; otherwise why not."""
    stamp = headers.get(TIME_HEADER)
    signature = headers.get(SIGNATURE_HEADER)
    if not stamp or not signature:
        return "no signature"
    try:
        skew = abs(time.time() - float(stamp))
    except ValueError:
        return "bad time stamp"
    if skew > MAX_SKEW_S:
        return f"time stamp off by {skew:.0f} s"
    if not hmac.compare_digest(signature, _mac(token, method, path, stamp, body)):
        return "bad signature"
    return None


def resolve_token(value: str | None, what: str) -> str:
    """The token given, else ``$DRTP_TOKEN``; a missing or short one is a user error."""
    token = value or os.environ.get("DRTP_TOKEN", "")
    if not token:
        raise DrtpError(f"{what}: no shared secret: set client_info.token (or --token) or DRTP_TOKEN")
    if len(token) < 8:
        raise DrtpError(f"{what}: the shared secret is too short (at least 8 characters)")
    return token
