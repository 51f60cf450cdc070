"""The real containerd the profile and concurrency tests pull with: it starts, pulls, and its pulls are a trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.containerd_support import available, capture_pulls
from tests.registry_log import connections, user_agents

pytestmark = pytest.mark.skipif(not available(), reason="containerd/ctr not installed (scripts/install.sh)")


def test_captured_pulls_are_containerds(tmp_path: Path) -> None:
    pulls = capture_pulls(tmp_path, count=2, layers=4)
    records = json.loads(pulls.trace.read_text())
    gets = [r for r in records if r["http.request.method"] == "GET" and "/blobs/" in r["http.request.uri"]]
    # each image: its config and 4 layers, downloaded once
    assert len(gets) == 2 * 5
    assert {r["http.request.uri"].split("/")[2] for r in records} == {"app0", "app1"}
    # the registry saw containerd itself, on more than one connection (layers are fetched in parallel)
    agents = set(user_agents(pulls.log, settle_s=0))
    assert len(agents) == 1 and next(iter(agents)).startswith("containerd/")
    assert len(connections(pulls.log, settle_s=0)) > 1
