"""A run reads the registry's own metrics: registry_metrics.csv, and registry_side beside drtp's own counts,
checked against the registry's access log (anonymous and with basic auth); a metrics page that cannot be read
is a warning, never a failed run."""

from __future__ import annotations

import json
import math
import threading

import pandas as pd
import pytest
import yaml

from drtp.analysis.registry_side import CLIENT, REGISTRY, fig_registry_side
from drtp.analysis.results_analysis import analyze_results, analyze_runs
from drtp.config import ConfigError, load_config
from drtp.master.run import replay as master_run
from drtp.master.run.replay import run_replay
from drtp.master.run.warmup import run_warmup
from drtp.master.series.experiment import registry_config, run_experiment
from drtp.registry.local import LocalRegistry, free_port
from tests.conftest import ibm_record, write_json
from tests.faultproxy import FaultProxy
from tests.realreg_support import PASSWORD, USER, write_htpasswd
from tests.registry_log import served_between
from tests.replay_support import TOKEN, make_trace, write_config

pytestmark = pytest.mark.registry


@pytest.fixture(scope="module")
def warmed(tmp_path_factory, nodes):
    """An anonymous registry serving its metrics, warmed for a small trace: (registry, config as a dict)."""
    d = tmp_path_factory.mktemp("metrics")
    trace = make_trace(d / "trace.json", requests=200)
    with LocalRegistry(d / "registry", metrics=True) as reg:
        write_config(d, trace, [reg.host], [n.address for n in nodes])
        raw = yaml.safe_load((d / "config.yaml").read_text())
        run_warmup(load_config(d / "config.yaml"), quiet=True)
        yield reg, raw


@pytest.fixture(scope="module")
def metered(tmp_path_factory, warmed):
    """A run of the warmed registry that read its metrics: (registry, summary, run directory)."""
    reg, raw = warmed
    d = tmp_path_factory.mktemp("metered")
    return reg, _run(d, raw, {reg.host: reg.metrics_url}), d / "run"


def _run(tmp_path, raw: dict, metrics: dict) -> dict:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**raw, "registry_metrics": metrics}))
    return run_replay(load_config(tmp_path / "config.yaml"), tmp_path / "run", quiet=True, stats_interval_s=0.5)


def _logged_in_window(reg: LocalRegistry, summary: dict, side: dict) -> list:
    """What the registry's access log shows it answered between the run's first and last metrics reading."""
    start = summary["start_epoch"]
    first, last = side["window_s"]
    return served_between(reg.log_path, start + first, start + last)


def _close(a: int, b: int) -> bool:
    """Within 2 % or 8 requests of each other, whichever is more."""
    return abs(a - b) <= max(0.02 * max(a, b), 8)


def test_a_run_keeps_the_registrys_metrics_and_counts_as_the_registry_did(metered):
    reg, summary, run_dir = metered
    samples = pd.read_csv(run_dir / "registry_metrics.csv")
    assert list(samples.columns) == ["elapsed_s", "registry", "metric", "labels", "value"]
    assert set(samples.registry) == {reg.host}
    assert samples.elapsed_s.nunique() >= 2  # before the first request and after the last, at least
    assert (samples.metric == "registry_http_requests_total").any()

    side = summary["registry_side"][reg.host]
    assert side == json.loads((run_dir / "summary.json").read_text())["registry_side"][reg.host]
    assert "warning" not in side
    # the registry's own count of the run's window agrees with its access log over the same window
    logged = _logged_in_window(reg, summary, side)
    assert side["requests"] >= summary["requests"] == 200 and _close(side["requests"], len(logged)), (
        side["requests"],
        len(logged),
    )
    slices = {(s["handler"], s["method"]): s for s in side["slices"]}
    assert side["requests"] == sum(s["registry_requests"] for s in slices.values())
    assert side["drtp_requests"] == sum(s["drtp_requests"] for s in slices.values())
    # an anonymous registry, no retries: every request drtp sent, the registry completed, slice by slice
    for (handler, method), s in slices.items():
        if handler == "base":
            continue  # the registry's readiness probe and drtp's preflight are not the run's
        assert s["registry_requests"] == s["drtp_requests"], (handler, method, s)
    assert slices[("manifest", "GET")]["drtp_requests"] > 0
    assert slices[("blob", "GET")]["registry_mean_ms"] > 0
    low, high = slices[("blob", "GET")]["registry_p50_bucket_ms"]
    assert high is None or low < high


