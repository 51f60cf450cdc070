"""Exit codes of real runs: a registry that goes away after the preflight, a results file that cannot grow
(RLIMIT_FSIZE) mid-run, and an experiment whose registries end differently."""

from __future__ import annotations

import datetime as _dt
import json
import os
import resource
import signal
import subprocess
import sys
import threading

import pandas as pd
import pytest
import yaml

from drtp.cli import main
from drtp.master.run import replay as master_run
from drtp.master.run.nodes import NodeLink
from drtp.master.run.warmup import run_warmup
from drtp.registry.local import LocalRegistry, free_port
from tests.replay_support import TOKEN, Node, make_trace, write_config

pytestmark = pytest.mark.registry


@pytest.fixture
def nodes(tmp_path):
    started = [Node(tmp_path), Node(tmp_path)]
    yield started
    for n in started:
        n.stop()


def _rows(run_dir) -> pd.DataFrame:
    df = pd.read_csv(run_dir / "requests.csv", keep_default_na=False, na_values=[""])
    return df[~df.auxiliary]


def run_with_file_limit(config, out, limit: int) -> subprocess.CompletedProcess:
    """``drtp run`` as a process whose files may not grow past ``limit`` bytes."""

    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, no signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "drtp.cli", "run", "-c", str(config), "--out", str(out)],
        capture_output=True,
        text=True,
        preexec_fn=limit_file_size,
        timeout=120,
    )


def _lines(err: str, text: str) -> list[str]:
    return [line for line in err.splitlines() if text in line]


def test_a_registry_gone_after_the_preflight_is_exit_1_and_said_so(tmp_path, nodes, capsys, monkeypatch):
    trace = make_trace(tmp_path / "trace.json", requests=200, span=20.0)
    with LocalRegistry(tmp_path / "registry") as reg:
        cfg = write_config(tmp_path, trace, [reg.host], [n.address for n in nodes])
        run_warmup(cfg, quiet=True)
        real_preflight = master_run.preflight_all

        def preflight_then_stop(*args, **kwargs):
            real_preflight(*args, **kwargs)  # the real registry answers it…
            reg.stop()  # …and is gone before the first request

        monkeypatch.setattr(master_run, "preflight_all", preflight_then_stop)
        config = str(tmp_path / "config.yaml")
        capsys.readouterr()
        assert main(["run", "-c", config, "--out", str(tmp_path / "run")]) == 1
        err = capsys.readouterr().err
        assert "Traceback" not in err
        said = _lines(err, "nothing succeeded")
        assert said == ["drtp run: error: nothing succeeded: all 200 trace requests failed (max_failed 0 allows 0)"], (
            err
        )

        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        rows = _rows(tmp_path / "run")
        assert summary["failed"] == summary["requests"] == len(rows) == 200 and not rows.ok.any()
        assert summary["complete"] is True and "incomplete_reason" not in summary
        assert (rows.status == 0).all()
        # the start is recorded as wall-clock time, and both forms agree
        started = _dt.datetime.fromisoformat(summary["started_at"])
        assert started.utcoffset() == _dt.timedelta(0)
        assert started.timestamp() == pytest.approx(summary["start_epoch"], abs=1e-3)

        # the same run with every failure tolerated passes, and still says that nothing succeeded
        reg.start()
        assert main(["run", "-c", config, "--out", str(tmp_path / "run-2"), "--max-failed", "100%"]) == 0
        err = capsys.readouterr().err
        assert len(_lines(err, "nothing succeeded: all 200 trace requests failed")) == 1, err
        assert json.loads((tmp_path / "run-2" / "summary.json").read_text())["succeeded"] == 0


