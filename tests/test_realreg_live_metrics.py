"""A real Prometheus (Debian ``prometheus``) scrapes ``drtp run --metrics-port`` during a run against the real
registry; its HTTP API then holds the run's final request count."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from drtp.cli import main
from drtp.master.run.warmup import run_warmup
from drtp.registry.local import LocalRegistry, free_port
from tests.replay_support import TOKEN, make_trace, terminate, write_config

pytestmark = pytest.mark.registry

PROMETHEUS = shutil.which("prometheus")


class Prometheus:
    """``prometheus`` on a free loopback port, scraping ``target`` every second, with its own data directory."""

    def __init__(self, workdir: Path, target: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                    "scrape_configs": [{"job_name": "drtp", "static_configs": [{"targets": [target]}]}],
                }
            )
        )
        self.log = workdir / "prometheus.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"prometheus did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)

    def wait_scraping(self) -> None:
        """Until Prometheus has tried its target once (it hands new targets to its scrapers only some seconds
        after it starts): a run started before would be over before its first scrape."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=10) as answer:
                targets = json.load(answer)["data"]["activeTargets"]
            if targets and not targets[0]["lastScrape"].startswith("0001-"):
                return
            time.sleep(0.2)
        raise AssertionError(f"prometheus never scraped its target: {self.log.read_text()[-2000:]}")

    def query(self, expr: str, at: float | None = None) -> list:
        """``/api/v1/query``'s result for ``expr`` (at ``at``, else now)."""
        params = {"query": expr} | ({"time": repr(at)} if at is not None else {})
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def stop(self) -> None:
        terminate(self.proc)


@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (Debian package prometheus)")
def test_prometheus_scrapes_a_run_and_holds_its_final_request_count(tmp_path, nodes, capsys):
    metrics_port = free_port()
    prometheus = Prometheus(tmp_path, f"127.0.0.1:{metrics_port}")
    try:
        trace = make_trace(tmp_path / "trace.json", requests=200)
        with LocalRegistry(tmp_path / "registry") as reg:
            cfg = write_config(tmp_path, trace, [reg.host], [n.address for n in nodes])
            run_warmup(cfg, quiet=True)
            out = tmp_path / "run"
            prometheus.wait_scraping()
            capsys.readouterr()
            # at 80 requests/s the run lasts a few seconds: Prometheus scrapes it while it goes
            argv = ["run", "-c", cfg.source, "--out", str(out), "--rate", "80", "--metrics-port", str(metrics_port)]
            assert main([*argv, "-q", "--max-failed", "100%"]) == 0
        err = capsys.readouterr().err
        assert f"drtp: live metrics at http://127.0.0.1:{metrics_port}/metrics" in err.splitlines()
        summary = json.loads((out / "summary.json").read_text())
        ended = (out / "summary.json").stat().st_mtime

        # every sample Prometheus took (a range selector leaves out the marks it sets once the target is gone)
        samples: dict[float, float] = {}
        for series in prometheus.query("drtp_requests_total[2m]"):
            assert series["metric"]["registry"] == f"http://{reg.host}"
            for at, value in series["values"]:
                samples[at] = samples.get(at, 0) + float(value)
        last = max(samples)
        # a scrape after the run's end: the exporter waited for it (Prometheus stamps a scrape as it sends it,
        # a moment before the page is made, which may be just after summary.json was written)
        assert last > ended - 0.25
        assert min(samples.values()) < summary["requests"]  # and scrapes while the run went on
        (total,) = prometheus.query("sum(drtp_requests_total)", at=last)
        assert int(float(total["value"][1])) == summary["requests"] == 200
        (offered,) = prometheus.query("drtp_offered_rps", at=last)
        assert float(offered["value"][1]) == 80
        # the latency histogram holds the requests that succeeded, as summary.json's latency does
        (ok,) = prometheus.query("sum(drtp_request_duration_seconds_count)", at=last)
        assert int(float(ok["value"][1])) == summary["requests"] - summary["failed"]
    finally:
        prometheus.stop()


