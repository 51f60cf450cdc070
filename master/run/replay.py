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
from drtp.config.checks import check_access_logs
from drtp.config.upstreams import upstreams, write_routes
from drtp.errors import DrtpError, RunError
from drtp.master.outputs.events import check_event_times
from drtp.master.outputs.output import RunContext
from drtp.master.outputs.results import RunResults, format_table
from drtp.master.outputs.results_dir import remove_if_empty, write_failed
from drtp.master.outputs.run_outputs import RunOutputs
from drtp.master.run.dispatch import Dispatch
from drtp.master.run.held import HeldRecords
from drtp.master.run.internal_errors import InternalErrors, InternalRunError
from drtp.master.run.nodes import NodeLink
from drtp.master.run.plan import Planner, registry_for, upstream_writes, with_names, write_targets
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
from drtp.replay.frames import ResultFrame
from drtp.replay.messages import UNLIMITED, ReplayRequest, RunSpec, registry_base
from drtp.replay.result_row import rows_of
from drtp.replay.signing import resolve_token
from drtp.replay.stats_file import STATS_FILE
from drtp.trace.reader import TraceReader, completion_stamped
from drtp.trace.records import TraceRecord

if TYPE_CHECKING:  # prometheus-client is imported only by a run that exports
    from drtp.master.outputs.live_metrics import LiveMetrics

log = logging.getLogger(__name__)  # -v / verbose: true shows the run's steps

START_LEAD_S = 1.0  # as-is mode: the common start is this far after the run is set up


class Stop(enum.Enum):
    """Why a run stopped before the end of its trace (besides a failed write, which carries its error)."""

    INTERRUPTED = "interrupted"
    BROKEN = "internal error"  # a bug in drtp (its error is in Replay.broken)
    ASKED = "asked to stop"  # an output asked (RunContext.stop_run: a required event failed); why in Replay.asked


class StopAsked(Exception):
    """Raised on the dispatch thread when an output asked the run to stop (its reason in ``Replay.asked``)."""


def node_addresses(cfg: Config) -> list[str]:
    if not cfg.client_info.client_list:
        raise DrtpError(f"{cfg.source}: missing key 'client_info.client_list' (the client nodes, host:port)")
    return list(cfg.client_info.client_list)  # the config checks each entry is host:port


def default_out(cfg: Config) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return cfg.path(cfg.results) / f"run-{stamp}"


