"""Generated blob content, streamed: a layer of any size never sits whole in memory.

Content is random (a PRNG seeded per blob) or zeros, produced in 1 MiB chunks.
Because the same seed yields the same bytes, a blob's digest can be computed in
one pass and the bytes sent in a second, which the registry protocol needs for a
monolithic upload (the digest goes in the PUT's URL).
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Iterator

CHUNK = 1 << 20
STREAM_ABOVE = 4 << 20  # smaller blobs are simply made in memory


def new_seed() -> int:
    return int.from_bytes(os.urandom(8), "big")


def chunks(seed: int, size: int, randomized: bool = True) -> Iterator[bytes]:
    rng = random.Random(seed)
    zeros = bytes(CHUNK) if not randomized else b""
    left = size
    while left > 0:
        n = min(CHUNK, left)
        yield rng.randbytes(n) if randomized else zeros[:n]
        left -= n


def digest(seed: int, size: int, randomized: bool = True) -> str:
    h = hashlib.sha256()
    for c in chunks(seed, size, randomized):
        h.update(c)
    return "sha256:" + h.hexdigest()
