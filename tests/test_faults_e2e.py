"""Honest results under faults: ``drtp run`` through client nodes and a fault-injecting proxy to a real registry.

The proxy forwards every request to the registry exactly once and puts the
fault on the answer, recording what a correct replayer must report for it.
Three witnesses are compared: the proxy's record of injected faults, drtp's
``requests.csv``, and the registry's own JSON log (what it really received).
"""

from __future__ import annotations

import email.utils
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from drtp.master.outputs.results import format_table
from drtp.master.run.warmup import run_warmup
from drtp.registry.local import LocalRegistry
from drtp.registry.manifest import CONFIG_DIGEST
from drtp.replay.result_row import COLUMNS
from drtp.replay.stats_file import STATS_LATER
from drtp.trace.reader import TraceReader
from tests.faultproxy import (
    KINDS,
    Chosen,
    FaultPlan,
    FaultProxy,
    Injected,
    Mixed,
    can_cause,
    fault_class,
    is_replayed,
)
from tests.registry_log import logged_requests
from tests.replay_support import make_trace, write_config

pytestmark = pytest.mark.registry

TIMEOUT_S = 3.0  # client_info.timeout of the runs: a loaded machine's registry answers well within it
DELAY_S = 3.5  # how long a delay fault holds an answer: past the client's timeout
TRACE_REQUESTS = 300
NEVER_SENT = frozenset(("not-sent", "lost"))  # rows of requests that never reached the registry


@dataclass(frozen=True)
class Replayed:
    """One ``drtp run`` through the proxy, and its three witnesses."""

    rows: pd.DataFrame  # requests.csv, trace and auxiliary rows
    summary: dict
    injected: list[Injected]
    forwarded: Counter  # per method, replayed paths only (not the run's preflight)
    logged: Counter  # per method, from the registry's log, replayed paths only
    returncode: int
    stderr: str
    run_dir: Path
    stdout: str = ""


@pytest.fixture(scope="module")
def warmed(tmp_path_factory, nodes):
    """A registry warmed up directly (no proxy) for a generated trace: (registry, trace, warmup map)."""
    workdir = tmp_path_factory.mktemp("warm")
    trace = make_trace(workdir / "trace.json", requests=TRACE_REQUESTS, span=30.0)
    with LocalRegistry(workdir / "registry") as reg:
        cfg = write_config(workdir, trace, [reg.host], [n.address for n in nodes])
        run_warmup(cfg, quiet=True)
        yield reg, trace, workdir / "warmup-map.jsonl"


def replay(
    tmp_path: Path,
    warmed,
    nodes,
    plan: FaultPlan,
    max_failed: str | None = None,
    retry_after: str | None = "1",
    **client_info,
) -> Replayed:
    """``drtp run`` (a subprocess: its exit code counts) with the registry behind a FaultProxy running ``plan``
    (its injected 429 and 503 answers carry ``Retry-After: retry_after``)."""
    reg, trace, warm_map = warmed
    shutil.copy(warm_map, tmp_path / "warmup-map.jsonl")
    offset = reg.log_path.stat().st_size
    run_dir = tmp_path / "run"
    with FaultProxy(reg.host, plan, delay_s=DELAY_S, retry_after=retry_after) as proxy:
        write_config(tmp_path, trace, [proxy.address], [n.address for n in nodes], timeout=TIMEOUT_S, **client_info)
        cmd = [sys.executable, "-m", "drtp.cli", "run", "-c", str(tmp_path / "config.yaml"), "--out", str(run_dir)]
        if max_failed is not None:
            cmd += ["--max-failed", max_failed]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ))
        assert proxy.errors == []
        injected = proxy.injected
        forwarded = Counter(f.method for f in proxy.forwarded if is_replayed(f.method, f.path))
    logged = Counter(x.method for x in logged_requests(reg.log_path, offset) if is_replayed(x.method, x.path))
    assert (run_dir / "summary.json").exists(), proc.stderr[-3000:]
    rows = pd.read_csv(run_dir / "requests.csv", keep_default_na=False, na_values=[""])
    summary = json.loads((run_dir / "summary.json").read_text())
    return Replayed(rows, summary, injected, forwarded, logged, proc.returncode, proc.stderr, run_dir, proc.stdout)


