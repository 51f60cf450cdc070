"""``drtp run``: replay a trace through client nodes against the registry.

One thread (this one) reads the trace as a stream, plans each record into a
request (master.run.plan), routes it to a node (master.run.routing) and buffers it in
that node's next batch; the nodes' threads (master.run.nodes) send batches and
bring results back as events, which this thread writes (master.outputs.results) as
they arrive.  At most ``client_info.inflight`` requests per node are out at a
time, so memory stays bounded whatever the trace's length.  Before it blocks
(on that bound, or on a layer push a request depends on) it sends every
partial batch, so no node ever waits for requests the master holds.
In rate mode (``client_info.rate``, ``drtp run --rate``) the requests' intended
starts come from an arrival process (master.run.arrivals) instead of the trace's
timestamps; the nodes keep them as they keep an as-is replay's.

The run directory is proven writable before anything starts (master.outputs.results_dir).
A write that fails mid-run cancels the run on the nodes: ``summary.json`` is still
written, marked ``complete: false`` with the reason, and the command exits 3.  So does
a bug (master.run.internal_errors): the run is cancelled on the nodes, each output is
closed on its own (one that failed is not called again), ``summary.json`` is written
from what arrived, and the command exits 3.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import enum
import json
import logging
import queue
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from drtp.config import Config, redacted
from drtp.errors import DrtpError, RunError
from drtp.master.outputs.original_output import write_original_results
from drtp.master.outputs.registry_metrics import METRICS_FILE, RegistryMetrics, metrics_endpoints
from drtp.master.outputs.replayer_health import MasterCpu, ReplayerHealth
from drtp.master.outputs.results import RunResults, format_table
from drtp.master.outputs.results_dir import ResultsWriteError, remove_if_empty, write_failed
from drtp.master.outputs.stats_history import StatsHistory
from drtp.master.run.arrivals import intended_starts
from drtp.master.run.held import HeldRecords
from drtp.master.run.internal_errors import InternalErrors, InternalRunError
from drtp.master.run.nodes import NodeLink
from drtp.master.run.plan import Planner, registry_for, with_names
from drtp.master.run.preflight import preflight_all
from drtp.master.run.push_ledger import PushLedger
from drtp.master.run.renewal import SecretRenewal
from drtp.master.run.routing import Router
from drtp.master.run.settings import RunSettings
from drtp.master.run.warmup import load_map
from drtp.outputs import prepare_output_dir
from drtp.progress import progress
from drtp.registry.auth import config_auth, registry_names
from drtp.registry.credentials import config_sources
from drtp.registry.repo_names import RepositoryMap
from drtp.replay.client_profiles import client_model
from drtp.replay.frames import LiveTally, ResultFrame
from drtp.replay.messages import UNLIMITED, ReplayRequest, RunSpec, registry_base
from drtp.replay.signing import resolve_token
from drtp.replay.stats_file import STATS_FILE
from drtp.trace.reader import TraceReader, completion_stamped
from drtp.trace.records import TraceRecord, Uri

if TYPE_CHECKING:  # prometheus-client is imported only by a run that exports
    from drtp.master.outputs.live_metrics import LiveMetrics

log = logging.getLogger(__name__)  # -v / verbose: true shows the run's steps

START_LEAD_S = 1.0  # as-is mode: the common start is this far after the run is set up
# upload sessions kept pinned to the node that opened them; one the trace abandoned (never closed) is
# forgotten beyond this many, oldest first (were it continued after all, its node would open a new one)
MAX_PINNED_UPLOADS = 100_000
PARTIAL_BATCH_S = 0.002  # stress mode: a partial batch for a node short of work waits at most this long


class Stop(enum.Enum):
    """Why a run stopped before the end of its trace (besides a failed write, which carries its error)."""

    INTERRUPTED = "interrupted"
    BROKEN = "internal error"  # a bug in drtp (its error is in Replay.broken)


def node_addresses(cfg: Config) -> list[str]:
    if not cfg.client_info.client_list:
        raise DrtpError(f"{cfg.source}: missing key 'client_info.client_list' (the client nodes, host:port)")
    return list(cfg.client_info.client_list)  # the config checks each entry is host:port


def default_out(cfg: Config) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return cfg.path(cfg.results) / f"run-{stamp}"


class Replay:
    def __init__(
        self,
        cfg: Config,
        settings: RunSettings,
        source: Callable[[], Iterable[list[TraceRecord]]] | None = None,
        preflight: bool = True,
        planner: Planner | None = None,
        live: LiveMetrics | None = None,
    ) -> None:
        """``settings``: the run's folder (``out_dir``, required here), resume, quiet, stats interval and the
        ``tags`` summary.json carries besides the run's own (a series' ``registry_id``, ``repetition``…), written
        with it by its one writer, an interrupted or incomplete run's summary too.

        The run-internal extras: ``source``, the records to replay, in batches, instead of the config's trace
        (``drtp ramp`` gives each step its share); ``preflight`` False when the registries were just checked
        (a ramp's later steps); ``planner``: one that planned the records before these (a ramp's earlier steps),
        so what they pushed — a layer's new digest, an image's blobs, an upload's pairing — is known to the
        records that follow; ``live``: the exporter of live metrics (already listening) that this run's frames
        feed.
        """
        if settings.out_dir is None:
            raise ValueError("Replay needs settings.out_dir (run_replay gives the default folder)")
        out_dir = settings.out_dir
        self.settings = settings
        self.tags = dict(settings.tags)
        self.cfg = cfg
        self.source = source
        self.preflight = preflight
        self.live = live  # nodes count LiveParts for it; the master adds them per frame
        self.resume = settings.resume  # continue an interrupted run in out_dir: skip the trace ids it completed
        self.skip: set[str] = set()
        self.offset = 0.0  # resume: new starts count on from the interrupted run's last end
        self.ci = cfg.client_info
        self.rate = self.ci.rate  # open loop: requests start at this many per second (None: as is or stress)
        self.timed = self.ci.wait or self.rate is not None  # requests have intended starts the nodes keep
        self.out_dir = out_dir
        self.quiet = settings.quiet
        self.stats_interval_s = settings.stats_interval_s  # the width of stats_history.csv's intervals
        self.start_epoch = 0.0  # the run's common start (wall-clock seconds); set when the run starts
        self.registries = cfg.require("registry")
        self.sources = config_sources(cfg)  # where the secrets come from (a helper's is renewed during the run)
        self.auths = config_auth(cfg, self.sources)  # credentials/TLS of the registries: ``registries:`` entries
        self.renewal: SecretRenewal | None = None
        self.registry_metrics: RegistryMetrics | None = None
        self.names = RepositoryMap.for_config(cfg)  # trace repository -> the registry's (repository_map)
        self.token = resolve_token(self.ci.token, "client_info.token")
        self.events: queue.Queue = queue.Queue()
        self.links = {a: NodeLink(a, self.token, self.events) for a in node_addresses(cfg)}
        self.client = client_model(self.ci)  # how each trace client behaves on the nodes
        # a per-client order is kept on one node: round-robin then spreads trace clients, not requests
        self.router = Router(list(self.links), hashed=self.ci.route, per_client=self.client.concurrency != UNLIMITED)
        self.planner = planner if planner is not None else Planner(self.registries, namespace=cfg.namespace)
        self.cap = max(1, self.ci.inflight)  # requests out at one node at most
        self.batch = max(1, self.ci.batch)
        self.refill_at = max(0, self.cap - self.batch)  # at the cap, wait until a whole batch fits again
        # a node with this many requests out has work for each of its slots four times over: not short of work
        # before its next result frame (at most 10 ms away) tells the master to send more
        self.busy_at = max(1, min(self.batch, 4 * self.ci.threads))
        self.held = HeldRecords(self.planner)  # records waiting for a request in flight, per trace client
        self.releases_seen = -1  # planner.releases when the held records were last looked at
        self.inflight: dict[int, tuple[str, ReplayRequest]] = {}
        self.per_node: dict[str, int] = {a: 0 for a in self.links}
        self.buffers: dict[str, list[ReplayRequest]] = {a: [] for a in self.links}
        self.buffered_at: dict[str, float] = {a: 0.0 for a in self.links}  # when a node's partial batch began
        self.upload_node: dict[tuple[str, str, str | None], str] = {}  # (client, repository, upload key) -> node
        self.dead: dict[str, dict] = {}
        self.done = 0
        self.results: RunResults | None = None
        self.replayer: ReplayerHealth | None = None  # the nodes' and the master's load per interval
        self.bar = None
        self.unreported = 0  # results not yet counted on the progress bar
        self.history: StatsHistory | None = None
        # the bugs the run met, by where (its outputs' closing steps each guarded): none may show a secret
        self.broken = InternalErrors(out_dir, self._secrets)

    # -- setup ----------------------------------------------------------------------------------

    def _load_warmup(self) -> int:
        path = self.cfg.path(self.cfg.warmup.output)
        if not path.exists():
            raise DrtpError(f"warmup map {path} not found: run 'drtp warmup -c CONFIG' first")
        n = 0
        for entry in load_map(path):
            self.planner.learn(entry["repository"], entry["kind"], entry["reference"], entry["digest"], entry["size"])
            n += 1
        return n

    def _reader(self) -> TraceReader:
        return TraceReader(self.cfg.trace_paths(), **self.cfg.reader_options())

    def _batches(self):
        if self.source is not None:
            return self.source()
        return with_names(self._reader().batches(), self.names)

    @property
    def mode(self) -> str:
        return "rate" if self.rate is not None else "as-is" if self.timed else "stress"

    # -- the run ------------------------------------------------------------------------------------

    def run(self) -> dict:
        # the results directory first: nothing may load the registry or the nodes for a run that cannot be kept
        made = prepare_output_dir(self.out_dir)
        try:
            # the whole trace is read (and checked) first: a bad record is refused before the registry sees anything
            total = sum(len(b) for b in self._batches())
            # a registry log's timestamps are completions: the planner's trace spans subtract the duration
            fmt = self.cfg.require("trace").format
            self.planner.completion_stamped = completion_stamped(self.cfg.trace_paths(), fmt)
            log.info("trace checked: %d requests; preflight of %s", total, ", ".join(self.registries))
            if self.preflight:
                preflight_all(self.registries, self.auths, registry_names(self.cfg), self.names.probe())
            for link in self.links.values():
                link.check()
            log.info("warmup map: %d objects; nodes up: %s", self._load_warmup(), ", ".join(self.links))
        except DrtpError:
            if made:
                remove_if_empty(self.out_dir)  # no empty run directory for a run that never started
            raise
        timed = self.timed
        run_id = uuid.uuid4().hex[:12]
        self._open_results(timed)
        if self.resume:
            self.skip = self.results.completed
            self.offset = self.results.resumed_end
            self.replayer.since_s = self.offset  # the replayer block covers this session only
            for repo, ref, digest, size in self.results.pushed:
                self.planner.learn(repo, "blob", ref, digest, size)
            if not self.quiet:
                print(f"resuming {self.out_dir}: {len(self.skip):,} requests done before")
        # resumed: the start moves back by the earlier run's length, so start_s keeps counting from one origin
        start_epoch = time.time() + (START_LEAD_S if timed else 0.0) - self.offset
        self.start_epoch = start_epoch
        engine = self.ci.engine if self.ci.engine != "auto" else ("threads" if timed else "loop")
        ci = self.ci
        spec = RunSpec(
            run_id,
            start_epoch,
            threads=ci.threads,
            timeout=ci.timeout,
            connect_timeout=ci.connect_timeout,
            retries=ci.retries,
            random=self.cfg.warmup.random,
            auth=self.auths,
            engine=engine,
            registries=[registry_base(r) for r in self.registries],  # a node refuses any other target
            timed=timed,
            on_time_s=ci.on_time_ms / 1000,
            stats_interval_s=self.stats_interval_s,
            client=self.client,
            live=self.live is not None,
        )
        if self.live is not None:
            self.live.new_run()
            self.live.offered_rps(self.rate)
            self.live.announce()
        try:
            for name, link in self.links.items():
                link.start(msgspec.structs.replace(spec, node=name))  # the node writes its rows under this name
            self.renewal = SecretRenewal(self.sources, self.auths, self.links, run_id)
            self.renewal.start()
            master_cpu = MasterCpu(self.replayer, self._run_clock, self.stats_interval_s)
        except Exception:
            self._cancel()  # the nodes that did start must not wait for batches that will never come
            raise
        log.info(
            "run %s started: %s mode, %s engine, results in %s",
            run_id,
            self.mode,
            engine,
            self.out_dir,
        )
        t0 = time.perf_counter()
        broken = self.broken
        try:
            # its first reading: right before the first request (a bug in it costs its figures, not the run)
            self.registry_metrics = broken.step("registry metrics", self._registry_metrics)
            master_cpu.start()
            with progress(total=total, desc="replay", unit="req", final_line=True, quiet=self.quiet) as bar:
                self.bar = bar
                stop = self._replay(timed)
        finally:
            # each output closes on its own: one that fails (a bug) is named and skipped, the others still close
            broken.step("replayer health", master_cpu.stop)
            self.renewal.stop()
            if self.registry_metrics is not None:
                broken.step("registry metrics", self.registry_metrics.stop)  # its last reading: after the last answer
        wall = time.perf_counter() - t0
        whole = (
            set() if stop is not None else {n for n, link in self.links.items() if link.finished and n not in self.dead}
        )
        broken.step("results", self._settle, whole)
        not_sent = total - self.results.all.requests
        extra = {
            **self.tags,
            "mode": self.mode,
            "route": "hash" if self.ci.route else "round-robin",
            "speedup": self.ci.speedup,
            **self._rate_settings(),
            "nodes": list(self.links),
            "registries": self.registries,
            "trace_requests": total,
            # the common start as wall-clock time: start_s + start_epoch is when a request left, to line up
            # with the registry's own logs
            "started_at": _dt.datetime.fromtimestamp(start_epoch, _dt.timezone.utc).isoformat(),
            "start_epoch": start_epoch,
            "wall_s": wall,
            "dead_nodes": self.dead,
            "interrupted": stop is Stop.INTERRUPTED,
            "not_sent": not_sent,
        }
        if self.registry_metrics is not None and (side := broken.step("registry metrics", self._registry_side)):
            extra["registry_side"] = side
        broken.step("stats history", self.history.close)
        # after the history's last grouping: the block counts every gauge that grouping dropped as late
        extra.update(broken.step("replayer health", self.replayer.summary) or {})
        # trace.output, if set: from requests.csv (every row is written), before summary.json, which says if it failed
        try:
            broken.step("original output", write_original_results, self.cfg, self.out_dir, start_epoch, self.quiet)
            original_error = None
        except RunError as e:
            original_error = e
        incomplete = self._incomplete_reason(stop, not_sent)
        extra["complete"] = incomplete is None
        if incomplete is not None:
            extra["incomplete_reason"] = incomplete
        extra.update(broken.summary())
        summary = self._close_results(extra, stop)
        if original_error is not None:
            if incomplete is None:  # the run's one error: the file it could not write (summary.json is whole)
                raise original_error
            print(f"drtp: {original_error}", file=sys.stderr, flush=True)  # the run's own stop is its error
        if not self.quiet and "requests" in summary:
            print(format_table(summary))
            for name, d in self.dead.items():
                print(f"client node {name} died ({d['reason']}); {d['lost']} requests lost")
            print(f"results in {self.out_dir}/ (requests.csv, summary.json, {STATS_FILE})")
        if summary.get("behind"):  # on stderr even with -q: the registry saw less load than the run says it offered
            print(f"drtp: warning: the run {summary['behind']}", file=sys.stderr, flush=True)
        if stop is Stop.INTERRUPTED:
            raise KeyboardInterrupt
        if broken:
            raise InternalRunError(
                f"the run did not finish: a bug in drtp, in {' and '.join(broken.errors)} (named above); "
                f"{'it was cancelled on the client nodes; ' if stop is Stop.BROKEN else ''}"
                "summary.json is marked incomplete"
            )
        if incomplete is not None:
            raise RunError(f"the run did not finish: {incomplete}; summary.json is marked incomplete")
        return summary

    def _rate_settings(self) -> dict:
        """Rate mode's settings for summary.json (empty otherwise): what the run was asked to offer."""
        if self.rate is None:
            return {}
        return {"rate": self.rate, "arrivals": self.ci.arrivals, "seed": self.ci.seed}

    def _open_results(self, timed: bool) -> None:
        """config.json and requests.csv's header, before any node starts: a failure here costs nothing."""
        try:
            (self.out_dir / "config.json").write_text(json.dumps(redacted(self.cfg), indent=2))
            self.history = history = StatsHistory(
                self.out_dir / STATS_FILE, self.stats_interval_s, self._run_clock, self.resume
            )
            self.replayer = ReplayerHealth(self.stats_interval_s, history.gauge, lambda: history.late_gauges)
            if self.live is not None:  # the nodes' and the master's load gauges, as the health parts come
                self.replayer.on_health.append(self.live.health)
                self.replayer.on_master_cpu.append(self.live.master_cpu)
            self.results = RunResults(
                self.out_dir, timed, self.ci.on_time_ms / 1000, self.resume, history, self.replayer
            )
            self.ledger = PushLedger(self.cfg.path(self.cfg.warmup.output), str(self.out_dir.absolute()))  # drtp clean
        except OSError as e:
            raise write_failed(Path(e.filename) if e.filename else self.out_dir, e) from None

    def _registry_metrics(self) -> RegistryMetrics | None:
        """The registries' own metrics, read from now on (None: the config names no metrics endpoint)."""
        endpoints = metrics_endpoints(self.cfg)
        if not endpoints:
            return None
        try:
            path, clock, interval = self.out_dir / METRICS_FILE, self._run_clock, self.stats_interval_s
            recorder = RegistryMetrics(path, endpoints, clock, interval, resume=self.resume)
        except OSError as e:
            self._cancel()  # the nodes must not wait for batches that will never come
            raise write_failed(self.out_dir / METRICS_FILE, e) from None
        recorder.start()
        return recorder

    def _registry_side(self) -> dict:
        """The summary's registry_side block (this run's rows are read back from requests.csv)."""
        try:
            return self.registry_metrics.registry_side(
                self.results.rows(), lambda repository: registry_for(repository, self.registries, self.cfg.namespace)
            )
        except OSError as e:
            return {"error": f"could not read back {self.out_dir / 'requests.csv'}: {e}"}

    def _secrets(self) -> list[str]:
        """What no error line may show: the nodes' token, the registries' passwords (a renewed one too)."""
        renewed = [s.secret.password or "" for s in self.sources if s.secret is not None]
        return [self.token, *(a.password or "" for a in self.auths), *renewed]

    def _run_clock(self) -> float:
        """Seconds since the run's common start (the origin of the rows' start_s)."""
        return time.time() - self.start_epoch

    def _replay(self, timed: bool) -> Stop | DrtpError | None:
        """Send the trace and collect its results; None when it went to the end, else why it stopped."""
        try:
            self._dispatch(timed)
            self._finish()
            return None
        except KeyboardInterrupt:
            self._cancel()
            try:
                self._drain(timeout=0)
            except DrtpError as e:
                return e
            except Exception as e:  # noqa: BLE001 - a bug while keeping what came: named, the rest still kept
                self.broken.add("replay", e)
            return Stop.INTERRUPTED
        except DrtpError as e:
            # a failed write: measuring on without keeping the measurements would load the registry for nothing
            self._cancel()
            return e
        except Exception as e:  # noqa: BLE001 - a bug: what arrived is kept, the nodes must not send on
            self._cancel()
            self.broken.add("replay", e)
            return Stop.BROKEN

    def _cancel(self) -> None:
        for link in self.links.values():
            if link.run is not None:
                link.cancel()

    def _settle(self, whole: set[str]) -> None:
        try:
            self.results.settle(list(self.links), whole)
        except OSError as e:
            raise write_failed(self.out_dir / "requests.csv", e) from None

    def _incomplete_reason(self, stop: Stop | DrtpError | None, not_sent: int) -> str | None:
        if stop is Stop.INTERRUPTED:
            return "interrupted" + (f"; {self.broken.describe()}" if self.broken else "")
        if isinstance(stop, DrtpError):
            also = f"; {self.broken.describe()}" if self.broken else ""
            return f"{stop}; the run was cancelled on the client nodes and requests.csv lacks the rows after it{also}"
        if stop is Stop.BROKEN:
            return (
                f"{self.broken.describe()}: a bug in drtp; the run was cancelled on the client nodes and "
                "requests.csv holds the rows that arrived before it"
            )
        if not_sent > 0:
            who = "every client node died" if not self.router.alive else "the result streams ended"
            return f"{who}; {not_sent:,} trace requests got no result"
        if self.broken:
            return f"{self.broken.describe()}: a bug in drtp; the figures of what failed are missing or partial"
        return None

    def _close_results(self, extra: dict, stop: Stop | DrtpError | None) -> dict:
        """Write summary.json; when even that fails, say why in the error (exit 3), with the first failure.

        A bug in the results' own figures still leaves a summary.json: the run's fields without them,
        ``complete: false`` and the error named."""
        if isinstance(stop, DrtpError):
            self.results.discard_unwritten()
        try:
            return self.results.close(**extra)
        except DrtpError:
            raise
        except OSError as e:
            path = self.out_dir / "summary.json"
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)  # a torn summary.json would pass for a result; none says the truth
            why = f"{write_failed(path, e)}: the run's figures are lost"
            if isinstance(stop, ResultsWriteError):
                why = f"{stop}, and {why}"
            raise ResultsWriteError(why) from None
        except Exception as e:  # noqa: BLE001 - a bug in the results' figures: the run's own fields still go out
            self.broken.add("results", e)
            self.results.discard_unwritten()
            extra.update(
                complete=False,
                incomplete_reason=self._incomplete_reason(stop, extra.get("not_sent", 0)),
                **self.broken.summary(),
            )
            path = self.out_dir / "summary.json"
            try:
                path.write_text(json.dumps(extra, indent=2, default=str))
            except OSError as err:
                raise write_failed(path, err) from None
            return extra

    def _lost(self, node: str, req: ReplayRequest, reason: str) -> None:
        try:
            rows = self.results.add(node, req, None, lost_reason=reason)
        except OSError as e:
            raise write_failed(self.out_dir / "requests.csv", e) from None
        if self.live is not None:  # no node counts a request lost with it: the master does, as a node would
            tally = LiveTally()
            for row in rows:
                if not row.auxiliary:
                    tally.add(registry_base(req.registry), row)
            self.live.add_parts(tally.parts())

    def _flush_results(self) -> None:
        try:
            self.results.flush()
        except OSError as e:
            raise write_failed(self.out_dir / "requests.csv", e) from None

    def _dispatch(self, timed: bool) -> None:
        cap = self.cap
        speedup = self.ci.speedup
        arrivals = intended_starts(self.rate, self.ci.arrivals, self.ci.seed) if self.rate is not None else None
        first = None
        seq = 0
        for records in self._batches():
            for rec in records:
                if not self.router.alive:
                    return
                if self.events.queue:  # a lock-free peek: most records find nothing to drain
                    self._drain(timeout=0)
                    if self.held and not self._release_held():
                        return
                if self.skip and rec.id in self.skip:
                    self.planner.replayed(rec)
                    seq += 1
                    if self.bar is not None:
                        self.bar.update(1)
                    continue
                if arrivals is not None:
                    at = self.offset + next(arrivals)
                elif timed:
                    # the trace's start of a request is its arrival: a registry log stamps completions (a
                    # request that arrived before the first one in the file is due at the start)
                    t = rec.time - rec.duration if self.planner.completion_stamped else rec.time
                    if first is None:
                        first = t
                    at = self.offset + max(0.0, t - first) / speedup
                else:
                    at = None  # stress: as soon as possible (no look at the record's time, which costs)
                uri = rec.parts  # split once: hold, route and plan all look at it
                if self.held.hold(rec, seq, at, uri):  # it waits for a request in flight; other clients go on
                    seq += 1
                    if len(self.held) >= cap and not self._wait_held(cap // 2):
                        return
                    continue
                if not self._send(rec, uri, seq, at):
                    return
                seq += 1
        self._wait_held(0)

    def _send(self, rec: TraceRecord, uri: Uri, seq: int, at: float | None) -> bool:
        """Plan ``rec`` (``uri``: its URI parts) and put it in its node's next batch; False when every node
        is dead."""
        upload = self.planner.upload_of(rec, uri, seq)
        node = self._route(rec, uri, upload)
        if node is None:  # every node is dead: what was measured is kept, the summary still written
            return False
        if self.per_node[node] >= self.cap and node not in self.dead:
            # at the cap: refill a whole batch at once, not one request per result (a batch of
            # one per result cost each node a connection and a thread per request)
            while self.per_node[node] > self.refill_at and node not in self.dead:
                self._drain(timeout=self._flush_all())
        if node in self.dead:
            node = self._route(rec, uri, upload)
            if node is None:
                return False
        req = self.planner.plan(rec, seq, at, uri, upload)
        self.inflight[seq] = (node, req)
        self.per_node[node] += 1
        buf = self.buffers[node]
        if not buf:
            self.buffered_at[node] = time.monotonic()
        buf.append(req)
        if len(buf) >= self.batch:
            self._flush(node)
        return True

    def _release_held(self) -> bool:
        """Send the held records whose wait is over; False when every node is dead.

        Held records wait only for requests in flight that the planner releases when they finish, and
        for each other: with no release since the last look, none can go (the look costs per held record).
        """
        if self.planner.releases == self.releases_seen and self.inflight:
            return True
        self.releases_seen = self.planner.releases
        for held in self.held.release(everyone=not self.inflight):
            self.held.planned(held)
            if not self._send(held.rec, held.uri, held.seq, held.at):
                return False
        return True

    def _wait_held(self, until: int) -> bool:
        """Wait for results until at most ``until`` records are held; False when every node is dead."""
        while len(self.held) > until and self.router.alive:
            self._drain(timeout=self._flush_all())
            if not self._release_held():
                return False
        return self.router.alive

    def _route(self, rec: TraceRecord, uri: Uri, upload: str | None) -> str | None:
        if uri.kind != "blob" or rec.method not in ("POST", "PATCH", "PUT"):
            return self.router.pick(rec.client)  # most requests: no upload session to follow
        op_key = (rec.client, uri.repository, upload)
        # an upload continues on the node that opened it (the node holds the session)
        pinned = self.upload_node.get(op_key)
        if pinned in self.dead:
            pinned = None
        node = pinned or self.router.pick(rec.client)
        if node is not None:
            # only a session that opened (202) or goes on is pinned: a mount (201) or a refused open leaves none
            if rec.method == "PATCH" or (rec.method == "POST" and rec.status == 202):
                self.upload_node[op_key] = node
                if len(self.upload_node) > MAX_PINNED_UPLOADS:  # sessions the trace abandoned: the oldest go
                    del self.upload_node[next(iter(self.upload_node))]
            elif rec.method == "PUT":
                self.upload_node.pop(op_key, None)
        return node

    def _flush(self, node: str) -> None:
        buf = self.buffers[node]
        if buf and node not in self.dead:
            self.links[node].send(buf)
            self.buffers[node] = []

    def _flush_all(self, final: bool = False) -> float:
        """Before the master waits: send the partial batches of the nodes that could run short of work;
        returns how long it may wait before it must look again.

        A node with four times its slots of requests out (or a whole batch, if that is less) has work for a
        while: its partial batch waits to be filled, so batches stay big (each costs a POST and a
        connection at both ends; at slow rates small batches were a large part of the master's cost).
        A node with less gets its partial batch once it is a quarter full or has waited ``PARTIAL_BATCH_S``.  As is
        and in rate mode, every partial batch goes at once: its requests have their times to keep.
        """
        wait = 1.0
        send_all = final or self.timed
        now = time.monotonic()
        for node, buf in self.buffers.items():
            if not buf or node in self.dead:
                continue
            if not send_all and self.per_node[node] - len(buf) >= self.busy_at:
                continue  # busy: its results wake the master before it runs out of work
            waited = now - self.buffered_at[node]
            if send_all or 4 * len(buf) >= self.batch or waited >= PARTIAL_BATCH_S:
                self._flush(node)
            else:
                wait = min(wait, PARTIAL_BATCH_S - waited)
        return wait

    def _finish(self) -> None:
        self._flush_all(final=True)
        for name, link in self.links.items():
            if name not in self.dead:
                link.end()
        while self.inflight:
            if not self._drain(timeout=1.0) and all(link.dead or link.finished for link in self.links.values()):
                # every stream is closed or dead: what remains will never come
                for name in {n for n, _ in self.inflight.values()}:
                    self._node_dead(name, "result stream ended before all results")
                break
        # a node ends its stream after cancelling the upload sessions the trace left open: the run ends after that
        until = time.monotonic() + self.ci.timeout + 5.0
        while not all(link.dead or link.finished for link in self.links.values()) and time.monotonic() < until:
            self._drain(timeout=0.1)
        self._drain(timeout=0)  # what the streams sent before they ended (their last frames) may still wait
        self._flush_results()

    # -- events ------------------------------------------------------------------------------------------

    def _drain(self, timeout: float) -> int:
        """Handle the events that are there (waiting up to ``timeout`` for the first); returns how many."""
        n = 0
        try:
            event = self.events.get(timeout=timeout) if timeout > 0 else self.events.get_nowait()
        except queue.Empty:
            if timeout > 0:  # a wait without results: the progress line and the stats history stay on time
                if self.bar is not None:
                    self.bar.tick()
                self._flush_results()
            return 0
        while True:
            kind, node, payload = event
            if kind == "frames":
                for frame in payload:
                    self._frame(node, frame)
            elif kind == "dead":
                self._node_dead(node, payload)
            elif kind == "closed" and self.per_node[node] > 0:
                # the node sends its stream's end only after its last result: the rest is lost
                self._node_dead(node, f"result stream ended with {self.per_node[node]} requests outstanding")
            n += 1
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                break
        self._flush_results()
        if self.live is not None:
            self.live.in_flight(len(self.inflight))
        if self.bar is not None:
            # once per drain: a bar update (and a look at the clock) per result would cost the master CPU
            self.bar.set_failed(self.results.failed)
            self.bar.update(self.unreported)
            self.unreported = 0
        return n

    def _frame(self, node: str, frame: ResultFrame) -> None:
        """A node's frame: its rows to requests.csv, its requests out of flight, the planner told of pushes."""
        if node in self.dead:
            return  # its requests in flight were written as lost when it was given up on
        try:
            self.results.add_frame(node, frame)
        except OSError as e:
            raise write_failed(self.out_dir / "requests.csv", e) from None
        if frame.model is not None:
            self.results.node_model(node, frame.model)
        if frame.refused and self.renewal is not None:
            self.renewal.refused(frame.refused)
        if self.live is not None:
            self.live.add_parts(frame.live)
        inflight, planner = self.inflight, self.planner
        feedback = {res.seq: res for res in frame.feedback} if frame.feedback else {}
        if feedback:  # what the registries accepted, for drtp clean: before the requests leave ``inflight``
            self.ledger.add(node, [(inflight[s][1], res) for s, res in feedback.items() if s in inflight])
        n = 0
        for seq in frame.done:
            entry = inflight.pop(seq, None)
            if entry is not None:
                planner.done(entry[1], feedback.get(seq))
                n += 1
        self.per_node[node] -= n
        self.done += n
        self.unreported += n

    def _node_dead(self, node: str, reason: str) -> None:
        if node in self.dead:
            return
        self.links[node].dead = True
        self.router.remove(node)
        lost = [seq for seq, (owner, _) in self.inflight.items() if owner == node]
        for seq in sorted(lost):
            _, req = self.inflight.pop(seq)
            self.planner.done(req, None)
            self._lost(node, req, f"client node {node} died")
            if self.bar is not None:
                self.bar.update(1)
        self.per_node[node] = 0
        self.buffers[node] = []
        self.dead[node] = {"reason": reason, "lost": len(lost)}
        msg = f"client node {node} died ({reason}); {len(lost)} requests lost"
        if not self.quiet:
            print(f"\ndrtp: {msg}", flush=True)


def run_replay(
    cfg: Config, settings: RunSettings | Path | None = None, live: LiveMetrics | None = None, **fields
) -> dict:
    """Replay ``cfg``'s trace with ``settings``; ``live``: the exporter (already listening) its frames feed.

    Scripts and tests may give the run's folder (or None: ``<results>/run-<date>-<time>``) and
    :class:`RunSettings`' fields as keywords instead (``run_replay(cfg, out, quiet=True)``).
    """
    if not isinstance(settings, RunSettings):
        settings = RunSettings(out_dir=settings, **fields)
    elif fields:
        raise TypeError(f"run_replay: give {', '.join(fields)} in settings")
    if settings.out_dir is None:
        settings = dataclasses.replace(settings, out_dir=default_out(cfg))
    return Replay(cfg, settings, live=live).run()
