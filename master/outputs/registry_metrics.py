"""``registry_metrics.csv`` and the summary's ``registry_side`` block: the registry's own witness of a run.

The master reads each registry's metrics endpoints (drtp.registry.metrics) right before
the run's first request, every stats interval while it goes and right after its last,
and writes every reading to ``registry_metrics.csv`` in long form (``elapsed_s,
registry, metric, labels, value``: one ``pandas.read_csv``).  A reading that fails is a
warning (the first per registry is kept for the summary), never a failed run: the
registry's metrics witness the run, they are not the run.

A resumed run (``--resume``) appends its readings to the file, whose earlier ones stay;
its ``registry_side`` covers the resumed session only (``resumed_session_only``: the
registry's counters are read afresh, and drtp's side counts the rows this session sent),
since the registry may have served anything between the two.

``registry_side`` puts the registry's figures for the window between the first and the
last good reading beside drtp's own for the same slices (handler and method): the
requests drtp sent — trace and helper requests, every attempt, and the extra round trip
of each 401 auth challenge answered by sending the request again (the registry served
and counted that 401 too) — and their mean latency; and both totals (``requests``,
``drtp_requests``).
"""

from __future__ import annotations

import csv
import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from drtp.config import Config, metrics_urls
from drtp.master.outputs.output import RunContext, RunOutput
from drtp.master.outputs.results_dir import write_failed
from drtp.registry.metrics import Reading, ScrapeError, handler_of, labels_text, scrape, window
from drtp.replay.messages import registry_base
from drtp.replay.result_row import ResultRow

log = logging.getLogger(__name__)

METRICS_FILE = "registry_metrics.csv"
COLUMNS = ("elapsed_s", "registry", "metric", "labels", "value")
QUANTILES = (0.5, 0.9, 0.99)


class RegistryMetrics:
    """Reads every registry's endpoints and writes each reading as it comes; ``registry -> [URL, …]``."""

    def __init__(
        self,
        path: Path,
        endpoints: dict[str, list[str]],
        clock: Callable[[], float],
        interval_s: float,
        timeout: float = 5.0,
        resume: bool = False,
    ) -> None:
        """``resume``: a resumed run's readings go after the earlier session's, which are kept."""
        self.path = path
        self.resume = resume
        self.endpoints = endpoints
        self.clock = clock  # seconds since the run's start (requests.csv's start_s origin)
        self.interval_s = interval_s
        self.timeout = timeout
        self.first: dict[str, Reading] = {}
        self.last: dict[str, Reading] = {}
        self.window_s: dict[str, list[float]] = {}  # registry -> [elapsed of first, of last good reading]
        self.warnings: dict[str, str] = {}  # registry -> its first failed reading
        self.lock = threading.Lock()
        self.stop_flag = threading.Event()
        self.thread: threading.Thread | None = None
        self.failure: Exception | None = None  # a bug in a reading: no more readings, stop() raises it to the run
        kept = resume and path.is_file() and path.stat().st_size > 0
        self.file = open(path, "a" if kept else "w", newline="")  # noqa: SIM115 - open for the run's length
        self.writer = csv.writer(self.file)
        if not kept:
            self.writer.writerow(COLUMNS)
        self.file.flush()

    def read_all(self) -> None:
        """One reading of every registry, written at once; after a bug in one, none (:meth:`stop` raises it)."""
        if self.failure is not None:
            return
        try:
            self._read_all()
        except Exception as e:  # noqa: BLE001 - on the reader's thread too: the run goes on, stop() names it
            self.failure = e

    def _read_all(self) -> None:
        for registry, urls in self.endpoints.items():
            elapsed = self.clock()
            try:
                reading = scrape(urls, self.timeout)
            except ScrapeError as e:
                with self.lock:
                    if registry not in self.warnings:
                        self.warnings[registry] = str(e)
                        log.warning("registry metrics of %s not read: %s", registry, e)
                continue
            with self.lock:
                for (name, labels), value in sorted(reading.items()):
                    self.writer.writerow((f"{elapsed:.3f}", registry, name, labels_text(labels), repr(value)))
                self.file.flush()
                self.first.setdefault(registry, reading)
                self.last[registry] = reading
                span = self.window_s.setdefault(registry, [elapsed, elapsed])
                span[1] = elapsed

    def start(self) -> None:
        """The reading before the first request, then one every interval on a thread of its own."""
        self.read_all()
        self.thread = threading.Thread(target=self._every_interval, name="drtp-registry-metrics", daemon=True)
        self.thread.start()

    def _every_interval(self) -> None:
        while not self.stop_flag.wait(self.interval_s):
            self.read_all()

    def stop(self) -> None:
        """The reading after the last request; the file is closed."""
        self.stop_flag.set()
        if self.thread is not None:
            self.thread.join(timeout=self.timeout * max(1, len(self.endpoints)) + 1)
        self.read_all()
        with self.lock:
            self.file.close()
        if self.failure is not None:
            raise self.failure

    def registry_side(self, rows: Iterable[ResultRow], registry_of: Callable[[str], str]) -> dict:
        """The summary's block: per registry, per handler and method, what the registry and drtp counted;
        ``registry_of`` names the registry of a row's repository (a run may spread over several)."""
        mine = drtp_side(rows, registry_of)
        block = {}
        for registry in self.endpoints:
            entry: dict = {"endpoints": len(self.endpoints[registry]), "resumed_session_only": self.resume}
            if registry in self.warnings:
                entry["warning"] = self.warnings[registry]
            own_total = sum(part[0] for part in mine.get(registry, {}).values())
            if registry not in self.first or self.first[registry] is self.last[registry]:
                entry.update(requests=None, drtp_requests=own_total, slices=[])  # no window: nothing to compare
                block[registry] = entry
                continue
            entry["window_s"] = self.window_s[registry]
            seen = window(self.first[registry], self.last[registry])
            # every request the registry completed in the window (its own probes too), and all drtp sent in it
            entry["requests"] = round(sum(part.requests for part in seen.values()))
            entry["drtp_requests"] = own_total
            slices = []
            for handler, method in sorted(set(seen) | set(mine.get(registry, {}))):
                theirs = seen.get((handler, method))
                own = mine.get(registry, {}).get((handler, method), (0, 0.0, 0))
                row: dict = {
                    "handler": handler,
                    "method": method,
                    "registry_requests": round(theirs.requests) if theirs else 0,
                    "registry_mean_ms": theirs.mean_ms() if theirs else None,
                    "drtp_requests": own[0],
                    "drtp_mean_ms": 1000 * own[1] / own[2] if own[2] else None,
                }
                for q in QUANTILES:
                    row[f"registry_p{round(q * 100)}_bucket_ms"] = theirs.quantile_bounds_ms(q) if theirs else None
                slices.append(row)
            entry["slices"] = slices
            block[registry] = entry
        return block


