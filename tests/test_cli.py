"""The drtp command line: help, version, generate, inspect and one-line errors."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest
import yaml

from drtp import __version__
from tests.conftest import ibm_record, write_json


def drtp(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "drtp.cli", *args], capture_output=True, text=True, cwd=cwd, stdin=subprocess.DEVNULL
    )


def test_help_and_version():
    out = drtp("--help")
    assert out.returncode == 0
    for command in ("generate", "inspect", "config", "demo"):
        assert command in out.stdout
    assert drtp("--version").stdout.strip() == f"drtp {__version__}"
    assert drtp("inspect", "--help").returncode == 0


def test_generate_then_inspect_json(tmp_path):
    trace = tmp_path / "t.json"
    out = drtp("generate", "-o", str(trace), "-n", "3000", "--seed", "5", "--span", "2h")
    assert out.returncode == 0, out.stderr
    out = drtp("inspect", str(trace), "--json")
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    for key in ("records", "span_s", "by_method", "by_kind", "bytes", "clients", "repositories", "objects"):
        assert key in s
    assert s["records"] == 3000
    assert sum(s["by_method"].values()) == 3000 and sum(s["by_kind"].values()) == 3000
    assert 3600 < s["span_s"] < 3 * 3600
    assert s["clients"] > 10 and s["repositories"] > 10 and s["objects"] > 100 and s["bytes"] > 0


def test_inspect_known_numbers_and_table(tmp_path):
    recs = [ibm_record(i) for i in range(10)]
    recs[0]["http.request.method"] = "HEAD"
    recs[1]["http.request.uri"] = "v2/user1/repo1/manifests/latest"
    path = write_json(tmp_path / "k.json", recs)
    s = json.loads(drtp("inspect", str(path), "--json").stdout)
    assert s["records"] == 10 and s["span_s"] == 9.009
    assert s["by_method"] == {"GET": 9, "HEAD": 1}
    assert s["by_kind"] == {"manifest": 1, "blob": 9}
    assert s["bytes"] == sum(1000 + i for i in range(10))
    assert s["clients"] == 3 and s["repositories"] == 4 and s["objects"] == 10
    table = drtp("inspect", str(path), "--requests", "4").stdout
    assert "records" in table and " 4" in table


def test_inspect_bad_record_is_one_line_error_and_skip_bad_counts(tmp_path):
    recs = [ibm_record(i) for i in range(10)]
    recs[6]["http.response.written"] = -3
    path = write_json(tmp_path / "bad.json", recs)
    out = drtp("inspect", str(path))
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and f"{path}: record 6" in out.stderr and "Traceback" not in out.stderr
    out = drtp("inspect", str(path), "--skip-bad", "--json")
    assert out.returncode == 0
    assert json.loads(out.stdout)["skipped"] == 1 and json.loads(out.stdout)["records"] == 9
    assert "record 6" in out.stderr


def test_bad_arguments_exit_non_zero(tmp_path):
    assert drtp("inspect", str(tmp_path / "missing.json")).returncode == 2
    assert drtp("generate", "-o", str(tmp_path / "x.json"), "--max-layer-size", "huge").returncode == 2
    assert drtp("nonsense").returncode == 2


# -- bad options and output paths: one stderr line, exit 2, before any work ---------------------------


def _one_line_exit_2(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 2, out
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    return out.stderr.strip()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["generate", "-o", "x.json", "-n", "0"],
            "drtp generate: error: -n/--requests: must be an integer ≥ 1, got '0'",
        ),
        (["generate", "-o", "x.json", "-n", "abc"], "drtp generate: error: -n/--requests: not an integer: 'abc'"),
        (["generate", "-o", "x.json", "--span", "0"], "drtp generate: error: --span: must be longer than 0 s"),
        (["generate", "-o", "x.json", "--span", "nan"], "drtp generate: error: --span: not a duration: 'nan'"),
        (["generate", "-o", "x.json", "--clients", "0"], "drtp generate: error: --clients: must be an integer ≥ 1"),
        (["generate", "-o", "x.json", "--clients", "99999999"], "--clients: expected an integer from 1 to 1,000,000"),
        (["generate", "-o", "x.json", "--max-layer-size", "1.5"], "--max-layer-size: not a whole number of bytes"),
        (["generate", "-o", "x.json", "--start", "9999-12-31"], "the trace would run past the year 9999"),
        (["cost", "--months", "-1"], "drtp cost: error: --months: must be a number > 0, got '-1'"),
        (["cost", "--months", "nan"], "drtp cost: error: --months: must be a number > 0, got 'nan'"),
        (["cost", "--storage", "abc"], "--storage: not a size: 'abc'"),
        (["demo", "--requests", "0"], "drtp demo: error: --requests: must be an integer ≥ 1"),
        (["simulate", "--jobs", "0"], "drtp simulate: error: --jobs: must be an integer ≥ 1, got '0'"),
        (["bench", "push", "--registry", "https://r", "--size", "abc"], "drtp bench: error: --size: not a size: 'abc'"),
        (["bench", "push", "--registry", "https://r", "--size", "1MB,0"], "--size: must be at least 1 byte"),
        (
            ["bench", "push", "--registry", "https://r", "--concurrency", "0"],
            "drtp bench: error: --concurrency: must be",
        ),
        (["bench", "push", "--registry", "https://r", "--layers", "-1"], "drtp bench: error: --layers: must be"),
        (
            ["bench", "push", "--registry", "https://r", "--chunk", "0"],
            "drtp bench: error: --chunk: must be at least 1 byte",
        ),
        (["slurm", "wait", "--poll", "0"], "drtp slurm wait: error: --poll: must be a number > 0"),
        (["analyze", "results"], "drtp analyze results: error: the following arguments are required"),
        (["nosuch"], "drtp: error: COMMAND: invalid choice: 'nosuch'"),
    ],
)
def test_bad_options_are_one_line_naming_command_and_option(tmp_path, args, message):
    out = _one_line_exit_2(drtp(*args, cwd=tmp_path))
    assert message in out
    assert not (tmp_path / "x.json").exists()


def test_output_paths_are_checked_before_any_work(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    cases = [
        (["generate", "-o", str(tmp_path), "-n", "10"], f"-o {tmp_path}: is a directory; give a file name"),
        (["generate", "-o", str(a_file / "t.json"), "-n", "10"], f"{a_file} is not a directory"),
        (["cost", "--storage", "1TB", "--out", str(a_file)], f"--out: results directory {a_file} is not a directory"),
        (["demo", "--out", str(a_file / "d")], f"--out: results directory {a_file / 'd'} cannot be created"),
        (["analyze", "results", str(tmp_path), "--out", str(a_file)], "--out: results directory"),
        (["bench", "push", "--registry", "https://r", "--out", str(a_file)], "--out: results directory"),
    ]
    for args, message in cases:
        assert message in _one_line_exit_2(drtp(*args, cwd=tmp_path)), args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # nothing made, nothing half-written


def test_a_read_only_output_directory_is_one_line(read_only_dir):
    ro = read_only_dir
    out = _one_line_exit_2(drtp("generate", "-o", str(ro / "t.json"), "-n", "10"))
    assert f"-o {ro / 't.json'}: cannot be written (Read-only file system)" in out
    out = _one_line_exit_2(drtp("cost", "--storage", "1TB", "--out", str(ro)))
    assert f"--out: results directory {ro} is not writable (Read-only file system)" in out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("generator: {clients: 0}", "p.yaml: key 'generator.clients': expected an integer from 1 to 1,000,000, got 0"),
        ("generator: {push_ratio: .nan}", "p.yaml: key 'generator.push_ratio': expected a number from 0 to 1"),
        ("generator: {idle_mean_s: 0}", "p.yaml: key 'generator.idle_mean_s'"),
        ("generator: [1]", "p.yaml: key 'generator': expected a mapping of keys, got list"),
        ("- 1", "p.yaml: the top level must be a mapping of keys"),
        ("targets: {a: [1, .nan]}", "p.yaml: key 'targets.a': expected [value, tolerance]"),
        ("a: " + "[" * 100_000 + "]" * 100_000, "p.yaml:1:67: not valid YAML: nested deeper than 64 levels"),
        ("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
         "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
         "e: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n", "more than 100,000 values once aliases are expanded"),
    ],
)  # fmt: skip
def test_bad_profiles_are_one_line(tmp_path, text, message):
    (tmp_path / "p.yaml").write_text(text)
    out = _one_line_exit_2(drtp("generate", "-o", "x.json", "-n", "10", "--profile", "p.yaml", cwd=tmp_path))
    assert message in out
    assert "profile file not found" in _one_line_exit_2(drtp("generate", "-o", "x", "--profile", "no.yaml"))


# -- trace commands: one line on stderr and exit 2 for bad inputs and options ---------------


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["inspect", "{trunc}"], "not a valid gzip file"),
        (["inspect", "{dir}"], "is a directory"),
        (["convert", "{empty}", "-o", "{out}.parquet"], "no records"),
        (["cost", "{deep}"], "nested too deeply"),
        (["analyze", "trace", "{good}", "--out", "{out}", "--bin", "0"], "--bin"),
        (["analyze", "trace", "{good}", "--out", "{out}", "--bin", "-1"], "--bin"),
        (["analyze", "trace", "{good}", "--out", "{out}", "--bin", "nan"], "--bin"),
        (["analyze", "trace", "{far}", "--out", "{out}"], "outside 1970..2099"),
        (["sample", "{good}", "-o", "{out}.json", "--method", "requests", "--amount", "-1"], "--amount"),
        (["sample", "{good}", "-o", "{out}.json", "--method", "window", "--window", "0"], "--window"),
        (["cost", "{good}", "--months", "nan"], "--months"),
        (["inspect", "{good}", "--requests", "0"], "--requests"),
    ],
)
def test_trace_commands_refuse_bad_input_in_one_line(tmp_path, args, named):
    import gzip

    good = write_json(tmp_path / "good.json", [ibm_record(i) for i in range(20)])
    whole = gzip.compress(good.read_bytes())
    (tmp_path / "t.json.gz").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "empty.json").write_text("[]")
    (tmp_path / "deep.json").write_text("[" + '{"a":' * 100_000 + "1" + "}" * 100_000 + "]")
    write_json(tmp_path / "far.json", [ibm_record(0, timestamp="9999-01-01T00:00:00.000Z")])
    paths = {
        "trunc": tmp_path / "t.json.gz",
        "dir": tmp_path,
        "empty": tmp_path / "empty.json",
        "deep": tmp_path / "deep.json",
        "good": good,
        "far": tmp_path / "far.json",
        "out": tmp_path / "out",
    }
    argv = [a.format(**paths) for a in args]
    res = subprocess.run([sys.executable, "-m", "drtp.cli", *argv], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and named in res.stderr, res.stderr


# -- the grouped help -----------------------------------------------------------------------------------


def test_help_lists_every_registered_command_under_one_group_with_an_example():
    from drtp.cli import COMMAND_GROUPS, build_parser

    parser = build_parser()
    registered = set(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)
    grouped = [name for group in COMMAND_GROUPS for name in group.commands]
    assert sorted(grouped) == sorted(registered), "a registered command has no group (or a group names no command)"
    text = drtp("--help").stdout
    assert "other commands" not in text
    for group in COMMAND_GROUPS:
        assert f"{group.title}:" in text and f"e.g. {group.example}" in text
        for name in group.commands:
            assert f"\n  {name} " in text  # listed with its help line
    assert "--set KEY=VALUE" in text and "DRTP_CONFIG__CLIENT_INFO__THREADS=8" in text
    for name in registered:  # each command's own help still works
        assert drtp(name, "--help").returncode == 0, name


def test_a_command_no_group_names_is_listed_under_other_commands(monkeypatch):
    import drtp.cli as cli

    shorter = tuple(
        g if "cost" not in g.commands else type(g)(g.title, ("analyze",), g.example) for g in cli.COMMAND_GROUPS
    )
    monkeypatch.setattr(cli, "COMMAND_GROUPS", shorter)
    help_text = cli.build_parser().format_help()
    assert "other commands:\n  cost " in help_text


# -- config keys from --set and the environment; drtp config ------------------------------------------------

BASE_CONFIG = """\
trace: {location: ., traces: [t.json], limit: {type: requests, amount: 100}}
registry: [localhost:5000]
client_info:
  client_list: [localhost:8081, localhost:8082]
  port: 8080          # the original's master callback port
  token: ${MY_SECRET}
