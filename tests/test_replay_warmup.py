"""Warmup: what the trace reads exists, manifests are real, a second run is a no-op, a cut one resumes."""

from __future__ import annotations

import json

import pytest
import requests

from drtp.master.run.warmup import CONFIG_KIND, load_map, run_warmup
from drtp.master.run.warmup import IMAGE_TAG_PREFIX as IMAGE_TAG
from drtp.registry.local import LocalRegistry
from drtp.registry.manifest import ACCEPT, SCHEMA2
from drtp.trace.reader import TraceReader
from tests.replay_support import make_trace, write_config

pytestmark = pytest.mark.registry


def test_warmup_pushes_what_is_read_and_resumes(tmp_path):
    trace = make_trace(tmp_path / "trace.json")
    records = list(TraceReader([trace]))
    with LocalRegistry(tmp_path / "registry") as reg:
        cfg = write_config(tmp_path, trace, [reg.host], ["127.0.0.1:1"])
        first = run_warmup(cfg, quiet=True)
        map_path = cfg.path(cfg.warmup.output)
        lines_of = list(load_map(map_path))
        entries = [e for e in lines_of if e["kind"] != CONFIG_KIND]  # the trace's objects
        assert first.blobs_pushed > 0 and first.manifests > 0 and first.failed == 0
        assert len(entries) == first.blobs_pushed + first.blobs_mounted + first.manifests
        # the minimal config blob: one line per repository it was written into (what drtp clean deletes)
        configs = [e for e in lines_of if e["kind"] == CONFIG_KIND]
        assert len(configs) == first.configs_recorded == first.configs_pushed > 0
        assert len({(e["registry"], e["repository"]) for e in configs}) == len(configs)

        # every manifest the trace reads with success before any push of it is a real schema-2 manifest
        manifests = [e for e in entries if e["kind"] == "manifest"]
        warmed = {(e["repository"], e["reference"]): e for e in manifests if not e["reference"].startswith(IMAGE_TAG)}
        assert warmed, "no manifest of the trace was warmed"
        never_pushed_404 = {(r.repository, r.reference) for r in records if r.kind == "manifest" and r.status == 404}
        assert not never_pushed_404 & set(warmed), "a tag the trace never had was warmed"
        for (repo, tag), e in list(warmed.items())[:10]:
            r = requests.get(f"{reg.url}/v2/{repo}/manifests/{tag}", headers={"Accept": ACCEPT}, timeout=5)
            assert r.status_code == 200 and r.headers["Content-Type"] == SCHEMA2
            doc = r.json()
            assert len(r.content) == e["size"]
            trace_size = max(x.size for x in records if x.repository == repo and x.reference == tag)
            assert abs(len(r.content) - trace_size) <= 2 or len(r.content) > trace_size
            for layer in doc["layers"]:  # it references blobs present in its repository
                head = requests.head(f"{reg.url}/v2/{repo}/blobs/{layer['digest']}", timeout=5)
                assert head.status_code == 200 and int(head.headers["Content-Length"]) == layer["size"]
        # warmup.shape images: every blob is a layer of a tagged manifest of its repository
        named = set()
        for e in manifests:
            url = f"{reg.url}/v2/{e['repository']}/manifests/{e['reference']}"
            doc = requests.get(url, headers={"Accept": ACCEPT}, timeout=5)
            named |= {(e["repository"], layer["digest"]) for layer in doc.json()["layers"]}
        assert {(e["repository"], e["digest"]) for e in entries if e["kind"] == "blob"} <= named
        # blobs are there with the trace's size
        for e in [e for e in entries if e["kind"] == "blob"][:10]:
            head = requests.head(f"{reg.url}/v2/{e['repository']}/blobs/{e['digest']}", timeout=5)
            assert head.status_code == 200 and int(head.headers["Content-Length"]) == e["size"]

        # a second warmup does nothing
        size = reg.log_path.stat().st_size
        again = run_warmup(cfg, quiet=True)
        assert (again.blobs_pushed, again.blobs_mounted, again.manifests) == (0, 0, 0)
        assert again.already == len(entries)
        pushes = [json.loads(x) for x in reg.log_path.read_bytes()[size:].splitlines() if x.startswith(b"{")]
        assert not [x for x in pushes if x.get("http.request.method") in ("PUT", "POST", "PATCH")]

        # cut the map (an interrupted warmup, with a torn last line): only the rest is redone
        lines = map_path.read_text().splitlines()
        keep = len(lines) // 2
        map_path.write_text("\n".join(lines[:keep]) + '\n{"registry": "127.0')
        resumed = run_warmup(cfg, quiet=True)
        redone = resumed.blobs_pushed + resumed.blobs_mounted + resumed.manifests + resumed.configs_recorded
        assert redone == len(lines) - keep
        assert len(list(load_map(map_path))) == len(lines)


def test_a_map_line_without_its_registry_is_not_an_entry(tmp_path):
    """Every reader of a warmup map (the run's planner, a resumed warmup, drtp clean) needs the registry an
    object was pushed to: a line without it is left out like a torn one, never a KeyError later."""
    from drtp.master.run.warmup import load_map

    whole = {"registry": "127.0.0.1:5000", "repository": "a/b", "kind": "blob", "reference": "x", "digest": "d"}
    path = tmp_path / "map.jsonl"
    partial = {k: v for k, v in whole.items() if k != "registry"}
    path.write_text(json.dumps(partial) + "\n" + json.dumps(whole) + "\n")
    assert list(load_map(path)) == [whole]
