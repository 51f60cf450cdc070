"""Characterization numbers on a small hand-made trace whose answers are counted by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from drtp.analysis import characterize as ch
from drtp.analysis.trace_frame import frame_from_records
from drtp.trace.summary import summarize
from tests.trace_records import rec

M1 = "v2/u1/r1/manifests/v1"
M2 = "v2/u2/r2/manifests/v2"


def blob(repo: str, digest: str) -> str:
    return f"v2/{repo}/blobs/{digest}"


def hand_trace():
    """13 requests; comments give the hand-counted facts the tests check."""
    return [
        rec(0, "GET", M1, client="c1", size=1000),  # pull 1: followed by 2 layers
        rec(1, "GET", blob("u1/r1", "L1"), client="c1", size=500_000, duration=0.1),
        rec(2, "GET", blob("u1/r1", "L2"), client="c1", size=5_000_000, duration=1.0),
        rec(10, "GET", M1, client="c2", size=1000),  # pull 2: no follow-up in u1/r1
        rec(70, "GET", blob("u2/r2", "L1"), client="c2", size=500_000),  # other repo: not a follow-up
        rec(200, "HEAD", blob("u2/r2", "L3"), client="c3", status=404),
        rec(201, "POST", "v2/u2/r2/blobs/uploads/", client="c3", status=202),
        rec(202, "PUT", "v2/u2/r2/blobs/uploads/abc?digest=L3", client="c3", size=2_000_000, status=201, duration=5.0),
        rec(205, "PUT", M2, client="c3", size=1500, status=201),  # in flight of the PUT above: no idle gap
        rec(230, "GET", M2, client="c1", size=1500),  # pull 3, after a push: followed by 2 layers
        rec(231, "GET", blob("u2/r2", "L3"), client="c1", size=2_000_000),
        rec(232, "GET", blob("u2/r2", "L1"), client="c1", size=500_000),
        rec(295, "GET", blob("u2/r2", "L1"), client="c1", size=500_000),  # 65 s after pull 3
    ]


@pytest.fixture(scope="module")
def df():
    return frame_from_records(hand_trace())


def test_columns_parse_uris_and_upload_digests(df):
    assert len(df) == 13
    assert df["object"].iloc[7] == "L3" and bool(df["upload"].iloc[7])  # digest from ?digest=
    assert pd.isna(df["object"].iloc[6])  # POST upload: no object
    assert df["object"].iloc[0] == "u1/r1:v1"
    assert list(df["user"].astype(str).unique()) == ["u1", "u2"]
    assert df["time"].is_monotonic_increasing


def test_summary_from_columns_equals_streaming_summary(df):
    assert ch.summarize_frame(df) == summarize([sorted(hand_trace(), key=lambda r: r.timestamp)])


def test_request_types_and_pull_push_ratio(df):
    rt = ch.request_types(df)
    assert rt["by_method"] == {"GET": 9, "HEAD": 1, "PUT": 2, "POST": 1}
    assert rt["image_pulls"] == 3 and rt["image_pushes"] == 1
    assert rt["pull_ratio"] == pytest.approx(0.75)
    assert rt["pull_push_ratio"] == pytest.approx(3.0)
    assert rt["method_share"]["GET"] == pytest.approx(9 / 13)
    assert rt["put_per_patch"] is None  # no PATCH


def test_manifest_layer_share(df):
    s = ch.manifest_layer_share(df)
    assert s["pull"]["requests"] == 9 and s["pull"]["manifest"] == pytest.approx(3 / 9)
    # pushes = PUT or HEAD: HEAD L3, PUT L3, PUT manifest
    assert s["push"]["requests"] == 3 and s["push"]["manifest"] == pytest.approx(1 / 3)


def test_sizes(df):
    s = ch.sizes(df)
    get_layers = s["GET blob"]
    assert get_layers["n"] == 6
    assert get_layers["share_below"]["1MB"] == pytest.approx(4 / 6)
    assert get_layers["max"] == 5_000_000
    assert s["PUT blob"]["n"] == 1 and s["PUT manifest"]["p50"] == 1500
    assert s["GET manifest"]["cdf"]["x"][-1] == 1500


def test_follow_ups_plain_and_after_push(df):
    f = ch.follow_ups(df, session_s=60)
    assert f["all"]["manifests"] == 3
    assert f["all"]["not_followed"] == pytest.approx(1 / 3)
    assert f["all"]["mean_layers"] == pytest.approx(4 / 3)
    assert f["all"]["cdf"]["share"][:3] == pytest.approx([1 / 3, 1 / 3, 1.0])
    assert f["after_push"]["manifests"] == 1 and f["after_push"]["not_followed"] == 0.0
    longer = ch.follow_ups(df, session_s=120)
    assert longer["all"]["mean_layers"] == pytest.approx(5 / 3)  # the GET at +65 s now counts
    short_window = ch.follow_ups(df, session_s=60, push_window_s=20)  # last PUT 25 s before pull 3
    assert short_window["after_push"]["manifests"] == 0


def test_popularity_top10_shares(df):
    p = ch.popularity(df)
    assert p["layers"]["items"] == 3 and p["layers"]["accesses"] == 6
    assert p["layers"]["top_shares"] == pytest.approx([4 / 6, 1 / 6, 1 / 6])
    assert p["layers"]["top10_share"] == pytest.approx(1.0)
    assert p["layers"]["top1pct_share"] == pytest.approx(4 / 6)
    assert p["manifests"]["top_shares"] == pytest.approx([2 / 3, 1 / 3])
    assert p["repositories"]["top_shares"] == pytest.approx([9 / 13, 4 / 13])
    assert p["users"]["top_shares"] == pytest.approx([9 / 13, 4 / 13])
    assert p["clients"]["top_shares"] == pytest.approx([7 / 13, 4 / 13, 2 / 13])


def test_popularity_of_counts_with_many_items():
    counts = np.array([50] + [1] * 199)  # 200 items: top 1 % = 2 items
    p = ch.popularity_of(counts)
    assert p["top1pct_share"] == pytest.approx(51 / 249)
    assert p["top10_share"] == pytest.approx(59 / 249)
    assert p["curve"]["access_share"][-1] == pytest.approx(1.0)


def test_requests_per_minute_counts_idle_minutes(df):
    r = ch.requests_per_minute(df)  # minutes: [4, 1, 0, 7, 1]
    assert r["minutes"] == 5 and r["share_zero"] == pytest.approx(0.2)
    assert r["p50"] == 1 and r["max"] == 7 and r["share_at_least_100"] == 0.0


def test_inter_arrival_and_idle(df):
    a = ch.arrivals(df)
    assert a["inter_arrival"]["n"] == 12
    assert a["inter_arrival"]["p50"] == pytest.approx(2.0)
    assert a["inter_arrival"]["max"] == pytest.approx(130.0)
    # the 5 s PUT covers the manifest PUT at 205: 11 idle periods, one of them 230 − 207 s
    assert a["idle_periods"] == 11
    assert np.isclose(a["idle"]["cdf"]["x"], 23.0).any()
    assert a["idle"]["min"] == pytest.approx(0.9)  # 2 − (1 + 0.1)


def test_concurrency(df):
    c = ch.concurrency(df, bin_s=60)
    assert c["active_clients"]["n"] == 5
    assert c["active_clients"]["max"] == 2 and c["active_clients"]["p50"] == 1
    assert c["series"]["requests_per_bin"] == [4, 1, 0, 7, 1]


def test_occupancy_is_time_averaged():
    occ = ch._occupancy(np.array([0.0, 10.0]), np.array([30.0, 70.0]), np.array([0.0, 60.0, 120.0]))
    assert occ == pytest.approx([80 / 60, 10 / 60])


def test_rhythm_and_data_volume(df):
    r = ch.daily_rhythm(df)
    # 13 requests in 295 s of hour 0 of Tuesday 2017-08-01: rates over the traced time only
    assert r["hour_of_day"] == {0: pytest.approx(13 / (295 / 3600))}
    assert r["day_of_week"] == {"Tue": pytest.approx(13 / (295 / 86400))}
    d = ch.data_volume(df)
    assert d["ingress_bytes"] == 2_001_500
    assert d["egress_bytes"] == 9_003_500


def test_response_times_and_size_dependency(df):
    r = ch.response_times(df)
    assert r["GET blob"]["n"] == 6 and r["GET blob"]["max"] == pytest.approx(1.0)
    assert r["PUT blob"]["share_above"]["1s"] == 1.0
    bins = ch.response_vs_size(df)["bins"]
    assert sum(b["count"] for b in bins) == 6
    assert bins[-1]["median_s"] == pytest.approx(1.0)  # the 5 MB layer


def test_characterize_is_json_ready(df):
    import json

    c = ch.characterize(df)
    assert json.loads(json.dumps(c))["request_types"]["pull_ratio"] == 0.75


def test_empty_distribution():
    assert ch.distribution([]) == {"n": 0}


def test_rhythm_weights_partial_days():
    # 10 requests/hour from Tuesday 00:00 to Wednesday 23:54, then one more at Thursday 06:00
    t = 1501545600.0 + np.append(np.arange(0, 2 * 86400, 360.0), 2 * 86400 + 6 * 3600)
    df = pd.DataFrame({"time": t})
    r = ch.daily_rhythm(df)
    assert r["day_of_week"]["Tue"] == pytest.approx(240.0)
    assert r["day_of_week"]["Thu"] == pytest.approx(1 / 0.25)  # one request in the 6 traced hours of Thursday


def test_columnar_numbers_match_the_naive_per_record_pass(tmp_path):
    """bench/bench_analyze.py's baseline recomputes a subset record by record; both must agree."""
    import importlib.util
    from pathlib import Path

    from drtp.trace.generate import GenerateOptions, generate
    from drtp.trace.reader import write_ibm

    spec = importlib.util.spec_from_file_location(
        "bench_analyze", Path(__file__).resolve().parent.parent / "bench" / "bench_analyze.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    trace = tmp_path / "t.json"
    write_ibm(trace, generate(GenerateOptions(requests=4000, seed=11, span_s=7200, clients=25, repositories=40)))
    naive, columnar = bench.naive(trace), bench.columnar(trace)
    assert bench.agree(naive, columnar) == []
    assert 0 < naive["not_followed"] < 1 and naive["idle_periods"] > 0
