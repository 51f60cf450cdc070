"""Profile targets checked against characterizations."""

from __future__ import annotations

import json

import pytest

from drtp.analysis.characterize import characterize
from drtp.analysis.targets import MEASURES, check_targets, profile_for
from drtp.analysis.trace_frame import frame_from_records
from drtp.cli import main
from drtp.errors import DrtpError
from drtp.trace.profiles import builtin_profiles, load_profile
from tests.test_analysis_characterize import hand_trace
from tests.trace_records import rec


@pytest.fixture(scope="module")
def char():
    return characterize(frame_from_records(hand_trace()))


def profile(tmp_path, targets: str):
    p = tmp_path / "mine.yaml"
    p.write_text(f"description: test\ngenerator: {{push_ratio: 0.1}}\ntargets:\n{targets}")
    return str(p)


def test_targets_in_and_out_of_range(char, tmp_path):
    # hand trace: pull ratio 0.75, GET share 9/13, top client 7/13, inter-arrival p99 ≈ 123.6 s
    rows = check_targets(
        char,
        profile(
            tmp_path,
            "  pull_ratio: [0.8, 0.06]\n  get_share: [0.5, 0.1]\n  interarrival_p99_s: [100, 1.5]\n"
            "  top_client_share: [0.5, 0.05]\n",
        ),
    )
    got = {r["target"]: r["within"] for r in rows}
    assert got == {"pull_ratio": True, "get_share": False, "interarrival_p99_s": True, "top_client_share": True}
    p99 = next(r for r in rows if r["target"] == "interarrival_p99_s")
    assert (p99["low"], p99["high"]) == pytest.approx((100 / 1.5, 150.0))  # a factor, not ± 1.5 s


def test_every_builtin_target_is_measured(char):
    for name in builtin_profiles():
        assert set(load_profile(name)["targets"]) <= set(MEASURES), name
    assert profile_for("dal", None) == "dal" and profile_for("my-trace", None) is None
    assert profile_for("dal", "x.yaml") == "x.yaml"


def test_unknown_target_is_named(char, tmp_path):
    with pytest.raises(DrtpError, match="'warp_factor' is not a known characteristic"):
        check_targets(char, profile(tmp_path, "  warp_factor: [9, 1]\n"))


def test_cli_writes_targets_for_a_profile(tmp_path):
    from drtp.trace.reader import write_ibm

    trace = tmp_path / "t.json"
    write_ibm(trace, hand_trace() + [rec(300, "GET", "v2/u1/r1/manifests/v1")])
    out = tmp_path / "o"
    mine = profile(tmp_path, "  pull_ratio: [0.77, 0.05]\n")
    assert main(["analyze", "trace", str(trace), "--out", str(out), "--profile", mine]) == 0
    rows = json.loads((out / "characterization.json").read_text())["t"]["targets"]
    assert rows[0]["measured"] == pytest.approx(4 / 5) and rows[0]["within"] is True
    assert (out / "targets.csv").read_text().count("pull_ratio") == 1
    assert "Profile targets" in (out / "report.html").read_text()
