"""A run's results: ``requests.csv`` written as results arrive, and ``summary.json``.

The master's memory must not grow with the trace, so the summary is kept
as it goes: counts and sums, and log-bucketed histograms (0.1 % wide buckets)
for the percentiles — a percentile in ``summary.json`` is within 0.1 % of the
exact nearest-rank percentile of the same column in ``requests.csv``; maxima
are exact.  Latency percentiles are over the requests that succeeded; start
lateness is over every request that was sent.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from drtp.replay_types import ReplayRequest, ReplayResult

COLUMNS = (
    "client",  # the trace's client address
    "node",  # the client node that sent the request
    "trace_id",
    "method",
    "kind",
    "repository",
    "reference",  # the trace's reference (tag, layer, uploads/<uuid>)
    "digest",  # the digest addressed, or the new digest a push got
    "size",  # bytes the trace recorded
    "bytes",  # bytes actually sent or received
    "intended_s",  # as-is mode: intended start after the run's start
    "start_s",  # actual start after the run's start
    "latency_s",  # from the actual start (service time)
    "response_s",  # as-is mode: from the intended start (includes lateness)
    "status",
    "expected_status",  # the trace's status
    "ok",
    "error",
    "auxiliary",  # a protocol helper request issued for the trace request above it
)
PERCENTILES = (50, 90, 99)


class LogHistogram:
    """Counts of non-negative values in buckets 0.1 % wide from 1 µs up; exact count and max."""

    MIN = 1e-6
    LOG_RATIO = math.log(1.001)

    __slots__ = ("counts", "n", "max", "total")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.n = 0
        self.max = 0.0
        self.total = 0.0

    def add(self, x: float, idx: int | None = None) -> None:
        """Count ``x``; ``idx`` is its bucket when the caller already has it (see :func:`bucket`)."""
        if idx is None:
            idx = bucket(x)
        self.counts[idx] = self.counts.get(idx, 0) + 1
        self.n += 1
        self.total += x
        if x > self.max:
            self.max = x

    def quantile(self, q: float) -> float:
        """Nearest-rank quantile (the value at rank ceil(q·n)), to 0.1 %."""
        if not self.n:
            return math.nan
        rank = max(1, math.ceil(q * self.n))
        seen = 0
        for idx in sorted(self.counts):
            seen += self.counts[idx]
            if seen >= rank:
                if idx < 0:
                    return 0.0
                return min(self.max, self.MIN * math.exp((idx + 0.5) * self.LOG_RATIO))
        return self.max

    def describe(self) -> dict:
        if not self.n:
            return {}
        out = {f"p{p}": self.quantile(p / 100) for p in PERCENTILES}
        out["max"] = self.max
        out["mean"] = self.total / self.n
        return out


def bucket(x: float, _log=math.log, _min=LogHistogram.MIN, _ratio=LogHistogram.LOG_RATIO) -> int:
    """The LogHistogram bucket of ``x`` (-1 below 1 µs)."""
    return -1 if x < _min else int(_log(x / _min) / _ratio)


class Marks:
    """One result's values and their histogram buckets, computed once for the three groups it counts in."""

    __slots__ = ("latency", "latency_idx", "late", "late_idx", "response", "response_idx")

    def __init__(self, req: ReplayRequest, res: ReplayResult) -> None:
        self.latency = res.latency
        self.latency_idx = bucket(res.latency)
        if req.at is not None:
            self.late = max(0.0, res.start - req.at)
            self.late_idx = bucket(self.late)
            self.response = res.start + res.latency - req.at
            self.response_idx = bucket(self.response)


