"""``drtp simulate``: config, results directory, sweeps, original-contract plugins, errors."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from drtp.cli import main
from tests.sim_helpers import gen_trace_file


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    return gen_trace_file(tmp_path_factory.mktemp("cli") / "trace.json", requests=5000, seed=9, span_s=86400)


def write_config(path, trace_file, name, args):
    cfg = {"trace": {"location": str(trace_file.parent), "traces": [trace_file.name]}, "simulate": {"name": name}}
    if args is not None:
        cfg["simulate"]["args"] = args
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_single_run_writes_summary_tables_and_png(tmp_path, trace_file, capsys):
    cfg = write_config(tmp_path / "c.yaml", trace_file, "two-level", {"capacity": "2%", "per_server": True})
    assert main(["simulate", "-c", str(cfg), "--out", str(tmp_path / "out")]) == 0
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    for key in ("requests", "hits", "hit_ratio", "hit_ratio_warm", "hit_ratio_memory", "hit_ratio_ssd"):
        assert key in summary
    assert summary["requests"] > 0 and 0 < summary["hit_ratio"] < 1
    assert summary["hits"] == summary["hits_memory"] + summary["hits_ssd"]
    assert summary["caches"] == 4  # the generator's hosts
    servers = pd.read_csv(out / "servers.csv")
    assert servers["requests"].sum() == summary["requests"]
    assert (out / "levels.csv").exists() and (out / "hit_ratio_timeline.png").stat().st_size > 1000
    printed = capsys.readouterr().out
    assert "hit_ratio_warm" in printed and str(out) in printed


def test_cache_sweep_writes_csv_and_fig17(tmp_path, trace_file):
    args = {"capacity": ["2%", "6%", "10%"], "ssd_multiplier": [10, 20]}
    cfg = write_config(tmp_path / "c.yaml", trace_file, "two-level", args)
    assert main(["simulate", "-c", str(cfg), "--out", str(tmp_path / "sw"), "--jobs", "2"]) == 0
    table = pd.read_csv(tmp_path / "sw" / "sweep.csv")
    assert len(table) == 6
    assert list(table["arg_capacity"]) == ["2%", "2%", "6%", "6%", "10%", "10%"]
    assert list(table["arg_ssd_multiplier"]) == [10, 20] * 3
    # the memory level does not depend on the SSD multiplier
    for _, g in table.groupby("arg_capacity"):
        assert g["hit_ratio_memory"].nunique() == 1
    assert (tmp_path / "sw" / "fig17_hit_ratio_vs_size.png").stat().st_size > 1000
    summary = json.loads((tmp_path / "sw" / "summary.json").read_text())
    assert summary["points"] == 6 and summary["sweep"] == ["capacity", "ssd_multiplier"]


def test_policy_sweep_side_by_side(tmp_path, trace_file):
    args = {"capacity": ["5%"], "policy": ["lru", "libcachesim:LRU", "libcachesim:S3-FIFO"]}
    cfg = write_config(tmp_path / "c.yaml", trace_file, "cache", args)
    assert main(["simulate", "-c", str(cfg), "--out", str(tmp_path / "p"), "--jobs", "1"]) == 0
    table = pd.read_csv(tmp_path / "p" / "sweep.csv").set_index("arg_policy")
    assert table.loc["lru", "hits"] == table.loc["libcachesim:LRU", "hits"]
    assert table.loc["lru", "hit_ratio_warm"] == table.loc["libcachesim:LRU", "hit_ratio_warm"]


def test_prefetch_sweep_writes_fig18(tmp_path, trace_file):
    args = {"lm_thresh": ["1h", "12h"], "ml_thresh": ["1h", "1d"]}
    cfg = write_config(tmp_path / "c.yaml", trace_file, "prefetch", args)
    assert main(["simulate", "-c", str(cfg), "--out", str(tmp_path / "pf"), "--jobs", "2"]) == 0
    table = pd.read_csv(tmp_path / "pf" / "sweep.csv")
    assert len(table) == 4 and (table["prefetches"] > 0).all()
    assert (tmp_path / "pf" / "fig18_hits_per_prefetch.png").stat().st_size > 1000


ORIGINAL_PLUGIN = """
import json