def test_the_report_draws_both_sides_means_from_the_summary(metered, tmp_path):
    reg, summary, run_dir = metered
    out = tmp_path / "analysis"
    analyze_results([run_dir], out, log=lambda line: None)
    assert (out / "registry_side.png").stat().st_size > 0
    html = (out / "report.html").read_text()
    assert "Client and registry" in html and "registry_p50_bucket_ms" in html

    results, _ = analyze_runs([run_dir])
    (run,) = results
    fig = fig_registry_side(results)
    (ax,) = fig.axes
    bars = {c.get_label(): [p.get_width() for p in c.patches] for c in ax.containers}
    labels = [t.get_text() for t in ax.get_yticklabels()]
    slices = summary["registry_side"][reg.host]["slices"]
    assert labels == [f"{s['handler']} {s['method']}" for s in slices]
    for key, label in (("drtp_mean_ms", CLIENT), ("registry_mean_ms", REGISTRY)):
        drawn = bars[label]
        assert drawn == pytest.approx([s[key] if s[key] is not None else math.nan for s in slices], nan_ok=True)
    assert sum(1 for s in slices if s["drtp_mean_ms"] and s["registry_mean_ms"]) >= 3


def test_a_metrics_page_that_cannot_be_read_is_a_warning_not_a_failed_run(tmp_path, warmed, caplog):
    reg, raw = warmed
    nowhere = f"http://127.0.0.1:{free_port()}/metrics"
    summary = _run(tmp_path, raw, {reg.host: nowhere})

    assert summary["complete"] and summary["failed"] == 0 and summary["requests"] == 200
    side = summary["registry_side"][reg.host]
    assert nowhere in side["warning"]
    assert side["slices"] == [] and side["requests"] is None
    assert side["drtp_requests"] >= 200  # what drtp sent is known without the registry's witness
    assert pd.read_csv(tmp_path / "run" / "registry_metrics.csv").empty
    assert any("registry metrics" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)


def test_a_resumed_run_keeps_the_earlier_readings_and_its_side_covers_the_resumed_session(
    tmp_path, warmed, monkeypatch
):
    reg, raw = warmed
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**raw, "registry_metrics": {reg.host: reg.metrics_url}}))
    cfg, out = load_config(tmp_path / "config.yaml"), tmp_path / "run"
    real_send = master_run.Replay._send

    def ctrl_c_midway(self, *args, **kwargs):
        if not self.resume and self.done >= 60:
            raise KeyboardInterrupt
        return real_send(self, *args, **kwargs)

    monkeypatch.setattr(master_run.Replay, "_send", ctrl_c_midway)
    with pytest.raises(KeyboardInterrupt):
        run_replay(cfg, out, quiet=True, stats_interval_s=0.5)
    before = pd.read_csv(out / "registry_metrics.csv")
    assert not before.empty
    summary = run_replay(cfg, out, quiet=True, resume=True, stats_interval_s=0.5)

    samples = pd.read_csv(out / "registry_metrics.csv")  # one header, every reading of both sessions
    assert samples.elapsed_s.dtype.kind == "f"
    assert samples.head(len(before)).equals(before)  # the interrupted session's readings are kept
    later = samples.iloc[len(before) :]
    side = summary["registry_side"][reg.host]
    assert side["resumed_session_only"] is True
    assert not later.empty and later.elapsed_s.min() == round(side["window_s"][0], 3) > before.elapsed_s.min()
    rows = pd.read_csv(out / "requests.csv")
    sent = rows[rows.attempts >= 1]
    resumed = sent[sent.start_s >= side["window_s"][0]]
    assert 0 < len(resumed) < len(sent)  # both sessions sent requests
    # drtp's side counts what the resumed session sent, as the registry's window does
    assert side["drtp_requests"] == int(resumed.attempts.sum() + resumed.challenges.sum())


