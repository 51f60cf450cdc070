"""Events on the run's clock, against a real registry: ``events:`` switch Debian's ``docker-registry`` to
read-only and back while a rate-mode replay pushes, a failing event is a warning, a required one stops the run.

The switch is the event's own doing: a small script (written into the test's folder, run without a shell)
stops the serving registry by its pid file, rewrites its config and starts ``docker-registry serve`` again,
as an operator's script would.  What is checked is what the run recorded (events.csv, the rows in the
window, the exit code), never how long anything took.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import yaml

from drtp.cli import main
from drtp.master.run.warmup import run_warmup
from drtp.registry.local import LocalRegistry, registry_binary
from drtp.replay.event_log import read_events
from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.reader import write_ibm
from tests.replay_support import write_config

pytestmark = pytest.mark.registry

RATE = 25.0  # requests per second: the trace's 100 requests last 4 s on the run's clock
WRITES = ("POST", "PATCH", "PUT")

SWITCH = textwrap.dedent(
    """\
    # Switch a running docker-registry to read-only or back: stop it (by its pid file), rewrite the
    # readonly setting of its config, start it again on the same port, record the new pid.
    import os, re, signal, sys, time
    from pathlib import Path
    from drtp.registry.local import LocalRegistry, registry_binary

    workdir, port, mode = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    delay = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    time.sleep(delay)  # the window's length: the registry stays as it is meanwhile
    pid_file = workdir / "registry.pid"
    pid = int(pid_file.read_text())
    os.kill(pid, signal.SIGTERM)
    for _ in range(200):  # its port closed: the old one is gone (a zombie of the test's own still answers kill 0)
        try:
            import socket
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            time.sleep(0.05)
        except OSError:
            break
    reg = LocalRegistry(workdir, port=port, delete=True, readonly=(mode == "readonly"))
    reg.start()
    if reg.port != port:
        sys.exit(f"port {port} was taken: the registry moved to {reg.port}")
    pid_file.write_text(str(reg.proc.pid))
    print(f"registry {mode} on port {port}, pid {reg.proc.pid}")
    """
)


@pytest.fixture(scope="module")
def warmed(tmp_path_factory, nodes):
    """(registry folder, port, trace, warmup map): a trace with pushes, warmed up on a registry whose pid file
    the switch script keeps (the registry it started last is stopped at the end)."""
    workdir = tmp_path_factory.mktemp("events-warm")
    opts = GenerateOptions(requests=100, seed=3, span_s=60, clients=40, repositories=6, push_ratio=0.5,
                           max_layer_size=4_000)  # fmt: skip
    trace = workdir / "trace.json"
    write_ibm(trace, generate(opts))
    regdir = workdir / "registry"
    reg = LocalRegistry(regdir, delete=True).start()
    (regdir / "registry.pid").write_text(str(reg.proc.pid))
    (workdir / "switch.py").write_text(SWITCH)
    try:
        run_warmup(write_config(workdir, trace, [reg.host], [n.address for n in nodes]), quiet=True)
        yield regdir, reg.port, trace, workdir
    finally:
        last = int((regdir / "registry.pid").read_text())
        reg.stop()
        if last != (reg.proc.pid if reg.proc else -1):
            try:
                os.kill(last, signal.SIGTERM)
            except ProcessLookupError:
                pass


def setup(tmp_path: Path, warmed, nodes, events: list[dict]) -> Path:
    regdir, port, trace, workdir = warmed
    (tmp_path / "warmup-map.jsonl").write_bytes((workdir / "warmup-map.jsonl").read_bytes())
    write_config(tmp_path, trace, [f"127.0.0.1:{port}"], [n.address for n in nodes], threads=16)
    path = tmp_path / "config.yaml"
    data = yaml.safe_load(path.read_text())
    data["events"] = events
    path.write_text(yaml.safe_dump(data))
    return path


def drtp_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "drtp.cli", "run", "-c", str(tmp_path / "config.yaml"), "--rate", f"{RATE:g}",
           "--max-failed", "100%", "-q", *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ))


def rows_of(run_dir: Path) -> pd.DataFrame:
    rows = pd.read_csv(run_dir / "requests.csv", keep_default_na=False, na_values=[""])
    return rows[~rows.auxiliary]


def test_events_switch_the_registry_read_only_and_back_and_the_window_holds_the_refused_writes(tmp_path, warmed, nodes):
    regdir, port, _, workdir = warmed
    switch = [sys.executable, str(workdir / "switch.py"), str(regdir), str(port)]
    collect = [registry_binary(), "garbage-collect", str(regdir / "config.yml")]
    setup(tmp_path, warmed, nodes, [
        {"name": "readonly", "at": "0.5s", "run": [*switch, "readonly"], "until": [*switch, "writable", "1.5"]},
        {"name": "gc", "at": "1s", "run": collect},  # the collector, run while the registry serves
    ])  # fmt: skip
    run_dir = tmp_path / "run"
    proc = drtp_run(tmp_path, "--out", str(run_dir))
    assert proc.returncode in (0, 1), proc.stderr
    event, gc = read_events(run_dir / "events.csv")
    assert gc.name == "gc" and gc.exit_code == 0 and "blobs marked" in (run_dir / "events" / "gc.log").read_text()
    assert event.name == "readonly" and event.planned_s == 0.5 and event.exit_code == 0
    assert event.started_s is not None and event.ended_s is not None and event.started_s < event.ended_s
    log = (run_dir / "events" / "readonly.log").read_text()
    assert "registry readonly on port" in log and "registry writable on port" in log
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] is True and summary["requests"] == 100
    rows = rows_of(run_dir)
    inside = rows[(rows.start_s >= event.started_s) & (rows.start_s < event.ended_s) & rows.method.isin(WRITES)]
    refused = inside[(inside.status == 405) | inside.outcome.isin(["refused", "reset"])]
    assert len(refused) >= 1, inside[["method", "start_s", "status", "outcome", "error"]].to_string()
    # the registry is writable again: its config as the event left it, and the pid file names a live process
    assert "enabled: false" in (regdir / "config.yml").read_text().split("readonly:")[1].splitlines()[1]
    os.kill(int((regdir / "registry.pid").read_text()), 0)
    # summary.json's windows: the writes refused in the read-only window are counted there, per class
    windows = {e["name"]: e for e in summary["events"]}
    assert set(windows) == {"readonly", "gc"} and "recovery_s" in windows["readonly"]
    during = windows["readonly"]["windows"]["during"]
    counted = during["failed_statuses"].get("405", 0) + during["auxiliary"]["failed_statuses"].get("405", 0)
    every = rows_of_all(run_dir)
    window = every[(every.start_s >= event.started_s) & (every.start_s < event.ended_s)]
    assert counted == int((window.status == 405).sum()) >= 1
    refused = during["failures"].get("refused", 0) + during["auxiliary"]["failures"].get("refused", 0)
    assert refused == int((window.outcome == "refused").sum())
    # the report draws the windows as named bands; drtp verify then finds every object drtp's records say the
    # registry holds and a tagged manifest names (the warmed registry is shaped like a real one)
    analysis = tmp_path / "analysis"
    assert main(["analyze", "results", str(run_dir), "--out", str(analysis)]) == 0
    assert "Maintenance events" in (analysis / "report.html").read_text()
    verify = tmp_path / "verify.json"
    assert main(["verify", "-c", str(tmp_path / "config.yaml"), "--run", str(run_dir), "-o", str(verify)]) == 0
    checked = json.loads(verify.read_text())
    (registry,) = checked["registries"].values()
    assert registry["referenced_lost"] == 0 and registry["counts"]["ok"] > 0, registry["counts"]


def rows_of_all(run_dir: Path) -> pd.DataFrame:
    """Every row of requests.csv, helper requests too."""
    return pd.read_csv(run_dir / "requests.csv", keep_default_na=False, na_values=[""])


def test_a_failing_event_is_one_warning_and_the_run_completes(tmp_path, warmed, nodes):
    # given on the command line: it replaces the config's event (which would stop the run)
    setup(tmp_path, warmed, nodes, [{"name": "other", "at": "0.5s", "run": ["false"], "required": True}])
    fail = f"{sys.executable} -c \"import sys; print('maintenance broke'); sys.exit(4)\""
    run_dir = tmp_path / "run"
    proc = drtp_run(tmp_path, "--out", str(run_dir), "--event", f"broken@0.5s:{fail}")
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "event broken" in line]
    assert warnings == ["drtp: warning: event broken failed (exit 4; its output: events/broken.log); the run goes on"]
    assert json.loads((run_dir / "summary.json").read_text())["complete"] is True
    assert len(rows_of(run_dir)) == 100
    (event,) = read_events(run_dir / "events.csv")
    assert event.exit_code == 4 and event.ended_s is not None
    assert "maintenance broke" in (run_dir / "events" / "broken.log").read_text()


def test_a_required_event_that_fails_stops_the_run_with_exit_3_and_keeps_the_rows(tmp_path, warmed, nodes):
    fail = [sys.executable, "-c", "import sys; sys.exit(2)"]
    setup(tmp_path, warmed, nodes, [{"name": "must", "after": 20, "run": fail, "required": True}])
    run_dir = tmp_path / "run"
    proc = drtp_run(tmp_path, "--out", str(run_dir))
    assert proc.returncode == 3, proc.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] is False and "required event must failed (exit 2" in summary["incomplete_reason"]
    rows = rows_of(run_dir)
    # the event came after 20 answers; the rows that came are kept, the trace's rest was never sent
    assert 20 <= len(rows) < 100 and summary["requests"] == len(rows)
    (event,) = read_events(run_dir / "events.csv")
    assert event.planned_s is None and event.exit_code == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("drtp run: error: the run did not finish: required event")
