"""Runs through real caches (Distribution's pull-through ``proxy:``, nginx ``proxy_cache``): what reached the
upstream, counted by the run, against what the test recomputes from the upstream's own access log.

The upstream is warmed directly (a config whose registry is the upstream), then the trace goes through the
cache with ``upstream: {url, access_log}``; the upstream's log lines of the run's window are counted here with
code of the test's own (json, not drtp's reader) and must equal summary.json ``upstream`` exactly.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml

from drtp.config import load_config
from drtp.master.run.replay import Replay
from drtp.master.run.settings import RunSettings
from drtp.master.run.warmup import run_warmup
from drtp.master.series.experiment import registry_config
from drtp.registry.local import LocalRegistry
from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.reader import write_ibm
from drtp.trace.registry_log import parse_go_duration
from tests.caches_support import NginxCache
from tests.replay_support import TOKEN

STORM_CLIENTS = 8
STORM_IMAGES = 5
STORM_LAYER = 200_000  # bytes; through the throttled path a cold fetch lasts about a second
STORM_RATE = 200_000  # bytes/s from the upstream to nginx


def storm_trace(path: Path) -> Path:
    """8 trace clients pulling each of 5 cold images at the same instant: a manifest GET and its layer's GET, which
    overlap in the trace (so a client's layer GET does not wait for its manifest, which may wait on nginx's lock)."""
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    records = []
    for image in range(STORM_IMAGES):
        at = t0 + dt.timedelta(seconds=2 * image)
        for client in range(STORM_CLIENTS):
            for uri, size, later, took in (
                (f"v2/storm/img{image}/manifests/v1", 1000, 0.0, 1.0),
                (f"v2/storm/img{image}/blobs/layer{image}", STORM_LAYER, 0.1, 1.0),
            ):
                records.append(
                    {
                        "host": "h",
                        "http.request.duration": took,
                        "http.request.method": "GET",
                        "http.request.remoteaddr": f"client{client}",
                        "http.request.uri": uri,
                        "http.request.useragent": "docker/24.0",
                        "http.response.status": 200,
                        "http.response.written": size,
                        "id": f"s{image}-{client}-{later}",
                        "timestamp": (at + dt.timedelta(seconds=later)).isoformat().replace("+00:00", "Z"),
                    }
                )
    write_ibm(path, records)
    return path


def pull_trace(path: Path) -> Path:
    """A short generated trace of pulls (no pushes: a pull-through cache refuses them)."""
    opts = GenerateOptions(
        requests=120, seed=3, span_s=6, clients=10, repositories=6, push_ratio=0.0, max_layer_size=64_000
    )
    write_ibm(path, generate(opts))
    return path


def config(tmp: Path, nodes, trace: Path, entry: dict, wait: bool):
    cfg = {
        "trace": {"location": str(trace.parent), "traces": [trace.name]},
        "registries": [{"id": "reg", **entry}],
        "client_info": {"client_list": [n.address for n in nodes], "threads": 16, "token": TOKEN, "wait": wait},
        "warmup": {"output": str(tmp / "warmup-map.jsonl"), "threads": 4},
        "results": str(tmp / "results"),
    }
    path = tmp / f"config-{len(list(tmp.glob('config-*')))}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    loaded = load_config(path)
    return registry_config(loaded, loaded.registries[0])


def run_through(tmp: Path, nodes, trace: Path, up: LocalRegistry, cache_url: str, wait: bool = False):
    """Warm ``up`` directly, replay ``trace`` through the cache; the run's directory and summary."""
    run_warmup(config(tmp, nodes, trace, {"url": up.url, "insecure": True}, wait), quiet=True)
    through = {
        "url": cache_url,
        "insecure": True,
        "upstream": {"url": up.url, "insecure": True, "access_log": str(up.log_path)},
    }
    # no preflight probe: a pull-through cache refuses its push (it goes to the upstream once the run sends it there)
    settings = RunSettings(out_dir=tmp / "run", quiet=True)
    summary = Replay(config(tmp, nodes, trace, through, wait), settings, preflight=False).run()
    rows = pd.read_csv(tmp / "run" / "requests.csv", keep_default_na=False, na_values=[""])
    return summary, rows[~rows.auxiliary]


# -- the test's own reading of the upstream's log -------------------------------------------------------------


def logged(up: LocalRegistry, start_epoch: float) -> list[dict]:
    """The upstream's requests that ended after the run's start, drtp's direct requests left out."""
    out = []
    for line in up.log_path.read_text().splitlines():
        if not line.startswith("{"):
            continue
        e = json.loads(line)
        if e.get("msg") != "response completed" or "drtp-direct" in e.get("http.request.useragent", ""):
            continue
        stamp, _, frac = e["time"].rstrip("Z").partition(".")
        end = dt.datetime.fromisoformat(stamp + "+00:00").timestamp() + float("0." + (frac or "0"))
        if end < start_epoch:
            continue
        path = e["http.request.uri"].split("?")[0]
        parts = path.split("/")
        kind = "ping" if path in ("/v2/", "/v2") else {"manifests": "manifest", "blobs": "blob"}.get(parts[-2], "other")
        out.append(
            {
                "method": e["http.request.method"],
                "kind": kind,
                "ref": parts[-1],
                "bytes": e["http.response.written"],
                "end": end,
                "start": end - parse_go_duration(e["http.response.duration"]),
            }
        )
    return out


