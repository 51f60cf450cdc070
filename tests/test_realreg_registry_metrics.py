"""A run reads the registry's own metrics: registry_metrics.csv, and registry_side beside drtp's own counts."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from drtp.config import ConfigError, load_config
from drtp.master.run import run_replay
from drtp.master.warmup import run_warmup
from drtp.registry.local import LocalRegistry
from tests.replay_support import make_trace, write_config

pytestmark = pytest.mark.registry


def test_a_run_keeps_the_registrys_metrics_and_counts_as_the_registry_did(tmp_path, nodes):
    trace = make_trace(tmp_path / "trace.json")
    with LocalRegistry(tmp_path / "registry", metrics=True) as reg:
        cfg_path = write_config(tmp_path, trace, [reg.host], [n.address for n in nodes]).source
        raw = yaml.safe_load(open(cfg_path))
        raw["registry_metrics"] = {reg.host: reg.metrics_url}
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(raw))
        cfg = load_config(tmp_path / "config.yaml")
        run_warmup(cfg, quiet=True)
        summary = run_replay(cfg, tmp_path / "run", quiet=True, stats_interval_s=0.5)

    samples = pd.read_csv(tmp_path / "run" / "registry_metrics.csv")
    assert list(samples.columns) == ["elapsed_s", "registry", "metric", "labels", "value"]
    assert set(samples.registry) == {reg.host}
    assert samples.elapsed_s.nunique() >= 2  # before the first request and after the last, at least
    assert (samples.metric == "registry_http_requests_total").any()

    side = summary["registry_side"][reg.host]
    assert "warning" not in side
    slices = {(s["handler"], s["method"]): s for s in side["slices"]}
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["registry_side"][reg.host]["slices"]
    # an anonymous registry, no retries: every request drtp sent, the registry completed, slice by slice
    for (handler, method), s in slices.items():
        if handler == "base":
            continue  # the registry's readiness probe and drtp's preflight are not the run's
        assert s["registry_requests"] == s["drtp_requests"], (handler, method, s)
    assert slices[("manifest", "GET")]["drtp_requests"] > 0
    assert slices[("blob", "GET")]["registry_mean_ms"] > 0
    low, high = slices[("blob", "GET")]["registry_p50_bucket_ms"]
    assert high is None or low < high


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
