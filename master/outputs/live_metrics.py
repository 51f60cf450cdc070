"""Live metrics: the run's figures in the Prometheus text format while it goes (``--metrics-port``).

People watch load tests in Grafana: this exporter lets Prometheus scrape a run,
an experiment or a ramp as it happens.  It counts nothing itself: the client
nodes count each frame's trace requests into :class:`~drtp.replay.frames.LivePart`\\ s
(only when the run spec asks, ``RunSpec.live``), and the master adds those parts
here, a few per frame, never a row.  Prometheus-client serves them: a collector
of our own turns the sums into metric families at each scrape, and its own
HTTP server answers on a thread.

What it serves (one exporter for every registry of an experiment and every step
of a ramp; the ``registry`` label tells them apart):

* ``drtp_requests_total{registry,method,kind,outcome}`` — trace requests ended, by outcome class (those lost
  with a client node that died are counted by the master, as a node would count them: outcome ``lost``);
* ``drtp_request_duration_seconds{registry,method,kind}`` — a histogram (bounds
  ``LIVE_BUCKETS_S``, from 0.1 ms) of the latency (``latency_s``) of the requests that
  succeeded, as summary.json's latency counts only those;
* ``drtp_in_flight`` — the master's trace requests out at the nodes;
* ``drtp_offered_rps`` — the rate offered, only in rate mode (and each ramp step's);
* ``drtp_node_cpu_ratio{node}``, ``drtp_node_lag_seconds{node}`` — each node's newest
  :class:`~drtp.replay.frames.HealthPart`; ``drtp_master_cpu_ratio`` — the master's own CPU;
  these gauges are the current run's: each run of the command starts them afresh (:meth:`LiveMetrics.new_run`).

The endpoint is read-only and carries no secret: labels are registry base URLs (the
config refuses a user or password in them), node addresses, methods, kinds and
outcome classes.  It binds 127.0.0.1 unless told otherwise.

A run can end between two scrapes, and the exporter ends with the command: the
last frames would then never reach Prometheus.  So at the end the exporter waits
for one scrape that sees the final values, for at most ``linger`` seconds
(``DEFAULT_LINGER_S``: 15 s, the scrape interval of Prometheus's example config;
0: no wait), and only when it counted something; Ctrl-C ends the wait.  The
wait ends once a page with the final values has been written to a scraper, not
when its collection began; stop() then gives scrapes still being answered a
short, bounded join.
"""

from __future__ import annotations

import contextlib
import math
import socket
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.utils import floatToGoString

from drtp.master.outputs.output import RunContext, RunOutput
from drtp.master.outputs.replayer_health import ReplayerHealthOutput
from drtp.replay.frames import LIVE_BUCKETS_S, HealthPart, LivePart, LiveTally, ResultFrame
from drtp.replay.messages import ReplayRequest, registry_base
from drtp.replay.outcome import OK
from drtp.replay.result_row import ResultRow

DEFAULT_HOST = "127.0.0.1"
DEFAULT_LINGER_S = 15.0
MAX_LINGER_S = 3600.0  # a longer wait is a mistake (the config key has the same bound)
WILDCARD_HOSTS = ("0.0.0.0", "::", "")  # listen on every address of the machine
STOP_JOIN_S = 2.0  # at stop: how long scrapes still being answered get to finish, in all
BUCKET_BOUNDS = [floatToGoString(b) for b in LIVE_BUCKETS_S] + ["+Inf"]  # the ``le`` labels, in order


@dataclass(frozen=True)
class LiveSettings:
    """Where to serve live metrics (from ``--metrics-port``/``--metrics-host`` or the ``live_metrics`` key)."""

    port: int
    host: str = DEFAULT_HOST
    linger_s: float = DEFAULT_LINGER_S  # at the end: wait this long at most for a scrape of the final values

    @property
    def url(self) -> str:
        """Where to scrape: listening on every address (0.0.0.0, ::), the machine's name (a Slurm job's node)."""
        host = socket.gethostname() if self.host in WILDCARD_HOSTS else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/metrics"


class _Histogram:
    """One (registry, method, kind)'s latency buckets (not cumulative) and sum, of the requests that succeeded."""

    __slots__ = ("buckets", "sum_s")

    def __init__(self) -> None:
        self.buckets = [0] * (len(LIVE_BUCKETS_S) + 1)
        self.sum_s = 0.0