class Group:
    """Figures of one slice of the run (all, one method+kind, one node)."""

    __slots__ = (
        "requests",
        "succeeded",
        "lost",
        "bytes",
        "matched",
        "on_time",
        "first",
        "last",
        "latency",
        "response",
        "lateness",
    )

    def __init__(self) -> None:
        self.requests = self.succeeded = self.lost = self.bytes = self.matched = self.on_time = 0
        self.first = math.inf
        self.last = -math.inf
        self.latency = LogHistogram()
        self.response = LogHistogram()
        self.lateness = LogHistogram()

    def add(self, req: ReplayRequest, res: ReplayResult | None, on_time_s: float, marks: Marks | None = None) -> None:
        self.requests += 1
        if res is None:
            self.lost += 1
            return
        m = marks or Marks(req, res)
        self.bytes += res.bytes
        self.matched += res.status == req.expected_status
        if res.start < self.first:
            self.first = res.start
        end = res.start + res.latency
        if end > self.last:
            self.last = end
        if req.at is not None:
            self.lateness.add(m.late, m.late_idx)
            self.on_time += m.late <= on_time_s
        if res.ok:
            self.succeeded += 1
            self.latency.add(m.latency, m.latency_idx)
            if req.at is not None:
                self.response.add(m.response, m.response_idx)

    def summary(self, timed: bool) -> dict:
        duration = self.last - self.first if self.requests - self.lost else 0.0
        out = {
            "requests": self.requests,
            "succeeded": self.succeeded,
            "failed": self.requests - self.succeeded,
            "lost": self.lost,
            "duration_s": duration,
            "throughput_rps": self.requests / duration if duration > 0 else 0.0,
            "bytes": self.bytes,
            "latency_s": self.latency.describe(),
            "status_matched": self.matched / self.requests if self.requests else 0.0,
        }
        if timed:
            out["response_s"] = self.response.describe()
            out["lateness_s"] = self.lateness.describe()
            sent = self.requests - self.lost
            out["on_time_ratio"] = self.on_time / sent if sent else 0.0
        return out


class RunResults:
    """Writes rows as results arrive and keeps the running summary."""

    def __init__(self, out_dir: Path, timed: bool, on_time_s: float, resume: bool = False) -> None:
        self.out_dir = out_dir
        self.timed = timed
        self.on_time_s = on_time_s
        self.all = Group()
        self.by_method: dict[str, Group] = {}
        self.by_node: dict[str, Group] = {}
        self.auxiliary = 0
        self.failed = 0
        # resume: what an earlier, interrupted run of this directory completed
        self.completed: set[str] = set()  # trace ids with a result (not lost)
        self.pushed: list[tuple[str, str, str, int]] = []  # (repository, layer ref, digest, size) pushed
        self.resumed_end = 0.0  # the latest end (s after that run's start) of those results
        path = out_dir / "requests.csv"
        old = None
        if resume and path.exists():
            old = path.with_name("requests.csv.resumed")
            path.replace(old)
        self.file = open(path, "w", newline="")
        self.csv = csv.writer(self.file)
        self.csv.writerow(COLUMNS)
        if old is not None:
            self._reload(old)
            old.unlink()

    def _reload(self, old: Path) -> None:
        """Keep an interrupted run's completed rows (and count them); drop lost and torn rows."""
        col = {c: i for i, c in enumerate(COLUMNS)}
        with open(old, newline="") as f:
            rows = csv.reader(f)
            next(rows, None)
            for row in rows:
                if len(row) != len(COLUMNS) or row[col["auxiliary"]] not in ("True", "False"):
                    continue  # a line torn by the interruption
                if row[col["auxiliary"]] == "True":
                    self.auxiliary += 1
                    self.csv.writerow(row)
                    continue
                if row[col["error"]].startswith("lost:"):
                    continue  # never answered: it is sent again
                try:
                    req, res = _from_row(row, col)
                except ValueError:
                    continue
                method = _group(self.by_method, f"{req.method} {req.kind}")
                for g in (self.all, method, _group(self.by_node, row[col["node"]])):
                    g.add(req, res, self.on_time_s)
                self.failed += not res.ok
                self.completed.add(req.trace_id)
                self.resumed_end = max(self.resumed_end, res.start + res.latency)
                if req.method == "PUT" and req.kind == "blob" and res.ok and res.digest:
                    if not req.reference.startswith("uploads"):
                        self.pushed.append((req.repository, req.reference, res.digest, req.size))
                self.csv.writerow(row)
        self.file.flush()

    def add(self, node: str, req: ReplayRequest, res: ReplayResult | None, lost_reason: str = "") -> None:
        groups = (self.all, _group(self.by_method, f"{req.method} {req.kind}"), _group(self.by_node, node))
        marks = Marks(req, res) if res is not None else None
        for g in groups:
            g.add(req, res, self.on_time_s, marks)
        at = "" if req.at is None else f"{req.at:.6f}"
        base = (req.client, node, req.trace_id)
        if res is None:
            self.failed += 1
            self.csv.writerow(
                (*base, req.method, req.kind, req.repository, req.reference, req.digest or "", req.size, 0, at)
                + ("", "", "", 0, req.expected_status, False, f"lost: {lost_reason}", False)
            )
            return
        self.failed += not res.ok
        response = "" if req.at is None else f"{res.start + res.latency - req.at:.6f}"
        self.csv.writerow(
            (*base, req.method, req.kind, req.repository, req.reference, res.digest or req.digest or "", req.size)
            + (res.bytes, at, f"{res.start:.6f}", f"{res.latency:.6f}", response)
            + (res.status, req.expected_status, res.ok, res.error, False)
        )
        for a in res.aux:
            self.auxiliary += 1
            self.csv.writerow(
                (*base, a.method, "blob", req.repository, a.what, "", 0, a.bytes, "", f"{a.start:.6f}")
                + (f"{a.latency:.6f}", "", a.status, "", 0 < a.status < 400, a.error, True)
            )

    def flush(self) -> None:
        self.file.flush()

    def summary(self, **extra) -> dict:
        out = self.all.summary(self.timed)
        out["auxiliary"] = self.auxiliary
        out.update(extra)
        out["per_method"] = {k: g.summary(self.timed) for k, g in sorted(self.by_method.items())}
        out["per_node"] = {k: g.summary(self.timed) for k, g in sorted(self.by_node.items())}
        return out

    def discard_unwritten(self) -> None:
        """After a failed write (disk full, file size limit): close requests.csv, dropping the rows it could not
        take, so that close() can still write summary.json."""
        try:
            self.file.close()
        except OSError:
            pass

    def close(self, **extra) -> dict:
        self.file.close()
        summary = self.summary(**extra)
        (self.out_dir / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=False, default=str))
        return summary