def counts(entries: list[dict]) -> tuple[dict, dict]:
    requests: dict = {}
    nbytes: dict = {}
    for e in entries:
        requests.setdefault(e["kind"], Counter())[e["method"]] += 1
        nbytes.setdefault(e["kind"], Counter())[e["method"]] += e["bytes"]
    return {k: dict(v) for k, v in requests.items()}, {k: dict(v) for k, v in nbytes.items()}


def assert_counts_match(summary: dict, up: LocalRegistry) -> tuple[dict, list[dict]]:
    block = summary["upstream"]["reg"]
    entries = logged(up, summary["start_epoch"])
    requests, nbytes = counts(entries)
    assert block["requests"] == requests
    assert block["bytes"] == nbytes
    return block, entries


def gets(entries: list[dict], kind: str) -> list[dict]:
    return [e for e in entries if e["kind"] == kind and e["method"] == "GET"]


# -- fixtures shared by the module ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cache-traces")
    return {"pulls": pull_trace(d / "pulls.json"), "storm": storm_trace(d / "storm.json")}


# -- the tests -------------------------------------------------------------------------------------------------


def test_nginx_counts_and_hit_ratio_on_a_generated_trace(tmp_path, nodes, traces):
    with LocalRegistry(tmp_path / "up") as up, NginxCache(up.url, lock=True) as cache:
        summary, rows = run_through(tmp_path, nodes, traces["pulls"], up, cache.url)
        block, entries = assert_counts_match(summary, up)
    assert set(rows.cache) <= {"hit", "miss", "wait"} and len(rows)
    for kind in ("manifest", "blob"):
        mine = rows[(rows.kind == kind) & (rows.status != 0)]
        fetched = len(gets(entries, kind))
        # with the lock each absent object is fetched once: every request not served from the cache is one GET
        assert (mine.cache == "miss").sum() == fetched
        if len(mine):
            assert block["hit_ratio"][kind]["requests"] == pytest.approx((len(mine) - fetched) / len(mine))
        assert block["client_requests"][kind] == (rows.kind == kind).sum()


def test_distribution_counts_and_hit_ratio_on_a_generated_trace(tmp_path, nodes, traces):
    with LocalRegistry(tmp_path / "up") as up, LocalRegistry(tmp_path / "cache", proxy={"remoteurl": up.url}) as c:
        summary, rows = run_through(tmp_path, nodes, traces["pulls"], up, c.url)
        block, entries = assert_counts_match(summary, up)
    start = summary["start_epoch"]
    for kind in ("manifest", "blob"):
        mine = rows[(rows.kind == kind) & (rows.status != 0)]
        fetched = gets(entries, kind)
        # the rule recomputed: served from the cache unless a GET of the object reached the upstream during it
        served = 0
        for r in mine.itertuples():
            begin, end = start + r.start_s, start + r.start_s + r.latency_s
            refs = {r.digest} if kind == "blob" else {r.reference, r.digest}
            served += not any(e["ref"] in refs and e["start"] < end and e["end"] > begin for e in fetched)
        if len(mine):
            assert block["hit_ratio"][kind]["requests"] == pytest.approx(served / len(mine))
    print("distribution generated:", json.dumps(block["upstream_gets_per_object"]))


@pytest.mark.parametrize("lock", [False, True], ids=["lock-off", "lock-on"])
def test_nginx_storm(tmp_path, nodes, traces, lock):
    with LocalRegistry(tmp_path / "up") as up, NginxCache(up.url, lock=lock, rate=STORM_RATE) as cache:
        summary, rows = run_through(tmp_path, nodes, traces["storm"], up, cache.url, wait=True)
        block, entries = assert_counts_match(summary, up)
    blobs = rows[rows.kind == "blob"]
    assert len(blobs) == STORM_CLIENTS * STORM_IMAGES and blobs.ok.all()
    assert len(gets(entries, "blob")) == (STORM_IMAGES if lock else STORM_CLIENTS * STORM_IMAGES)
    per = block["upstream_gets_per_object"]["blob"]
    assert per["per_absence"] == (1 if lock else STORM_CLIENTS)
    served = STORM_CLIENTS * STORM_IMAGES - len(gets(entries, "blob"))
    assert block["hit_ratio"]["blob"]["requests"] == pytest.approx(served / len(blobs))
    if lock:  # one client fetched each layer; the 7 others waited on the lock and were served from the cache
        assert Counter(blobs.cache) == {"miss": STORM_IMAGES, "wait": (STORM_CLIENTS - 1) * STORM_IMAGES}
        assert set(block["latency_by_class"]) >= {"miss", "wait"}
    else:
        assert set(blobs.cache) == {"miss"}


def test_distribution_storm(tmp_path, nodes, traces):
    with LocalRegistry(tmp_path / "up") as up, LocalRegistry(tmp_path / "cache", proxy={"remoteurl": up.url}) as c:
        summary, rows = run_through(tmp_path, nodes, traces["storm"], up, c.url, wait=True)
        block, entries = assert_counts_match(summary, up)
    blobs = rows[rows.kind == "blob"]
    assert len(blobs) == STORM_CLIENTS * STORM_IMAGES
    per = block["upstream_gets_per_object"]["blob"]
    assert per["gets"] == len(gets(entries, "blob"))
    print("distribution storm:", json.dumps(block["upstream_gets_per_object"]), dict(Counter(blobs.cache)))