"""


def run_env(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("DRTP_CONFIG__")} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "drtp.cli", *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, env=full
    )


def test_drtp_config_prints_every_key_typed_with_overrides_marked(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(BASE_CONFIG)
    env = {"MY_SECRET": "s3cr3t-s3cr3t-s3cr3t", "DRTP_CONFIG__CLIENT_INFO__THREADS": "8",
           "DRTP_CONFIG__WARMUP__THREADS": "3"}  # fmt: skip
    out = run_env("config", "-c", str(cfg), "--set", "trace.limit.amount=1000", "--set", "warmup.threads=5",
                  "--set", "client_info.client_list=[a:1,b:2]", env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "s3cr3t" not in out.stdout and "token: '***'" in out.stdout
    shown = yaml.safe_load(out.stdout)  # the marks are comments: the text is the data
    assert shown["trace"]["limit"] == {"type": "requests", "amount": 1000}  # an int stays an int
    assert shown["client_info"]["threads"] == 8 and shown["client_info"]["client_list"] == ["a:1", "b:2"]
    assert shown["warmup"]["threads"] == 5  # --set wins over the environment
    # every key, the defaults too
    assert shown["client_info"]["batch"] == 200 and shown["client_info"]["retries"] == 0
    assert shown["client_info"]["timeout"] == 30.0 and shown["trace"]["output"] is None and shown["slurm"] is None
    lines = out.stdout.splitlines()
    assert "    amount: 1000  # from --set" in lines
    assert "  threads: 8  # from DRTP_CONFIG__CLIENT_INFO__THREADS" in lines
    assert "  threads: 5  # from --set" in lines
    assert "  batch: 200" in lines and "  port: 8080" in lines


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--set", "client_info.threads=0"], {}, "key 'client_info.threads' (from --set): expected an integer ≥ 1"),
        (["--set", "client_info.thread=8"], {}, "unknown key 'client_info.thread' (from --set)"),
        (["--set", "client_info.engine=warp"], {}, "key 'client_info.engine' (from --set): 'warp' is not one of"),
        (["--set", "trace.traces.x=1"], {}, "key 'trace.traces.x' (from --set): 'trace.traces' holds a list"),
        (["--set", "threads"], {}, "--set: 'threads': expected key=value"),
        (["--set", "client_info.threads=[1"], {}, "--set: client_info.threads:1:3: not valid YAML"),
        ([], {"DRTP_CONFIG__CLIENT_INFO__THREADS": "many"},
         "key 'client_info.threads' (from DRTP_CONFIG__CLIENT_INFO__THREADS): expected an integer, got 'many'"),
        ([], {"DRTP_CONFIG__CLIENT-INFO": "1"}, "environment variable DRTP_CONFIG__CLIENT-INFO: not a config key"),
    ],
)  # fmt: skip
def test_bad_overrides_are_one_line_naming_key_and_origin(tmp_path, args, env, message):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(BASE_CONFIG)
    every_command = (["config"], ["run"], ["warmup"], ["simulate"], ["slurm", "render"], ["experiment"])
    for command in every_command if "threads=0" in args else (["config"], ["run"]):
        out = run_env(*command, "-c", str(cfg), *args, env={"MY_SECRET": "s3cr3t-s3cr3t-s3cr3t"} | env)
        assert out.returncode == 2 and message in out.stderr and out.stderr.count("\n") == 1, (command, out.stderr)
        assert "Traceback" not in out.stderr


def test_environment_and_set_reach_the_command(tmp_path):
    """A real command runs with the overridden keys: slurm render prints the nodes and partition set outside."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(BASE_CONFIG + "slurm: {partition: file-partition}\n")
    env = {"MY_SECRET": "s3cr3t-s3cr3t-s3cr3t", "DRTP_CONFIG__SLURM__PARTITION": "env-partition"}
    out = run_env("slurm", "render", "-c", str(cfg), "--set", "slurm.nodes=7", env=env)
    assert out.returncode == 0, out.stderr
    assert "#SBATCH --partition=env-partition" in out.stdout and "#SBATCH --nodes=7" in out.stdout
    out = run_env("slurm", "render", "-c", str(cfg), "--set", "slurm.partition=set-partition", env=env)
    assert "#SBATCH --partition=set-partition" in out.stdout  # --set over the environment


