"""bench/bench_same_run.py's comparison on real runs: two seeded runs of this tree match on every compared
column and count, and one changed answer in a run's files shows as exactly the column and the count it changes."""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import bench_same_run as same  # noqa: E402


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The fail mode (a fault proxy's 503s, never-pushed GETs' 404s) run twice by this checkout's drtp."""
    work = tmp_path_factory.mktemp("same-run")
    trace, fail_trace = same.make_traces(work, 80, 5)
    mode = same.MODES["fail"]
    runs = [same.replay(same.ROOT, mode, trace, fail_trace, work / f"run{i}", 150.0, 7) for i in (0, 1)]
    return runs, same.trace_order(fail_trace)


def test_two_runs_of_one_tree_match(two_runs):
    runs, order = two_runs
    checks = same.compare("fail", *runs, order)
    assert [c.what for c in checks if not c.same] == []
    by_what = {c.what: c for c in checks}
    assert int(by_what["summary failed"].before) > 0  # the failures the mode is for did happen
    assert "summary failures.http" in by_what
    assert not {f"requests.csv {col}" for col in same.DROPPED} & by_what.keys()
    assert {"requests.csv node", "requests.csv digest", "requests.csv status"} <= by_what.keys()


def test_one_changed_answer_shows(two_runs, tmp_path):
    (before, after), order = two_runs
    changed = tmp_path / "run"
    shutil.copytree(after.run, changed)
    with open(changed / "requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    ok = next(r for r in rows if r["status"] == "200" and r["auxiliary"] == "False")
    ok.update(status="500", ok="False", outcome="http", error="HTTP 500")
    with open(changed / "requests.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    summary = json.loads((changed / "summary.json").read_text())
    summary["failed"] += 1
    (changed / "summary.json").write_text(json.dumps(summary))

    checks = same.compare("fail", before, same.Replayed(changed, after.nodes), order)
    differ = {c.what: c for c in checks if not c.same}
    assert set(differ) == {
        "requests.csv status",
        "requests.csv ok",
        "requests.csv outcome",
        "requests.csv error",
        "summary failed",
    }
    assert differ["requests.csv status"].after.startswith(f"1 differ (first: trace_id {ok['trace_id']} row 0: '200'")
    assert same.format_checks(checks, "a", "b").splitlines()[-1].endswith("; 5 differ")