class LiveMetrics:
    """The sums of the parts the frames brought, served to Prometheus from :meth:`start` to :meth:`stop`.

    The master's dispatch thread adds; the HTTP server's threads read at each scrape: one lock between them,
    taken once per call (a frame's parts together), never per request.
    """

    def __init__(self, settings: LiveSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str, str, str], int] = {}
        self._latency: dict[tuple[str, str, str], _Histogram] = {}
        self._nodes: dict[str, HealthPart] = {}  # each node's newest (highest interval index) part of this run
        self._master_cpu: float | None = None
        self._in_flight = 0
        self._offered: float | None = None
        self._final = False  # the run is over: the values are the final ones
        self._final_scraped = threading.Event()  # a scrape's page with the final values was delivered
        self._scrape = threading.local()  # per handler thread: whether the page it serves holds the final values
        self._handlers: set[threading.Thread] = set()  # handler threads answering a scrape now
        self._server = None
        self._thread: threading.Thread | None = None
        self._announced = False
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))

    # -- the server ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Listen; OSError (the port is taken, the host is not this machine's) or ValueError when it cannot."""
        s = self.settings
        try:
            self._server = _server(s.host, s.port, make_wsgi_app(self.registry), self._handler_class())
        except socket.gaierror as e:
            raise OSError(f"cannot resolve host {s.host!r}: {e.strerror or e}") from None
        except OverflowError as e:  # a port out of range (the options and the config bound it before)
            raise ValueError(str(e)) from None
        self._thread = threading.Thread(target=self._server.serve_forever, name="drtp-live-metrics", daemon=True)
        self._thread.start()

    def _handler_class(self) -> type[WSGIRequestHandler]:
        """The request handler: quiet, and it marks the final values scraped only once their page was written
        (a wait that ended when collection began could end the command before Prometheus got the page)."""
        live = self

        class Handler(WSGIRequestHandler):
            def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
                pass  # a scrape is no news: stderr stays for the run's progress

            def handle(self) -> None:
                me = threading.current_thread()
                live._handlers.add(me)
                live._scrape.final = False
                try:
                    super().handle()  # the whole answer is written when it returns
                    if live._scrape.final:
                        live._final_scraped.set()
                finally:
                    live._handlers.discard(me)

        return Handler

    def announce(self) -> None:
        """Say where the metrics are, once, when the first run starts its requests: on stderr beside the progress
        lines, so a batch job's log has it too (a command refused before that prints only its refusal)."""
        if not self._announced:
            self._announced = True
            print(f"drtp: live metrics at {self.settings.url}", file=sys.stderr, flush=True)

    def finish(self) -> bool:
        """The run is over: wait (at most ``linger_s``) until a scrape read the final values; whether one did.

        Nothing counted: no wait (a run refused before its first request has nothing to show)."""
        with self._lock:
            self._final = True
            self._in_flight = 0
            counted = bool(self._requests)
        if not counted or self.settings.linger_s <= 0:
            return False
        return self._final_scraped.wait(self.settings.linger_s)

    def stop(self) -> None:
        """Stop listening; scrapes still being answered get ``STOP_JOIN_S`` in all to finish."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None
            deadline = time.monotonic() + STOP_JOIN_S
            for handler in list(self._handlers):
                handler.join(timeout=max(0.0, deadline - time.monotonic()))

    # -- what the run tells -------------------------------------------------------------------------

    def add_parts(self, parts: list[LivePart]) -> None:
        """A frame's parts: its trace requests per registry, method, kind and outcome."""
        if not parts:
            return
        with self._lock:
            requests, latency = self._requests, self._latency
            for p in parts:
                key = (p.registry, p.method, p.kind, p.outcome)
                requests[key] = requests.get(key, 0) + p.count
                h_key = key[:3]
                h = latency.get(h_key)
                if h is None:
                    h = latency[h_key] = _Histogram()
                if p.outcome == OK and len(p.buckets) == len(h.buckets):  # else a node of other bounds: counted only
                    held = h.buckets
                    for i, n in enumerate(p.buckets):
                        if n:  # a frame's requests fill few buckets
                            held[i] += n
                    h.sum_s += p.sum_s

    def new_run(self) -> None:
        """A run of the command starts (an experiment's registries, a ramp's steps, repetitions): the gauges of
        the run before are not this one's, and its interval indices start again at 0."""
        with self._lock:
            self._nodes = {}
            self._master_cpu = None

    def health(self, node: str, part: HealthPart) -> None:
        """A node's load in one interval; the gauges show each node's newest interval of this run."""
        with self._lock:
            held = self._nodes.get(node)
            if held is None or part.index >= held.index:
                self._nodes[node] = part

    def master_cpu(self, share: float) -> None:
        """The master process's CPU in the latest interval, share of one core."""
        self._master_cpu = share

    def in_flight(self, n: int) -> None:
        """The master's trace requests out at the nodes (set once per drain of their results)."""
        self._in_flight = n

    def offered_rps(self, rate: float | None) -> None:
        """The rate the run offers (rate mode, a ramp's step); None: no offered rate, no gauge."""
        self._offered = rate

    # -- what a scrape reads ------------------------------------------------------------------------

    def families(self) -> Iterator[Metric]:
        """The metric families of the values now (one consistent snapshot)."""
        with self._lock:
            requests = dict(self._requests)
            latency = {k: (list(h.buckets), h.sum_s) for k, h in self._latency.items()}
            nodes = dict(self._nodes)
            master_cpu, in_flight, offered = self._master_cpu, self._in_flight, self._offered
            if self._final:
                self._scrape.final = True  # set delivered by the handler once the page is written
        total = CounterMetricFamily(
            "drtp_requests",
            "Trace requests drtp's client nodes ended, by registry, method, kind and outcome class (ok: succeeded)",
            labels=["registry", "method", "kind", "outcome"],
        )
        for key, n in sorted(requests.items()):
            total.add_metric(list(key), n)
        yield total
        duration = HistogramMetricFamily(
            "drtp_request_duration_seconds",
            "Latency of the trace requests that succeeded, from the start of sending to the end of the answer",
            labels=["registry", "method", "kind"],
        )
        for key, (buckets, sum_s) in sorted(latency.items()):
            duration.add_metric(list(key), list(zip(BUCKET_BOUNDS, _cumulative(buckets), strict=True)), sum_s)
        yield duration
        yield GaugeMetricFamily("drtp_in_flight", "Trace requests the master has out at the client nodes", in_flight)
        if offered is not None:
            yield GaugeMetricFamily("drtp_offered_rps", "Requests per second the run offers (rate mode)", offered)
        if nodes:
            cpu = GaugeMetricFamily(
                "drtp_node_cpu_ratio", "A client node's CPU in its newest interval, share of one core", labels=["node"]
            )
            lag = GaugeMetricFamily(
                "drtp_node_lag_seconds",
                "p99 of how late a client node's engine handled what was due, in its newest interval",
                labels=["node"],
            )
            for node, part in sorted(nodes.items()):
                cpu.add_metric([node], part.cpu)
                lag.add_metric([node], part.lag_ms / 1000)
            yield cpu
            yield lag
        if master_cpu is not None and math.isfinite(master_cpu):
            yield GaugeMetricFamily("drtp_master_cpu_ratio", "The master process's CPU, share of one core", master_cpu)