class RegistryMetricsOutput(RunOutput):
    """The registries' metrics as one of the run's outputs: read on a thread of their own from right before the
    first request to right after the last answer, and summary.json's ``registry_side``."""

    name = "registry metrics"

    def __init__(self, run: RunContext, endpoints: dict[str, list[str]]) -> None:
        self.run = run
        self.endpoints = endpoints
        self.recorder: RegistryMetrics | None = None

    @classmethod
    def open(cls, run: RunContext) -> RegistryMetricsOutput | None:
        endpoints = metrics_endpoints(run.cfg)
        return cls(run, endpoints) if endpoints else None  # None: the config names no metrics endpoint

    def start(self) -> None:
        """The file, and the first reading (a bug in it costs its figures, not the run)."""
        run, path = self.run, self.run.out_dir / METRICS_FILE
        try:
            recorder = RegistryMetrics(path, self.endpoints, run.clock, run.interval_s, resume=run.resume)
        except OSError as e:
            raise write_failed(path, e) from None
        self.recorder = recorder
        recorder.start()

    def stop(self) -> None:
        if self.recorder is not None:
            self.recorder.stop()  # its last reading: after the last answer

    def finish(self, summary: dict) -> None:
        """summary.json's registry_side block (this run's rows are read back from requests.csv)."""
        if self.recorder is None:
            return
        results = self.run.results
        try:
            side = self.recorder.registry_side(results.rows(), self.run.registry_of)
        except OSError as e:
            side = {"error": f"could not read back {results.path}: {e}"}
        if side:
            summary["registry_side"] = side


def drtp_side(
    rows: Iterable[ResultRow], registry_of: Callable[[str], str]
) -> dict[str, dict[tuple[str, str], tuple[int, float, int]]]:
    """Per registry, per (handler, method): (sends, sum of latencies in s, rows with a latency).

    A row's sends are its attempts and the 401 challenges answered by sending it again: each reached the
    registry, which counts it under the same handler and method."""
    out: dict[str, dict[tuple[str, str], list]] = {}
    for row in rows:
        if row.attempts < 1:  # never sent (lost, or a helper that failed before it)
            continue
        key = (handler_of(row.method, row.kind, row.reference), row.method)
        part = out.setdefault(registry_of(row.repository), {}).setdefault(key, [0, 0.0, 0])
        part[0] += row.attempts + row.challenges
        if row.latency_s is not None:
            part[1] += row.latency_s
            part[2] += 1
    return {r: {k: (v[0], v[1], v[2]) for k, v in parts.items()} for r, parts in out.items()}


def metrics_endpoints(cfg: Config) -> dict[str, list[str]]:
    """Registry (as ``registry:`` names it) -> its metrics URLs, for the registries that name any: a
    ``registries:`` entry's ``metrics``, else ``registry_metrics``."""
    by_entry = {registry_base(e.url): metrics_urls(e.metrics) for e in cfg.registries}
    by_host = {registry_base(h): metrics_urls(v) for h, v in cfg.registry_metrics.items()}
    out = {}
    for registry in cfg.registry:
        base = registry_base(registry)
        urls = by_entry.get(base) or by_host.get(base)
        if urls:
            out[registry] = urls
    return out
