"""Live metrics: the parts nodes count per frame, and the exporter's text as Prometheus reads it (parsed back)."""

from __future__ import annotations

import random
import socket
import threading
import urllib.request
from collections import Counter

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from drtp.cli import main
from drtp.config import ConfigError, load_config
from drtp.master.outputs.live_metrics import LiveMetrics, LiveSettings, exporting
from drtp.registry.local import LocalRegistry, free_port
from drtp.replay.frames import LIVE_BUCKETS_S, FrameBuilder, FrameReader, HealthPart, LivePart
from drtp.replay.messages import ReplayRequest, ReplayResult, RunSpec
from drtp.replay.result_row import rows_of
from tests.conftest import hang_guard
from tests.test_result_frames import finished

REG = "http://127.0.0.1:5000"


def _bucket(latency: float) -> int:
    """The index of the first bound at or above ``latency`` (Prometheus's ``le``); one past the last: above all."""
    return next((i for i, bound in enumerate(LIVE_BUCKETS_S) if latency <= bound), len(LIVE_BUCKETS_S))


def _at(seq: int, latency: float, outcome: str = "ok") -> tuple:
    req = ReplayRequest(seq, f"id{seq}", "10.0.0.1", "GET", "blob", "get", "127.0.0.1:5000", "r/x", f"l{seq}", 10, 200)
    return req, ReplayResult(seq, 200 if outcome == "ok" else 503, outcome == "ok", 0.0, latency, outcome=outcome)


def test_a_live_run_s_frames_count_every_trace_row_once_in_its_bucket():
    rng = random.Random(5)
    batch = [finished(rng, seq, False) for seq in range(400)]
    # latencies on the bounds themselves go into that bound's bucket (le), above the last into the overflow
    batch += [_at(1000 + i, bound) for i, bound in enumerate(LIVE_BUCKETS_S)] + [_at(2000, 61.0), _at(2001, 0.0)]
    builder = FrameBuilder(RunSpec("r", 0.0, node="n1", live=True))
    frames = FrameReader().feed(b"".join(builder.frame(batch[i : i + 37]) for i in range(0, len(batch), 37)))
    counts: Counter = Counter()
    buckets: dict = {}
    sums: Counter = Counter()
    for frame in frames:
        for p in frame.live:
            key = (p.registry, p.method, p.kind, p.outcome)
            counts[key] += p.count
            buckets[key] = [a + b for a, b in zip(buckets.get(key, [0] * len(p.buckets)), p.buckets, strict=True)]
            sums[key] += p.sum_s
    want_counts: Counter = Counter()
    want_buckets: dict = {}
    want_sums: Counter = Counter()
    for req, res in batch:
        for row in rows_of("n1", req, res):
            if row.auxiliary:
                continue  # helper requests are not the trace's: they are not counted
            key = (REG, row.method, row.kind, row.outcome)
            want_counts[key] += 1
            want_buckets.setdefault(key, [0] * (len(LIVE_BUCKETS_S) + 1))[_bucket(row.latency_s)] += 1
            want_sums[key] += row.latency_s
    assert counts == want_counts and sum(counts.values()) == len(batch)
    assert buckets == want_buckets
    assert sums.keys() == want_sums.keys() and all(sums[k] == pytest.approx(want_sums[k]) for k in sums)
    on_bounds = buckets[(REG, "GET", "blob", "ok")]
    assert on_bounds[-1] >= 1 and on_bounds[0] >= 2  # 61 s above the last bound; 0 and 0.0001 in the first
    assert {o for (_, _, _, o) in counts} > {"ok"}  # failures are counted too, by their outcome class


def test_a_run_without_live_metrics_counts_no_parts():
    builder = FrameBuilder(RunSpec("r", 0.0, node="n1"))
    (frame,) = FrameReader().feed(builder.frame([finished(random.Random(1), seq, False) for seq in range(50)]))
    assert frame.live == [] and frame.rows


