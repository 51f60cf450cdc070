"""Exit codes without a registry: the max_failed budget, the verdict, bad inputs (2) and unwritable results (3)."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from fractions import Fraction

import pytest
import yaml

from drtp.cli import main
from drtp.exit_codes import ExitCode, worst
from drtp.master.run.verdict import judge
from drtp.registry.local import free_port
from drtp.replay.failure_budget import FailureBudget, parse_max_failed
from tests.replay_support import TOKEN, make_trace


@pytest.mark.parametrize(
    ("value", "budget"),
    [
        (0, FailureBudget(count=0)),
        (7, FailureBudget(count=7)),
        ("7", FailureBudget(count=7)),
        ("1%", FailureBudget(percent=Fraction(1))),
        ("0.5%", FailureBudget(percent=Fraction(1, 2))),
        (" 100 % ", FailureBudget(percent=Fraction(100))),
    ],
)
def test_max_failed_accepts_a_count_or_a_percentage(value, budget):
    assert parse_max_failed(value) == budget


@pytest.mark.parametrize("value", ["abc", -1, "-1", "150%", "100.01%", "nan", "nan%", math.nan, True, "1.5", "", "%"])
def test_max_failed_refuses_anything_else(value):
    with pytest.raises(ValueError, match="expected a count"):
        parse_max_failed(value)


def test_a_percentage_is_of_the_trace_requests_and_exact():
    assert FailureBudget(percent=Fraction(1)).limit(300) == 3
    assert FailureBudget(percent=Fraction(1, 2)).limit(999) == 4
    assert FailureBudget(percent=Fraction(100)).allows(300, 300)
    assert not FailureBudget(percent=Fraction(1)).allows(4, 300)
    assert FailureBudget(count=3).allows(3, 10) and not FailureBudget(count=3).allows(4, 10)


def _summary(requests: int, succeeded: int, not_sent: int = 0) -> dict:
    failed = requests - succeeded
    return {"requests": requests, "succeeded": succeeded, "failed": failed, "trace_requests": requests + not_sent,
            "not_sent": not_sent}  # fmt: skip


def test_verdict():
    zero = FailureBudget(count=0)
    assert judge(_summary(300, 300), zero).code is ExitCode.OK
    v = judge(_summary(300, 290), zero)
    assert v.code is ExitCode.TOO_MANY_FAILED and v.failed == 10
    assert v.message == "10 of 300 trace requests failed (3.33%); max_failed 0 allows 0"
    assert judge(_summary(300, 290), FailureBudget(percent=Fraction(4))).code is ExitCode.OK
    v = judge(_summary(300, 0), zero)
    assert v.code is ExitCode.TOO_MANY_FAILED and v.message.startswith("nothing succeeded: all 300 trace requests")
    # nothing succeeded is said even when the budget lets the run pass
    v = judge(_summary(300, 0), FailureBudget(percent=Fraction(100)))
    assert v.code is ExitCode.OK and v.message.startswith("nothing succeeded")
    # requests never sent count as failed
    assert judge(_summary(290, 290, not_sent=10), FailureBudget(count=9)).code is ExitCode.TOO_MANY_FAILED


def test_an_incomplete_summary_is_never_judged_a_result():
    """Whoever judges a summary marked incomplete gets the code of a run that could not finish, not 0."""
    everything = FailureBudget(percent=Fraction(100))
    broken = {**_summary(300, 300), "complete": False, "incomplete_reason": "internal error in replay (KeyError: 1)"}
    v = judge(broken, everything)
    assert (
        v.code is ExitCode.CANNOT_RUN and v.message == "the run did not finish: internal error in replay (KeyError: 1)"
    )
    interrupted = {**_summary(300, 300), "complete": False, "interrupted": True, "incomplete_reason": "interrupted"}
    assert judge(interrupted, everything).code is ExitCode.INTERRUPTED
    # the figures a bug in the results left out: still judged, as could not finish
    assert judge({"complete": False, "trace_requests": 300}, everything).code is ExitCode.CANNOT_RUN
    assert judge({**_summary(300, 300), "complete": True}, everything).code is ExitCode.OK


def test_the_worst_code_wins():
    assert worst([0, 1, 3, 2]) == 3 and worst([1, 0]) == 1 and worst([3, 130]) == 130 and worst([]) == 0


def _config(tmp_path, experiment: bool = False, **client_info) -> str:
    """A valid run (or experiment) config whose registry and client node do not exist: nothing may reach them."""
    trace = make_trace(tmp_path / "trace.json", requests=20)
    dead = f"127.0.0.1:{free_port()}"
    ci = {"client_list": [dead], "token": TOKEN, **client_info}
    cfg = {
        "trace": {"location": str(tmp_path), "traces": [trace.name]},
        "client_info": ci,
        "warmup": {"output": str(tmp_path / "warmup.jsonl")},
        "results": str(tmp_path / "results"),
    }
    if experiment:
        cfg["registries"] = [{"id": "gone", "url": f"http://{dead}", "insecure": True}]
    else:
        cfg["registry"] = [dead]
    path = tmp_path / ("experiment.yaml" if experiment else "config.yaml")
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if re.match(r"drtp( [a-z-]+)*: error: ", line)]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("bad", ["abc", "-1", "150%", "nan"])
def test_a_bad_max_failed_option_is_one_line_and_exit_2(tmp_path, capsys, bad):
    assert main(["run", "-c", _config(tmp_path), "--max-failed", bad]) == 2
    line = _one_error_line(capsys)
    assert line.startswith("drtp run: error: --max-failed: expected a count") and repr(bad) in line
    assert not (tmp_path / "results").exists()  # refused before anything was made


@pytest.mark.parametrize("bad", ["abc", -1, "150%", "nan"])
def test_a_bad_max_failed_key_is_one_line_and_exit_2(tmp_path, capsys, bad):
    path = _config(tmp_path, max_failed=bad)
    experiment = _config(tmp_path, experiment=True, max_failed=bad)
    for command in (["config", "-c", path], ["run", "-c", path], ["experiment", "-c", experiment]):
        assert main(command) == 2
        assert "key 'client_info.max_failed': expected a count" in _one_error_line(capsys)


def test_unwritable_results_are_found_before_anything_starts(tmp_path, capsys):
    """A bad path is a bad input (exit 2), one line naming the directory, and before the preflight: the
    registry given does not exist, so any later check would have named it instead."""
    cfg = _config(tmp_path)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    for out, why in ((a_file, "is not a directory"), (a_file / "run", "cannot be created (Not a directory)")):
        assert main(["run", "-c", cfg, "--out", str(out)]) == 2
        assert _one_error_line(capsys) == f"drtp run: error: results directory {out} {why}"
    assert main(["experiment", "-c", _config(tmp_path, experiment=True), "--out", str(a_file / "exp")]) == 2
    assert f"results directory {a_file / 'exp'} cannot be created" in _one_error_line(capsys)


def test_a_read_only_results_directory_is_exit_2(tmp_path, capsys, read_only_dir):
    """Root passes every permission check: only a read-only file system really refuses it a write."""
    ro = read_only_dir
    cfg = _config(tmp_path)
    assert main(["run", "-c", cfg, "--out", str(ro)]) == 2
    assert _one_error_line(capsys) == f"drtp run: error: results directory {ro} is not writable (Read-only file system)"
    assert main(["run", "-c", cfg, "--out", str(ro / "run-1")]) == 2
    assert "(Read-only file system)" in _one_error_line(capsys)


def test_an_unreachable_client_node_is_exit_3_not_a_traceback(tmp_path):
    """Through the real command line: the registry is up (a probe server answering /v2/), the node is not."""
    import http.server
    import threading

    class V2(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), V2)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        path = _config(tmp_path)
        data = yaml.safe_load(open(path))
        data["registry"] = [f"127.0.0.1:{server.server_address[1]}"]
        open(path, "w").write(yaml.safe_dump(data))
        proc = subprocess.run([sys.executable, "-m", "drtp.cli", "run", "-c", path], capture_output=True, text=True)
    finally:
        server.shutdown()
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith("drtp run: error: client node 127.0.0.1:") and "does not answer" in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert list((tmp_path / "results").iterdir()) == []  # no empty run directory left for a run that never started