class Poller:
    """Reads the exporter's page every 0.1 s while a command runs: each scrape's samples, {(name, labels): value}."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pages: list[dict] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.done.wait(0.1):
            try:
                with urllib.request.urlopen(self.url, timeout=5) as answer:
                    text = answer.read().decode()
            except OSError:
                continue  # not listening yet, or no more
            page = {}
            for family in text_string_to_metric_families(text):
                for s in family.samples:
                    page[(s.name, tuple(sorted(s.labels.items())))] = s.value
            self.pages.append(page)

    def stop(self) -> list[dict]:
        self.done.set()
        self.thread.join()
        return self.pages


def _sum(page: dict, name: str, **labels) -> float:
    return sum(v for (n, ls), v in page.items() if n == name and all(dict(ls).get(k) == x for k, x in labels.items()))


def test_one_endpoint_serves_every_registry_of_an_experiment(tmp_path, nodes, capsys):
    """Two registries in turn: each run's count under its own registry label, on the one endpoint."""
    trace = make_trace(tmp_path / "trace.json", requests=40)
    port = free_port()
    with LocalRegistry(tmp_path / "reg-a") as a, LocalRegistry(tmp_path / "reg-b") as b:
        path = tmp_path / "config.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "trace": {"location": str(trace.parent), "traces": [trace.name]},
                    "registries": [{"id": "a", "url": a.url, "insecure": True}, {"id": "b", "url": b.url,
                                                                                 "insecure": True}],
                    "client_info": {"client_list": [n.address for n in nodes], "token": TOKEN, "threads": 8},
                    "warmup": {"output": str(tmp_path / "warmup-map.jsonl"), "threads": 4},
                    "live_metrics": {"port": port, "linger": 60},  # the config key, as a Slurm job has it
                }
            )
        )  # fmt: skip
        poller = Poller(f"http://127.0.0.1:{port}/metrics")
        try:
            code = main(["experiment", "-c", str(path), "--out", str(tmp_path / "exp"), "-q", "--max-failed", "100%"])
        finally:
            pages = poller.stop()
    assert code == 0
    assert capsys.readouterr().err.count(f"drtp: live metrics at http://127.0.0.1:{port}/metrics") == 1
    final = pages[-1]  # the exporter waited for a scrape of its final values: the poller's last one
    for entry, reg in (("a", a), ("b", b)):
        summary = json.loads((tmp_path / "exp" / entry / "summary.json").read_text())
        assert _sum(final, "drtp_requests_total", registry=reg.url) == summary["requests"] == 40
        ok = _sum(final, "drtp_request_duration_seconds_count", registry=reg.url)
        assert ok == summary["requests"] - summary["failed"]
    assert _sum(final, "drtp_in_flight") == 0
    # while registry b ran, registry a's count stood at its final value: counters only grow, per registry
    seen_b = [p for p in pages if _sum(p, "drtp_requests_total", registry=b.url) > 0]
    assert seen_b and all(_sum(p, "drtp_requests_total", registry=a.url) == 40 for p in seen_b)


def test_a_ramp_s_steps_share_one_endpoint_and_each_offers_its_rate(tmp_path, nodes, capsys):
    trace = make_trace(tmp_path / "trace.json", requests=60)
    port = free_port()
    with LocalRegistry(tmp_path / "registry") as reg:
        cfg = write_config(tmp_path, trace, [reg.host], [n.address for n in nodes])
        run_warmup(cfg, quiet=True)
        poller = Poller(f"http://127.0.0.1:{port}/metrics")
        try:
            argv = ["ramp", "-c", cfg.source, "--out", str(tmp_path / "ramp"), "--from", "20", "--step", "20"]
            argv += ["--to", "40", "--step-duration", "1", "--slo", "p99<60s", "-q", "--metrics-port", str(port)]
            code = main(argv)
        finally:
            pages = poller.stop()
    ramp = json.loads((tmp_path / "ramp" / "ramp.json").read_text())
    final = pages[-1]
    steps = ramp["steps"]
    load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    if code == 1 and load > 2 * cpus and steps[-1]["under_offered"]:
        # both steps hold only if drtp starts their requests on time: on a machine running many more busy
        # processes than it has CPUs a node may start a 1-second step's last requests late enough that the
        # step did not start at its rate, and the ramp rightly ends there, naming drtp; what ran was counted
        assert all(s["held"] for s in steps[:-1]) and "the replayer's limit" in steps[-1]["broken"], steps
        assert _sum(final, "drtp_requests_total", registry=f"http://{reg.host}") == sum(s["requests"] for s in steps)
        pytest.skip(
            f"drtp fell behind at {steps[-1]['rate']:g}/s on this loaded machine (load average {load:.1f} on "
            f"{cpus} CPUs; {steps[-1]['behind']}): the ramp ended there"
        )
    assert code == 0
    assert [s["requests"] for s in steps] == [20, 40]
    assert _sum(final, "drtp_requests_total", registry=f"http://{reg.host}") == 60  # both steps, one counter
    offered = [p[("drtp_offered_rps", ())] for p in pages if ("drtp_offered_rps", ()) in p]
    assert offered[0] == 20 and offered[-1] == 40 and sorted(offered) == offered  # each step its own rate
