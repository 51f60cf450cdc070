"""A run's common clock: seconds since the run spec's start, read from ``time.perf_counter``.

The nodes time their requests with it (client/scheduler.py) and so does ``drtp
bench`` on the master, so both measure on the same scale: the start the
master sent in the ``RunSpec`` (a ``time.time()`` value), counted with the
monotonic high-resolution counter.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def monotonic_clock(start_epoch: float) -> Callable[[], float]:
    """A perf_counter clock reading seconds since ``start_epoch`` (a time.time() value)."""
    offset = time.perf_counter() - (time.time() - start_epoch)
    return lambda: time.perf_counter() - offset
