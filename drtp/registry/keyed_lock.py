"""One writer of a blob into a repository at a time.

Distribution's filesystem driver records that a repository holds a blob in a small
link file that every push or mount of the blob into the repository rewrites in place.
A manifest PUT that checks one of its blobs while that file is being rewritten finds it
empty and is refused (400 ``MANIFEST_BLOB_UNKNOWN``), as is a mount whose source link
is being rewritten.  So drtp never pushes or mounts a blob into a repository while
another of its threads does the same: every such write holds the lock of its key.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator
from contextlib import contextmanager


class KeyedLock:
    """A lock per key, made when first held and dropped when nobody holds or waits for it,
    so a run over millions of blobs keeps only the locks in use."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[Hashable, tuple[threading.Lock, int]] = {}  # key -> (its lock, holders and waiters)

    @contextmanager
    def hold(self, key: Hashable) -> Iterator[None]:
        """Hold ``key``'s lock for the block; other threads holding the same key wait, other keys do not."""
        with self._guard:
            lock, users = self._locks.get(key, (None, 0))
            if lock is None:
                lock = threading.Lock()
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        """Keys held or waited for now."""
        with self._guard:
            return len(self._locks)
