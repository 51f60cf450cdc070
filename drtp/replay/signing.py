"""The shared secret between the master and its client nodes (HMAC-SHA256).

Every control request is signed: ``X-Drtp-Time`` (epoch seconds),
``X-Drtp-Nonce`` (16 random bytes, hex) and ``X-Drtp-Signature`` =
HMAC-SHA256(token, "METHOD\\nPATH\\nTIME\\nNONCE\\n" + body).  The token itself
never travels and a captured request cannot be altered.  A node accepts a
signed request once: its time must be finite and within :data:`MAX_SKEW_S` of
the node's clock (both ways), and its nonce is remembered for as long as the
time stays acceptable, so the same request sent again is refused.

The headers are checked before the body is read (:meth:`Verifier.check_headers`),
so an unsigned or stale request costs the node no body bytes; the MAC over the
body is checked once exactly ``Content-Length`` bytes were read.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path

from drtp.errors import DrtpError

# Clocks of a cluster's master and nodes are NTP-synchronised: a minute covers their skew and a
# slow request, and bounds how long a nonce must be remembered.
MAX_SKEW_S = 60.0
MIN_TOKEN_LEN = 16  # the shared secret's minimum length, everywhere it is read (config, client, run)
MAX_BODY = 16 << 20  # the largest control request body a node reads (the master splits bigger batches)
TIME_HEADER = "X-Drtp-Time"
NONCE_HEADER = "X-Drtp-Nonce"
SIGNATURE_HEADER = "X-Drtp-Signature"

_STAMP = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,6})?")  # plain decimal: no nan, inf, sign or exponent
_NONCE = re.compile(r"[0-9a-f]{32}")
_SIGNATURE = re.compile(r"[0-9a-f]{64}")


def _mac(token: str, method: str, path: str, stamp: str, nonce: str, body: bytes) -> str:
    mac = hmac.new(token.encode(), f"{method.upper()}\n{path}\n{stamp}\n{nonce}\n".encode(), hashlib.sha256)
    mac.update(body)  # fed on, not joined: a batch's body is not copied once more to be signed
    return mac.hexdigest()


def sign(token: str, method: str, path: str, body: bytes = b"") -> dict[str, str]:
    """Headers that authenticate one request to a client node (a fresh nonce each call)."""
    stamp = f"{time.time():.3f}"
    nonce = secrets.token_hex(16)
    return {
        TIME_HEADER: stamp,
        NONCE_HEADER: nonce,
        SIGNATURE_HEADER: _mac(token, method, path, stamp, nonce, body),
    }


class Verifier:
    """A node's check of signed requests; remembers the nonces it accepted while they could come again.

    Memory is bounded by what the master sends in ``2 * window`` seconds: only
    requests whose MAC was right are remembered, so nobody without the token can
    fill the table.
    """

    def __init__(self, token: str, window: float = MAX_SKEW_S, clock: Callable[[], float] = time.time) -> None:
        self.token = token
        self.window = window
        self.clock = clock
        self.seen: dict[str, float] = {}  # nonce -> when it may be forgotten; insertion order is time order
        self.lock = threading.Lock()

    def check_headers(self, headers) -> str | None:
        """None when the signature headers are well formed, fresh and not used before; otherwise why not."""
        stamp = headers.get(TIME_HEADER)
        nonce = headers.get(NONCE_HEADER)
        signature = headers.get(SIGNATURE_HEADER)
        if not stamp or not nonce or not signature:
            return "no signature"
        if not _STAMP.fullmatch(stamp):
            return "bad time stamp"
        if not _NONCE.fullmatch(nonce) or not _SIGNATURE.fullmatch(signature):
            return "malformed signature headers"
        skew = self.clock() - float(stamp)
        if abs(skew) > self.window:
            return f"time stamp off by {skew:+.0f} s (at most {self.window:g} s)"
        with self.lock:
            if nonce in self.seen:
                return "replayed request (nonce already used)"
        return None

    def verify(self, method: str, path: str, body: bytes, headers) -> str | None:
        """None when the request is signed with the token and seen for the first time; otherwise why not.

        Call after :meth:`check_headers` passed and the body was read; on success the
        nonce is used up (two copies racing each other: only the first passes).
        """
        stamp, nonce = headers.get(TIME_HEADER), headers.get(NONCE_HEADER)
        expected = _mac(self.token, method, path, stamp, nonce, body)
        if not hmac.compare_digest(headers.get(SIGNATURE_HEADER), expected):
            return "bad signature"
        now = self.clock()
        with self.lock:
            self._forget(now)
            if nonce in self.seen:
                return "replayed request (nonce already used)"
            # acceptable while its stamp is within the window: at most 2 windows from now
            self.seen[nonce] = now + 2 * self.window
        return None

    def _forget(self, now: float) -> None:
        """Drop the nonces whose time stamps can no longer pass (oldest first; the lock is held)."""
        seen = self.seen
        while seen:
            oldest = next(iter(seen))
            if seen[oldest] > now:
                return
            del seen[oldest]


def token_error(token: str) -> str | None:
    """None when ``token`` is long enough to be the shared secret; otherwise what is wrong."""
    if len(token) < MIN_TOKEN_LEN:
        return f"the shared secret is too short ({len(token)} characters; at least {MIN_TOKEN_LEN})"
    return None


def read_token_file(path: str | Path) -> str:
    """The shared secret in file ``path`` (surrounding whitespace stripped); a one-line DrtpError if unusable."""
    p = Path(path)
    if p.is_dir():
        raise DrtpError(f"--token-file {path}: is a directory, not a file")
    try:
        token = p.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise DrtpError(f"--token-file {path}: not found") from None
    except UnicodeDecodeError:
        raise DrtpError(f"--token-file {path}: not UTF-8 text") from None
    except OSError as e:
        raise DrtpError(f"--token-file {path}: cannot read ({e.strerror or e})") from None
    if not token:
        raise DrtpError(f"--token-file {path}: is empty")
    why = token_error(token)
    if why:
        raise DrtpError(f"--token-file {path}: {why}")
    return token


def resolve_token(value: str | None, what: str, token_file: str | Path | None = None) -> str:
    """The token from ``token_file``, else ``value``, else ``$DRTP_TOKEN``; a missing or short one is a user error."""
    if token_file is not None:
        return read_token_file(token_file)
    token = value or os.environ.get("DRTP_TOKEN", "")
    if not token:
        raise DrtpError(f"{what}: no shared secret: set --token-file, DRTP_TOKEN or client_info.token")
    why = token_error(token)
    if why:
        raise DrtpError(f"{what}: {why}")
    return token