@pytest.mark.parametrize("engine", ["loop", "threads"])
def test_auth_challenges_are_round_trips_drtp_counts_as_the_registry_does(tmp_path, nodes, engine):
    """With basic auth, each node's first requests meet a 401 challenge and go again: the registry serves and
    counts both sends, and so does drtp (the rows' ``challenges``), on either engine."""
    trace = make_trace(tmp_path / "trace.json", requests=150)
    with LocalRegistry(tmp_path / "reg", htpasswd=write_htpasswd(tmp_path / "htpasswd"), metrics=True) as reg:
        entry = {"id": "basic", "url": reg.url, "insecure": True, "username": USER, "password": PASSWORD}
        cfg = {
            "trace": {"location": str(tmp_path), "traces": [trace.name]},
            "client_info": {
                "client_list": [n.address for n in nodes],
                "threads": 8,
                "token": TOKEN,
                "batch": 50,
                "engine": engine,
            },
            "warmup": {"output": str(tmp_path / "warmup.jsonl"), "threads": 4},
            "registries": [{**entry, "metrics": reg.metrics_url}],
        }
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
        status = run_experiment(load_config(tmp_path / "c.yaml"), tmp_path / "exp", quiet=True, stats_interval_s=0.5)
        assert status["basic"]["ok"], status
        summary = json.loads((tmp_path / "exp" / "basic" / "summary.json").read_text())
        side = summary["registry_side"][reg.url]
        logged = _logged_in_window(reg, summary, side)

    rows = pd.read_csv(tmp_path / "exp" / "basic" / "requests.csv")
    assert rows.challenges.sum() > 0  # the nodes met challenges in the run
    assert summary["failed"] == 0 and summary["auxiliary"]["failed"] == 0
    refused = [x for x in logged if x.status == 401]
    assert len(refused) >= rows.challenges.sum()  # every challenge a row counts is a 401 in the registry's log
    assert _close(side["requests"], len(logged)), (side["requests"], len(logged))
    for s in side["slices"]:
        if s["handler"] != "base":
            assert s["registry_requests"] == s["drtp_requests"], s
    assert side["drtp_requests"] == int(rows.attempts.sum() + rows.challenges.sum())


@pytest.mark.parametrize("engine", ["loop", "threads"])
def test_a_send_retried_before_its_challenge_counts_every_send(tmp_path, nodes, engine):
    """A read whose first send got no answer (the connection closed), sent again (``retries: 1``), met a 401
    and went once more with credentials: three sends, which the row counts as the registry's log shows
    them — ``challenges`` 1 (the 401 answered) and ``attempts`` 2 (the rest) — on either engine."""
    target = "/v2/team/one/manifests/v1"
    armed = threading.Event()  # the warmup's requests pass; the run's first read of the manifest is cut

    def close_first(index: int, method: str, path: str) -> str | None:
        if armed.is_set() and method == "GET" and path == target:
            armed.clear()
            return "close"
        return None

    over = {"http.request.uri": target[1:], "http.response.written": 600}
    write_json(tmp_path / "trace.json", [ibm_record(0, **over)])
    with (
        LocalRegistry(tmp_path / "reg", htpasswd=write_htpasswd(tmp_path / "htpasswd")) as reg,
        FaultProxy(reg.host, plan=close_first) as proxy,
    ):
        entry = {"id": "basic", "url": f"http://{proxy.address}", "insecure": True, "username": USER}
        cfg = {
            "trace": {"location": str(tmp_path), "traces": ["trace.json"]},
            "client_info": {"client_list": [n.address for n in nodes], "token": TOKEN, "retries": 1, "engine": engine},
            "warmup": {"output": str(tmp_path / "warmup.jsonl")},
            "registries": [{**entry, "password": PASSWORD}],
        }
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
        loaded = load_config(tmp_path / "c.yaml")
        config = registry_config(loaded, loaded.registries[0])  # the entry's run, as drtp experiment makes it
        run_warmup(config, quiet=True)
        armed.set()
        summary = run_replay(config, tmp_path / "run", quiet=True)
        sent = [f for f in proxy.forwarded if f.method == "GET" and f.path == target]
    assert summary["failed"] == 0 and not armed.is_set()
    row = pd.read_csv(tmp_path / "run" / "requests.csv").query("not auxiliary").iloc[0]
    assert [f.upstream_status for f in sent] == [401, 401, 200]  # the closed one reached the registry too
    assert (row.attempts, row.challenges) == (2, 1)


def test_registry_metrics_must_name_a_registry_of_the_run(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump({"registry": ["127.0.0.1:5000"], "registry_metrics": {"127.0.0.1:6000": "http://x:1/metrics"}})
    )
    with pytest.raises(ConfigError, match=r"registry_metrics\.127\.0\.0\.1:6000.*not a registry"):
        load_config(path)
    path.write_text(yaml.safe_dump({"registry": ["127.0.0.1:5000"], "registry_metrics": {"127.0.0.1:5000": "ftp://x"}}))
    with pytest.raises(ConfigError, match=r"registry_metrics\.127\.0\.0\.1:5000.*http\(s\) URL"):
        load_config(path)
