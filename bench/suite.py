"""The self-benchmark suite: every bench script at one size, side by side with its baseline, as ONE table.

Each row is drtp's number and its baseline's, measured in the same run on the same
input, their ratio (drtp ÷ baseline) and drtp's target for that row (bench/README.md).  ``drtp selfbench``
calls :func:`run_suite`; this file also runs on its own:

    python bench/suite.py [--size tiny|small|full] [--out bench/out]
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import bench_analyze  # noqa: E402
import bench_faults  # noqa: E402
import bench_fidelity  # noqa: E402
import bench_master  # noqa: E402
import bench_prodreg  # noqa: E402
import bench_reader  # noqa: E402
import bench_replay  # noqa: E402
import bench_simulate  # noqa: E402

from drtp.trace.generate import GenerateOptions, generate  # noqa: E402
from drtp.trace.reader import write_ibm  # noqa: E402


@dataclass(frozen=True)
class Size:
    """How big each part runs; ``full`` is the size the targets are judged at."""

    reader: int  # records in the ingest file
    reader_repeat: int
    stress_requests: int  # per stress case
    wrk_s: int
    asis_s: float  # per as-is rate
    sim: int  # trace requests for the simulation rows
    sim_repeat: int
    scale: tuple[int, int]  # the two sizes of the RSS rows
    analyze: int  # records for `drtp analyze trace`
    rates: tuple[float, ...] = (50, 200, 500)
    faults: int = 300  # trace requests replayed clean and with ~10 % faults
    prodreg: int = 300  # trace requests per drtp round against each registry kind
    master: tuple[int, int] = (3000, 1000)  # trace requests at full rate, and paced


SIZES = {
    "tiny": Size(3000, 1, 300, 1, 1, 5000, 1, (2000, 20000), 3000),
    "small": Size(200_000, 2, 3000, 4, 5, 200_000, 2, (20_000, 200_000), 200_000, 1000, 2000, (30_000, 10_000)),
    "full": Size(
        1_000_000, 3, 8000, 8, 20, 1_000_000, 3, (100_000, 1_000_000), 1_000_000, 3000, 5000, (100_000, 20_000)
    ),
}

COLUMNS = ["row", "metric", "drtp", "baseline", "unit", "ratio", "better", "target", "met", "baseline_is", "note"]


@dataclass
class Row:
    """One line of the table: ratio = drtp ÷ baseline; ``better`` says which way is good."""

    row: str
    metric: str
    drtp: float
    baseline: float
    unit: str
    better: str  # "higher" or "lower"
    target: str
    met: str  # "yes", "no" or "—" (no target, or not judged at this size)
    baseline_is: str
    note: str = ""
    ratio: float = field(init=False)

    def __post_init__(self) -> None:
        self.ratio = self.drtp / self.baseline if self.baseline else math.nan


def yes_no(ok: bool | None) -> str:
    return "—" if ok is None else ("yes" if ok else "no")


class Traces:
    """Generated traces shared by the rows, one per size, written once into ``work``."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.paths: dict[int, Path] = {}

    def get(self, n: int) -> Path:
        if n not in self.paths:
            path = self.work / f"gen-{n}.json"
            write_ibm(path, generate(GenerateOptions(requests=n, seed=7, span_s=7 * 86400.0)))
            self.paths[n] = path
        return self.paths[n]


def ingest_rows(size: Size, traces: Traces) -> list[Row]:
    methods = (bench_reader.METHODS[0], bench_reader.METHODS[-1])
    base, ours = bench_reader.measure(traces.get(size.reader), size.reader_repeat, methods)
    rate = ours["records_per_s"]
    ratio = rate / base["records_per_s"]
    return [
        Row(
            "1 ingest",
            f"trace ingest, {ours['records']:,} records (records/s, one core)",
            rate,
            base["records_per_s"],
            "records/s",
            "higher",
            "≥10× and ≥1M records/s",
            yes_no(ratio >= 10 and rate >= 1e6),
            "original get_requests(): json.load + strptime per record",
        )
    ]


