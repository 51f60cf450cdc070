"""Hand-made trace records for tests that need a few exact requests (characterization, profile targets)."""

from __future__ import annotations

import datetime as _dt

from drtp.trace.records import TraceRecord

T0 = _dt.datetime(2017, 8, 1, tzinfo=_dt.timezone.utc)


def rec(
    t: float,
    method: str,
    uri: str,
    *,
    client: str = "c1",
    size: int = 0,
    duration: float = 0.01,
    status: int = 200,
    host: str = "h1",
    rid: str | None = None,
) -> TraceRecord:
    """One trace record ``t`` seconds after 2017-08-01T00:00Z."""
    return TraceRecord(
        host=host,
        duration=duration,
        method=method,
        client=client,
        uri=uri,
        status=status,
        size=size,
        id=rid or f"r{t:.3f}{method}{uri}{client}",
        timestamp=T0 + _dt.timedelta(seconds=t),
    )