def _from_row(row: list[str], col: dict[str, int]) -> tuple[ReplayRequest, ReplayResult]:
    """A requests.csv row back as the request and result it was written from (for resuming)."""
    intended = row[col["intended_s"]]
    req = ReplayRequest(
        seq=0,
        trace_id=row[col["trace_id"]],
        client=row[col["client"]],
        method=row[col["method"]],
        kind=row[col["kind"]],
        op="get",
        registry="",
        repository=row[col["repository"]],
        reference=row[col["reference"]],
        size=int(row[col["size"]] or 0),
        expected_status=int(row[col["expected_status"]] or 0),
        digest=row[col["digest"]] or None,
        at=float(intended) if intended else None,
    )
    res = ReplayResult(
        seq=0,
        status=int(row[col["status"]] or 0),
        ok=row[col["ok"]] == "True",
        start=float(row[col["start_s"]]),
        latency=float(row[col["latency_s"]]),
        bytes=int(row[col["bytes"]] or 0),
        digest=row[col["digest"]] or None,
        error=row[col["error"]],
    )
    return req, res


def _ms(d: dict, key: str) -> str:
    v = d.get(key)
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * 1000:.1f}"


def format_table(summary: dict) -> str:
    """The summary as a console table: all requests, per method+kind, per node."""
    timed = "lateness_s" in summary
    head = ["", "requests", "failed", "req/s", "MB", "p50 ms", "p90 ms", "p99 ms", "max ms"]
    if timed:
        head += ["late p99 ms", "on time"]
    rows = []

    def row(name: str, s: dict) -> None:
        lat = s["latency_s"]
        r = [name, f"{s['requests']:,}", f"{s['failed']:,}", f"{s['throughput_rps']:.1f}", f"{s['bytes'] / 1e6:.1f}"]
        r += [_ms(lat, "p50"), _ms(lat, "p90"), _ms(lat, "p99"), _ms(lat, "max")]
        if timed:
            r += [_ms(s["lateness_s"], "p99"), f"{s['on_time_ratio']:.1%}"]
        rows.append(r)

    row("all", summary)
    for k, s in summary["per_method"].items():
        row(k, s)
    for k, s in summary["per_node"].items():
        row(f"node {k}", s)
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = [
        "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=False)))
        for r in [head, *rows]
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def _group(groups: dict[str, Group], key: str) -> Group:
    """The group for ``key``, made on first use (setdefault would build a Group for every result)."""
    g = groups.get(key)
    if g is None:
        g = groups[key] = Group()
    return g
