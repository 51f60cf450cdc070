"""The numbers of a run, computed in one place from its rows.

The master feeds it each :class:`~drtp.replay.result_row.ResultRow` as results
arrive and writes its summary to ``summary.json``; ``drtp analyze results``
reads ``requests.csv`` back and feeds the same rows to the same model, so
both report the same counts, failures, bytes, percentiles and throughput.

Memory does not grow with the trace: counts and sums, and log-bucketed
histograms (0.1 % wide buckets) for the percentiles — a percentile is within
0.1 % of the exact nearest-rank percentile of the column; maxima are exact.

Definitions (a request is failed when its outcome is anything but ``ok``,
see drtp.replay.outcome):

* trace requests and helper (auxiliary) requests are counted apart; helpers
  never appear among the trace's counts, bytes or latencies;
* ``bytes`` are the bytes measured on the wire, over every trace request (a HEAD
  counts the body a registry's log records for it: see client/executor.py's head_bytes);
* ``manifests_above_trace_size`` counts the manifest PUTs sent bigger than the
  trace's size: a trace size below the smallest valid manifest over the image's
  blobs (or unknown, 0) cannot be matched;
* latency (and, as is, response time) is over the requests that succeeded;
  start lateness is over every request that was sent;
* ``duration_s`` runs from the first start to the last end of the requests
  that were sent, and ``throughput_rps`` is succeeded requests per second of
  it — failed answers, however fast, are not throughput;
* ``achieved_rps`` is the rate requests started at (sent requests less one over the span
  of their starts) and ``offered_rps`` the rate the run meant them to start at, by
  the same count over their intended starts (as is: the trace's rate × speedup; rate
  mode: ``--rate``); ``behind`` says in one line when the run fell behind them.
* ``failed_statuses`` counts the failed requests per HTTP status of the answer
  they got (``{"429": 3, "503": 1}``: a throttling registry in plain sight,
  where ``failures`` says only ``http``); a failure without a status (no
  complete answer: timeout, reset, lost…) is in ``failures`` alone.
"""

from __future__ import annotations

import math

from drtp.replay.outcome import LOST, OUTCOMES
from drtp.replay.result_row import ResultRow

PERCENTILES = (50, 90, 99)


def nearest_rank(values: list[float], q: float) -> float | None:
    """The value at rank ceil(q·n) of the sorted values (None for none): the percentile of drtp's files, for
    the few values (per interval, per run) that need no histogram."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class LogHistogram:
    """Counts of non-negative values in buckets 0.1 % wide from 1 µs up; exact count, max and sum.

    The sum is kept in whole microseconds (rows hold their times to the microsecond), so it does not
    depend on the order of the values: histograms merged from client nodes give the same mean, to
    the last digit, as one histogram fed every row.
    """

    MIN = 1e-6
    LOG_RATIO = math.log(1.001)

    __slots__ = ("counts", "n", "max", "total")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.n = 0
        self.max = 0.0
        self.total = 0  # microseconds

    def add(self, x: float, idx: int | None = None) -> None:
        """Count ``x``; ``idx`` is its bucket when the caller already has it (see :func:`bucket`)."""
        if idx is None:
            idx = bucket(x)
        self.counts[idx] = self.counts.get(idx, 0) + 1
        self.n += 1
        self.total += round(x * 1e6)
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

    def merge(self, other: LogHistogram) -> None:
        """Add ``other``'s values: the buckets are the same for every histogram, so a merge is exact."""
        counts = self.counts
        for idx, c in other.counts.items():
            counts[idx] = counts.get(idx, 0) + c
        self.n += other.n
        self.total += other.total
        if other.max > self.max:
            self.max = other.max

    def state(self) -> list:
        """The histogram as plain values (for msgspec): [bucket counts, n, max, total]."""
        return [self.counts, self.n, self.max, self.total]

    @classmethod
    def from_state(cls, state: list) -> LogHistogram:
        h = cls()
        counts, h.n, h.max, h.total = state
        h.counts = {int(k): v for k, v in counts.items()}
        return h

    def describe(self) -> dict:
        if not self.n:
            return {}
        out = {f"p{p}": self.quantile(p / 100) for p in PERCENTILES}
        out["max"] = self.max
        out["mean"] = self.total / self.n / 1e6
        return out


