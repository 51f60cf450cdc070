"""Property tests of the master's merging outputs, fed as a run feeds them: late, out of order, split, dying.

Hypothesis draws a run: client nodes with finished requests (trace rows, helper rows, failures, 429s), cut
into result frames that the real node code builds (drtp.replay.frames ``FrameBuilder``) and sends as a byte
stream cut anywhere, health parts per interval in any of a node's frames, the master's CPU per interval, the
master's clock moving on between frames by any amount (so a node's interval part often arrives after its
row of stats_history.csv was written), the nodes' frames interleaved in any order, a node that dies (its
requests not yet reported are written lost, as the master does) and a run interrupted (no node model
merged).  The master's side is the real one: every output of master.outputs.run_outputs ``OUTPUTS``, opened
and fed through their interface (master.outputs.output ``RunOutput``) as master/run/replay.py feeds them: a
new output gets the same run, and must take it without a bug (the first property).

Each other test checks one output against what was fed:

* stats_history.csv — its counts sum to requests.csv's trace rows; a row is in its own interval, or, when
  it came after that interval's row was written, in the oldest interval not yet written (by design:
  docs/replay.md), and summary.json's ``stats_history_late`` counts exactly those; percentiles per
  interval are those of the rows it holds; every gauge is in its interval's row or counted late, none lost,
  none twice;
* summary.json's replayer block — every node's parts and the master's CPU, late ones too;
* live metrics — the request counters and latency histograms are requests.csv's, the gauges the newest
  interval fed;
* summary.json — its figures are those drtp analyze results computes from requests.csv, and requests.csv
  holds every request once (reported, or lost with its node);
* the original trace player's results file and summary.json's ``registry_side`` — requests.csv's trace
  requests, and the sends drtp made, per registry.
"""

from __future__ import annotations

import bisect
import csv
import io
import json
import math
import tempfile
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drtp.config import config_from_dict
from drtp.master.outputs.live_metrics import BUCKET_BOUNDS, LiveMetrics, LiveSettings
from drtp.master.outputs.output import RunContext
from drtp.master.outputs.replayer_health import ReplayerHealthOutput, judged
from drtp.master.outputs.results import RunResults
from drtp.master.outputs.run_outputs import OUTPUTS, RunOutputs
from drtp.master.outputs.upstream import UpstreamOutput
from drtp.master.run.internal_errors import InternalErrors
from drtp.replay.frames import LIVE_BUCKETS_S, FrameBuilder, FrameReader, HealthPart, ResultFrame
from drtp.replay.messages import AuxResult, ReplayRequest, ReplayResult, RunSpec, registry_base
from drtp.replay.outcome import LOST, OK
from drtp.replay.result_row import ResultRow, parse_cells, rows_of
from drtp.replay.stats_file import STATS_COLUMNS, STATS_FILE
from drtp.replay.summary import LogHistogram, ResultsModel

PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REGISTRIES = {"a/app": "127.0.0.1:5000", "b/app": "127.0.0.1:5001"}  # repository -> its registry
KINDS = [("GET", "blob", "get"), ("GET", "manifest", "get"), ("HEAD", "blob", "get"), ("PUT", "manifest",
         "manifest-put")]  # fmt: skip
MAX_END_S = 8.0  # requests end within this many seconds of the run's start
ON_TIME_S = 0.01


# -- the run Hypothesis draws ----------------------------------------------------------------------------------


@dataclass
class NodeScript:
    name: str
    finished: list[tuple[ReplayRequest, ReplayResult]]
    cuts: list[int]  # the finished requests are sent in frames cut at these positions
    health: dict[int, list[HealthPart]]  # frame number -> the health parts sent with it (the last frame too)
    dies_before: int | None  # the frame number from which nothing arrives (None: the node lives)


@dataclass
class Run:
    interval_s: float
    timed: bool
    interrupted: bool
    nodes: list[NodeScript]
    master_cpu: list[tuple[float, float]]  # per interval from 0 on: (share, wall_s)
    order: list[str]  # which node's next frame (or "master": the master's next CPU reading) comes next
    waits: list[float]  # how far the master's clock moves on before each of them
    close_wait: float


def _ms(lo: float, hi: float) -> st.SearchStrategy[float]:
    """Seconds on a millisecond grid (requests.csv keeps microseconds: no rounding in the way)."""
    return st.integers(round(lo * 1000), round(hi * 1000)).map(lambda ms: ms / 1000)