def init(data, args):
    # the original contract: a list of dicts sorted by time, and the config's args
    out = {
        "n": len(data),
        "keys": sorted(data[0]),
        "sorted": all(a["delay"] <= b["delay"] for a, b in zip(data, data[1:])),
        "first_delay": data[0]["delay"],
        "methods": sorted({d["method"] for d in data}),
        "min_size": min(d["size"] for d in data),
        "put_manifests": sum(1 for d in data if d["method"] == "PUT" and "/manifests/" in d["uri"]),
        "arg": args["cache_size"],
    }
    print("running cache simulation")
    return out
"""


def test_original_contract_plugin_runs_unchanged(tmp_path, trace_file):
    (tmp_path / "cache.py").write_text(ORIGINAL_PLUGIN)
    cfg = write_config(tmp_path / "c.yaml", trace_file, "cache.py", {"cache_size": 2})
    assert main(["simulate", "-c", str(cfg), "--out", str(tmp_path / "o")]) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    result = summary["result"]
    assert result["keys"] == ["client", "delay", "duration", "method", "size", "uri"]
    assert result["sorted"] and result["first_delay"] == 0
    assert result["methods"] == ["GET", "PUT"] and result["min_size"] > 0
    assert result["put_manifests"] > 0  # PUT manifests stay PUTs (the original player made GETs of them)
    assert result["arg"] == 2 and result["n"] == summary["requests"] > 0


def test_original_contract_one_argument(tmp_path, trace_file):
    (tmp_path / "p.py").write_text("def init(requests):\n    return [{'n': len(requests)}]\n")
    cfg = write_config(tmp_path / "c.yaml", trace_file, "p.py", None)
    assert main(["simulate", "-c", str(cfg), "--out", str(tmp_path / "o")]) == 0
    assert pd.read_csv(tmp_path / "o" / "result.csv")["n"].iloc[0] > 0


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("nosuch", {}, "simulate.name: unknown plugin 'nosuch'"),
        ("lru", {"capacityy": 5}, "unknown key 'simulate.args.capacityy'"),
        ("lru", {}, "missing key 'simulate.args.capacity'"),
        ("lru", {"capacity": "lots"}, "simulate.args.capacity: not a size"),
        ("prefetch", {"per_server": "maybe"}, "simulate.args.per_server"),
        ("libcachesim:NoSuch", {"capacity": 5}, "unknown libcachesim policy 'NoSuch'"),
        ("cache", {"capacity": 5, "policy": "mru"}, "simulate.args.policy: unknown policy 'mru'"),
        ("missing.py", {}, "plugin file"),
    ],
)
def test_bad_plugin_or_args_is_one_line(tmp_path, trace_file, capsys, name, args, message):
    cfg = write_config(tmp_path / "c.yaml", trace_file, name, args)
    assert main(["simulate", "-c", str(cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert err.count("\n") == 0 and "Traceback" not in err


def test_list_names_plugins_and_arguments(capsys):
    assert main(["simulate", "--list"]) == 0
    text = capsys.readouterr().out
    for expected in ("lru:", "two-level:", "prefetch:", "cache:", "ssd_multiplier", "lm_thresh", "libcachesim:S3FIFO"):
        assert expected in text


NEW_STYLE_PLUGIN = """
import numpy as np

from drtp.plugins.base import PluginArgs, SimPlugin, SimResult
from drtp.trace.columns import GET


class Args(PluginArgs):
    top: int = 3


class Plugin(SimPlugin):
    name = "busiest-clients"
    description = "requests of the busiest clients"
    Args = Args

    def run(self, trace):
        counts = np.bincount(trace.client[trace.method == GET])
        best = np.sort(counts)[::-1][: self.args.top]
        return SimResult({"top": self.args.top, "requests": int(best.sum())})