def bucket(x: float, _log=math.log, _min=LogHistogram.MIN, _ratio=LogHistogram.LOG_RATIO) -> int:
    """The LogHistogram bucket of ``x`` (-1 below 1 µs)."""
    return -1 if x < _min else int(_log(x / _min) / _ratio)


class Marks:
    """One row's derived values and their histogram buckets, computed once for the three groups it counts in."""

    __slots__ = ("latency", "latency_idx", "late", "late_idx", "response", "response_idx", "end")

    def __init__(self, row: ResultRow) -> None:
        self.latency = row.latency_s
        self.latency_idx = -1 if row.latency_s is None else bucket(row.latency_s)
        self.end = None if row.start_s is None else row.start_s + (row.latency_s or 0.0)
        self.late = self.response = None
        self.late_idx = self.response_idx = -1
        if row.intended_s is not None and row.start_s is not None:
            self.late = max(0.0, row.start_s - row.intended_s)
            self.late_idx = bucket(self.late)
        if row.response_s is not None:
            self.response = row.response_s
            self.response_idx = bucket(row.response_s)


def failures_by_class(counts: dict[str, int]) -> dict[str, int]:
    """Failure counts in drtp.replay.outcome's order, classes that did not occur left out."""
    return {c: counts[c] for c in OUTCOMES if counts.get(c)}


def by_status(counts: dict[str, int]) -> dict[str, int]:
    """Failure counts per HTTP status (keys: the status as text, as JSON needs), in the statuses' order."""
    return {k: counts[k] for k in sorted(counts, key=int)}


def _add_counts(into: dict[str, int], counts: dict[str, int]) -> None:
    for k, c in counts.items():
        into[k] = into.get(k, 0) + c