def replay_rows(size: Size) -> list[Row]:
    res = bench_replay.measure(size.stress_requests, size.wrk_s, size.asis_s, rates=size.rates)
    rows = []
    for r in res["stress"]:
        rows.append(
            Row(
                "2 stress",
                f"stress rate, {r['case']}, {r['concurrency']} concurrent",
                r["drtp_rps"],
                r["wrk_rps"],
                "req/s",
                "higher",
                "≥0.90 of wrk",
                yes_no(r["ratio"] >= 0.9),
                "wrk at the same concurrency on the same registry and URLs",
                f"{r['requests']} requests over {r['distinct_urls']} URLs; nodes' event loop; "
                "best of 2 alternated rounds each",
            )
        )
        rows.append(
            Row(
                "2 stress",
                f"stress rate, {r['case']}, thread engine (engine: threads)",
                r["threads_rps"],
                r["wrk_rps"],
                "req/s",
                "higher",
                "",
                "—",
                "wrk, as above",
                "the nodes' thread pool, as before the event loop; as-is runs still use it",
            )
        )
        if "pinned_drtp_rps" in r:
            rows.append(
                Row(
                    "2 stress",
                    f"stress rate, {r['case']}, registry and load generator on separate CPUs",
                    r["pinned_drtp_rps"],
                    r["pinned_wrk_rps"],
                    "req/s",
                    "higher",
                    "",
                    "—",
                    "wrk pinned like drtp (registry on CPU 0, generator on CPU 1)",
                    "as with the replayer on its own machine: is it the bottleneck? one round each",
                )
            )
    for r in res["asis"]:
        for q in ("p50", "p99", "max"):
            judged = q == "p99" and r["rate"] == 200
            rows.append(
                Row(
                    "3 as-is",
                    f"as-is lateness {q} at {r['rate']:g} req/s",
                    r[f"lateness_{q}_ms"],
                    r[f"baseline_lateness_{q}_ms"],
                    "ms",
                    "lower",
                    "p99 ≤ 2 ms at 200/s" if judged else "",
                    yes_no(r["lateness_p99_ms"] <= 2.0) if judged else "—",
                    "one Python thread sleeping until each start, no requests",
                    f"{r['requests']} requests over {r['seconds']:g} s, {r['failed']} failed, "
                    f"on time (≤10 ms) {r['on_time_ratio']:.1%}",
                )
            )
    for r in res["stress"]:
        for suffix, key, engine in (
            ("", "node_cpu_us_per_req", "event loop"),
            (", thread engine", "threads_node_cpu_us_per_req", "thread pool"),
        ):
            rows.append(
                Row(
                    "5 scale",
                    f"client node CPU per request, {r['case']}{suffix}",
                    r[key],
                    r["wrk_cpu_us_per_req"],
                    "CPU µs/req",
                    "lower",
                    "",
                    "—",
                    "wrk's CPU per request in the same case",
                    f"both client nodes together, stress mode, {engine}",
                )
            )
    return rows


def simulate_rows(size: Size, traces: Traces) -> list[Row]:
    out = bench_simulate.measure(traces.get(size.sim), size.sim_repeat, pcts=(10,), sweep=False, log=lambda *a: None)
    by = {r["policy"]: r for r in out["rows"]}
    base = by["libcachesim LRU (baseline)"]
    rows = []
    for name in (
        "drtp lru",
        "drtp two-level (SSD 10x)",
        "plugin lru (incl. tables)",
        "plugin two-level (incl. tables)",
    ):
        r = by[name]
        rows.append(
            Row(
                "4 simulate",
                f"{name}, 10% ingress (GET layer req/s)",
                r["layer_req_per_s"],
                base["layer_req_per_s"],
                "req/s",
                "higher",
                "≥1M req/s",
                yes_no(r["layer_req_per_s"] >= 1e6),
                "libCacheSim LRU through its Python binding, same requests",
                f"{out['layer_requests']:,} GET layer requests of {out['requests']:,}; "
                f"{r['trace_req_per_s']:,.0f} trace req/s; hit ratio {r['hit_ratio']:.3f} vs {base['hit_ratio']:.3f}",
            )
        )
    return rows


