"""``repository_map`` and ``create_repository`` against the real registry: its access log shows every name drtp sent.

One experiment replays a generated trace of two-level names, plus cross-repository mounts, through two
entries of one registry: ``flatten`` under ``flat/`` and the template ``{prefix}{user}_{repo}`` under
``tpl/``, the first with a ``create_repository`` hook (a script of the test's own that records each call and
what the registry had seen of that repository by then).  Then: a collision refused before anything is sent,
failing hooks, and ``drtp bench`` with an entry's names.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qs

import pandas as pd
import pytest
import yaml

from drtp.cli import main
from drtp.config import load_config
from drtp.master.run.warmup import run_warmup
from drtp.master.series.experiment import registry_config, run_experiment
from drtp.registry.local import LocalRegistry
from drtp.registry.repo_hooks import created_path
from drtp.registry.repo_names import RepositoryMap
from drtp.trace.reader import TraceReader
from tests.conftest import ibm_record, write_json
from tests.registry_log import logged_requests
from tests.replay_support import TOKEN, Node, make_trace

pytestmark = pytest.mark.registry

# The hook: appends "<repository> <log lines naming it so far>" to a file, or fails as told.
HOOK = """\
import sys
log, out, repo = sys.argv[1], sys.argv[2], sys.argv[3]
if repo.endswith(sys.argv[4] if len(sys.argv) > 4 else "\\0"):
    sys.stderr.write("denied: " + "x" * 1000 + " END")
    sys.exit(7)
seen = sum(("/v2/" + repo + "/") in line for line in open(log))
with open(out, "a") as f:
    f.write(f"{repo} {seen}\\n")
"""


def _hook(tmp_path: Path, reg: LocalRegistry, calls: Path, fail_on: str | None = None) -> list[str]:
    script = tmp_path / "create_repo.py"
    script.write_text(HOOK)
    argv = [sys.executable, str(script), str(reg.log_path), str(calls), "{repository}"]
    return argv + ([fail_on] if fail_on else [])


def _calls(path: Path) -> list[tuple[str, int]]:
    return [(r, int(n)) for r, n in (line.split() for line in path.read_text().splitlines())]


def _mount_trace(path: Path) -> Path:
    """Mounts after the generated trace's end: blob M1 read in its source, then mounted into another repository."""

    def rec(i, method, uri, status, size=0):
        return ibm_record(
            i, **{"http.request.method": method, "http.request.uri": uri, "http.response.status": status},
            **{"http.response.written": size, "http.request.remoteaddr": "mounter", "id": f"m{i}"},
            timestamp=f"2017-08-01T00:01:{i:02d}.000Z",
        )  # fmt: skip

    return write_json(path, [
        rec(0, "GET", "v2/msrc/team/blobs/M1", 200, 4000),
        rec(1, "POST", "v2/mdst/team/blobs/uploads/?mount=M1&from=msrc%2Fteam", 201),
        rec(2, "GET", "v2/mdst/team/blobs/M1", 200, 4000),
        rec(3, "POST", "v2/mdst/other/blobs/uploads/?mount=M1&from=msrc/team", 201),
    ])  # fmt: skip


def _repositories(logged) -> Counter:
    """Repository → requests, of every object path the registry answered."""
    out = Counter()
    for x in logged:
        for marker in ("/blobs/", "/manifests/"):
            if marker in x.path:
                out[x.path[len("/v2/") : x.path.index(marker)]] += 1
                break
    return out