class Group:
    """Figures of the trace requests of one slice of the run (all, one method+kind, one node)."""

    __slots__ = (
        "requests",
        "succeeded",
        "lost",
        "sent",
        "bytes",
        "matched",
        "on_time",
        "failures",
        "statuses",
        "first",
        "last",
        "last_start",
        "intended",
        "first_intended",
        "last_intended",
        "latency",
        "response",
        "lateness",
    )

    def __init__(self) -> None:
        self.requests = self.succeeded = self.lost = self.sent = self.bytes = self.matched = self.on_time = 0
        self.failures: dict[str, int] = {}
        self.statuses: dict[str, int] = {}  # failed requests per status of their answer ("429"); none without one
        self.first = math.inf
        self.last = -math.inf
        self.last_start = -math.inf  # with ``first`` and ``sent``: the rate requests actually started at
        self.intended = 0  # requests with an intended start, and its span: the rate the run offered
        self.first_intended = math.inf
        self.last_intended = -math.inf
        self.latency = LogHistogram()
        self.response = LogHistogram()
        self.lateness = LogHistogram()

    def add(self, row: ResultRow, m: Marks, on_time_s: float) -> None:
        self.requests += 1
        self.bytes += row.bytes
        self.matched += row.status == row.expected_status
        if row.ok:
            self.succeeded += 1
            if m.latency is not None:
                self.latency.add(m.latency, m.latency_idx)
            if m.response is not None:
                self.response.add(m.response, m.response_idx)
        else:
            self.failures[row.outcome] = self.failures.get(row.outcome, 0) + 1
            self.lost += row.outcome == LOST
            if row.status:
                status = str(row.status)
                self.statuses[status] = self.statuses.get(status, 0) + 1
        if row.intended_s is not None:
            self.intended += 1
            if row.intended_s < self.first_intended:
                self.first_intended = row.intended_s
            if row.intended_s > self.last_intended:
                self.last_intended = row.intended_s
        if row.start_s is None:
            return  # never sent, or its result never came back: no times
        self.sent += 1
        if row.start_s < self.first:
            self.first = row.start_s
        if m.end > self.last:
            self.last = m.end
        if row.start_s > self.last_start:
            self.last_start = row.start_s
        if m.late is not None:
            self.lateness.add(m.late, m.late_idx)
            self.on_time += m.late <= on_time_s

    _COUNTS = ("requests", "succeeded", "lost", "sent", "bytes", "matched", "on_time", "intended")
    _HISTOGRAMS = ("latency", "response", "lateness")

    def state(self) -> dict:
        """The group as plain values, for a node to ship its figures and the master to merge them."""
        out = {k: getattr(self, k) for k in self._COUNTS}
        out["failures"] = self.failures
        out["statuses"] = self.statuses
        out["first"], out["last"] = (self.first, self.last) if self.sent else (None, None)
        out["last_start"] = self.last_start if self.sent else None
        out["intended_span"] = [self.first_intended, self.last_intended] if self.intended else None
        for k in self._HISTOGRAMS:
            out[k] = getattr(self, k).state()
        return out

    def merge(self, state: dict) -> None:
        """Add another group's figures (its :meth:`state`): the same as adding its rows here."""
        for k in self._COUNTS:
            setattr(self, k, getattr(self, k) + state[k])
        _add_counts(self.failures, state["failures"])
        _add_counts(self.statuses, state["statuses"])
        if state["first"] is not None:
            self.first = min(self.first, state["first"])
            self.last = max(self.last, state["last"])
            self.last_start = max(self.last_start, state["last_start"])
        if state["intended_span"] is not None:
            self.first_intended = min(self.first_intended, state["intended_span"][0])
            self.last_intended = max(self.last_intended, state["intended_span"][1])
        for k in self._HISTOGRAMS:
            getattr(self, k).merge(LogHistogram.from_state(state[k]))

    def start_rates(self) -> tuple[float | None, float | None]:
        """(offered, achieved): requests per second by intended start (None without intended starts: closed
        loop), and by actual start; n requests spaced 1/R apart span (n-1)/R seconds, so both count n-1.
        A rate of fewer than two starts, or of starts all at one instant, is no number: None."""
        offered = None
        if self.intended > 1 and self.last_intended > self.first_intended:
            offered = (self.intended - 1) / (self.last_intended - self.first_intended)
        achieved = None
        if self.sent > 1 and self.last_start > self.first:
            achieved = (self.sent - 1) / (self.last_start - self.first)
        return offered, achieved

    def summary(self, timed: bool) -> dict:
        duration = self.last - self.first if self.sent else 0.0
        out = {
            "requests": self.requests,
            "succeeded": self.succeeded,
            "failed": self.requests - self.succeeded,
            "failures": failures_by_class(self.failures),
            "failed_statuses": by_status(self.statuses),
            "lost": self.lost,
            "duration_s": duration,
            "throughput_rps": self.succeeded / duration if duration > 0 else 0.0,
            "bytes": self.bytes,
            "latency_s": self.latency.describe(),
            "status_matched": self.matched / self.requests if self.requests else 0.0,
        }
        if timed:
            out["response_s"] = self.response.describe()
            out["lateness_s"] = self.lateness.describe()
            out["on_time_ratio"] = self.on_time / self.sent if self.sent else 0.0
        return out


class Helpers:
    """The helper (auxiliary) requests: counted apart from the trace's, never among them."""

    __slots__ = ("requests", "failures", "statuses")

    def __init__(self) -> None:
        self.requests = 0
        self.failures: dict[str, int] = {}
        self.statuses: dict[str, int] = {}  # as Group.statuses: a throttled upload open is a helper's 429

    def add(self, row: ResultRow) -> None:
        self.requests += 1
        if not row.ok:
            self.failures[row.outcome] = self.failures.get(row.outcome, 0) + 1
            if row.status:
                status = str(row.status)
                self.statuses[status] = self.statuses.get(status, 0) + 1

    def state(self) -> list:
        return [self.requests, self.failures, self.statuses]

    def merge(self, state: list) -> None:
        requests, failures, statuses = state
        self.requests += requests
        _add_counts(self.failures, failures)
        _add_counts(self.statuses, statuses)

    def summary(self) -> dict:
        return {
            "requests": self.requests,
            "failed": sum(self.failures.values()),
            "failures": failures_by_class(self.failures),
            "failed_statuses": by_status(self.statuses),
        }


