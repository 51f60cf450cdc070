"""What a trace holds: the numbers ``drtp inspect`` prints.

:func:`summarize` reads record batches once, keeping only counters and sets of
distinct names, so a trace of any length can be summarised; :func:`summarize_frame`
gives the same numbers from the columns ``drtp analyze`` already holds.

A batch is summarised a column at a time, as drtp.trace.columns builds its
columns: the methods, URIs and clients of a batch are counted or collected in
one C-level pass each (``Counter.update``, ``set.update`` over ``map``), and each
distinct URI is split once, at the end, weighted by how often it came (a trace
repeats its URIs: a popular layer is pulled thousands of times), without the
grammar's checks the reader has made already.  This needs
neither numpy nor pandas, whose import alone would cost ``drtp inspect`` more
than the summary.
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from collections.abc import Iterable
from operator import attrgetter

from drtp.trace.records import KINDS, METHODS, TraceRecord, split_valid_uri

_method, _uri, _client, _size = (attrgetter(name) for name in ("method", "uri", "client", "size"))


def summarize(batches: Iterable[list[TraceRecord]]) -> dict:
    """Summary keys: records, span_s, first, last, by_method, by_kind, bytes,
    clients, repositories, objects (distinct layers + manifests; uploads excluded)."""
    by_method: Counter[str] = Counter()
    uris: Counter[str] = Counter()
    clients: set[str] = set()
    total_bytes = 0
    records = 0
    first = last = None
    for batch in batches:
        if not batch:
            continue
        if first is None:
            first = batch[0].timestamp
        last = batch[-1].timestamp
        records += len(batch)
        by_method.update(map(_method, batch))
        uris.update(map(_uri, batch))
        clients.update(map(_client, batch))
        total_bytes += sum(map(_size, batch))
    by_kind: Counter[str] = Counter()
    repos: set[str] = set()
    objects: set[tuple[str, str]] = set()
    for uri, count in uris.items():
        parts = split_valid_uri(uri)  # the reader checked every URI
        by_kind[parts.kind] += count
        repos.add(parts.repository)
        if parts.kind == "blob":
            if not parts.reference.startswith("uploads/"):
                objects.add(("", parts.reference))  # a layer is its digest, whatever the repository
        else:
            objects.add((parts.repository, parts.reference))
    return {
        "records": records,
        "span_s": (last - first).total_seconds() if records else 0.0,
        "first": first.isoformat() if first else None,
        "last": last.isoformat() if last else None,
        "by_method": {m: by_method[m] for m in METHODS if by_method[m]},
        "by_kind": {k: by_kind[k] for k in KINDS if by_kind[k]},
        "bytes": total_bytes,
        "clients": len(clients),
        "repositories": len(repos),
        "objects": len(objects),
    }


def summarize_frame(df) -> dict:
    """The same summary as :func:`summarize`, from a trace's columns as a pandas frame (drtp.analysis.trace_frame's)."""
    n = len(df)
    by_method = df["method"].value_counts()
    by_kind = df["kind"].value_counts()
    first = _dt.datetime.fromtimestamp(df["time"].iloc[0], _dt.timezone.utc) if n else None
    last = _dt.datetime.fromtimestamp(df["time"].iloc[-1], _dt.timezone.utc) if n else None
    objects = df["object"][~df["upload"]]
    return {
        "records": n,
        "span_s": (last - first).total_seconds() if n else 0.0,
        "first": first.isoformat() if first else None,
        "last": last.isoformat() if last else None,
        "by_method": {m: int(by_method[m]) for m in METHODS if by_method.get(m, 0)},
        "by_kind": {k: int(by_kind[k]) for k in KINDS if by_kind.get(k, 0)},
        "bytes": int(df["size"].sum()),
        "clients": int(df["client"].nunique()),
        "repositories": int(df["repository"].nunique()),
        "objects": int(objects.nunique()),
    }


def format_summary(s: dict) -> str:
    """The summary as an aligned text table."""
    rows = [
        ("records", f"{s['records']:,}"),
        ("time span", f"{s['span_s']:,.1f} s ({s['first']} → {s['last']})"),
        ("bytes", f"{s['bytes']:,} ({s['bytes'] / 1e9:,.2f} GB)"),
        ("clients", f"{s['clients']:,}"),
        ("repositories", f"{s['repositories']:,}"),
        ("objects", f"{s['objects']:,}"),
    ]
    for m, n in s["by_method"].items():
        rows.append((f"  {m}", f"{n:,} ({n / max(1, s['records']):.1%})"))
    for k, n in s["by_kind"].items():
        rows.append((f"  {k}", f"{n:,} ({n / max(1, s['records']):.1%})"))
    if s.get("skipped"):
        rows.append(("skipped (bad)", f"{s['skipped']:,}"))
    if s.get("ignored"):
        rows.append(("ignored (not objects)", f"{s['ignored']:,}"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
