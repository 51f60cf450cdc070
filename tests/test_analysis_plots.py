"""Units and charts of ``drtp analyze results`` on hand-built run directories whose answers are worked out by hand.

Latency is shown in milliseconds in every table, the report and the plots (requests.csv keeps seconds);
tick labels are plain numbers; the throughput line holds whole seconds only; a chart without data is left
out with a note instead of drawn empty.
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")

from drtp.analysis import results as rs  # noqa: E402
from drtp.analysis import results_figures as rf  # noqa: E402
from drtp.analysis.plotting import PlainLogFormatter, new_figure, plain_number, plain_ticks  # noqa: E402
from drtp.analysis.results_analysis import analyze_results  # noqa: E402

VIEW_FIGURES = {"latency_size", "mean_latency"}  # drtp.analysis.views_figures: drawn whenever a request succeeded

# Seven successful GET layer requests and one failed one.  Latencies of the successes, sorted:
# 0.2 0.5 0.5 0.7 0.75 0.9 1.5 s, so p50 (nearest rank 4 of 7) = 0.7 s = 700 ms and max = 1.5 s = 1,500 ms.
ROWS = [  # start_s, latency_s, status
    (10.0, 0.2, 200),
    (10.1, 0.5, 200),
    (10.5, 0.7, 200),
    (11.0, 1.5, 200),
    (11.0, 0.1, 500),  # failed: never throughput, never in the latency
    (12.0, 0.9, 200),
    (12.5, 0.75, 200),
    (13.0, 0.5, 200),
]


def write_run(run_dir: Path, as_is: bool) -> Path:
    """A run directory with ROWS as its requests.csv; as is, each request intended 4 ms before its start."""
    frame = pd.DataFrame(ROWS, columns=["start_s", "latency_s", "status"])
    frame.insert(0, "method", "GET")
    frame.insert(1, "kind", "blob")
    frame["expected_status"] = 200
    if as_is:
        frame["intended_s"] = frame["start_s"] - 0.004
    run_dir.mkdir(parents=True)
    frame.to_csv(run_dir / "requests.csv", index=False)
    return run_dir


def only_ok(run_dir: Path) -> Path:
    """The run without its failed request."""
    frame = pd.read_csv(run_dir / "requests.csv")
    frame[frame["status"] == 200].to_csv(run_dir / "requests.csv", index=False)
    return run_dir


# Throughput: a run of 10.5 s from its first start (at 5.0 on the master's clock), so 1 s bins, ten whole
# and the last half of an eleventh.  A bin holds the completions in (start, end]; completion − 5.0:
THROUGHPUT_ROWS = [  # start_s, latency_s, status
    (5.0, 0.2, 200),  # 0.2 → bin 0
    (5.1, 0.5, 200),  # 0.6 → bin 0
    (5.5, 0.7, 200),  # 1.2 → bin 1
    (6.0, 0.1, 500),  # failed: not throughput
    (6.0, 1.5, 200),  # 2.5 → bin 2
    (7.0, 0.9, 200),  # 2.9 → bin 2
    (8.0, 1.0, 200),  # 4.0, on the edge → bin 3 = (3, 4]
    (14.0, 0.5, 200),  # 9.5 → bin 9
    (15.0, 0.25, 200),  # 10.25 → the partial last bin (10, 10.5]
    (15.0, 0.5, 200),  # 10.5 → the partial last bin; the run's last end
]


def frame_of(rows) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["start_s", "latency_s", "status"])
    frame.insert(0, "method", "GET")
    frame.insert(1, "kind", "blob")
    frame["expected_status"] = 200
    return rs.typed(frame)


def test_throughput_counts_whole_bins_and_keeps_the_partial_last_apart():
    df = frame_of(THROUGHPUT_ROWS)
    bins = rs.throughput_bins(df)
    assert bins["bin_s"] == 1.0
    assert bins["counts"] == [2, 1, 2, 1, 0, 0, 0, 0, 0, 1]
    assert bins["tail_requests"] == 2 and bins["tail_s"] == 0.5
    r = rs.analyze_run(df)
    assert sum(bins["counts"]) + bins["tail_requests"] == r["succeeded"] == 9
    fig = rf.fig_throughput({"run": r})
    (steps,) = fig.axes[0].patches
    rate, edges, _ = steps.get_data()
    assert list(rate) == [2, 1, 2, 1, 0, 0, 0, 0, 0, 1] and list(edges) == list(range(11))  # up to 10 s, not 10.5
    assert fig.axes[0].get_lines()[0].get_ydata()[0] == pytest.approx(9 / 10.5)  # the model's average, dotted


def test_a_short_run_gets_narrower_bins_in_requests_per_second():
    # 0.4 s from the first start: 20 bins of 20 ms (50 ms bins would be fewer than 10);
    # completions at 250 ms → bin (240, 260] = 12, and 400 ms, the run's end → bin (380, 400] = 19, no partial bin
    df = frame_of([(2.0, 0.25, 200), (2.1, 0.3, 200)])
    bins = rs.throughput_bins(df)
    assert bins["bin_s"] == 0.02 and bins["tail_s"] == 0.0 and bins["tail_requests"] == 0
    assert bins["counts"] == [0] * 12 + [1] + [0] * 6 + [1]
    fig = rf.fig_throughput({"short": rs.analyze_run(df)})
    (steps,) = fig.axes[0].patches
    rate, edges, _ = steps.get_data()
    assert rate.max() == pytest.approx(50.0)  # one request in 20 ms: 50 requests per second
    assert edges[-1] == pytest.approx(0.4) and "20 ms bins" in fig.axes[0].get_legend().get_texts()[0].get_text()


def test_a_run_without_successes_has_no_throughput_chart():
    df = frame_of([(0.0, 0.1, 500), (1.0, 0.2, 503)])
    assert rf.left_out({"failing": rs.analyze_run(df)})["throughput"] == rf.NO_THROUGHPUT


def test_tables_and_report_show_latency_in_ms(tmp_path):
    run = write_run(tmp_path / "run", as_is=True)
    out = tmp_path / "out"
    results = analyze_results([run], out, log=lambda *_: None)
    assert results["run"]["latency_s"]["max"] == 1.5  # the model keeps seconds, as requests.csv
    latency = pd.read_csv(out / "latency.csv")
    assert list(latency.columns) == ["run", "request", "n", "p50_ms", "p90_ms", "p99_ms", "max_ms"]
    get_blob = latency[latency["request"] == "GET blob"].iloc[0]
    assert get_blob["max_ms"] == pytest.approx(1500.0, rel=1e-12) and get_blob["n"] == 7
    # p50 within the model's 0.1 % histogram buckets
    assert get_blob["p50_ms"] == pytest.approx(700.0, rel=1e-3)
    runs = pd.read_csv(out / "runs.csv", index_col=0)
    assert runs.loc["run", "latency_max_ms"] == pytest.approx(1500.0, rel=1e-12)
    assert runs.loc["run", "lateness_p99_ms"] == pytest.approx(4.0, rel=1e-3)  # every start 4 ms late
    assert not [c for c in runs.columns if c.endswith("_s") and c != "duration_s"]
    html = (out / "report.html").read_text()
    row = re.search(r"<tr><td>run</td><td>GET blob</td>(.*?)</tr>", html).group(1)
    assert re.findall(r"<td>([^<]*)</td>", row) == ["7", "700", "1,500", "1,500", "1,500"]  # n, p50…max in ms
    assert "<th>p50_ms</th>" in html and "<th>latency_max_ms</th>" in html


def test_tick_labels_are_plain_numbers_on_every_chart(tmp_path):
    run = write_run(tmp_path / "run", as_is=True)
    df, summary = rs.read_run_files(run)
    results, frames = {"run": rs.analyze_run(df, summary)}, {"run": df}
    for name, make in rf.FIGURES.items():
        fig = make(results, frames)
        fig.canvas.draw()
        for ax in fig.axes:
            for axis in (ax.xaxis, ax.yaxis):
                assert axis.get_offset_text().get_text() == "", (name, "offset notation")
                labels = [t.get_text() for t in axis.get_ticklabels() + axis.get_ticklabels(minor=True)]
                assert not [t for t in labels if "$" in t or "e+" in t or "e-" in t or "×" in t], (name, labels)
    cdf = rf.fig_latency_cdf(results, frames)
    cdf.canvas.draw()
    ax = cdf.axes[0]
    assert ax.get_xscale() == "log" and isinstance(ax.xaxis.get_major_formatter(), PlainLogFormatter)
    assert ax.get_xlabel() == "latency (ms, log scale)"
    lo, hi = ax.get_xlim()
    assert lo < 200 and hi > 1500  # 0.2 … 1.5 s drawn as 200 … 1,500 ms
    shown = [t.get_text() for t in ax.xaxis.get_ticklabels() + ax.xaxis.get_ticklabels(minor=True)]
    assert "1,000" in shown and all(re.fullmatch(r"[0-9,.]*", t) for t in shown), shown


def test_plain_number_and_log_axes():
    assert [plain_number(x) for x in (0.001, 0.5, 1.0, 10.0, 100.0, 1000.0, 2.5e-5, 0.30000000000000004)] == [
        "0.001",
        "0.5",
        "1",
        "10",
        "100",
        "1,000",
        "0.000025",
        "0.3",
    ]
    fig, (ax,) = new_figure()
    ax.plot([0.3, 3000], [1e9, 1e9 + 5])
    ax.set_xscale("log")
    plain_ticks(ax)
    fig.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.1", "1", "10", "100", "1,000", "10,000"]
    assert ax.yaxis.get_offset_text().get_text() == ""  # 1,000,000,000 … not "+1e9" in a corner
    assert "1,000,000,000" in [t.get_text() for t in ax.get_yticklabels()]


@pytest.mark.parametrize("as_is", [False, True])
def test_charts_without_data_are_left_out_with_a_note(tmp_path, as_is):
    """Stress mode without failures: no lateness, no failures chart; as is with a failure: all five."""
    run = write_run(tmp_path / "run", as_is)
    if not as_is:
        only_ok(run)
    out = tmp_path / "out"
    out.mkdir()
    (out / "lateness.png").write_bytes(b"an earlier analysis's chart")
    lines: list[str] = []
    analyze_results([run], out, log=lines.append)
    html = (out / "report.html").read_text()
    drawn = {p.stem for p in out.glob("*.png")}
    if as_is:
        assert drawn == set(rf.FIGURES) | VIEW_FIGURES
        assert html.count("data:image/png;base64,") == 7 and "not drawn:" not in html
        assert "left out" not in lines[-1]
    else:
        # the earlier lateness.png is gone
        assert drawn == {"latency_cdf", "latency_violin", "throughput"} | VIEW_FIGURES
        assert html.count("data:image/png;base64,") == 5
        assert f"Chart &#x27;lateness&#x27; not drawn: {rf.NO_LATENESS}." in html
        assert f"Chart &#x27;failures&#x27; not drawn: {rf.NO_FAILURES}." in html
        assert lines[-1] == (
            "charts: latency_cdf.png, latency_violin.png, throughput.png; left out (no data): "
            f"failures ({rf.NO_FAILURES}); lateness ({rf.NO_LATENESS})"
        )