"""


def test_user_file_with_a_plugin_class_runs_like_a_builtin(tmp_path, trace_file):
    (tmp_path / "busy.py").write_text(NEW_STYLE_PLUGIN)
    cfg = write_config(tmp_path / "c.yaml", trace_file, "busy.py", {"top": [1, 2]})
    assert main(["simulate", "-c", str(cfg), "--out", str(tmp_path / "o"), "--jobs", "2"]) == 0
    table = pd.read_csv(tmp_path / "o" / "sweep.csv")
    assert list(table["top"]) == [1, 2]
    assert 0 < table["requests"].iloc[0] < table["requests"].iloc[1]


def test_user_file_without_init_or_plugin(tmp_path, trace_file, capsys):
    (tmp_path / "empty.py").write_text("x = 1\n")
    cfg = write_config(tmp_path / "c.yaml", trace_file, "empty.py", None)
    assert main(["simulate", "-c", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "has no init(requests) or init(requests, args) function" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("lru", {"capacity": "500%"}, "plugin 'lru': simulate.args.capacity: a percentage must be more than 0%"),
        ("lru", {"capacity": "0%"}, "simulate.args.capacity: a percentage must be more than 0% and at most 100%"),
        ("lru", {"capacity": 0}, "plugin 'lru': simulate.args.capacity: must be at least 1 byte, got 0"),
        ("lru", {"capacity": 1.5}, "simulate.args.capacity: not a whole number of bytes: 1.5"),
        ("lru", {"capacity": -5}, "simulate.args.capacity: not a size: -5"),
        ("lru", {"capacity": float("nan")}, "simulate.args.capacity: not a size: nan"),
        ("lru", {"capacity": True}, "key 'simulate.args.capacity': expected an integer or a number or a string"),
        ("lru", {"capacity": ["5%", "500%"]}, "simulate.args.capacity: a percentage must be more than 0%"),
        ("lru", {"capacity": "1e-9%"}, "simulate.args.capacity: not a percentage"),
        ("lru", {"capacity": "0.00000000001%"}, "of the trace's ingress"),
        ("lru", {"capacity": 5, "timeline_buckets": 0}, "key 'simulate.args.timeline_buckets': expected an integer"),
        ("two-level", {"capacity": 5, "ssd_multiplier": float("nan")}, "key 'simulate.args.ssd_multiplier'"),
        ("two-level", {"capacity": list(range(1, 101)), "ssd_multiplier": list(range(101))},
         "simulate.args: a sweep of 100 capacity × 101 ssd_multiplier is more than 10,000 points"),
        ("prefetch", {"lm_thresh": float("inf")}, "simulate.args.lm_thresh: not a duration: inf"),
        ("prefetch", {"ml_thresh": "-1h"}, "simulate.args.ml_thresh: not a duration: '-1h'"),
        ("libcachesim:MQ", {"capacity": 5, "params": {"n_queue": 0}}, "parameter 'n_queue': expected a number from 1"),
        ("libcachesim:S3-FIFO", {"capacity": 5, "params": {"small_size_ratio": -1}}, "expected a share in (0, 1]"),
    ],
)  # fmt: skip
def test_bad_plugin_arguments_name_config_plugin_and_key(tmp_path, trace_file, capsys, name, args, message):
    cfg = write_config(tmp_path / "c.yaml", trace_file, name, args)
    assert main(["simulate", "-c", str(cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.count("\n") == 0, err
    if "ingress" not in message:  # refused before the trace was read: nothing written
        assert str(cfg) in err and not (tmp_path / "o" / "summary.json").exists()


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            'def init(requests):\n    print "hello"\n',
            "p.py:2: cannot load plugin: this is Python 2 code (print statement)",
        ),
        (
            "try:\n    pass\nexcept Exception, e:\n    pass\n",
            "p.py:3: cannot load plugin: this is Python 2 code (except X, e)",
        ),
        ("def init(requests):\n    return x +\n", "p.py:2: cannot load plugin: SyntaxError: invalid syntax"),
        ("import no_such_module_here\n", "p.py:1: cannot load plugin: ModuleNotFoundError"),
        ("import sys\nsys.exit(3)\n", "p.py:2: cannot load plugin: SystemExit: 3"),
        ("def init(requests):\n    return 1 / 0\n", "p.py:2: plugin init() failed: ZeroDivisionError"),
    ],
)
def test_broken_plugin_files_name_the_file_and_line(tmp_path, trace_file, capsys, source, message):
    (tmp_path / "p.py").write_text(source)
    cfg = write_config(tmp_path / "c.yaml", trace_file, "p.py", None)
    assert main(["simulate", "-c", str(cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.count("\n") == 0, err
    if "Python 2" in message:  # how to convert it, with a tool that exists on Python 3.13+
        assert "python -m fissix -w" in err
