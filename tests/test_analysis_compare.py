"""``drtp analyze compare`` on real run directories: the table, compare.json/csv and figures, checked by hand."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

from drtp.analysis.compare import BLOCKS, block_summaries, compare_runs
from drtp.analysis.results import read_run_files
from drtp.cli import main


def test_one_run_against_one_compares_time_blocks(real_runs, tmp_path: Path, capsys) -> None:
    out = tmp_path / "cmp"
    code = main(
        [
            "analyze",
            "compare",
            "--baseline",
            str(real_runs.stress),
            "--candidate",
            str(real_runs.as_is),
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert "1 run a side: interval from 10 time blocks" in printed
    data = json.loads((out / "compare.json").read_text())
    assert data["method"] == "time blocks"
    rows = {(r["slice"], r["stat"]): r for r in data["rows"]}
    base = json.loads((real_runs.stress / "summary.json").read_text())
    cand = json.loads((real_runs.as_is / "summary.json").read_text())
    # the medians shown are the runs' own figures, from their summaries
    p50 = rows[("all", "p50")]
    assert p50["baseline"] == base["latency_s"]["p50"] * 1000
    assert p50["candidate"] == cand["latency_s"]["p50"] * 1000
    assert p50["change"] == p50["candidate"] / p50["baseline"] - 1
    assert p50["verdict"] == "inconclusive"
    failed = rows[("all", "failed")]
    assert failed["baseline"] == 100 * base["failed"] / base["requests"]
    assert set(r["verdict"] for r in data["rows"]) == {"inconclusive"}
    frame = pd.read_csv(out / "compare.csv")
    assert list(frame.columns[:10]) == [
        "slice",
        "stat",
        "unit",
        "baseline",
        "candidate",
        "change",
        "ci_low",
        "ci_high",
        "p_value",
        "verdict",
    ]
    assert (out / "compare-all.png").stat().st_size > 0
    assert (out / "compare-get-blob.png").exists()


def test_blocks_cut_a_run_by_time_and_count_every_request_once(real_runs) -> None:
    df, summary = read_run_files(real_runs.stress)
    blocks = block_summaries(df, summary)
    assert 1 < len(blocks) <= BLOCKS
    main_rows = df[~df.auxiliary & df.start_s.notna()]
    assert sum(b["requests"] for b in blocks) == len(main_rows)


def test_repetitions_are_read_from_a_folder_of_rep_runs(real_runs, tmp_path: Path) -> None:
    for side, run in (("a", real_runs.stress), ("b", real_runs.as_is)):
        for k in range(1, 5):
            shutil.copytree(run, tmp_path / side / f"rep-{k}")
    comparison = compare_runs([str(tmp_path / "a")], [str(tmp_path / "b")])
    assert comparison.meta["method"] == "runs"
    p50 = next(r for r in comparison.rows if (r.slice, r.stat) == ("all", "p50"))
    assert p50.baseline_runs == p50.candidate_runs == 4
    # four identical runs a side: the interval is the change itself, the test sees all four apart
    assert p50.ci_low == p50.ci_high == p50.change


def test_a_folder_without_runs_is_one_line(tmp_path: Path, capsys) -> None:
    code = main(["analyze", "compare", "--baseline", str(tmp_path), "--candidate", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "not a run directory" in err


def test_a_repetition_killed_before_its_summary_is_left_out_and_named(real_runs, tmp_path: Path) -> None:
    for side, run in (("a", real_runs.stress), ("b", real_runs.as_is)):
        for k in range(1, 6):
            shutil.copytree(run, tmp_path / side / f"rep-{k}")
    (tmp_path / "a" / "rep-5" / "summary.json").unlink()  # killed hard: its rows, no summary
    comparison = compare_runs([str(tmp_path / "a")], [str(tmp_path / "b")])
    p50 = next(r for r in comparison.rows if (r.slice, r.stat) == ("all", "p50"))
    assert (p50.baseline_runs, p50.candidate_runs) == (4, 5)
    assert comparison.meta["left_out"] == [f"{tmp_path / 'a' / 'rep-5'}: did not finish: no summary.json"]