@st.composite
def finished_request(draw, seq: int, timed: bool) -> tuple[ReplayRequest, ReplayResult]:
    method, kind, op = draw(st.sampled_from(KINDS))
    repository = draw(st.sampled_from(sorted(REGISTRIES)))
    start = draw(_ms(0.0, MAX_END_S - 2.0))
    latency = draw(_ms(0.001, 2.0))
    outcome = draw(st.sampled_from([OK, OK, OK, "http", "timeout", "reset"]))
    status = 200 if outcome == OK else draw(st.sampled_from([429, 503])) if outcome == "http" else 0
    aux = []
    if draw(st.booleans()):  # a helper request with it: in requests.csv, never in the trace's figures
        aux.append(AuxResult("DELETE", "upload cancel", draw(st.sampled_from([204, 429])), start + latency, 0.002, 0))
    at = max(0.0, start - draw(_ms(0.0, 0.05))) if timed else None
    req = ReplayRequest(seq, f"t{seq}", f"client{seq % 3}", method, kind, op, REGISTRIES[repository], repository,
                        f"ref{seq}", 100, 200, at=at)  # fmt: skip
    res = ReplayResult(seq, status, outcome == OK, start, latency, bytes=draw(st.integers(0, 5000)),
                       outcome=outcome, error="" if outcome == OK else f"HTTP {status}" if status else outcome,
                       aux=aux)  # fmt: skip
    return req, res


@st.composite
def health_part(draw, index: int, interval_s: float) -> HealthPart:
    wall = draw(st.sampled_from([0.0, interval_s, interval_s / 10]))  # a short one: the run's tail, not judged
    return HealthPart(index, draw(_ms(0.0, 1.2)), draw(_ms(0.0, 40.0)), draw(st.integers(0, 16)), wall)


@st.composite
def runs(draw) -> Run:
    interval_s = draw(st.sampled_from([0.25, 0.5, 1.0]))
    timed = draw(st.booleans())
    last_index = math.ceil(MAX_END_S / interval_s) + 2  # a node's clock may be a little ahead of the master's
    seq = 0
    nodes = []
    for n in range(draw(st.integers(1, 3))):
        finished = []
        for _ in range(draw(st.integers(0, 20))):
            finished.append(draw(finished_request(seq, timed)))
            seq += 1
        cuts = sorted(draw(st.sets(st.integers(0, len(finished)), max_size=5)))  # a frame may hold no result
        frames = len(cuts) + 2  # the frames of results, then the last one (the node's model)
        health: dict[int, list[HealthPart]] = defaultdict(list)
        for index in sorted(draw(st.sets(st.integers(0, last_index), max_size=8))):  # each interval once
            health[draw(st.integers(0, frames - 1))].append(draw(health_part(index, interval_s)))
        dies = draw(st.none() | st.integers(0, frames - 1))
        nodes.append(NodeScript(f"10.0.0.{n + 1}:8081", finished, cuts, dict(health), dies))
    master_cpu = draw(st.lists(st.tuples(_ms(0.0, 1.0), st.sampled_from([interval_s, interval_s / 10])), max_size=6))
    tokens = [node.name for node in nodes for _ in range(len(node.cuts) + 2)] + ["master"] * len(master_cpu)
    order = draw(st.permutations(tokens))
    waits = draw(st.lists(_ms(0.0, 2.5), min_size=len(order), max_size=len(order)))
    return Run(interval_s, timed, draw(st.booleans()), nodes, master_cpu, order, waits, draw(_ms(0.0, 2.0)))


# -- the master's side, driven as master/run/replay.py drives it ------------------------------------------------------

START_EPOCH = 1.7e9
METRICS_PAGE = b"""# TYPE registry_http_requests_total counter
registry_http_requests_total{code="200",handler="blob",method="get"} 7
"""


class _MetricsPage(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(METRICS_PAGE)))
        self.end_headers()
        self.wfile.write(METRICS_PAGE)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass


@cache
def metrics_url() -> str:
    """A registry's metrics page (what the registry metrics output reads on its own thread)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _MetricsPage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}/metrics"


def every_output_config():
    """A config for which every output of the list opens but the upstream's: trace.output set, a metrics endpoint
    named, an event (never due: its runner's thread waits the whole run and starts nothing)."""
    registries = sorted(set(REGISTRIES.values()))
    data = {
        "trace": {"location": ".", "traces": ["t.json"], "output": "original.json"},
        "registry": registries,
        "client_info": {"on_time_ms": ON_TIME_S * 1000},
        "registry_metrics": {registries[0]: metrics_url()},
        "events": [{"name": "never", "after": 10**9, "run": ["true"]}],
    }
    return config_from_dict(data, source="c.yaml")


class DrawnSampler:
    """The master's CPU sampler's place in the replayer's health: its readings are the ones Hypothesis drew,
    handed to ReplayerHealth.master as the sampler's thread hands them."""

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Fed:
    """What reached the master, each with how many rows stats_history.csv had when it came."""

    rows: list[tuple[int, ResultRow]] = field(default_factory=list)  # (rows written, a row of a node's frame)
    lost: list[int] = field(default_factory=list)  # rows written when each lost request was recorded
    health: list[tuple[int, str, HealthPart]] = field(default_factory=list)  # (rows written, node, part)
    master_cpu: list[tuple[int, int, float, float]] = field(default_factory=list)  # (rows written, index, share, wall)
    requests: Counter = field(default_factory=Counter)  # trace requests reported or lost, per node


@dataclass
class Outputs:
    """What the run wrote (read back before its directory goes), what it was fed, and its live metrics."""

    summary: dict  # summary.json
    history: list[dict]  # stats_history.csv's rows
    requests: list[ResultRow]  # requests.csv's rows
    live: LiveMetrics
    fed: Fed
    closed_at: float  # the master's clock when the run closed
    opened: list[str]  # the outputs the run had, by name
    errors: dict[str, str]  # the bugs the outputs met, by output
    original: list[dict]  # the original trace player's results file


def node_frames(node: NodeScript, interval_s: float, timed: bool) -> list[ResultFrame]:
    """The node's stream as the master's reader decodes it: the frames built by the node's own code, the bytes
    arriving in pieces that cut frames anywhere."""
    builder = FrameBuilder(RunSpec("r", 0.0, node=node.name, timed=timed, on_time_s=ON_TIME_S,
                                   stats_interval_s=interval_s, live=True))  # fmt: skip
    bounds = [0, *node.cuts, len(node.finished)]
    stream = bytearray()
    for i in range(len(bounds) - 1):
        stream += builder.frame(node.finished[bounds[i] : bounds[i + 1]], node.health.get(i, []))
    stream += builder.last(node.health.get(len(bounds) - 1, []))
    reader, frames = FrameReader(), []
    for at in range(0, len(stream), 613):
        frames += reader.feed(bytes(stream[at : at + 613]))
    assert reader.pending == 0 and len(frames) == len(bounds)  # a frame with nothing in it is still sent
    return frames


def written(out: Path) -> int:
    """How many interval rows stats_history.csv holds now (it is flushed after each write)."""
    with open(out / STATS_FILE, newline="") as f:
        return sum(1 for _ in f) - 1


def replay(run: Run, out: Path) -> Outputs:
    clock = Clock()
    iv = run.interval_s
    live = LiveMetrics(LiveSettings(port=0))  # never listening: the test reads its families
    context = RunContext(every_output_config(), out, run.timed, False, True, iv, clock, REGISTRIES.__getitem__,
                         live=live, start_epoch=START_EPOCH)  # fmt: skip
    # every output of the list that the run has (OUTPUTS), requests.csv's results first
    outputs = RunOutputs(context, lambda: RunResults(out, run.timed, ON_TIME_S, False))
    results = context.results
    health = context.output(ReplayerHealthOutput)
    health.sampler = DrawnSampler()
    broken = InternalErrors(out)
    outputs.start(broken)
    streams = {node.name: node_frames(node, iv, run.timed) for node in run.nodes}
    scripts = {node.name: node for node in run.nodes}
    sent = {node.name: 0 for node in run.nodes}  # frames each node sent so far
    dead: set[str] = set()
    fed = Fed()
    cpu_index = 0
    total = sum(len(node.finished) for node in run.nodes)
    for who, wait in zip(run.order, run.waits, strict=True):
        clock.now += wait
        w = written(out)
        if who == "master":
            share, wall = run.master_cpu[cpu_index]
            health.health.master(cpu_index, share, wall)
            fed.master_cpu.append((w, cpu_index, share, wall))
            cpu_index += 1
        elif who not in dead:
            number = sent[who]
            sent[who] += 1
            node = scripts[who]
            if number == node.dies_before:  # the stream ends here: what it had not reported is lost
                dead.add(who)
                reported = [0, *node.cuts, len(node.finished)][number]  # before the last frame: all of them
                for req, _ in node.finished[reported:]:
                    outputs.lost(who, req, list(rows_of(who, req, None, f"client node {who} died")))
                    fed.lost.append(w)
                    fed.requests[who] += 1
            else:
                frame = streams[who][number]
                outputs.frame(who, frame)
                fed.rows += [(w, parse_cells(v)) for v in csv.reader(io.StringIO(frame.rows.decode()))]
                fed.health += [(w, who, part) for part in frame.health]
                fed.requests[who] += len(frame.done)
        outputs.tick(total - sum(fed.requests.values()))  # after each drain of the nodes' events
    clock.now += run.close_wait
    outputs.stop(broken)
    whole = set() if run.interrupted else {name for name in streams if name not in dead}
    results.settle(list(streams), whole)
    # as the run closes its outputs: each adds its block in the list's order (the history's last grouping
    # first, then the replayer block, which counts every gauge that grouping dropped as late)
    extra: dict = {}
    not_written = outputs.finish(extra, broken)
    assert not not_written
    summary = results.close(**extra)
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))
    with open(out / STATS_FILE, newline="") as f:
        history_rows = list(csv.DictReader(f))
    original = json.loads((out / "original.json").read_text())
    opened = [o.name for o in outputs.all]
    return Outputs(summary, history_rows, read_requests(out), live, fed, clock.now, opened, dict(broken.errors),
                   original)  # fmt: skip