def scale_rows(size: Size, traces: Traces, work: Path) -> list[Row]:
    small, big = size.scale
    rows = []
    for what, measure in (
        ("master replay pipeline", lambda n: bench_replay.rss_of(traces.get(n), work / f"rss-{n}")),
        ("simulate (read + compact + lru)", lambda n: bench_simulate.rss_of(traces.get(n))),
    ):
        a, b = measure(small), measure(big)
        rows.append(
            Row(
                "5 scale",
                f"peak RSS {what}, {b['requests']:,} vs {a['requests']:,} requests",
                b["peak_rss_mb"],
                a["peak_rss_mb"],
                "MB",
                "lower",
                "flat (≤1.5× for 10× the requests)",
                yes_no(b["peak_rss_mb"] <= 1.5 * a["peak_rss_mb"]),
                f"the same at {a['requests']:,} requests",
                f"{b['rate']:,.0f} req/s at the larger size",
            )
        )
    return rows


def analyze_rows(size: Size, traces: Traces, work: Path) -> list[Row]:
    res = bench_analyze.measure(traces.get(size.analyze), work / "analyze", parquet=False)
    by = {r["stage"]: r for r in res["rows"]}
    full = by["drtp analyze trace end to end (+13 PNGs, report)"]
    subset = by["subset of characterization numbers (read + compute)"]
    n = res["records"]
    budget = 60.0 * n / 1e6
    agree = "yes" if not res["problems"] else "NO"
    return [
        Row(
            "6 analyze",
            f"subset of the characterization numbers (read + compute), {n:,} records",
            subset["drtp_s"],
            subset["naive_s"],
            "s",
            "lower",
            "",
            "—",
            "naive per-record Python pass over the same reader",
            f"numbers agree: {agree}",
        ),
        Row(
            "6 analyze",
            f"drtp analyze trace end to end (+PNGs, report), {n:,} records",
            full["drtp_s"],
            budget,
            "s",
            "lower",
            "<60 s for 1M records",
            yes_no(full["drtp_s"] < budget) if n >= 1_000_000 else "—",
            "the 60 s budget scaled to the records (judged at 1M only)",
            f"{full['drtp_s'] * 1e6 / n:.1f} s per 1M records (fixed costs dominate small sizes)",
        ),
    ]


def faults_rows(size: Size) -> list[Row]:
    res = bench_faults.measure(size.faults)
    f = res["faulted"]
    injected = sum(r["injected"] for r in res["classes"])
    writes = "yes" if f["writes_logged"] == f["writes_sent"] else "NO"
    rows = [
        Row(
            "7 faults",
            f"replay duration with ~10% faults ÷ clean, {res['requests']:,} requests",
            f["duration_s"],
            res["clean"]["duration_s"],
            "s",
            "lower",
            "",
            "—",
            "the same trace through the same proxy without faults",
            f"{injected} faults injected, {f['failed']} trace requests failed; client timeout "
            f"{res['timeout_s']:g} s, delay faults hold {res['delay_s']:g} s; POST/PATCH/PUT logged = sent: {writes}",
        )
    ]
    for r in res["classes"]:
        if not r["injected"]:
            continue  # a class drtp recorded that was never injected still fails the "honest" note above
        rows.append(
            Row(
                "7 faults",
                f"failed rows recorded as {r['class']} vs injected",
                r["recorded"],
                r["injected"],
                "requests",
                "higher",
                "= injected",
                yes_no(r["recorded"] == r["injected"]),
                "faults of this class the proxy injected (each answer faulted once, each request sent once)",
                f"honest overall (every class, writes, clean run without failures): {'yes' if res['honest'] else 'NO'}",
            )
        )
    return rows


