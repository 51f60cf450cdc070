"""Sampling: the representative day, the steady window and the cuts, on traces with known answers."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pytest

from drtp.errors import DrtpError
from drtp.trace.reader import read_trace, write_ibm
from drtp.trace.sample import sample
from tests.conftest import ibm_record

T0 = dt.datetime(2017, 8, 1, tzinfo=dt.timezone.utc)


def rec(i: int, when: dt.datetime, method: str = "GET", size: int = 1000) -> dict:
    ts = when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"
    return ibm_record(i, **{"timestamp": ts, "http.request.method": method, "http.response.written": size})


def multi_day(counts: list[int]) -> list[dict]:
    """Day d has counts[d] GETs of 1 KB and counts[d]/10 PUTs of 5 KB, spread over the day."""
    out = []
    for d, n in enumerate(counts):
        day = T0 + dt.timedelta(days=d)
        for k in range(n):
            out.append(rec(len(out), day + dt.timedelta(seconds=k * 86_000 / n)))
        for k in range(n // 10):
            out.append(rec(len(out), day + dt.timedelta(seconds=k * 86_000 / (n // 10) + 7), "PUT", 5000))
        out.append(rec(len(out), day + dt.timedelta(seconds=86_399)))  # every day is covered to its end
    return sorted(out, key=lambda r: r["timestamp"])


def test_representative_day(tmp_path):
    trace = tmp_path / "days.json"
    write_ibm(trace, multi_day([100, 300, 200, 205, 150]))
    out = tmp_path / "day.json"
    summary = sample([trace], out, "day")
    assert summary["start"].startswith("2017-08-03T00:00")  # day 2: 200 requests, the closest to the mean
    assert summary["why"]["days_considered"] == 5 and summary["why"]["days_within_tolerance"] == 2
    recs = read_trace([out])
    assert len(recs) == 200 + 20 + 1 and all(r.timestamp.day == 3 for r in recs)
    assert summary["records"] == len(recs)


def test_no_day_qualifies_is_said(tmp_path):
    trace = tmp_path / "days.json"
    write_ibm(trace, multi_day([100, 400, 1000]))
    summary = sample([trace], tmp_path / "d.json", "day")
    assert summary["why"]["days_within_tolerance"] == 0 and "closest" in summary["why"]["reason"]


def test_steady_window(tmp_path):
    records = []
    for minute in range(8 * 60):
        steady = 240 <= minute < 300  # 04:00–05:00 is steady at 10 requests a minute
        n = 10 if steady else (20 if minute % 2 else 0)
        for k in range(n):
            records.append(rec(len(records), T0 + dt.timedelta(minutes=minute, seconds=k * 60 / n)))
    trace = tmp_path / "w.json"
    write_ibm(trace, records)
    summary = sample([trace], tmp_path / "win.json", "window")
    assert summary["start"] == "2017-08-01T04:00:00+00:00" and summary["end"] == "2017-08-01T05:00:00+00:00"
    # p5/p95 tolerate two odd minutes an hour, so windows a few minutes off qualify too; the exact one wins
    assert 1 <= summary["why"]["windows_within_tolerance"] <= 13  # up to 6 minutes off either way
    assert summary["records"] == 600


@pytest.mark.parametrize(
    ("method", "amount", "expected"), [("requests", 25, 25), ("duration", 9.5, 10), ("bytes", 5500, 5)]
)
def test_cuts(small_trace, tmp_path, method, amount, expected):
    # small_trace: record i at i s + i ms, 1000 + i bytes
    summary = sample([small_trace], tmp_path / "cut.json", method, amount=amount)
    assert summary["records"] == expected == len(read_trace([tmp_path / "cut.json"]))


def test_cut_from_a_start_time(small_trace, tmp_path):
    start = dt.datetime(2017, 7, 1, 1, 0, 20, tzinfo=dt.timezone.utc)
    summary = sample([small_trace], tmp_path / "cut.json", "requests", amount=5, start=start)
    assert [r.id for r in read_trace([tmp_path / "cut.json"])] == [f"id{i}" for i in range(20, 25)]
    assert summary["first"].startswith("2017-07-01T01:00:20")


def test_sample_errors_and_cli(small_trace, tmp_path):
    with pytest.raises(DrtpError, match="needs --amount"):
        sample([small_trace], tmp_path / "x.json", "requests")
    with pytest.raises(DrtpError, match="less than the 60-minute window"):
        sample([small_trace], tmp_path / "x.json", "window")
    out = tmp_path / "cli.json"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "drtp.cli",
            "sample",
            str(small_trace),
            "-o",
            str(out),
            "--method",
            "bytes",
            "--amount",
            "5.5KB",
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(out.with_suffix(".summary.json").read_text())["records"] == 5
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "drtp.cli",
            "sample",
            str(small_trace),
            "-o",
            str(out),
            "--method",
            "bytes",
            "--amount",
            "lots",
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and "--amount" in res.stderr
