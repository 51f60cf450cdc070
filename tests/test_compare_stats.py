"""The statistics of ``drtp analyze compare`` on drawn samples whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from drtp.analysis.compare import MIN_RUNS, Side, compare_sides, compare_values, format_rows, outliers


def draws(rng, n: int, median: float, spread: float = 0.1) -> list[float]:
    return list(rng.lognormal(np.log(median), spread, n))


def test_intervals_cover_the_true_change_at_their_level() -> None:
    rng = np.random.default_rng(1)
    trials, covered = 300, 0
    for _ in range(trials):
        # medians 100 and 110: the true change of the median is +10 %
        _, _, _, lo, hi, _, _ = compare_values("p50", draws(rng, 8, 100), draws(rng, 8, 110), rng=rng)
        covered += lo <= 0.10 <= hi
    # a 95 % interval from 8 runs a side covers ~95 % of the time; below 90 % would be a broken interval
    assert covered / trials >= 0.90


def test_equal_distributions_are_called_better_or_worse_at_most_alpha_of_the_time() -> None:
    rng = np.random.default_rng(2)
    trials = 400
    called = sum(
        compare_values("p50", draws(rng, 6, 100), draws(rng, 6, 100), noise=0.0, rng=rng)[-1] in ("better", "worse")
        for _ in range(trials)
    )
    assert called / trials <= 0.05


def test_three_runs_a_side_are_inconclusive_whatever_the_difference() -> None:
    rng = np.random.default_rng(3)
    verdict = compare_values("p50", draws(rng, 3, 100), draws(rng, 3, 300), rng=rng)[-1]
    assert verdict == "inconclusive"
    assert MIN_RUNS == 4


def test_a_clear_difference_is_worse_for_latency_and_better_for_throughput() -> None:
    rng = np.random.default_rng(4)
    base, cand = draws(rng, 6, 100, 0.02), draws(rng, 6, 120, 0.02)
    mb, mc, change, lo, hi, p, verdict = compare_values("p50", base, cand, rng=rng)
    assert verdict == "worse" and p < 0.05
    assert mc / mb - 1 == pytest.approx(change) and 0 < lo < change < hi
    assert compare_values("throughput", base, cand, rng=rng)[-1] == "better"


def test_a_change_under_the_noise_threshold_is_the_same() -> None:
    base = [100.0, 100.1, 100.2, 100.3, 100.4]
    cand = [101.0, 101.1, 101.2, 101.3, 101.4]  # +1 %, every run above: significant, but under 2 %
    *_, p, verdict = compare_values("p50", base, cand)
    assert p < 0.05 and verdict == "same"


def test_the_failed_share_changes_by_its_difference() -> None:
    # values are percentages: 1 % of failures against 5 %
    _, _, change, *_ = compare_values("failed", [1.0] * 4, [5.0] * 4)
    assert change == pytest.approx(0.04)


def test_runs_far_from_their_sides_median_are_flagged() -> None:
    assert outliers(["a", "b", "c", "d", "e"], [10, 11, 10.5, 10.2, 40]) == ["e"]
    assert outliers(["a", "b", "c"], [10, 10, 10]) == []


def test_the_table_warns_when_runs_are_too_few() -> None:
    base = Side(["a1", "a2"], {("all", "p50"): [10.0, 11.0]})
    cand = Side(["b1", "b2"], {("all", "p50"): [20.0, 21.0]})
    rows = compare_sides(base, cand)
    p50 = next(r for r in rows if r.stat == "p50")
    assert p50.verdict == "inconclusive" and p50.baseline == 10.5 and p50.candidate == 20.5
    text = format_rows(rows)
    assert "a verdict needs 4 runs a side" in text and "+95.2%" in text


def test_from_zero_to_something_is_judged_by_the_test_too() -> None:
    # a baseline median of 0 leaves no ratio: the verdict still needs the runs to differ
    assert compare_values("p50", [0.0] * 4, [5.0, 6.0, 7.0, 8.0])[-1] == "worse"
    assert compare_values("p50", [0.0, 0.0, 9.0, 10.0, 0.0], [5.0, 6.0, 0.0, 11.0, 0.0])[-1] == "same"


def test_failures_from_none_to_some_pass_the_noise_threshold_in_points() -> None:
    # the failed share's change is a difference in points: from 0 % it is judged like any other change
    *_, p, verdict = compare_values("failed", [0.0] * 4, [1.0, 1.2, 1.1, 1.3])
    assert p < 0.05 and verdict == "same"  # under 2 points: the test agrees, still the same
    assert compare_values("failed", [0.0] * 4, [3.0, 3.2, 3.1, 3.3])[-1] == "worse"
    # a throughput from 0 has no ratio and no threshold: the test decides
    assert compare_values("throughput", [0.0] * 4, [0.5, 0.6, 0.7, 0.8])[-1] == "better"