def _part(registry: str, method: str, outcome: str, count: int, at: dict, sum_s: float) -> LivePart:
    buckets = [0] * (len(LIVE_BUCKETS_S) + 1)
    for index, n in at.items():
        buckets[index] += n
    assert sum(buckets) == count
    return LivePart(registry, method, "blob", outcome, count, buckets, sum_s)


def _scrape(live: LiveMetrics) -> dict:
    """The exporter's page over HTTP, parsed back by prometheus-client's parser: {name: family}."""
    with urllib.request.urlopen(live.settings.url, timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


@pytest.fixture
def live():
    exporter = LiveMetrics(LiveSettings(free_port(), linger_s=0))
    exporter.start()
    yield exporter
    exporter.stop()


def test_the_exporter_sums_the_parts_into_counters_and_cumulative_histograms(live):
    other = "https://127.0.0.1:5443"
    live.add_parts([_part(REG, "GET", "ok", 3, {0: 1, 3: 2}, 0.0021), _part(REG, "GET", "timeout", 1, {16: 1}, 30.0)])
    live.add_parts([_part(REG, "GET", "ok", 2, {3: 1, 18: 1}, 75.0), _part(other, "HEAD", "ok", 1, {5: 1}, 0.004)])
    live.add_parts([])
    live.in_flight(7)
    got = _scrape(live)

    requests = {
        (s.labels["registry"], s.labels["method"], s.labels["outcome"]): s.value
        for s in got["drtp_requests"].samples
        if s.name == "drtp_requests_total"
    }
    assert requests == {(REG, "GET", "ok"): 5, (REG, "GET", "timeout"): 1, (other, "HEAD", "ok"): 1}

    duration = got["drtp_request_duration_seconds"]
    assert duration.type == "histogram"
    series = {}
    for s in duration.samples:
        series.setdefault((s.labels["registry"], s.labels["method"]), {})[(s.name, s.labels.get("le"))] = s.value
    mine = series[(REG, "GET")]
    # only the requests that succeeded: the timeout is a request (counted above), not a latency
    assert mine[("drtp_request_duration_seconds_count", None)] == 5
    assert mine[("drtp_request_duration_seconds_sum", None)] == pytest.approx(75.0021)
    cumulative = [mine[("drtp_request_duration_seconds_bucket", le)] for le in [*map(_le, LIVE_BUCKETS_S), "+Inf"]]
    assert cumulative == [1, 1, 1] + [4] * 15 + [5]  # 0.1 ms: 1; 1 ms: 3 more; above 60 s: 1 more
    assert series[(other, "HEAD")][("drtp_request_duration_seconds_bucket", "0.005")] == 1
    assert series[(other, "HEAD")][("drtp_request_duration_seconds_bucket", "0.0025")] == 0

    assert got["drtp_in_flight"].samples[0].value == 7
    assert "drtp_offered_rps" not in got and "drtp_master_cpu_ratio" not in got  # nothing offered, nothing told
    assert "drtp_node_cpu_ratio" not in got


def _le(bound: float) -> str:
    from prometheus_client.utils import floatToGoString

    return floatToGoString(bound)


def test_health_gauges_show_each_node_s_newest_interval(live):
    live.health("10.0.0.1:8081", HealthPart(4, 0.93, 12.5, 40))
    live.health("10.0.0.1:8081", HealthPart(3, 0.10, 1.0, 2))  # an older interval arriving late changes nothing
    live.health("10.0.0.2:8081", HealthPart(1, 0.25, 0.5, 9))
    live.master_cpu(0.4)
    live.offered_rps(250.0)
    got = _scrape(live)
    cpu = {s.labels["node"]: s.value for s in got["drtp_node_cpu_ratio"].samples}
    lag = {s.labels["node"]: s.value for s in got["drtp_node_lag_seconds"].samples}
    assert cpu == {"10.0.0.1:8081": 0.93, "10.0.0.2:8081": 0.25}
    assert lag == pytest.approx({"10.0.0.1:8081": 0.0125, "10.0.0.2:8081": 0.0005})
    assert got["drtp_master_cpu_ratio"].samples[0].value == 0.4
    assert got["drtp_offered_rps"].samples[0].value == 250.0
    live.health("10.0.0.2:8081", HealthPart(2, 0.5, 0.0, 1))
    assert {s.labels["node"]: s.value for s in _scrape(live)["drtp_node_cpu_ratio"].samples}["10.0.0.2:8081"] == 0.5


def test_each_run_of_a_command_starts_the_load_gauges_afresh(live):
    # an experiment's or a ramp's next run counts its intervals from 0 again: its gauges must follow it
    live.health("10.0.0.1:8081", HealthPart(30, 0.95, 40.0, 50))
    live.health("10.0.0.2:8081", HealthPart(30, 0.5, 1.0, 5))
    live.master_cpu(0.7)
    live.new_run()
    assert "drtp_node_cpu_ratio" not in _scrape(live) and "drtp_master_cpu_ratio" not in _scrape(live)
    live.health("10.0.0.1:8081", HealthPart(0, 0.2, 1.0, 3))
    got = _scrape(live)
    assert {s.labels["node"]: s.value for s in got["drtp_node_cpu_ratio"].samples} == {"10.0.0.1:8081": 0.2}


def test_the_end_waits_for_a_scrape_of_the_final_values():
    live = LiveMetrics(LiveSettings(free_port(), linger_s=60))
    live.start()
    try:
        live.add_parts([_part(REG, "GET", "ok", 1, {2: 1}, 0.0004)])
        live.in_flight(3)
        seen = []

        def scraper():
            seen.append(_scrape(live)["drtp_in_flight"].samples[0].value)  # before the end: not final
            # the end has begun when the exporter marks its values final; a scrape then ends the wait
            while not live._final:
                threading.Event().wait(0.01)
            seen.append(_scrape(live)["drtp_in_flight"].samples[0].value)

        t = threading.Thread(target=scraper)
        t.start()
        while not seen:
            threading.Event().wait(0.01)
        assert live.finish() is True  # returns once the scraper read the final values, long before 60 s
        t.join()
        assert seen == [3, 0]  # the final scrape saw the run's end: nothing in flight
    finally:
        live.stop()


def test_the_end_waits_until_the_final_page_was_written_and_stop_lets_it_finish():
    live = LiveMetrics(LiveSettings(free_port(), linger_s=60))
    events: list[str] = []

    class Slow:  # a collector of the same registry that takes a while: the page is written only after it
        def collect(self):
            threading.Event().wait(0.5)
            events.append("page complete")
            return iter(())

    live.registry.register(Slow())
    live.start()
    try:
        live.add_parts([_part(REG, "GET", "ok", 1, {2: 1}, 0.0004)])
        got = []
        t = threading.Thread(target=lambda: got.append(_scrape(live)))
        with live._lock:
            live._final = True  # the run is over before the scrape starts
        t.start()
        assert live.finish() is True
        events.append("finish returned")
    finally:
        live.stop()
    t.join()
    assert events == ["page complete", "finish returned"] and got[0]["drtp_requests"].samples


def test_the_end_does_not_wait_when_nothing_was_counted_or_the_run_was_interrupted():
    idle = LiveMetrics(LiveSettings(free_port(), linger_s=600))
    idle.start()
    with hang_guard(30), exporting(idle):
        pass  # a command refused before its first request: nothing to show, no wait
    assert idle._server is None
    busy = LiveMetrics(LiveSettings(free_port(), linger_s=600))
    busy.start()
    busy.add_parts([_part(REG, "GET", "ok", 1, {2: 1}, 0.0004)])
    with hang_guard(30), pytest.raises(KeyboardInterrupt), exporting(busy):
        raise KeyboardInterrupt  # Ctrl-C: out at once, no wait for a scrape
    assert busy._server is None
    with pytest.raises(OSError):
        urllib.request.urlopen(busy.settings.url, timeout=5)


def _refused(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own refusal of an option's value
        code = e.code
    assert code == 2
    out = capsys.readouterr()
    assert "Traceback" not in out.err and len(out.err.splitlines()) == 1, out.err
    return out.err.strip()


def test_a_port_in_use_or_a_bad_host_is_one_line_before_any_request(tmp_path, capsys, small_trace):
    with LocalRegistry(tmp_path / "registry") as reg:
        config = tmp_path / "c.yaml"
        raw = {
            "trace": {"location": str(small_trace.parent), "traces": [small_trace.name]},
            "registry": [reg.host],
            "client_info": {"client_list": ["127.0.0.1:1"], "token": "test-secret-0123456789"},
        }
        config.write_text(yaml.safe_dump(raw))
        logged = reg.log_path.stat().st_size
        busy = LiveMetrics(LiveSettings(free_port()))
        busy.start()  # holds the port
        try:
            port = busy.settings.port
            for command in ("run", "experiment", "ramp"):
                argv = [command, "-c", str(config), "--metrics-port", str(port)]
                if command == "ramp":
                    argv += ["--from", "1", "--step", "1", "--step-duration", "1", "--slo", "p99<1s"]
                err = _refused(capsys, argv)
                assert err.startswith(f"drtp {command}: error: --metrics-port {port}: cannot serve live metrics on "
                                      f"127.0.0.1:{port}: "), err  # fmt: skip
                assert "in use" in err
            raw["live_metrics"] = {"port": port}
            config.write_text(yaml.safe_dump(raw))
            err = _refused(capsys, ["run", "-c", str(config)])
            assert err.startswith(f"drtp run: error: {config}: key 'live_metrics': cannot serve live metrics on ")
        finally:
            busy.stop()
        err = _refused(capsys, ["run", "-c", str(config), "--metrics-host", "192.0.2.1"])  # not this machine's
        assert err.startswith("drtp run: error: --metrics-host 192.0.2.1: cannot serve live metrics on 192.0.2.1:")
        err = _refused(capsys, ["run", "-c", str(config), "--metrics-host", "no such host.invalid"])
        assert err.startswith("drtp run: error: --metrics-host: 'no such host.invalid' is not a host name")
        assert reg.log_path.stat().st_size == logged  # the registry saw nothing: no preflight, no request
    del raw["live_metrics"]
    config.write_text(yaml.safe_dump(raw))
    err = _refused(capsys, ["run", "-c", str(config), "--metrics-host", "127.0.0.1"])
    assert err == "drtp run: error: --metrics-host: needs --metrics-port PORT (or the config key live_metrics.port)"
    err = _refused(capsys, ["run", "-c", str(config), "--metrics-linger", "5"])
    assert err == "drtp run: error: --metrics-linger: needs --metrics-port PORT (or the config key live_metrics.port)"
    err = _refused(capsys, ["run", "-c", str(config), "--metrics-port", "1", "--metrics-linger", "2h"])
    assert err == "drtp run: error: --metrics-linger: at most 3600 s, got 7200"
    err = _refused(capsys, ["run", "-c", str(config), "--metrics-port", "70000"])
    assert err.startswith("drtp run: error: --metrics-port: not a port number: '70000'")


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"port": 0}, "live_metrics.port"),
        ({"port": "x"}, "live_metrics.port"),
        ({"host": "127.0.0.1"}, "live_metrics.port"),  # missing
        ({"port": 9100, "host": "a b"}, "live_metrics.host"),
        ({"port": 9100, "linger": -1}, "live_metrics.linger"),
        ({"port": 9100, "path": "/x"}, "live_metrics.path"),
    ],
)
def test_config_key_errors_name_the_key(tmp_path, section, key):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"live_metrics": section}))
    with pytest.raises(ConfigError) as e:
        load_config(path)
    text = str(e.value)
    assert text.startswith(f"{path}: ") and f"'{key}'" in text and "\n" not in text, text


def test_the_address_said_is_one_to_scrape():
    assert LiveSettings(9464).url == "http://127.0.0.1:9464/metrics"
    assert LiveSettings(9464, "::1").url == "http://[::1]:9464/metrics"
    # listening on every address: the machine's name, which a Prometheus elsewhere can reach (not 0.0.0.0)
    assert LiveSettings(9464, "0.0.0.0").url == f"http://{socket.gethostname()}:9464/metrics"
