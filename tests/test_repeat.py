"""Repetitions' configs: the repository prefix each one replays under, its warmup map, and where repeat is refused."""

from __future__ import annotations

import msgspec
import pytest
import yaml

from drtp.cli import main
from drtp.config import config_from_dict
from drtp.master.run.replay import Replay
from drtp.master.run.settings import RunSettings
from drtp.master.run.warmup import plan_warmup
from drtp.master.series.experiment import experiment_parts, registry_config
from drtp.master.series.repeat import repetition_config, run_parts
from drtp.registry.repo_names import RepositoryMap
from drtp.trace.reader import TraceReader
from tests.replay_support import TOKEN, make_trace


def _cfg(tmp_path, **data):
    base = {"warmup": {"output": str(tmp_path / "map.jsonl")}, "repeat": 3}
    return config_from_dict({**base, **data}, base_dir=str(tmp_path))


@pytest.mark.parametrize(
    ("entry", "mapped", "one_level"),
    [
        ({}, "rep2-user/repo", "rep2-lonely"),
        ({"repository": "myorg/"}, "myorg/rep2-user/repo", "myorg/rep2-lonely"),
        ({"repository": "myorg/", "repository_map": "flatten"}, "myorg/rep2-user-repo", "myorg/rep2-lonely"),
        ({"repository": "proj/", "repository_map": "{prefix}{user}_{repo}"}, "proj/rep2-user_repo", "proj/rep2-lonely"),
        # a template without {prefix}: the repetition's prefix goes before the last path part of its name
        ({"repository_map": "{user}_{repo}"}, "rep2-user_repo", "rep2-lonely"),
        ({"repository": "proj/", "repository_map": "org/{user}-{repo}"}, "org/rep2-user-repo", "proj/rep2-lonely"),
        ({"repository_map": "{name}"}, "user/rep2-repo", "rep2-lonely"),
    ],
)
def test_a_repetition_replays_under_its_prefix_after_the_entrys_own(tmp_path, entry, mapped, one_level) -> None:
    cfg = _cfg(tmp_path, registries=[{"id": "a", "url": "http://127.0.0.1:5000", "insecure": True, **entry}])
    sub = repetition_config(registry_config(cfg, cfg.registries[0]), 2)
    names = RepositoryMap.for_config(sub)
    assert names.map("user/repo") == mapped and names.map("lonely") == one_level
    assert sub.warmup.output == str(tmp_path / "map-a-rep2.jsonl")
    # every repetition its own repositories, whatever the template
    firsts = {
        RepositoryMap.for_config(repetition_config(registry_config(cfg, cfg.registries[0]), k)).map("user/repo")
        for k in (1, 2, 3)
    }
    assert len(firsts) == 3


def test_a_plain_registry_list_gets_the_prefix_too_and_reuse_gets_none(tmp_path) -> None:
    cfg = _cfg(tmp_path, registry=["127.0.0.1:5000", "127.0.0.1:5001"])
    parts = run_parts(cfg, tmp_path / "out")
    assert [p.run_dir.name for p in parts] == ["rep-1", "rep-2", "rep-3"] and all(p.warm for p in parts)
    assert [RepositoryMap.for_config(p.cfg).map("user/repo") for p in parts] == [
        "rep1-user/repo",
        "rep2-user/repo",
        "rep3-user/repo",
    ]
    reuse = msgspec.structs.replace(cfg, repeat_state="reuse")
    parts = run_parts(reuse, tmp_path / "out")
    assert all(p.cfg is reuse and not p.warm for p in parts)  # the user's warmup, the trace's own names
    assert RepositoryMap.for_config(parts[2].cfg).map("user/repo") == "user/repo"


def test_an_experiment_interleaves_its_registries(tmp_path) -> None:
    entries = [{"id": i, "url": f"http://127.0.0.1:500{n}", "insecure": True} for n, i in enumerate("ab")]
    parts = experiment_parts(_cfg(tmp_path, registries=entries, repeat=2), tmp_path)
    assert [(p.key, p.run_dir.relative_to(tmp_path).as_posix()) for p in parts] == [
        ("a/rep-1", "a/rep-1"),
        ("b/rep-1", "b/rep-1"),
        ("a/rep-2", "a/rep-2"),
        ("b/rep-2", "b/rep-2"),
    ]
    once = experiment_parts(_cfg(tmp_path, registries=entries, repeat=1), tmp_path)
    assert [(p.key, p.run_dir.name, p.cfg.namespace) for p in once] == [("a", "a", ""), ("b", "b", "")]


def test_a_ramp_refuses_repeat(tmp_path, capsys) -> None:
    path = tmp_path / "ramp.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "trace": {"location": str(tmp_path), "traces": ["t.json"]},
                "registry": ["127.0.0.1:5000"],
                "client_info": {"client_list": ["127.0.0.1:9"]},
                "repeat": 2,
            }
        )
    )
    argv = ["ramp", "-c", str(path), "--from", "10", "--step", "10", "--step-duration", "1", "--slo", "p99<1s"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("drtp ramp: error: ") and "key 'repeat'" in err and "\n" not in err


def test_a_repository_lands_on_the_same_registry_in_every_repetition(tmp_path) -> None:
    """A plain registry list spreads repositories by the trace's name, not the repetition's prefixed one:
    every repetition sends each repository (warmup and run alike) to the same registry."""
    trace = make_trace(tmp_path / "trace.json", requests=200)
    hosts = ["127.0.0.1:5000", "127.0.0.1:5001", "127.0.0.1:5002"]
    cfg = _cfg(
        tmp_path,
        registry=hosts,
        trace={"location": str(tmp_path), "traces": [trace.name]},
        client_info={"client_list": ["127.0.0.1:1"], "token": TOKEN},
    )
    spreads = []
    for part in run_parts(cfg, tmp_path / "out"):
        ns = part.cfg.namespace
        # the run's own names and planner (nothing is sent)
        replay = Replay(part.cfg, RunSettings(out_dir=part.run_dir))
        ran = {}
        for seq, rec in enumerate(r for batch in replay._batches() for r in batch):
            req = replay.planner.plan(rec, seq, None)
            ran[rec.parts.repository.removeprefix(ns)] = req.registry
        reader = TraceReader(part.cfg.trace_paths(), **part.cfg.reader_options())
        warm = plan_warmup(reader, part.cfg.registry, RepositoryMap.for_config(part.cfg))
        warmed = {repo.removeprefix(ns): reg for reg, repo, _tag in warm.manifests}
        assert all(repo.startswith(ns) for _reg, repo, _tag in warm.manifests)
        spreads.append((ran, warmed))
    assert len({reg for reg in spreads[0][0].values()}) > 1  # the trace does spread over the registries
    assert spreads[0] == spreads[1] == spreads[2]