def _config(tmp_path: Path, traces: list[Path], entries: list[dict], nodes: list[str]) -> Path:
    cfg = {
        "trace": {"location": str(traces[0].parent), "traces": [t.name for t in traces]},
        "client_info": {"client_list": nodes, "threads": 8, "token": TOKEN, "batch": 50},
        "warmup": {"output": str(tmp_path / "warmup.jsonl"), "threads": 4},
        "results": str(tmp_path / "results"),
        "registries": entries,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_flatten_and_template_name_every_object_and_mount_source_and_the_hook_runs_first(tmp_path):
    trace = make_trace(tmp_path / "gen.json", requests=300)
    mounts = _mount_trace(tmp_path / "mounts.json")
    records = list(TraceReader([trace, mounts]))
    names = {r.repository for r in records}
    assert all(n.count("/") == 1 for n in names)  # the IBM traces' user/repo
    calls = tmp_path / "hook-calls.txt"
    node = Node(tmp_path)
    with LocalRegistry(tmp_path / "reg") as reg:
        flat = {"id": "flat", "url": reg.url, "insecure": True, "repository": "flat/", "repository_map": "flatten"}
        flat["create_repository"] = _hook(tmp_path, reg, calls)
        tpl = {"id": "tpl", "url": reg.url, "insecure": True, "repository": "tpl/"}
        tpl["repository_map"] = "{prefix}{user}_{repo}"
        path = _config(tmp_path, [trace, mounts], [flat, tpl], [node.address])
        try:
            status = run_experiment(load_config(path), tmp_path / "exp", quiet=True, stats_interval_s=0.5)
        finally:
            node.stop()
        logged = logged_requests(reg.log_path)
        cfg = load_config(path)
        again = run_warmup(registry_config(cfg, cfg.registries[0]), quiet=True)  # resumed: nothing left to do
        hook_calls_after_resume = _calls(calls)
    assert status["flat"]["ok"] and status["tpl"]["ok"], status

    expected = {
        "flat": {f"flat/{n.replace('/', '-')}" for n in names},
        "tpl": {"tpl/{}_{}".format(*n.split("/")) for n in names},
    }
    seen = _repositories(logged)
    assert set(seen) == expected["flat"] | expected["tpl"] | {"flat/drtp-preflight", "tpl/drtp-preflight"}
    assert all(name.count("/") == 1 for name in seen)  # no three-level name reached the registry
    for rid in ("flat", "tpl"):
        df = pd.read_csv(tmp_path / "exp" / rid / "requests.csv", keep_default_na=False, na_values=[""])
        main_rows = df[~df.auxiliary]
        assert len(main_rows) == len(records) and main_rows.ok.all(), main_rows[~main_rows.ok].head().to_string()
        assert set(main_rows.repository) == expected[rid]
    # the mount sources (from=) too, of the warmup's mounts and of the trace's, which the run replays
    froms = Counter(parse_qs(x.query)["from"][0] for x in logged if "mount=" in x.query)
    assert set(froms) <= expected["flat"] | expected["tpl"], froms
    assert froms["flat/msrc-team"] >= 2 and froms["tpl/msrc_team"] >= 2
    assert {x.status for x in logged if "mount=" in x.query} == {201}
    warm = [json.loads(line) for line in (tmp_path / "warmup-flat.jsonl").read_text().splitlines()]
    assert {e["repository"] for e in warm} <= expected["flat"] and warm  # the warmup map holds mapped names

    # the hook: once per repository the flat entry's registry saw (the probe included), each before any request
    hooked = _calls(calls)
    assert Counter(r for r, _ in hooked) == Counter(expected["flat"] | {"flat/drtp-preflight"})
    assert all(n == 0 for _, n in hooked), [c for c in hooked if c[1]]
    assert hook_calls_after_resume == hooked and again.already > 0  # a resumed warmup runs no hook again
    assert {json.loads(x)["repository"] for x in created_path(tmp_path / "warmup-flat.jsonl").open()} == {
        r for r, _ in hooked
    }


def _collision_trace(path: Path) -> Path:
    uris = ["v2/a/b-c/blobs/L1", "v2/a-b/c/blobs/L2"]
    return write_json(path, [ibm_record(i, **{"http.request.uri": u}) for i, u in enumerate(uris)])


@pytest.mark.parametrize("command", ["warmup", "run", "experiment"])
def test_a_collision_is_one_line_and_nothing_reaches_the_registry(tmp_path, capsys, command):
    trace = _collision_trace(tmp_path / "t.json")
    calls = tmp_path / "calls.txt"
    with LocalRegistry(tmp_path / "reg") as reg:
        entry = {"id": "hub", "url": reg.url, "insecure": True, "repository": "ns/", "repository_map": "flatten"}
        entry["create_repository"] = _hook(tmp_path, reg, calls)
        path = _config(tmp_path, [trace], [entry], ["127.0.0.1:9"])
        if command != "experiment":  # warmup and run take the entry beside a plain registry list
            data = yaml.safe_load(path.read_text())
            path.write_text(yaml.safe_dump({**data, "registry": [reg.url]}))
        offset = reg.log_path.stat().st_size
        args = [command, "-c", str(path)] + (["--out", str(tmp_path / "out")] if command != "warmup" else [])
        code = main(args)
        logged = logged_requests(reg.log_path, offset)
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and len(lines) == 1, err  # a mistake in the config: the experiment stops at it too
    line = lines[0]
    assert "registries[hub]" in line and "'a/b-c' and 'a-b/c'" in line and "'ns/a-b-c'" in line
    assert "repository_map" in line
    assert logged == [] and not calls.exists()  # no request, no hook


def test_a_failing_hook_stops_the_warmup_before_any_push_with_one_line(tmp_path, capsys):
    trace = make_trace(tmp_path / "gen.json", requests=60)
    victim = "ns/" + sorted({r.repository for r in TraceReader([trace])})[2].replace("/", "-")
    calls = tmp_path / "calls.txt"
    with LocalRegistry(tmp_path / "reg") as reg:
        entry = {"id": "ecr", "url": reg.url, "insecure": True, "repository": "ns/", "repository_map": "flatten"}
        entry["create_repository"] = _hook(tmp_path, reg, calls, fail_on=victim)
        path = _config(tmp_path, [trace], [entry], ["127.0.0.1:9"])
        data = yaml.safe_load(path.read_text())
        path.write_text(yaml.safe_dump({**data, "registry": [reg.url]}))
        offset = reg.log_path.stat().st_size
        code = main(["warmup", "-c", str(path)])
        logged = logged_requests(reg.log_path, offset)
        err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
        assert code == 3 and len(err) == 1, err
        msg = err[0]
        assert "registries[ecr]" in msg and "create_repository" in msg and repr(victim) in msg
        assert "(exit 7)" in msg and msg.endswith(" END") and len(msg) < 600  # the end of stderr, bounded
        assert logged == []  # the warmup did not start: not even the preflight
        created = {r for r, _ in _calls(calls)}
        assert victim not in created
        # again, fixed: only the repositories not created before get the hook
        entry["create_repository"] = _hook(tmp_path, reg, calls)
        path.write_text(yaml.safe_dump({**data, "registry": [reg.url], "registries": [entry]}))
        assert main(["warmup", "-c", str(path)]) == 0
        second = _calls(calls)[len(created) :]
        assert victim in {r for r, _ in second} and not created & {r for r, _ in second}
        # --fresh forgets the record with the map: every repository gets the hook again
        before = len(_calls(calls))
        assert main(["warmup", "-c", str(path), "--fresh"]) == 0
        assert sorted(r for r, _ in _calls(calls)[before:]) == sorted(r for r, _ in _calls(calls)[:before])
        capsys.readouterr()
        # a program that is not there is a mistake in the config: exit 2, naming the key
        entry["create_repository"] = ["./no-such-hook", "{repository}"]
        path.write_text(yaml.safe_dump({**data, "registry": [reg.url], "registries": [entry]}))
        assert main(["warmup", "-c", str(path), "--fresh"]) == 2
    msg = capsys.readouterr().err.strip()
    assert "registries[ecr]" in msg and "'create_repository'" in msg and "no-such-hook" in msg and "\n" not in msg


def test_bench_and_its_preflight_use_the_entry_s_names_and_hook(tmp_path):
    calls = tmp_path / "calls.txt"
    with LocalRegistry(tmp_path / "reg") as reg:
        entry = {"id": "hub", "url": reg.url, "insecure": True, "repository": "me/", "repository_map": "flatten"}
        entry["create_repository"] = _hook(tmp_path, reg, calls)
        path = _config(tmp_path, [tmp_path / "unused.json"], [entry], [])
        offset = reg.log_path.stat().st_size
        args = ["bench", "push", "-c", str(path), "--registry", "hub", "--size", "10KB", "--layers", "2"]
        assert main([*args, "--out", str(tmp_path / "bench")]) == 0
        logged = logged_requests(reg.log_path, offset)
    assert set(_repositories(logged)) == {"me/drtp-bench-push", "me/drtp-preflight"}
    assert sorted(_calls(calls)) == [("me/drtp-bench-push", 0), ("me/drtp-preflight", 0)]
    df = pd.read_csv(tmp_path / "bench" / "requests.csv")
    assert set(df.repository) == {"me/drtp-bench-push"}
    assert RepositoryMap("prefix", "me/").map("drtp-bench/push") == "me/drtp-bench/push"  # what prefix would send


def test_bench_refuses_a_repository_outside_the_grammar_before_sending_anything(tmp_path, capsys):
    args = ["bench", "push", "--registry", "http://127.0.0.1:9", "--insecure", "--repository", "Bad/Name"]
    assert main([*args, "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--repository 'Bad/Name'" in err and "not a Distribution name" in err and "\n" not in err
