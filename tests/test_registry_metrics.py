"""The registry's own metrics: parsed with prometheus-client, differenced over a window, read from a real registry."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from drtp.master.outputs.registry_metrics import RegistryMetrics
from drtp.registry.local import LocalRegistry
from drtp.registry.metrics import ScrapeError, handler_of, labels_text, parse, scrape, window

PAGE = """\
# TYPE go_goroutines gauge
go_goroutines 12
# TYPE registry_http_requests_total counter
registry_http_requests_total{code="200",handler="blob",method="get"} 7
registry_http_requests_total{code="404",handler="blob",method="get"} 3
# TYPE registry_http_request_duration_seconds histogram
registry_http_request_duration_seconds_bucket{handler="blob",method="get",le="0.005"} 4
registry_http_request_duration_seconds_bucket{handler="blob",method="get",le="0.01"} 9
registry_http_request_duration_seconds_bucket{handler="blob",method="get",le="+Inf"} 10
registry_http_request_duration_seconds_sum{handler="blob",method="get"} 0.07
registry_http_request_duration_seconds_count{handler="blob",method="get"} 10
"""


def test_parse_keeps_the_registrys_series_and_sums_equal_ones() -> None:
    reading = parse(PAGE)
    assert not any(name.startswith("go_") for name, _ in reading)
    key = ("registry_http_requests_total", (("code", "200"), ("handler", "blob"), ("method", "get")))
    assert reading[key] == 7
    assert labels_text(key[1]) == "code=200,handler=blob,method=get"


def test_a_page_that_is_not_prometheus_text_is_a_scrape_error() -> None:
    with pytest.raises(ScrapeError):
        parse('registry_http_requests_total{code="200" 7\n')


def test_window_counts_what_happened_between_two_readings() -> None:
    first = parse(PAGE)
    later = PAGE.replace("} 7", "} 17").replace("} 3", "} 3")
    later = later.replace('le="0.005"} 4', 'le="0.005"} 4').replace('le="0.01"} 9', 'le="0.01"} 19')
    later = later.replace('le="+Inf"} 10', 'le="+Inf"} 20').replace("0.07", "0.17").replace("_count{", "_count{")
    later = later.replace('method="get"} 10\n', 'method="get"} 20\n')
    part = window(first, parse(later))[("blob", "GET")]
    assert part.requests == 10  # 10 more 200s, no more 404s
    assert part.duration_count == 10
    assert part.mean_ms() == pytest.approx(10.0)  # 0.1 s over 10 requests
    # all 10 new observations fell in (5 ms, 10 ms]: the median is known only to lie there
    assert part.quantile_bounds_ms(0.5) == [5.0, 10.0]
    assert part.quantile_bounds_ms(0.99) == [5.0, 10.0]


def test_a_counter_that_went_down_was_reset_and_counts_from_zero() -> None:
    first = parse(PAGE)
    restarted = parse(PAGE.replace("} 7", "} 2"))
    assert window(first, restarted)[("blob", "GET")].requests == 2


def test_handlers_are_distributions_names() -> None:
    assert handler_of("GET", "manifest", "v1") == "manifest"
    assert handler_of("HEAD", "blob", "layer") == "blob"
    assert handler_of("DELETE", "blob", "layer") == "blob"
    assert handler_of("POST", "blob", "uploads/") == "blob_upload"
    assert handler_of("PATCH", "blob", "uploads/abc") == "blob_upload_chunk"
    assert handler_of("PUT", "blob", "uploads/abc") == "blob_upload_chunk"  # sent to the upload's URL
    assert handler_of("DELETE", "blob", "upload cancel") == "blob_upload_chunk"  # a helper row's reference
    assert handler_of("GET", "blob", "uploads/abc") == "blob_upload_chunk"
    assert handler_of("HEAD", "blob", "config blob check") == "blob"


def test_a_real_registrys_metrics_count_the_requests_it_served(tmp_path: Path) -> None:
    with LocalRegistry(tmp_path / "reg", metrics=True) as reg:
        # two endpoints of one registry (a load balancer's members) are summed: here both are the same one
        members = [reg.metrics_url, reg.metrics_url]
        before = scrape(members)
        for _ in range(5):
            req = urllib.request.Request(f"{reg.url}/v2/team/app/manifests/v1", method="HEAD")
            with pytest.raises(urllib.error.HTTPError):  # nothing pushed: 404, counted all the same
                urllib.request.urlopen(req, timeout=10)
        with urllib.request.urlopen(f"{reg.url}/v2/", timeout=10):
            pass
        after = scrape(members)
    seen = window(before, after)
    manifest = seen[("manifest", "HEAD")]
    assert manifest.requests == 2 * 5  # each "member" counted the five HEADs
    assert seen[("base", "GET")].requests >= 2  # the registry's own readiness probe may add some
    assert manifest.mean_ms() is not None and manifest.mean_ms() > 0
    low, high = manifest.quantile_bounds_ms(0.5)
    assert high is not None and low < high


def test_an_endpoint_that_does_not_answer_is_a_scrape_error(tmp_path: Path) -> None:
    with LocalRegistry(tmp_path / "reg") as reg:  # its API port has no metrics page: 404
        with pytest.raises(ScrapeError, match="127.0.0.1"):
            scrape([f"http://127.0.0.1:{reg.port}/metrics-nowhere"], timeout=2)


def test_a_reading_that_fails_mid_run_is_a_warning_and_the_window_spans_the_good_ones(tmp_path: Path) -> None:
    """A metrics page that cannot be read once is a warning; the window runs from the first good reading to
    the last, and registry_metrics.csv keeps only the good ones."""
    page = tmp_path / "metrics.txt"
    elapsed = iter([0.0, 1.0, 2.0])
    recorder = RegistryMetrics(tmp_path / "registry_metrics.csv", {"reg": [page.as_uri()]}, lambda: next(elapsed), 1.0)
    page.write_text(PAGE)
    recorder.read_all()
    page.unlink()  # the endpoint is gone for one reading
    recorder.read_all()
    page.write_text(PAGE.replace("} 7", "} 12"))
    recorder.read_all()
    recorder.file.close()

    side = recorder.registry_side([], lambda repository: "reg")["reg"]
    assert "metrics.txt" in side["warning"]
    assert side["window_s"] == [0.0, 2.0]
    assert side["requests"] == 5 and side["drtp_requests"] == 0
    assert side["slices"][0]["registry_requests"] == 5
    kept = pd.read_csv(tmp_path / "registry_metrics.csv")
    assert sorted(kept.elapsed_s.unique()) == [0.0, 2.0]


def test_a_registry_side_edited_into_nonsense_is_skipped_not_a_crash() -> None:
    """summary.json may come from elsewhere: slices that are not drtp's are left out of the table and figure."""
    from drtp.analysis.registry_side import fig_registry_side, registry_side_table

    good = {"handler": "blob", "method": "GET", "drtp_mean_ms": 3.0, "registry_mean_ms": 1.0}
    side = {"error": "text", "r": {"slices": [1, {"handler": 2}, {**good, "registry_p50_bucket_ms": ["a", None]}]}}
    results = {"a": {"replayer_summary": {"registry_side": side}}, "b": {"replayer_summary": {"registry_side": []}}}
    table = registry_side_table(results)
    assert table[["run", "registry", "handler", "method"]].values.tolist() == [["a", "r", "blob", "GET"]]
    assert table.registry_p50_bucket_ms.tolist() == [""]
    (ax,) = fig_registry_side(results).axes
    assert [p.get_width() for c in ax.containers for p in c.patches] == [3.0, 1.0]