def replayed(run: Run) -> Outputs:
    with tempfile.TemporaryDirectory() as tmp:
        return replay(run, Path(tmp))


def read_requests(out: Path) -> list[ResultRow]:
    with open(out / "requests.csv", newline="") as f:
        lines = csv.reader(f)
        next(lines)
        return [parse_cells(values) for values in lines]


def _f3(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


# -- the properties ----------------------------------------------------------------------------------------------


@PROPERTY
@given(runs())
def test_every_output_of_the_list_takes_the_run_without_a_bug(run):
    o = replayed(run)
    # each output opened, so each was fed; but the upstream's, which classes requests.csv's rows from a cache's
    # access log and rewrites the file (its own tests feed it real logs: test_upstream_output, test_caches_e2e)
    assert o.opened == ["results", *(kind.name for kind in OUTPUTS if kind is not UpstreamOutput)]
    assert o.errors == {}  # none met a bug: late, out of order, split or dying, every part had its place


@PROPERTY
@given(runs())
def test_stats_history_counts_every_row_once_in_its_interval_or_the_oldest_open_one(run):
    o = replayed(run)
    iv = run.interval_s
    history = o.history
    assert history and list(history[0]) == list(STATS_COLUMNS)
    trace_rows = [r for r in o.requests if not r.auxiliary]
    # the totals requests.csv has
    assert sum(int(h["requests"]) for h in history) == len(trace_rows)
    assert sum(int(h["failures"]) for h in history) == sum(not r.ok for r in trace_rows)
    assert sum(int(h["throttled"]) for h in history) == sum(not r.ok and r.status == 429 for r in trace_rows)
    assert sum(int(h["bytes"]) for h in history) == sum(r.bytes for r in trace_rows)
    # each reported row in its own interval, or, come after that interval's row was written, in the oldest
    # open one; the lost rows in one written after the master learned of them
    expected: dict[int, Counter] = defaultdict(Counter)
    latencies: dict[int, LogHistogram] = defaultdict(LogHistogram)
    late = 0
    for w, row in o.fed.rows:
        if row.auxiliary:
            continue
        own = math.floor((row.start_s + row.latency_s) / iv)
        at = max(own, w)
        late += own < w
        expected[at].update(requests=1, failures=not row.ok, throttled=not row.ok and row.status == 429,
                            bytes=row.bytes)  # fmt: skip
        if row.ok:
            latencies[at].add(row.latency_s)
    lost_in = []
    for k, h in enumerate(history):
        lost = int(h["requests"]) - expected[k]["requests"]
        assert lost >= 0 and int(h["failures"]) - expected[k]["failures"] == lost, (k, h)
        assert int(h["bytes"]) == expected[k]["bytes"] and int(h["throttled"]) == expected[k]["throttled"], (k, h)
        lost_in.append(lost)
        lat = latencies[k]
        assert (h["p50_ms"], h["p99_ms"]) == ((_f3(lat.quantile(0.5) * 1000), _f3(lat.quantile(0.99) * 1000))
                                              if lat.n else ("", ""))  # fmt: skip
    assert sum(lost_in) == len(o.fed.lost) == sum(r.outcome == LOST for r in trace_rows)
    for k in range(len(history)):  # none counted in an interval already written when its node was given up on
        assert sum(lost_in[: k + 1]) <= sum(w <= k for w in o.fed.lost)
    assert all(not expected[k] for k in expected if k >= len(history))  # no reported row beyond the last interval
    assert o.summary["stats_history_late"] == late
    # gauges: the largest of those fed for the interval before its row was written; the others counted late
    gauges: dict[int, dict[str, float]] = defaultdict(dict)
    late_gauges = 0

    def gauge(w: int, index: int, name: str, value: float) -> None:
        nonlocal late_gauges
        if index < w:
            late_gauges += 1
        else:
            assert index < len(history), f"{name} of interval {index} lost: the file ends at {len(history)}"
            gauges[index][name] = max(value, gauges[index].get(name, -math.inf))

    for w, _, part in o.fed.health:
        gauge(w, part.index, "node_cpu_max", part.cpu)
        gauge(w, part.index, "loop_lag_ms_max", part.lag_ms)
    for w, index, share, _ in o.fed.master_cpu:
        gauge(w, index, "master_cpu", share)
    for k, h in enumerate(history):
        assert {g: h[g] for g in ("node_cpu_max", "loop_lag_ms_max", "master_cpu")} == {
            g: _f3(gauges[k].get(g)) for g in ("node_cpu_max", "loop_lag_ms_max", "master_cpu")
        }, k
    assert o.summary["replayer"]["late_gauges"] == late_gauges
    # the intervals are the run's, one after the other; the last ends when the run closed
    assert [float(h["elapsed_s"]) for h in history[:-1]] == [round((k + 1) * iv, 3) for k in range(len(history) - 1)]
    assert float(history[-1]["elapsed_s"]) >= min(o.closed_at, len(history) * iv) - 1e-3


@PROPERTY
@given(runs())
def test_the_replayer_block_keeps_every_health_part_and_master_reading_late_or_not(run):
    o = replayed(run)
    iv = run.interval_s
    block = o.summary["replayer"]
    parts: dict[str, list[HealthPart]] = defaultdict(list)
    for _, node, part in o.fed.health:
        if judged(part.wall_s, iv):
            parts[node].append(part)
    assert set(block["nodes"]) == set(parts)
    for node, mine in parts.items():
        figures = block["nodes"][node]
        assert figures["intervals"] == len(mine) == len({p.index for p in mine})
        assert figures["cpu_max"] == round(max(p.cpu for p in mine), 3)
        assert figures["lag_ms_max"] == round(max(p.lag_ms for p in mine), 3)
        assert figures["in_flight_max"] == max(p.in_flight for p in mine)
    shares = [share for _, _, share, wall in o.fed.master_cpu if judged(wall, iv)]
    assert block["master"]["cpu_max"] == (round(max(shares), 3) if shares else None)
    late = sum(2 * (part.index < w) for w, _, part in o.fed.health)
    late += sum(index < w for w, index, _, _ in o.fed.master_cpu)
    assert block["late_gauges"] == late
    assert o.summary["replayer_limited"] is (block["limited"] is not None)


def _samples(live: LiveMetrics) -> dict[str, dict[tuple, float]]:
    out: dict[str, dict[tuple, float]] = defaultdict(dict)
    for family in live.families():
        for s in family.samples:
            out[s.name][tuple(sorted(s.labels.items()))] = s.value
    return out


@PROPERTY
@given(runs())
def test_live_metrics_count_what_requests_csv_holds_and_show_each_nodes_newest_interval(run):
    o = replayed(run)
    samples = _samples(o.live)
    counts: Counter = Counter()
    buckets: dict[tuple, list[int]] = {}
    sums: Counter = Counter()
    for row in o.requests:
        if row.auxiliary:
            continue
        registry = registry_base(REGISTRIES[row.repository])
        counts[(("kind", row.kind), ("method", row.method), ("outcome", row.outcome), ("registry", registry))] += 1
        key = (("kind", row.kind), ("method", row.method), ("registry", registry))
        per_bucket = buckets.setdefault(key, [0] * (len(LIVE_BUCKETS_S) + 1))  # a failure alone shows zeros
        if row.ok:
            per_bucket[bisect.bisect_left(LIVE_BUCKETS_S, row.latency_s)] += 1  # the first bound >= it: ``le``
            sums[key] += row.latency_s
    assert samples.get("drtp_requests_total", {}) == counts
    expected_buckets = {}
    for key, per_bucket in buckets.items():
        cumulative = 0
        for le, n in zip(BUCKET_BOUNDS, per_bucket, strict=True):
            cumulative += n
            expected_buckets[tuple(sorted((*key, ("le", le))))] = cumulative
    assert samples.get("drtp_request_duration_seconds_bucket", {}) == expected_buckets
    assert set(samples.get("drtp_request_duration_seconds_sum", {})) == set(buckets)
    for key, total in samples.get("drtp_request_duration_seconds_sum", {}).items():
        assert math.isclose(total, sums[key], rel_tol=1e-9, abs_tol=1e-12), key
    newest: dict[str, HealthPart] = {}
    for _, node, part in o.fed.health:
        if node not in newest or part.index > newest[node].index:
            newest[node] = part
    assert samples.get("drtp_node_cpu_ratio", {}) == {(("node", n),): p.cpu for n, p in newest.items()}
    assert samples.get("drtp_node_lag_seconds", {}) == {(("node", n),): p.lag_ms / 1000 for n, p in newest.items()}
    master = [share for _, _, share, _ in o.fed.master_cpu]
    assert samples.get("drtp_master_cpu_ratio", {}) == ({(): master[-1]} if master else {})


def _no_means(d):
    return {k: _no_means(v) for k, v in d.items() if k != "mean"} if isinstance(d, dict) else d


@PROPERTY
@given(runs())
def test_the_summary_says_what_requests_csv_holds_whichever_nodes_lived(run):
    o = replayed(run)
    # requests.csv holds every request once: each reported one, each lost one; no other
    trace_rows = [r for r in o.requests if not r.auxiliary]
    reported = {r.trace_id for _, r in o.fed.rows if not r.auxiliary}
    lost = {r.trace_id for r in trace_rows if r.outcome == LOST}
    assert len(trace_rows) == len(reported) + len(lost) == sum(o.fed.requests.values())
    assert not reported & lost
    assert Counter(r.node for r in trace_rows) == o.fed.requests
    # its figures are those the same model computes from requests.csv's rows (as drtp analyze results does); a
    # mean may differ in its last digit (a float sum in another order)
    from_file = ResultsModel(run.timed, ON_TIME_S)
    for row in o.requests:
        from_file.add(row)
    analyzed = from_file.summary()
    summary = o.summary
    assert _no_means(analyzed) == _no_means({k: v for k, v in summary.items() if k in analyzed})
    assert summary["requests"] == len(trace_rows)
    assert summary["lost"] == len(lost)
    assert summary["auxiliary"]["requests"] == sum(r.auxiliary for r in o.requests)
    assert {node: s["requests"] for node, s in summary["per_node"].items()} == +o.fed.requests


@PROPERTY
@given(runs())
def test_the_original_output_and_the_registry_side_hold_requests_csvs_requests(run):
    o = replayed(run)
    trace_rows = [r for r in o.requests if not r.auxiliary]
    assert len(o.original) == len(trace_rows)  # one record per trace request, in requests.csv's order
    assert [r["onTime"] == "failed" for r in o.original] == [not r.ok for r in trace_rows]
    assert [r["size"] for r in o.original] == [r.bytes for r in trace_rows]
    side = o.summary["registry_side"]
    watched = sorted(set(REGISTRIES.values()))[0]
    assert list(side) == [watched]
    sends = sum(
        r.attempts + r.challenges for r in o.requests if r.attempts >= 1 and REGISTRIES[r.repository] == watched
    )
    assert side[watched]["drtp_requests"] == sends