def check_honest(
    run: Replayed, trace: Path, retried: frozenset[str] = frozenset(), retry_after_s: tuple[float, float] = (1.0, 1.0)
) -> None:
    """What every faulted run must show, whatever the faults were.

    ``retried``: fault kinds a GET/HEAD is sent again after (client_info.retries): those
    faults end as a second attempt, not as a failed row.  ``retry_after_s``: the range the
    Retry-After of the proxy's 429 and 503 answers must be recorded in (seconds).
    """
    records = list(TraceReader([trace]))
    rows = run.rows
    main = rows[~rows.auxiliary]
    assert len(main) == len(records) == run.summary["requests"]
    assert set(main.trace_id) == {r.id for r in records}
    assert run.injected, "the plan injected nothing: the test tests nothing"

    # every injected fault is a failed row of its class (trace and auxiliary rows together) ...
    failed = rows[rows.outcome != "ok"]
    caused = failed[failed.outcome.combine(failed.status, can_cause).astype(bool)]
    absorbed = [f for f in run.injected if f.method in ("GET", "HEAD") and f.kind in retried]
    want = Counter((f.method, fault_class(f.outcome, f.status)) for f in run.injected if f not in absorbed)
    got = Counter((m, fault_class(o, s)) for m, o, s in zip(caused.method, caused.outcome, caused.status, strict=True))
    assert got == want, _explain(run, caused)
    assert (rows.ok == (rows.outcome == "ok")).all()
    # ... and a faulted read is never a row that says ok: per (method, path), failed rows cover the faults
    faulted_reads = Counter(
        (f.method, f.path) for f in run.injected if f.method in ("GET", "HEAD") and f not in absorbed
    )
    failed_reads = Counter(zip(failed.method, _paths(failed), strict=True))
    assert all(failed_reads[k] >= n for k, n in faulted_reads.items()), faulted_reads - failed_reads

    # the registry received each request exactly as often as drtp says it sent it: nothing re-sent
    sent = rows[~rows.outcome.isin(NEVER_SENT)]
    attempts = Counter()
    for method, n in zip(sent.method, sent.attempts, strict=True):
        attempts[method] += int(n)
    assert run.logged == run.forwarded == attempts
    for method in ("POST", "PATCH", "PUT"):
        assert run.logged[method] == (sent.method == method).sum(), method
    # a second attempt for each fault a retry absorbed, and none for anything else
    again = Counter()
    for method, n in zip(sent.method, sent.attempts, strict=True):
        again[method] += int(n) - 1
    assert +again == Counter(f.method for f in absorbed)

    # the summary counts the same failures as the rows, per class, trace and helper requests apart
    assert run.summary["failed"] == int((main.outcome != "ok").sum()) > 0
    assert run.summary["succeeded"] == int((main.outcome == "ok").sum())
    assert run.summary["failures"] == dict(Counter(main.outcome[main.outcome != "ok"]))
    helpers = rows[rows.auxiliary]
    assert run.summary["auxiliary"]["requests"] == len(helpers)
    assert run.summary["auxiliary"]["failures"] == dict(Counter(helpers.outcome[helpers.outcome != "ok"]))
    check_statuses(run, retry_after_s)


def failed_statuses(rows: pd.DataFrame) -> dict[str, int]:
    """Failed rows per status of their answer, as summary.json keeps them (no answer, no status: not counted)."""
    answered = rows[(rows.outcome != "ok") & (rows.status > 0)]
    return {str(k): int(v) for k, v in sorted(Counter(answered.status).items())}