def test_a_results_file_that_cannot_grow_cancels_the_run_and_exit_3(tmp_path, nodes):
    """The master as a process with a file size limit: requests.csv hits it mid-run (EFBIG), summary.json
    (smaller) is still written, marked incomplete, and the nodes drop what they still held."""
    trace = make_trace(tmp_path / "trace.json", requests=400, span=40.0)
    limit = 24_000  # bytes: above config.json and summary.json, far below the run's requests.csv
    with LocalRegistry(tmp_path / "registry") as reg:
        cfg = write_config(
            tmp_path, trace, [reg.host], [n.address for n in nodes], wait=True, speedup=4.0, inflight=40, batch=10
        )
        run_warmup(cfg, quiet=True)
        log_offset = reg.log_path.stat().st_size

        out = tmp_path / "run"
        proc = run_with_file_limit(tmp_path / "config.yaml", out, limit)
        for n in nodes:  # the nodes were told to cancel: they said so, hold nothing queued, and still serve
            runs = NodeLink(n.address, TOKEN, None).check()["runs"]
            assert all(r["queued"] == 0 for r in runs.values()), runs
            assert " cancelled; " in n.log.read_text()
        with open(reg.log_path, "rb") as f:
            f.seek(log_offset)
            registry_saw = sum(b'"http.request.method"' in line for line in f)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    errors = _lines(proc.stderr, "drtp run: error:")
    assert len(errors) == 1, proc.stderr[-3000:]
    assert errors[0].startswith(
        f"drtp run: error: the run did not finish: writing {out / 'requests.csv'} failed (File too large)"
    )
    assert errors[0].endswith("summary.json is marked incomplete")

    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False
    assert "File too large" in summary["incomplete_reason"] and "cancelled" in summary["incomplete_reason"]
    assert summary["trace_requests"] == 400
    assert (out / "requests.csv").stat().st_size <= limit
    # the run stopped early: the registry got fewer than the trace's requests
    assert registry_saw < 400


def test_when_even_summary_json_cannot_be_written_it_says_so(tmp_path, nodes):
    trace = make_trace(tmp_path / "trace.json", requests=300, span=30.0)
    limit = 3_000  # config.json fits; requests.csv and summary.json do not
    with LocalRegistry(tmp_path / "registry") as reg:
        write_config(tmp_path, trace, [reg.host], [n.address for n in nodes], wait=True, speedup=6.0, inflight=40)
        from drtp.config import load_config

        run_warmup(load_config(tmp_path / "config.yaml"), quiet=True)

        out = tmp_path / "run"
        proc = run_with_file_limit(tmp_path / "config.yaml", out, limit)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    errors = _lines(proc.stderr, "drtp run: error:")
    assert len(errors) == 1, proc.stderr[-3000:]
    assert f"writing {out / 'requests.csv'} failed (File too large)" in errors[0]
    assert f"and writing {out / 'summary.json'} failed (File too large): the run's figures are lost" in errors[0]
    assert not (out / "summary.json").exists()  # not a torn one that would pass for a result
    assert os.path.getsize(out / "config.json") > 0


def test_an_experiment_exits_with_its_worst_registry(tmp_path, nodes):
    trace = make_trace(tmp_path / "trace.json", requests=100)
    with LocalRegistry(tmp_path / "registry") as reg:
        cfg = {
            "trace": {"location": str(tmp_path), "traces": [trace.name]},
            "client_info": {"client_list": [n.address for n in nodes], "token": TOKEN},
            "warmup": {"output": str(tmp_path / "warmup.jsonl")},
            "registries": [
                {"id": "up", "url": reg.url, "insecure": True},
                {"id": "gone", "url": f"http://127.0.0.1:{free_port()}", "insecure": True},
            ],
        }
        (tmp_path / "exp.yaml").write_text(yaml.safe_dump(cfg))
        code = main(["experiment", "-c", str(tmp_path / "exp.yaml"), "--out", str(tmp_path / "exp")])
    status = json.loads((tmp_path / "exp" / "experiment.json").read_text())
    assert status["up"]["ok"] and status["up"]["exit_code"] == 0 and status["up"]["failed"] == 0
    assert not status["gone"]["ok"] and status["gone"]["exit_code"] == 3  # the preflight could not reach it
    assert code == 3


def test_every_client_node_dying_is_a_run_that_did_not_finish(tmp_path, nodes, capsys):
    trace = make_trace(tmp_path / "trace.json", requests=300, span=30.0)
    with LocalRegistry(tmp_path / "registry") as reg:
        cfg = write_config(tmp_path, trace, [reg.host], [n.address for n in nodes], wait=True, speedup=3.0)
        run_warmup(cfg, quiet=True)
        killers = [threading.Timer(1.5, n.kill) for n in nodes]
        for k in killers:
            k.start()
        code = main(["run", "-c", str(tmp_path / "config.yaml"), "--out", str(tmp_path / "run")])
        for k in killers:
            k.join()
    err = capsys.readouterr().err
    assert code == 3, err[-2000:]
    assert "Traceback" not in err
    errors = _lines(err, "drtp run: error:")
    assert len(errors) == 1 and errors[0].startswith("drtp run: error: the run did not finish: every client node died")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["complete"] is False and summary["incomplete_reason"].startswith("every client node died")
    assert set(summary["dead_nodes"]) == {n.address for n in nodes}
    assert summary["not_sent"] > 0 and summary["requests"] + summary["not_sent"] == 300