class Replay(Dispatch):
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
        self.names = RepositoryMap.for_config(cfg)  # trace repository -> the registry's (repository_map)
        self.token = resolve_token(self.ci.token, "client_info.token")
        self.events: queue.Queue = queue.Queue()
        self.links = {a: NodeLink(a, self.token, self.events) for a in node_addresses(cfg)}
        self.client = client_model(self.ci)  # how each trace client behaves on the nodes
        # a per-client order is kept on one node: round-robin then spreads trace clients, not requests
        self.router = Router(list(self.links), hashed=self.ci.route, per_client=self.client.concurrency != UNLIMITED)
        if planner is None:  # a cache's writes go to its upstream, or are skipped (upstream_writes)
            planner = Planner(self.registries, namespace=cfg.namespace, writes=write_routes(cfg))
        self.planner = planner
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
        self.outputs: RunOutputs | None = None  # requests.csv's results and every other output (run_outputs)
        self.bar = None
        self.asked: str | None = None  # why an output asked the run to stop (RunContext.stop_run), the first reason
        self.unreported = 0  # results not yet counted on the progress bar
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

    def _trace_extent(self) -> tuple[int, float | None]:
        """The trace's requests, and how long it lasts on the run's clock (None in stress mode: not known)."""
        total = 0
        first = last = None
        timed_span = self.timed and self.rate is None
        stamped = self.planner.completion_stamped
        for batch in self._batches():
            total += len(batch)
            if timed_span:
                for rec in batch:
                    t = rec.time - rec.duration if stamped else rec.time
                    first = t if first is None or t < first else first
                    last = t if last is None or t > last else last
        if self.rate is not None:
            return total, total / self.rate
        if timed_span:
            return total, (last - first) / self.ci.speedup if first is not None else 0.0
        return total, None

    @property
    def mode(self) -> str:
        return "rate" if self.rate is not None else "as-is" if self.timed else "stress"

    # -- the run ------------------------------------------------------------------------------------

    def run(self) -> dict:
        # the results directory first: nothing may load the registry or the nodes for a run that cannot be kept
        made = prepare_output_dir(self.out_dir)
        try:
            # the whole trace is read (and checked) first: a bad record is refused before the registry sees anything
            fmt = self.cfg.require("trace").format
            # a registry log's timestamps are completions: the planner's trace spans subtract the duration
            self.planner.completion_stamped = completion_stamped(self.cfg.trace_paths(), fmt)
            total, span_s = self._trace_extent()
            # an event past the trace is refused before anything is sent
            check_event_times(self.cfg, span_s, total, self.settings.events_origin)
            log.info("trace checked: %d requests; preflight of %s", total, ", ".join(self.registries))
            if self.preflight:
                check_access_logs(self.cfg)  # an upstream's log the run will read (exit 2 before anything is sent)
                probe = self.names.probe()
                preflight_all(self.registries, self.auths, registry_names(self.cfg), probe, upstreams(self.cfg))
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
            run_id, start_epoch, threads=ci.threads, timeout=ci.timeout, connect_timeout=ci.connect_timeout,
            retries=ci.retries, random=self.cfg.warmup.random, auth=self.auths, engine=engine,
            registries=[registry_base(r) for r in self.registries] + write_targets(self.planner.routes),  # only these
            timed=timed, on_time_s=ci.on_time_ms / 1000, stats_interval_s=self.stats_interval_s, client=self.client,
            live=self.live is not None,
        )  # fmt: skip
        self.outputs.run.start_epoch = start_epoch
        try:
            for name, link in self.links.items():
                link.start(msgspec.structs.replace(spec, node=name))  # the node writes its rows under this name
            self.renewal = SecretRenewal(self.sources, self.auths, self.links, run_id)
            self.renewal.start()
        except Exception:
            self._cancel()  # the nodes that did start must not wait for batches that will never come
            raise
        log.info("run %s started: %s mode, %s engine, results in %s", run_id, self.mode, engine, self.out_dir)
        t0 = time.perf_counter()
        broken = self.broken
        try:
            self._start_outputs()  # right before the first request (a bug in one costs its figures, not the run)
            with progress(total=total, desc="replay", unit="req", final_line=True, quiet=self.quiet) as bar:
                self.bar = bar
                stop = self._replay(timed)
        finally:
            # each output closes on its own: one that fails (a bug) is named and skipped, the others still close
            self.outputs.stop(broken)
            self.renewal.stop()
        wall = time.perf_counter() - t0
        whole = (
            set() if stop is not None else {n for n, link in self.links.items() if link.finished and n not in self.dead}
        )
        if stop is None and self._asked_after_end():  # a required event that failed as the run ended
            stop = Stop.ASKED
        broken.step("results", self._settle, whole)
        skipped = sum(self.planner.skipped.values())  # upstream_writes: skip: never sent, by design
        not_sent = total - self.results.all.requests - skipped
        extra = {
            **self.settings.tags,
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
        upstream_writes(extra, self.cfg, self.planner.skipped)  # summary.json's upstream[id]["writes"]
        # each output's block, in the outputs' order (master.outputs.run_outputs); a file one could not write
        # (trace.output) is the run's error once summary.json, which says if it failed, is written
        not_written = self.outputs.finish(extra, broken)
        incomplete = self._incomplete_reason(stop, not_sent)
        extra["complete"] = incomplete is None
        if incomplete is not None:
            extra["incomplete_reason"] = incomplete
        extra.update(broken.summary())
        failed = stop if isinstance(stop, DrtpError) else None
        reason = lambda: self._incomplete_reason(stop, not_sent)  # noqa: E731 - asked again only after a bug
        summary = self.results.write_summary(extra, failed, self.broken, reason)
        for i, error in enumerate(not_written):
            if incomplete is None and i == 0:  # the run's one error: a file it could not write (summary.json is whole)
                raise error
            print(f"drtp: {error}", file=sys.stderr, flush=True)  # the run's own stop is its error
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
        """config.json, requests.csv's header and every other output's files (master.outputs.run_outputs),
        before any node starts: a failure here costs nothing."""
        try:
            (self.out_dir / "config.json").write_text(json.dumps(redacted(self.cfg), indent=2))
            context = RunContext(
                self.cfg, self.out_dir, timed, self.resume, self.quiet, self.stats_interval_s, self._run_clock,
                self._registry_of, live=self.live, stop_run=self._stop_run,
            )  # fmt: skip
            on_time_s = self.ci.on_time_ms / 1000
            self.outputs = RunOutputs(context, lambda: RunResults(self.out_dir, timed, on_time_s, self.resume))
            self.results = context.results
            self.ledger = PushLedger(self.cfg.path(self.cfg.warmup.output), str(self.out_dir.absolute()))  # drtp clean
        except OSError as e:
            raise write_failed(Path(e.filename) if e.filename else self.out_dir, e) from None

    def _start_outputs(self) -> None:
        try:
            self.outputs.start(self.broken)
        except DrtpError:  # a file that could not be made (registry_metrics.csv)
            self._cancel()  # the nodes must not wait for batches that will never come
            raise

    def _registry_of(self, repository: str) -> str:
        """The registry (as ``registry:`` names it) a trace repository's requests go to."""
        return registry_for(repository, self.registries, self.cfg.namespace)

    def _secrets(self) -> list[str]:
        """What no error line may show: the nodes' token, the registries' passwords (a renewed one too)."""
        renewed = [s.secret.password or "" for s in self.sources if s.secret is not None]
        return [self.token, *(a.password or "" for a in self.auths), *renewed]

    def _stop_run(self, reason: str) -> None:
        """An output asks the run to stop (from any thread): the dispatch thread, woken through the nodes' event
        queue, cancels the run on the nodes, keeps what came and ends it as incomplete (exit 3)."""
        self.events.put(("stop", "", reason))

    def _asked_after_end(self) -> bool:
        """Whether an output asked the run to stop once the dispatch thread no longer looked (its reason kept)."""
        for kind, _node, payload in list(self.events.queue):
            if kind == "stop":
                self.asked = self.asked or payload
                return True
        return False

    def _run_clock(self) -> float:
        """Seconds since the run's common start (the origin of the rows' start_s)."""
        return time.time() - self.start_epoch

    def _replay(self, timed: bool) -> Stop | DrtpError | None:
        """Send the trace and collect its results; None when it went to the end, else why it stopped."""
        try:
            self._dispatch(timed)
            self._finish()
            self.outputs.tick(None)
            return None
        except (KeyboardInterrupt, StopAsked) as stopped:
            self._cancel()
            try:
                self._drain(timeout=0)
            except StopAsked:
                pass
            except DrtpError as e:
                return e
            except Exception as e:  # noqa: BLE001 - a bug while keeping what came: named, the rest still kept
                self.broken.add("replay", e)
            return Stop.ASKED if isinstance(stopped, StopAsked) else Stop.INTERRUPTED
        except DrtpError as e:
            # a failed write: measuring on without keeping the measurements would load the registry for nothing
            self._cancel()
            return e
        except Exception as e:  # noqa: BLE001 - a bug: what arrived is kept, the nodes must not send on
            self._cancel()
            self.broken.add("replay", e)
            return Stop.BROKEN

    def _settle(self, whole: set[str]) -> None:
        try:
            self.results.settle(list(self.links), whole)
        except OSError as e:
            raise write_failed(self.out_dir / "requests.csv", e) from None

    def _incomplete_reason(self, stop: Stop | DrtpError | None, not_sent: int) -> str | None:
        if stop is Stop.INTERRUPTED:
            return "interrupted" + (f"; {self.broken.describe()}" if self.broken else "")
        if stop is Stop.ASKED:
            also = f"; {self.broken.describe()}" if self.broken else ""
            return (
                f"{self.asked}: the run stopped there (cancelled on the client nodes); requests.csv holds the rows "
                f"that arrived before it{also}"
            )
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

    def _lost(self, node: str, req: ReplayRequest, reason: str) -> None:
        """A request lost with its node: its rows (the master makes them, as the node would have) to every output."""
        self.outputs.lost(node, req, list(rows_of(node, req, None, reason)))

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
                self.outputs.tick(None)
            return 0
        while True:
            kind, node, payload = event
            if kind == "frames":
                for frame in payload:
                    self._frame(node, frame)
            elif kind == "dead":
                self._node_dead(node, payload)
            elif kind == "stop":
                if self.asked is None:
                    self.asked = payload
                raise StopAsked(payload)
            elif kind == "closed" and self.per_node[node] > 0 and self.asked is None:
                # the node sends its stream's end only after its last result: the rest is lost (unless the run was
                # asked to stop and cancelled them: those were dropped on purpose, never sent or never answered)
                self._node_dead(node, f"result stream ended with {self.per_node[node]} requests outstanding")
            n += 1
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                break
        self.outputs.tick(len(self.inflight))
        if self.bar is not None:
            # once per drain: a bar update (and a look at the clock) per result would cost the master CPU
            self.bar.set_failed(self.results.failed)
            self.bar.update(self.unreported)
            self.unreported = 0
        return n

    def _frame(self, node: str, frame: ResultFrame) -> None:
        """A node's frame: to every output (its rows to requests.csv first), its requests out of flight, the
        planner told of pushes."""
        if node in self.dead:
            return  # its requests in flight were written as lost when it was given up on
        self.outputs.frame(node, frame)
        if frame.refused and self.renewal is not None:
            self.renewal.refused(frame.refused)
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