def check_statuses(run: Replayed, retry_after_s: tuple[float, float]) -> None:
    """Throttling in plain sight: failed requests per HTTP status in summary.json (overall, per method+kind, per
    node, helpers apart) and per interval in stats_history.csv, as the rows say; the Retry-After of each injected
    429/503 in its row, and in no other."""
    rows = run.rows
    main = rows[~rows.auxiliary]
    assert run.summary["failed_statuses"] == failed_statuses(main)
    for key, part in main.groupby(main.method + " " + main.kind):
        assert run.summary["per_method"][key]["failed_statuses"] == failed_statuses(part), key
    for node, part in main.groupby("node"):
        assert run.summary["per_node"][node]["failed_statuses"] == failed_statuses(part), node
    assert run.summary["auxiliary"]["failed_statuses"] == failed_statuses(rows[rows.auxiliary])
    told = rows.status.isin((429, 503)) & (rows.outcome == "http")  # only the proxy answers these
    low, high = retry_after_s
    assert rows.retry_after_s[told].between(low, high).all(), rows[told][["method", "status", "retry_after_s"]]
    assert rows.retry_after_s[~told].isna().all()
    history = pd.read_csv(run.run_dir / "stats_history.csv")
    assert history.throttled.sum() == run.summary["failed_statuses"].get("429", 0)
    assert history.failures.sum() == run.summary["failed"]