def fidelity_rows() -> list[Row]:
    res = bench_fidelity.measure()
    what = f"a captured skopeo session, {res['requests']} requests"
    note = f"upload sessions left open {res['open_uploads']}, helper requests {res['helper_requests']}"
    return [
        Row(
            "8 fidelity",
            f"status match (replayed status = trace status), {what}",
            res["status_match"],
            1.0,
            "share",
            "higher",
            "= 1",
            yes_no(res["status_match"] == 1.0),
            "every request with the trace's status",
            note,
        ),
        Row(
            "8 fidelity",
            "manifest bytes replayed ÷ trace",
            res["manifest_bytes_ratio"],
            1.0,
            "ratio",
            "higher",
            "within 1%",
            yes_no(abs(res["manifest_bytes_ratio"] - 1) <= 0.01),
            "the trace's manifest bytes",
            f"manifest PUTs alone {res['manifest_put_bytes_ratio']:.3f}",
        ),
        Row(
            "8 fidelity",
            "blob bytes replayed ÷ trace",
            res["blob_bytes_ratio"],
            1.0,
            "ratio",
            "higher",
            "within 1%",
            yes_no(abs(res["blob_bytes_ratio"] - 1) <= 0.01),
            "the trace's blob bytes",
            note,
        ),
    ]


def prodreg_rows(size: Size, judged: bool) -> list[Row]:
    """Rows 9: stress rate and the nodes' CPU per request mid-run against wrk, per kind of registry and mix."""
    rows = []
    for r in bench_prodreg.measure(size.prodreg, 2 if judged else 1, wrk_min_s=size.wrk_s):
        where = f"{r['registry']}, {r['case']}"
        rows.append(
            Row(
                "9 registries",
                f"stress rate, {where}",
                r["drtp_rps"],
                r["wrk_rps"],
                "req/s",
                "higher",
                "≥0.90 of wrk",
                yes_no(r["ratio"] >= 0.9) if judged else "—",
                f"wrk -t2 -c{r['concurrency']}, same registry, URLs and credentials",
                f"{r['requests']} requests over {r['distinct_urls']} URLs; best of alternated rounds",
            )
        )
        rows.append(
            Row(
                "9 registries",
                f"client node CPU per request mid-run, {where}",
                r["node_cpu_us_per_req"],
                r["wrk_cpu_us_per_req"],
                "CPU µs/req",
                "lower",
                "≤1.5× wrk's",
                yes_no(r["cpu_ratio"] <= 1.5) if judged else "—",
                "wrk's CPU per request over the middle half of its run",
                f"both nodes, 25–75 % of the rows; rounds node {r['node_cpu_rounds']} µs, wrk {r['wrk_cpu_rounds']} µs",
            )
        )
    return rows


def master_rows(size: Size, judged: bool) -> list[Row]:
    """Rows 10: the master's CPU per request against stand-in nodes that answer at once, full rate and paced."""
    full_n, paced_n = size.master
    res = bench_master.measure(full_n, (1, 2, 4), (20_000, 2_000), paced_n)
    one = res["runs"][0]
    rows = [
        Row(
            "10 master",
            "master CPU per request, 1 stand-in node, full rate",
            one["master_cpu_us_per_req"],
            res["read_us_per_req"],
            "CPU µs/req",
            "lower",
            "≤10 µs",
            yes_no(one["master_cpu_us_per_req"] <= 10) if judged else "—",
            "reading the same trace alone (TraceReader, CPU per record): the least a master spends",
            f"{one['requests']:,} requests at {one['rate_rps']:,.0f} req/s; "
            f"one master core feeds {1e6 / one['master_cpu_us_per_req']:,.0f} req/s",
        )
    ]
    for r in res["runs"][1:]:
        pace = f"paced to {r['paced_rps']:,.0f} req/s" if r["paced_rps"] else "full rate"
        how = f"{r['nodes']} stand-in nodes, {pace}"
        flat = r["master_cpu_us_per_req"] <= 1.2 * one["master_cpu_us_per_req"]
        rows.append(
            Row(
                "10 master",
                f"master CPU per request, {how}",
                r["master_cpu_us_per_req"],
                one["master_cpu_us_per_req"],
                "CPU µs/req",
                "lower",
                "flat (≤1.2× of 1 node at full rate)",
                yes_no(flat) if judged else "—",
                "the same master with 1 stand-in node at full rate",
                f"{r['requests']:,} requests at {r['rate_rps']:,.0f} req/s",
            )
        )
    return rows