def test_deploy_refuses_keys_the_remote_would_not_see(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(BASE_CONFIG + "deploy: {host: example.invalid}\n")
    out = run_env("deploy", "-c", str(cfg), "--set", "client_info.threads=4", env={"MY_SECRET": "x" * 20})
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "--set client_info.threads would not reach" in out.stderr


# -- verbose -----------------------------------------------------------------------------------------------


def test_verbose_flag_and_key_log_more_on_a_real_command(tmp_path):
    trace = tmp_path / "t.json"
    assert drtp("generate", "-o", str(trace), "-n", "500", "--seed", "3").returncode == 0
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"trace: {{location: {tmp_path}, traces: [t.json]}}\nsimulate: {{name: lru, args: {{capacity: 5%}}}}\n"
    )

    def simulate(*extra: str, verbose_key: bool = False) -> str:
        path = cfg
        if verbose_key:
            path = tmp_path / "v.yaml"
            path.write_text(cfg.read_text() + "verbose: true\n")
        out = run_env("simulate", "-c", str(path), "--out", str(tmp_path / f"o{len(extra)}{verbose_key}"), *extra)
        assert out.returncode == 0, out.stderr
        return out.stderr

    quiet = simulate()
    assert "INFO" not in quiet and "DEBUG" not in quiet
    for logged in (simulate("-v"), simulate(verbose_key=True)):
        assert "drtp.config INFO config" in logged and "DEBUG" not in logged
    debug = simulate("-vv", "--set", "simulate.args.capacity=10%")
    assert "drtp.config DEBUG config key simulate.args.capacity set by --set" in debug
    assert "10%" not in debug  # values are not logged: they may be secrets
    assert "drtp.config INFO" in run_env("-v", "config", "-c", str(cfg)).stderr  # -v before the command too


