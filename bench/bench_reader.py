"""Trace ingest speed: drtp's streaming reader vs the original method, side by side.

The original trace player loaded each file with ``json.load`` and parsed every
timestamp with ``datetime.strptime``.  Both read the same
generated file in the same run; the table gives records/s and the ratio.

    python bench/bench_reader.py [--requests 200000] [--repeat 3] [--out bench/out/reader.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import tempfile
import time
from pathlib import Path

from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.parquet import write_parquet
from drtp.trace.reader import TraceReader, write_ibm


def original_method(path: Path) -> int:
    """The original master's get_requests(): json.load, then per record a filter, strptime and
    a request dict; sort by time; delays relative to the first request (ported to Python 3)."""
    ret = []
    with open(path) as f:
        records = json.load(f)
    for request in records:
        method = request["http.request.method"]
        uri = request["http.request.uri"]
        if method in ("GET", "PUT") and ("manifest" in uri or "blobs" in uri):
            size = request["http.response.written"]
            if size > 0:
                timestamp = dt.datetime.strptime(request["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ")
                ret.append(
                    {
                        "delay": timestamp,
                        "uri": uri,
                        "size": size,
                        "method": method,
                        "duration": request["http.request.duration"],
                        "client": request["http.request.remoteaddr"],
                    }
                )
    ret.sort(key=lambda x: x["delay"])
    begin = ret[0]["delay"]
    for r in ret:
        r["delay"] = (r["delay"] - begin).total_seconds()
    return len(records)  # records read (the original keeps only GET/PUT with size > 0)


def strptime_every_record(path: Path) -> int:
    """json.load + strptime for every record (no filter), sorted: the original method, without its filter."""
    with open(path) as f:
        records = json.load(f)
    for r in records:
        r["timestamp"] = dt.datetime.strptime(r["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ")
    records.sort(key=lambda r: r["timestamp"])
    return len(records)


def orjson_method(path: Path) -> int:
    """orjson.loads + fromisoformat per record: a faster untyped baseline."""
    import orjson  # only this baseline needs it

    records = orjson.loads(path.read_bytes())
    for r in records:
        r["timestamp"] = dt.datetime.fromisoformat(r["timestamp"].replace("Z", "+00:00"))
    records.sort(key=lambda r: r["timestamp"])
    return len(records)


def drtp_reader(path: Path) -> int:
    """Streaming, validated, URI-checked, time-sorted TraceRecords."""
    return sum(len(batch) for batch in TraceReader([path]).batches())


def drtp_reader_agents(path: Path) -> int:
    """The same with each record's user agent decoded too (AgentRecord: only for ``user_agent: trace``)."""
    return sum(len(batch) for batch in TraceReader([path], user_agent=True).batches())


def drtp_parquet(path: Path) -> int:
    """The same records from the trace's Parquet cache (``drtp convert``, done once, not timed)."""
    cache = path.with_name(path.name + ".parquet")
    if not cache.exists():
        write_parquet(cache, TraceReader([path]).batches())
    return sum(len(batch) for batch in TraceReader([cache]).batches())


def best_rate(fn, path: Path, repeat: int) -> tuple[float, int]:
    best = 0.0
    n = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = fn(path)
        best = max(best, n / (time.perf_counter() - t0))
    return best, n


METHODS = (
    ("original get_requests() (baseline)", original_method),
    ("json.load + strptime every record", strptime_every_record),
    *((("orjson + fromisoformat", orjson_method),) if importlib.util.find_spec("orjson") else ()),
    ("drtp TraceReader over its Parquet cache", drtp_parquet),
    ("drtp TraceReader with user agents", drtp_reader_agents),
    ("drtp TraceReader (msgspec, streaming)", drtp_reader),  # last: the row the suite reports
)


def measure(path: Path, repeat: int = 3, methods: tuple = METHODS) -> list[dict]:
    """Rows {method, records, records_per_s, ratio_vs_original}; the first method is the baseline."""
    rows = []
    for name, fn in methods:
        rate, n = best_rate(fn, path, repeat)
        rows.append({"method": name, "records": n, "records_per_s": rate})
    base = rows[0]["records_per_s"]
    for r in rows:
        r["ratio_vs_original"] = r["records_per_s"] / base
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trace", type=Path, help="use this trace file instead of generating one")
    ap.add_argument("--out", type=Path, default=Path("bench/out/reader.json"))
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = args.trace or Path(tmp) / "trace.json"
        if not args.trace:
            write_ibm(path, generate(GenerateOptions(requests=args.requests, seed=1)))
        rows = measure(path, args.repeat)
        size_mb = path.stat().st_size / 1e6

    print(f"trace ingest, {rows[0]['records']:,} records ({size_mb:.0f} MB), best of {args.repeat}, one core")
    print(f"{'method':<40} {'records/s':>12} {'vs original':>12}")
    for r in rows:
        print(f"{r['method']:<40} {r['records_per_s']:>12,.0f} {r['ratio_vs_original']:>11.1f}x")
    target = rows[-1]
    print(
        f"targets: >= 1,000,000 records/s: {'met' if target['records_per_s'] >= 1e6 else 'MISSED'}; "
        f">= 10x original: {'met' if target['ratio_vs_original'] >= 10 else 'MISSED'}"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