PARTS = ("ingest", "replay", "simulate", "scale", "analyze", "faults", "fidelity", "prodreg", "master")


def run_suite(size_name: str = "tiny", out_dir: Path | None = None, parts: tuple = PARTS, log=print) -> dict:
    """Run the parts at ``size_name``; write table.csv / table.json under ``out_dir``; return the JSON document."""
    size = SIZES[size_name]
    started = time.perf_counter()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="drtp-selfbench-") as tmp:
        work = Path(tmp)
        traces = Traces(work)
        steps = {
            "ingest": lambda: ingest_rows(size, traces),
            "replay": lambda: replay_rows(size),
            "simulate": lambda: simulate_rows(size, traces),
            "scale": lambda: scale_rows(size, traces, work),
            "analyze": lambda: analyze_rows(size, traces, work),
            "faults": lambda: faults_rows(size),
            "fidelity": fidelity_rows,
            "prodreg": lambda: prodreg_rows(size, size_name != "tiny"),
            "master": lambda: master_rows(size, size_name == "full"),
        }
        for part in parts:
            t0 = time.perf_counter()
            log(f"[selfbench] {part} ({size_name}) …", flush=True)
            rows += steps[part]()
            log(f"[selfbench] {part} done in {time.perf_counter() - t0:.1f} s", flush=True)
    rows.sort(key=lambda r: int(r.row.split()[0]))
    doc = {
        "size": size_name,
        "sizes": asdict(size),
        "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "seconds": time.perf_counter() - started,
        "columns": COLUMNS,
        "rows": [{c: getattr(r, c) for c in COLUMNS} for r in rows],
    }
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        with open(out_dir / f"selfbench-{size_name}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(doc["rows"])
        (out_dir / f"selfbench-{size_name}.json").write_text(json.dumps(doc, indent=2, allow_nan=True) + "\n")
    return doc


def fmt(x: float) -> str:
    if isinstance(x, float) and math.isnan(x):
        return "—"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.2f}" if abs(x) >= 1 else f"{x:.3f}"


def format_table(doc: dict) -> str:
    """The table as text: one line per row, ratio = drtp ÷ baseline."""
    head = ["row", "metric", "drtp", "baseline", "unit", "ratio", "better", "target", "met"]
    cells = [head] + [
        [r["row"], r["metric"], fmt(r["drtp"]), fmt(r["baseline"]), r["unit"], fmt(r["ratio"]) + "×", r["better"]]
        + [r["target"], r["met"]]
        for r in doc["rows"]
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    right = {2, 3, 5}
    lines = []
    for k, c in enumerate(cells):
        padded = (v.rjust(w) if i in right else v.ljust(w) for i, (v, w) in enumerate(zip(c, widths, strict=True)))
        lines.append("  ".join(padded))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    met = [r["met"] for r in doc["rows"]]
    lines.append(
        f"\nsize {doc['size']}, {doc['machine']['cpus']} CPUs, {doc['seconds']:.0f} s; "
        f"targets met {met.count('yes')}, missed {met.count('no')}, not judged {met.count('—')}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--out", type=Path, default=BENCH_DIR / "out")
    ap.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS))
    a = ap.parse_args(argv)
    doc = run_suite(a.size, a.out, tuple(a.only))
    print(format_table(doc))
    print(f"wrote {a.out / f'selfbench-{a.size}.csv'} and .json")


if __name__ == "__main__":
    main()
