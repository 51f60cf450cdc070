"""Open-loop rate mode: when each request is meant to start, whatever the registry answers.

A closed loop (stress mode) sends the next request when a slot is free, so a
registry that slows down is sent less and its stall never shows in the latency
(coordinated omission).  In rate mode the master gives every request an
intended start from an arrival process instead of the trace's timestamps, and
the nodes run them as they run an as-is replay: not before that time, latency
also counted from it (``response_s``).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

ARRIVALS = ("constant", "poisson")


def intended_starts(rate: float, arrivals: str = "constant", seed: int | None = None) -> Iterator[float]:
    """Seconds after the first request at which the requests start: ``rate`` per second, for ever.

    ``constant`` spaces them 1/rate apart (exactly: k/rate, no drift from adding up gaps); ``poisson``
    draws exponential gaps of mean 1/rate (independent arrivals, as from many unrelated clients),
    from ``random.Random(seed)`` so a seeded run offers the same starts again.
    """
    if arrivals == "constant":
        return (k / rate for k in itertools.count())
    if arrivals != "poisson":
        raise ValueError(f"unknown arrivals {arrivals!r}; one of {', '.join(ARRIVALS)}")
    return _poisson(rate, random.Random(seed))


def _poisson(rate: float, rng: random.Random) -> Iterator[float]:
    t = 0.0
    while True:
        yield t
        t += rng.expovariate(rate)