def check_analysis_agrees(run: Replayed, out: Path) -> None:
    """``drtp analyze results`` on the faulted run gives summary.json's numbers, failures per class included."""
    proc = subprocess.run(
        [sys.executable, "-m", "drtp.cli", "analyze", "results", str(run.run_dir), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = json.loads((out / "results.json").read_text())
    analysis = saved[run.run_dir.name]
    keys = ("requests", "succeeded", "failed", "failures", "failed_statuses", "lost", "bytes", "auxiliary")
    for key in (*keys, "duration_s"):
        assert analysis[key] == run.summary[key], key
    for q in ("p50", "p99", "max"):
        assert analysis["latency_s"][q] == run.summary["latency_s"][q], q
    assert analysis["per_method"] == run.summary["per_method"]
    failures = pd.read_csv(out / "failures.csv", index_col=0)
    assert failures[run.run_dir.name].to_dict() == run.summary["failures"]


# The GET/HEAD helper requests a node sends, by the ``reference`` their rows carry: (kind, target)
HELPER_READS = {"config blob check": ("blob", CONFIG_DIGEST)}


def _paths(rows: pd.DataFrame) -> list[str]:
    """The request path of each GET/HEAD row: blobs by digest, manifests by the trace's reference,
    a helper read by what it reads (its row names the helper, not the object)."""
    out = []
    columns = (rows.repository, rows.kind, rows.reference, rows.digest, rows.auxiliary)
    for repo, kind, ref, digest, helper in zip(*columns, strict=True):
        if helper and ref in HELPER_READS:
            kind, target = HELPER_READS[ref]
        else:
            target = digest if kind == "blob" and isinstance(digest, str) and digest else ref
        out.append(f"/v2/{repo}/{kind}s/{target}")
    return out


def _explain(run: Replayed, caused: pd.DataFrame) -> str:
    cols = ["method", "kind", "reference", "status", "outcome", "error", "auxiliary"]
    return (
        f"injected: {Counter((f.method, f.kind, f.outcome, f.status) for f in run.injected)}\n"
        f"failed rows:\n{caused[cols].to_string()}"
    )


@pytest.mark.parametrize("kind", KINDS)
def test_each_fault_kind_is_reported_as_its_class(tmp_path, warmed, nodes, kind):
    """A few requests of every method get the fault; each is a failed row of the right class, never re-sent."""
    plan = Chosen(kinds=(kind,), per_kind=3, start=1, gap=3)
    run = replay(tmp_path, warmed, nodes, plan)
    check_honest(run, warmed[1])
    assert {f.kind for f in run.injected} == {kind}
    assert {"GET", "HEAD", "POST", "PATCH", "PUT"} <= {f.method for f in run.injected}
    # failed trace requests and the default max_failed of 0: completed, but too many failed
    assert run.returncode == 1, run.stderr[-3000:]


@pytest.mark.parametrize("engine", ["auto", "threads"], ids=["loop", "threads"])
def test_mixed_faults_on_a_tenth_of_the_requests(tmp_path, warmed, nodes, engine):
    """About 10 % of the requests get a fault of any kind; a generous --max-failed makes the exit code 0."""
    run = replay(tmp_path, warmed, nodes, Mixed(rate=0.1, seed=11), max_failed="50%", engine=engine)
    check_honest(run, warmed[1])
    assert len({f.kind for f in run.injected}) >= 4
    failed = int((~run.rows[~run.rows.auxiliary].ok).sum())
    assert 0 < failed <= TRACE_REQUESTS // 2
    assert run.returncode == 0, run.stderr[-3000:]
    check_analysis_agrees(run, tmp_path / "analysis")


def test_retries_send_reads_again_only_when_no_answer_byte_came(tmp_path, warmed, nodes):
    """With client_info.retries, a GET/HEAD whose answer never began (closed, held past the timeout) is sent
    again and counted as an attempt; a read cut after its first byte, and any write, is never sent again."""
    plan = Chosen(kinds=("close", "delay", "reset"), per_kind=1, start=1, gap=3)
    run = replay(tmp_path, warmed, nodes, plan, retries=1)
    check_honest(run, warmed[1], retried=frozenset(("close", "delay")))
    kinds = Counter((f.method, f.kind) for f in run.injected)
    assert kinds[("GET", "close")] and kinds[("GET", "delay")] and kinds[("PUT", "close")] and kinds[("POST", "delay")]
    assert (run.rows.attempts > 1).any()


def test_throttling_in_plain_sight(tmp_path, warmed, nodes):
    """429s and 503s with a Retry-After as an HTTP-date: each failed row keeps the seconds it was told, summary.json,
    the console table, stats_history.csv and the analysis report count the failures per status.  (Both engines
    keep a delta-seconds Retry-After in test_mixed_faults_on_a_tenth_of_the_requests, through check_honest.)"""
    come_back = email.utils.formatdate(time.time() + 600, usegmt=True)  # ten minutes from now
    plan = Chosen(kinds=("429", "503"), per_kind=3, start=1, gap=3)
    run = replay(tmp_path, warmed, nodes, plan, max_failed="50%", retry_after=come_back)
    check_honest(run, warmed[1], retry_after_s=(500.0, 600.0))  # the date has whole seconds; the run takes a while
    statuses = run.summary["failed_statuses"]
    assert statuses.get("429", 0) >= 3 and statuses.get("503", 0) >= 3
    assert run.returncode == 0, run.stderr[-3000:]
    # the console prints the summary's table: a column per status beside the outcome classes
    table = format_table(run.summary)
    assert table in run.stdout
    head = table.splitlines()[0]
    assert "HTTP 429" in head and "HTTP 503" in head
    check_analysis_agrees(run, tmp_path / "analysis")
    by_status = pd.read_csv(tmp_path / "analysis" / "failed_statuses.csv", index_col=0)
    assert {str(k): int(v) for k, v in by_status[run.run_dir.name].items()} == statuses
    assert "Trace requests per HTTP status" in (tmp_path / "analysis" / "report.html").read_text()


def test_resuming_an_older_versions_run_is_refused_in_one_line(tmp_path, warmed, nodes):
    """A run directory whose files lack this version's columns is not resumed: one line, exit 2, files untouched."""
    reg, trace, warm_map = warmed
    shutil.copy(warm_map, tmp_path / "warmup-map.jsonl")
    write_config(tmp_path, trace, [reg.host], [n.address for n in nodes])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    older = ",".join(c for c in COLUMNS if c != "retry_after_s") + "\n"
    (run_dir / "requests.csv").write_text(older)
    stats = "elapsed_s,requests,failures,bytes,rate_per_s,p50_ms,p99_ms\n"
    (run_dir / "stats_history.csv").write_text(stats)
    cmd = [sys.executable, "-m", "drtp.cli", "run", "-c", str(tmp_path / "config.yaml"), "--out", str(run_dir)]
    proc = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    # the history of before the throttled column lacks every column added since (stats_file's ``later`` ones)
    assert f"written by another drtp version (no column {', '.join(STATS_LATER)})" in line, line
    assert "stats_history.csv" in line and "new results directory" in line
    assert (run_dir / "requests.csv").read_text() == older and (run_dir / "stats_history.csv").read_text() == stats
