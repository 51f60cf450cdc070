"""KeyedLock: one holder per key at a time, other keys free, no lock kept for a key nobody holds."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from drtp.registry.keyed_lock import KeyedLock


def test_holders_of_one_key_take_turns_and_other_keys_do_not_wait():
    locks = KeyedLock()
    inside: dict[str, int] = {"a": 0, "b": 0}
    most: dict[str, int] = {"a": 0, "b": 0}
    guard = threading.Lock()
    start = threading.Barrier(8, timeout=30)

    def hold(i: int) -> None:
        key = "ab"[i % 2]
        start.wait()
        for _ in range(20):
            with locks.hold(key):
                with guard:
                    inside[key] += 1
                    most[key] = max(most[key], inside[key])
                    both = inside["a"] and inside["b"]
                time.sleep(0.0005)
                with guard:
                    inside[key] -= 1
                if both:
                    seen_both.set()

    seen_both = threading.Event()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(hold, range(8)))
    assert most == {"a": 1, "b": 1}  # never two holders of one key
    assert seen_both.is_set()  # but a holder of "a" and one of "b" at the same time
    assert len(locks) == 0  # nothing kept once nobody holds or waits


def test_a_key_is_released_when_its_block_raises():
    locks = KeyedLock()
    try:
        with locks.hold(("reg", "repo", "sha256:x")):
            raise ValueError("the push failed")
    except ValueError:
        pass
    assert len(locks) == 0
    with locks.hold(("reg", "repo", "sha256:x")):  # free again: this would block forever otherwise
        assert len(locks) == 1