# -- a Python 2 plugin -------------------------------------------------------------------------------------

PYTHON2_PLUGIN = """\
import json


def init(requests, args):
    hits = {}
    for r in requests:
        hits[r['uri']] = hits.get(r['uri'], 0) + 1
    for uri, n in hits.iteritems():
        pass
    print "requests:", len(requests)
    return {'unique': len(hits)}
"""


@pytest.mark.parametrize(
    ("line", "construct"),
    [
        ('    print "requests:", len(requests)', "print statement"),
        ("    try:\n        pass\n    except ValueError, e:\n        pass", "except X, e"),
        ('    raise ValueError, "bad"', "raise X, message"),
        ("    return `hits`", "backquotes"),
        ("    return 0777", "octal literal 0NNN"),
        ("    if 1 <> 2: pass", "<> operator"),
        ('    exec "x = 1"', "exec statement"),
    ],
)
def test_a_python2_plugin_is_one_line_naming_file_line_and_conversion(tmp_path, line, construct):
    trace = tmp_path / "t.json"
    assert drtp("generate", "-o", str(trace), "-n", "50").returncode == 0
    source = PYTHON2_PLUGIN.replace('    print "requests:", len(requests)', line)
    (tmp_path / "plugin.py").write_text(source)
    bad = source.splitlines().index(line.splitlines()[-2 if "except" in line else 0]) + 1
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"trace: {{location: {tmp_path}, traces: [t.json]}}\nsimulate: {{name: {tmp_path}/plugin.py}}\n")
    out = drtp("simulate", "-c", str(cfg), "--out", str(tmp_path / "o"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert f"plugin.py:{bad}: cannot load plugin: this is Python 2 code ({construct})" in out.stderr
    assert f"python -m fissix -w {tmp_path}/plugin.py" in out.stderr


@pytest.mark.parametrize(
    ("setting", "secret_key"),
    [
        ("client_info.token=p4ss-p4ss-p4ss-p4ss", "client_info.token"),
        ("registries=[{id: a, url: 'http://127.0.0.1:5000', password: p4ss-p4ss-p4ss-p4ss}]", "registries[0].password"),
        ("deploy={host: h, jump: {host: j, password: p4ss-p4ss-p4ss-p4ss}}", "deploy.jump.password"),
    ],
)
def test_set_refuses_secrets_on_the_command_line(tmp_path, setting, secret_key):
    """ps shows every argument: a secret given by --set is refused, and the refusal does not repeat it."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(BASE_CONFIG)
    out = run_env("config", "-c", str(cfg), "--set", setting, env={"MY_SECRET": "s3cr3t-s3cr3t-s3cr3t"})
    line = _one_line_exit_2(out)
    assert f"sets the secret '{secret_key}'" in line and "p4ss" not in line
    # a token from the environment is fine (it is not on the command line), and clearing one by --set too
    env = {"MY_SECRET": "s3cr3t-s3cr3t-s3cr3t", "DRTP_CONFIG__CLIENT_INFO__TOKEN": "p4ss-p4ss-p4ss-p4ss"}
    ok = run_env("config", "-c", str(cfg), env=env)
    assert ok.returncode == 0 and "token: '***'  # from DRTP_CONFIG__CLIENT_INFO__TOKEN" in ok.stdout, ok
    assert "p4ss" not in ok.stdout
    cleared = run_env("config", "-c", str(cfg), "--set", "client_info.token=", env=env)
    assert cleared.returncode == 0 and "token: null  # from --set" in cleared.stdout, cleared