def _server(host: str, port: int, app, handler: type[WSGIRequestHandler]) -> ThreadingWSGIServer:
    """A thread-per-scrape WSGI server on ``host``:``port`` of the address family the host resolves to."""
    family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    class Server(ThreadingWSGIServer):
        address_family = family

    return make_server(host, port, app, Server, handler_class=handler)


def _cumulative(buckets: Iterable[int]) -> list[int]:
    out, n = [], 0
    for b in buckets:
        n += b
        out.append(n)
    return out


class _Collector:
    """Prometheus-client's view of :class:`LiveMetrics`: the families of the values at each scrape."""

    def __init__(self, live: LiveMetrics) -> None:
        self.live = live

    def collect(self) -> Iterator[Metric]:
        return self.live.families()


@contextlib.contextmanager
def exporting(live: LiveMetrics | None) -> Iterator[LiveMetrics | None]:
    """Serve ``live`` (already listening) for a command's runs; at the end, unless interrupted, wait for a scrape
    of the final values (:meth:`LiveMetrics.finish`), then stop.  A run that failed still shows what it did."""
    if live is None:
        yield None
        return
    interrupted = False
    try:
        yield live
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        try:
            if not interrupted:
                live.finish()
        finally:
            live.stop()


class LiveMetricsOutput(RunOutput):
    """Live metrics as one of a run's outputs: the exporter outlives the run (the command started it, handed it
    in and stops it after its last run: :func:`exporting`); each run starts its gauges afresh, adds its frames'
    live parts, counts the requests lost with a node as a node would, and shows its requests in flight and the
    load the replayer's health reports."""

    name = "live metrics"

    def __init__(self, live: LiveMetrics, rate: float | None) -> None:
        self.live = live
        self.rate = rate

    @classmethod
    def open(cls, run: RunContext) -> LiveMetricsOutput | None:
        live = run.live
        if live is None:
            return None
        replayer = run.output(ReplayerHealthOutput)
        if replayer is not None:  # the nodes' and the master's load gauges, as the health parts come
            replayer.health.on_health.append(live.health)
            replayer.health.on_master_cpu.append(live.master_cpu)
        return cls(live, run.cfg.client_info.rate)

    def start(self) -> None:
        live = self.live
        live.new_run()
        live.offered_rps(self.rate)
        live.announce()

    def frame(self, node: str, frame: ResultFrame) -> None:
        self.live.add_parts(frame.live)

    def lost(self, node: str, req: ReplayRequest, rows: list[ResultRow]) -> None:
        tally = LiveTally()  # no node counts a request lost with it: the master does, as a node would
        for row in rows:
            if not row.auxiliary:
                tally.add(registry_base(req.registry), row)
        self.live.add_parts(tally.parts())

    def tick(self, in_flight: int | None) -> None:
        if in_flight is not None:
            self.live.in_flight(in_flight)