class ResultsModel:
    """Every number of a run, kept up to date one row at a time."""

    def __init__(self, timed: bool, on_time_s: float) -> None:
        self.timed = timed  # as-is mode: requests have intended starts
        self.on_time_s = on_time_s  # a request starting at most this late is on time
        self.all = Group()
        self.by_method: dict[str, Group] = {}
        self.by_node: dict[str, Group] = {}
        self.helpers = Helpers()
        self.manifests_above_trace_size = 0

    @property
    def failed(self) -> int:
        """Failed trace requests so far."""
        return self.all.requests - self.all.succeeded

    def add(self, row: ResultRow) -> None:
        if row.auxiliary:
            self.helpers.add(row)
            return
        if row.bytes > row.size and row.method == "PUT" and row.kind == "manifest":
            self.manifests_above_trace_size += 1
        marks = Marks(row)
        on_time_s = self.on_time_s
        self.all.add(row, marks, on_time_s)
        _group(self.by_method, f"{row.method} {row.kind}").add(row, marks, on_time_s)
        _group(self.by_node, row.node).add(row, marks, on_time_s)

    def state(self) -> dict:
        """Every figure as plain values (msgspec encodes them): what a client node ships at the end of its run."""
        return {
            "all": self.all.state(),
            "by_method": {k: g.state() for k, g in self.by_method.items()},
            "by_node": {k: g.state() for k, g in self.by_node.items()},
            "helpers": self.helpers.state(),
            "manifests_above_trace_size": self.manifests_above_trace_size,
        }

    def merge(self, state: dict) -> None:
        """Add the figures of another model over other rows (its :meth:`state`).

        Counts and histogram buckets add up exactly, so the percentiles after merging are those of all
        the rows together; only a mean's last digit may differ (a float sum in another order)."""
        self.all.merge(state["all"])
        for k, g in state["by_method"].items():
            _group(self.by_method, k).merge(g)
        for k, g in state["by_node"].items():
            _group(self.by_node, k).merge(g)
        self.helpers.merge(state["helpers"])
        self.manifests_above_trace_size += state["manifests_above_trace_size"]

    def summary(self, **extra) -> dict:
        """The run's figures; ``extra`` (the run's settings and circumstances) go before the per-slice ones."""
        out = self.all.summary(self.timed)
        if self.timed:
            out["on_time_s"] = self.on_time_s
        offered, out["achieved_rps"] = self.all.start_rates()
        if offered is not None:
            out["offered_rps"] = offered
            out["behind"] = behind(offered, out["achieved_rps"], out.get("lateness_s", {}).get("p99"), self.on_time_s)
        out["auxiliary"] = self.helpers.summary()
        out["manifests_above_trace_size"] = self.manifests_above_trace_size
        out.update(extra)
        out["per_method"] = {k: g.summary(self.timed) for k, g in sorted(self.by_method.items())}
        out["per_node"] = {k: g.summary(self.timed) for k, g in sorted(self.by_node.items())}
        return out


BEHIND_SHARE = 0.95  # a run whose requests started at less than this share of the offered rate fell behind


def behind(offered: float | None, achieved: float | None, late_p99: float | None, on_time_s: float) -> str | None:
    """One line saying how a run with intended starts fell behind them, None when it kept up.

    Behind is when requests started at less than 95 % of the rate the run offered, or the p99 of start
    lateness is over ``on_time_s``: the registry's numbers were then measured under less load than intended.
    """
    why = []
    if offered is not None and achieved is not None and achieved < BEHIND_SHARE * offered:
        why.append(f"requests started at {achieved:.1f}/s, under {BEHIND_SHARE:.0%} of the {offered:.1f}/s offered")
    if late_p99 is not None and late_p99 > on_time_s:
        why.append(f"start lateness p99 {late_p99 * 1000:.1f} ms > on_time_ms {on_time_s * 1000:g}")
    return "fell behind: " + "; ".join(why) if why else None


def replayer_limited_line(summary: dict) -> str | None:
    """One line for a replayer-limited run (summary.json's ``replayer_limited`` and ``replayer.limited``, made by
    drtp.master.outputs.replayer_health): under the console table and in the report's banner.  None for any
    other run."""
    found = (summary.get("replayer") or {}).get("limited")
    if not summary.get("replayer_limited") or not found:
        return None
    return (
        f"replayer-limited: client node {found['node']} was {found['why']}, from {found['from_s']:g} s to "
        f"{found['to_s']:g} s: latencies include the replayer's own queueing (use more client nodes or fewer "
        "threads per node)"
    )


def _group(groups: dict[str, Group], key: str) -> Group:
    """The group for ``key``, made on first use (setdefault would build a Group for every row)."""
    g = groups.get(key)
    if g is None:
        g = groups[key] = Group()
    return g
