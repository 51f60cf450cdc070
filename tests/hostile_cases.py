"""The hostile-input corpus: recipes that write bad (and valid-but-unusual) inputs of every kind drtp reads.

Many inputs are huge or degenerate (a JSON array nested 100,000 deep, a YAML alias bomb), so none is kept
as a file: each recipe writes its input into an empty folder at test time and returns the path.  The one
file kept beside this module, ``tests/hostile/registry.log``, is a real Distribution registry's JSON log of a
blob push and pull; the log recipes start from it.

Every case says what the error line must name besides the input's file name: the index of the bad record,
the config key or the option.  tests/test_hostile_inputs.py runs every command that reads the kind against
each case and checks the rule (one line on stderr naming the input, exit code 2, no hang, no output that
claims success; valid inputs succeed).
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ibm_record

HERE = Path(__file__).parent / "hostile"
REGISTRY_LOG = HERE / "registry.log"
PROFILE = Path(__file__).parent.parent / "configs" / "profiles" / "dev.yaml"

RECORDS = 10  # records of the valid trace every record-level case is made from
BAD = 7  # index of the bad record in record-level cases: the error must name it (7, or line 8)
DEEP = 100_000  # nesting depth of the deep JSON and YAML cases

# a YAML "billion laughs": nine levels of nine aliases, 9^9 strings once expanded
ALIAS_BOMB = "\n".join(
    ['a0: &a0 "lol"']
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    + ["client_info:", "  client_list: *a9", ""]
)


@dataclass(frozen=True)
class Case:
    """One input and what the rule expects of every command that reads it.

    ``write(folder, env)`` writes the input into the empty ``folder`` and returns its path;
    ``valid`` inputs must be read (exit 0), ``warns`` inputs too, with one warning line; ``record`` is
    the index of the bad record and ``key`` the config key or option the error line must name (its last
    dotted part is enough).
    """

    id: str
    write: Callable[[Path, Any], Path]
    valid: bool = False
    warns: tuple[str, ...] = ()  # commands for which it is valid with bad parts left out: exit 0, one warning line
    record: int | None = None
    key: str | None = None
    commands: tuple[str, ...] = ()  # empty: every command of the case's kind
    extra_names: tuple[str, ...] = field(default=())  # other names accepted in place of the file name


# -- trace files -------------------------------------------------------------------------------------------


def valid_records(n: int = RECORDS) -> list[dict]:
    """A small valid trace, one record a second, starting at a fraction of a second."""
    return [ibm_record(i, timestamp=f"2017-07-01T01:00:{i:02d}.{250 + i:03d}Z") for i in range(n)]


def _file(name: str, data: bytes | Callable[[], bytes]) -> Callable[[Path, Any], Path]:
    """A recipe writing ``data`` (or what the callable returns) to ``folder/name``."""

    def write(folder: Path, env: Any) -> Path:
        path = folder / name
        path.write_bytes(data() if callable(data) else data)
        return path

    return write


def _json(records: list) -> bytes:
    return json.dumps(records, indent=1).encode()  # NaN and Infinity come out as JSON's non-standard literals


def _jsonl(records: list) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def _bad_record(**over: Any) -> bytes:
    """The valid trace with fields of record BAD replaced (a value of ``...`` removes the field)."""
    recs = valid_records()
    for key, value in over.items():
        if value is ...:
            del recs[BAD][key]
        else:
            recs[BAD][key] = value
    return _json(recs)


def _uri(uri: str) -> bytes:
    return _bad_record(**{"http.request.uri": uri})


def _field(id_: str, key: str, value: Any) -> Case:
    """A case: the valid trace whose record BAD has ``key`` (a trace field name) set to ``value``."""
    return Case(id_, _file(f"{id_}.json", lambda: _bad_record(**{key: value})), record=BAD)


def _uri_case(id_: str, uri: str, valid: bool = False) -> Case:
    return Case(id_, _file(f"{id_}.json", lambda: _uri(uri)), record=BAD, valid=valid)


def _invalid_utf8() -> bytes:
    text = _json(valid_records())
    return text.replace(f"layer{BAD}".encode(), f"layer{BAD}".encode() + b"\xff\xfe", 1)


def _nul_inside() -> bytes:
    text = _json(valid_records())
    return text.replace(b'"id7"', b'"id\x007"', 1)


def _directory(folder: Path, env: Any) -> Path:
    path = folder / "trace_dir.json"
    path.mkdir()
    return path


def _missing(folder: Path, env: Any) -> Path:
    return folder / "missing_trace.json"


def _parquet(folder: Path, name: str) -> Path:
    """A real Parquet trace of the valid records, written by drtp's own writer."""
    from drtp.trace.parquet import write_parquet
    from drtp.trace.reader import TraceReader

    src = folder / "src.json"
    src.write_bytes(_json(valid_records()))
    path = folder / name
    write_parquet(path, TraceReader([src]).batches())
    src.unlink()
    return path


def _parquet_truncated(folder: Path, env: Any) -> Path:
    path = _parquet(folder, "parquet_truncated.parquet")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _parquet_foreign(folder: Path, env: Any) -> Path:
    """A valid Parquet file that is no trace: other columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = folder / "parquet_foreign.parquet"
    pq.write_table(pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]}), path)
    return path


def _jsonl_bad_line() -> bytes:
    lines = _jsonl(valid_records()).splitlines(keepends=True)
    lines[BAD] = b'{"http.request.uri": "v2/user0/repo0/blobs/x", not json\n'
    return b"".join(lines)


def _jsonl_truncated() -> bytes:
    data = _jsonl(valid_records())
    return data[: len(data) - 40]


BOM = b"\xef\xbb\xbf"

TRACE_CASES: list[Case] = [
    Case("valid", _file("valid.json", lambda: _json(valid_records())), valid=True),
    Case("bom", _file("bom.json", lambda: BOM + _json(valid_records())), valid=True),
    Case("bom_jsonl", _file("bom.jsonl", lambda: BOM + _jsonl(valid_records())), valid=True),
    Case("bom_gz", _file("bom.json.gz", lambda: gzip.compress(BOM + _json(valid_records()))), valid=True),
    Case("whole_second_start", _file("whole_second.json", lambda: _json([ibm_record(i) for i in range(RECORDS)])),
         valid=True),
    Case("empty", _file("empty.json", b"")),
    Case("blank", _file("blank.json", b" \n\t\n")),
    Case("empty_array", _file("empty_array.json", b"[]")),
    Case("empty_array_gz", _file("empty_array.json.gz", lambda: gzip.compress(b"[]"))),
    Case("empty_gz", _file("empty_gz.json.gz", b"")),
    Case("gz_truncated", _file("gz_truncated.json.gz", lambda: gzip.compress(_json(valid_records()))[:300])),
    Case("gz_not_gzip", _file("gz_not_gzip.json.gz", b"this is not gzip data\n" * 20)),
    Case("gz_garbage_inside", _file("gz_garbage_inside.json.gz", lambda: gzip.compress(b"\x00\x01garbage" * 50))),
    Case("array_deep", _file("array_deep.json", b"[" * DEEP + b"]" * DEEP)),
    Case("object_deep", _file("object_deep.json", b"[" + b'{"a":' * DEEP + b"1" + b"}" * DEEP + b"]")),
    Case("jsonl_object_deep", _file("jsonl_object_deep.jsonl", b'{"a":' * DEEP + b"1" + b"}" * DEEP + b"\n")),
    Case("scalar_number", _file("scalar_number.json", b"42")),
    Case("scalar_string", _file("scalar_string.json", b'"a trace"')),
    Case("scalar_null", _file("scalar_null.json", b"null")),
    Case("array_of_numbers", _file("array_of_numbers.json", b"[1, 2, 3]")),
    Case("array_of_nulls", _file("array_of_nulls.json", b"[null]")),
    Case("not_json", _file("not_json.json", b"hello, this is not a trace\n")),
    Case("json_truncated", _file("json_truncated.json", lambda: _json(valid_records())[:-200])),
    Case("trailing_garbage", _file("trailing_garbage.json", lambda: _json(valid_records()) + b" garbage")),
    Case("nul_bytes", _file("nul_bytes.json", b"\x00" * 4096)),
    Case("nul_inside", _file("nul_inside.json", _nul_inside), record=BAD),
    Case("invalid_utf8", _file("invalid_utf.json", _invalid_utf8), record=BAD),
    Case("directory", _directory),
    Case("missing", _missing),
    Case("parquet_junk", _file("parquet_junk.parquet", b"junk, not parquet " * 64)),
    Case("parquet_empty", _file("parquet_empty.parquet", b"")),
    Case("parquet_truncated", _parquet_truncated),
    Case("parquet_foreign", _parquet_foreign),
    Case("jsonl_bad_line", _file("jsonl_bad_line.jsonl", _jsonl_bad_line), record=BAD),
    Case("jsonl_truncated", _file("jsonl_truncated.jsonl", _jsonl_truncated), record=RECORDS - 1),
    _field("written_huge", "http.response.written", 10**30),
    _field("written_negative", "http.response.written", -1),
    _field("written_float", "http.response.written", 1.5),
    _field("written_string", "http.response.written", "abc"),
    _field("written_nan", "http.response.written", float("nan")),
    _field("duration_nan", "http.request.duration", float("nan")),
    _field("duration_inf", "http.request.duration", float("inf")),
    _field("duration_negative", "http.request.duration", -1),
    _field("duration_huge", "http.request.duration", 1e300),
    _field("status_huge", "http.response.status", 999),
    _field("status_string", "http.response.status", "abc"),
    _field("timestamp_far_future", "timestamp", "9999-12-31T23:59:59.000Z"),
    _field("timestamp_garbage", "timestamp", "yesterday noon"),
    _field("timestamp_missing", "timestamp", ...),
    _field("timestamp_number", "timestamp", 1e30),
    _field("method_foo", "http.request.method", "FOO"),
    _field("method_empty", "http.request.method", ""),
    _field("uri_missing", "http.request.uri", ...),
    _uri_case("uri_crlf", "v2/user0/repo0/blobs/layer\r\nX-Injected: yes"),
    _uri_case("uri_lf", "v2/user0/repo0/blobs/layer\nHost: evil"),
    _uri_case("uri_dotdot", "v2/user0/../../repo0/blobs/layer"),
    _uri_case("uri_dotdot_ref", "v2/user0/repo0/manifests/.."),
    _uri_case("uri_space", "v2/user 0/repo0/blobs/layer"),
    _uri_case("uri_uppercase", "v2/User0/Repo0/blobs/layer"),
    # a query is informational (upload tokens, mount sources) and never sent on: URL query characters pass
    _uri_case("uri_query", "v2/user0/repo0/blobs/layer?digest=x", valid=True),
    _uri_case("uri_query_path", "v2/user0/repo0/manifests/x?/../../_catalog", valid=True),
    _uri_case("uri_empty_repository", "v2//blobs/layer"),
    _uri_case("uri_tag_too_long", "v2/user0/repo0/manifests/" + "t" * 200),
    _uri_case("uri_name_too_long", "v2/" + "a/" * 200 + "r/blobs/layer"),
]  # fmt: skip


# -- registry logs (capture, and the trace reader's registry-log format) ---------------------------------------


def _log_lines() -> list[dict]:
    return [json.loads(line) for line in REGISTRY_LOG.read_text().splitlines() if line.strip()]


def _log_with(**over: Any) -> bytes:
    """The real log with one field of its first object request (a blob HEAD) replaced."""
    lines = _log_lines()
    target = next(i for i, x in enumerate(lines) if "/blobs/" in x.get("http.request.uri", ""))
    lines[target].update(over)
    return b"".join(json.dumps(x).encode() + b"\n" for x in lines)


def _log_field(id_: str, key: str, value: Any) -> Case:
    """A case: the real log with ``key`` of its first object request set to ``value``.

    A registry's log holds more than requests (startup lines, pings, lines of other loggers), so capture
    (and convert of a log, a capture that keeps the names) is a filter: a bad line is left out and reported
    in one warning line, and the rest is captured.  Every other reader of a log refuses the bad line.
    """
    return Case(id_, _file(f"{id_}.log", lambda: _log_with(**{key: value})), warns=("capture", "convert"))


def _log_not_requests() -> bytes:
    return b"".join(json.dumps({"level": "info", "msg": f"hello {i}", "n": i}).encode() + b"\n" for i in range(20))


def _log_no_objects() -> bytes:
    """Real log lines, but not one object request: the startup lines and the /v2/ ping."""
    lines = [x for x in _log_lines() if "/blobs/" not in x.get("http.request.uri", "")]
    return b"".join(json.dumps(x).encode() + b"\n" for x in lines)


LOG_CASES: list[Case] = [
    Case("valid", _file("registry.log", lambda: REGISTRY_LOG.read_bytes()), valid=True),
    Case("log_empty", _file("log_empty.log", b"")),
    Case("log_garbage_text", _file("log_garbage.log", b"the quick brown fox\njumps over\n" * 50)),
    Case("log_random_bytes", _file("log_random.log", lambda: random.Random(1).randbytes(8192))),
    Case("log_nul_bytes", _file("log_nul.log", b"\x00" * 4096)),
    Case("log_not_requests", _file("log_not_requests.log", _log_not_requests)),
    Case("log_no_object_requests", _file("log_no_objects.log", _log_no_objects)),
    _log_field("log_bad_time", "time", "yesterday noon"),
    _log_field("log_bad_duration", "http.response.duration", "forever"),
    _log_field("log_negative_duration", "http.response.duration", "-5ms"),
    _log_field("log_huge_written", "http.response.written", 10**30),
    _log_field("log_status_string", "http.response.status", "abc"),
    Case("log_directory", _directory),
    Case("log_missing", _missing),
]  # fmt: skip


# -- configs -----------------------------------------------------------------------------------------------

# commands that read a config: what each case runs; the valid base config passes in all of them but deploy,
# which gets past validation to the SSH connection (to a closed loopback port) and fails there
CONFIG_COMMANDS = ("config", "run", "warmup", "experiment", "simulate", "slurm", "clean", "deploy")
TRACE_READERS = ("run", "warmup", "experiment", "simulate")  # the config commands that read the trace


def _config_text(name: str, text: str | bytes) -> Callable[[Path, Any], Path]:
    return _file(name, text.encode() if isinstance(text, str) else text)


def _config(name: str, change: Callable[[dict], None]) -> Callable[[Path, Any], Path]:
    """A recipe writing the environment's valid base config with ``change`` applied."""

    def write(folder: Path, env: Any) -> Path:
        cfg = env.base_config(folder)
        change(cfg)
        path = folder / name
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path

    return write


def _set(dotted: str, value: Any) -> Callable[[dict], None]:
    def change(cfg: dict) -> None:
        *parents, last = dotted.split(".")
        node = cfg
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value

    return change


def _key(id_: str, dotted: str, value: Any, commands: tuple[str, ...] = ()) -> Case:
    """A case: the base config with one key set to a bad value; the error must name the key."""
    return Case(id_, _config(f"{id_}.yaml", _set(dotted, value)), key=dotted, commands=commands)


def _entry(id_: str, key: str, **keys: Any) -> Case:
    """A case: the base config's registries entry with ``keys`` added; the error must name ``key``."""

    def change(cfg: dict) -> None:
        cfg["registries"][0].update(keys)

    return Case(id_, _config(f"{id_}.yaml", change), key=key)


def _trace_is(name: str, kind: str) -> Callable[[Path, Any], Path]:
    """The base config whose trace is a directory (``kind`` dir) or a missing file, in the case folder."""

    def write(folder: Path, env: Any) -> Path:
        cfg = env.base_config(folder)
        target = folder / name
        if kind == "dir":
            target.mkdir()
        cfg["trace"] = {"location": str(folder), "traces": [name]}
        path = folder / f"config_{kind}.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path

    return write


def _config_dir(folder: Path, env: Any) -> Path:
    path = folder / "config_dir.yaml"
    path.mkdir()
    return path


def _config_missing(folder: Path, env: Any) -> Path:
    return folder / "config_missing.yaml"


def _plugin(id_: str, args: dict, key: str = "simulate.args.capacity", name: str = "lru") -> Case:
    """A simulate case: the base config's simulate section with other plugin arguments."""
    args = {"percent_of": "footprint", **args}  # the valid trace uploads nothing: percentages of what it reads
    return Case(id_, _config(f"{id_}.yaml", _set("simulate", {"name": name, "args": args})), key=key,
                commands=("simulate",))  # fmt: skip


CONFIG_CASES: list[Case] = [
    # clean: the valid config has no warmup map (nothing recorded to clean is refused); deploy: see above
    Case("valid", _config("valid.yaml", lambda cfg: None), valid=True, commands=CONFIG_COMMANDS[:-2]),
    Case("alias_bomb", _config_text("alias_bomb.yaml", ALIAS_BOMB)),
    Case("yaml_deep_list", _config_text("deep_list.yaml", "[" * DEEP + "]" * DEEP)),
    Case("yaml_deep_map", _config_text("deep_map.yaml", "{a: " * DEEP + "1" + "}" * DEEP)),
    Case("yaml_deep_block", _config_text("deep_block.yaml", "".join(f"{' ' * i}- \n" for i in range(0, 2000)))),
    Case("yaml_syntax_error", _config_text("syntax_error.yaml", "trace:\n  location: [unclosed\nregistry: x\n")),
    Case("yaml_two_documents", _config_text("two_documents.yaml", "results: a\n---\nresults: b\n")),
    Case("yaml_top_list", _config_text("top_list.yaml", "- trace\n- registry\n")),
    Case("yaml_top_scalar", _config_text("top_scalar.yaml", "just some words\n")),
    Case("yaml_nul_bytes", _config_text("nul_bytes.yaml", b"\x00" * 512)),
    Case("yaml_invalid_utf8", _config_text("invalid_utf.yaml", b"results: \xff\xfe\xfd\n")),
    Case("yaml_python_tag", _config_text("python_tag.yaml", "results: !!python/object/apply:os.getcwd []\n")),
    Case("config_directory", _config_dir),
    Case("config_missing", _config_missing),
    Case("unknown_key", _config("unknown_key.yaml", _set("client_info.treads", 4)), key="client_info.treads"),
    Case("unknown_section", _config("unknown_section.yaml", _set("registyr", ["x"])), key="registyr"),
    _key("timeout_negative", "client_info.timeout", -1),
    _key("timeout_zero", "client_info.timeout", 0),
    _key("timeout_nan", "client_info.timeout", float("nan")),
    _key("timeout_inf", "client_info.timeout", float("inf")),
    _key("connect_timeout_zero", "client_info.connect_timeout", 0),
    _key("threads_zero", "client_info.threads", 0),
    _key("threads_negative", "client_info.threads", -4),
    _key("threads_huge", "client_info.threads", 10**12),
    _key("batch_zero", "client_info.batch", 0),
    _key("inflight_zero", "client_info.inflight", 0),
    _key("speedup_zero", "client_info.speedup", 0),
    _key("speedup_nan", "client_info.speedup", float("nan")),
    _key("on_time_negative", "client_info.on_time_ms", -5),
    _key("port_out_of_range", "client_info.port", 70000),
    _key("token_short", "client_info.token", "abc"),
    _key("token_empty", "client_info.token", ""),
    _key("limit_negative", "trace.limit", {"type": "requests", "amount": -10}),
    _key("limit_nan", "trace.limit", {"type": "seconds", "amount": float("nan")}),
    _key("reorder_window_negative", "trace.reorder_window", -1),
    _key("warmup_threads_zero", "warmup.threads", 0),
    _key("repeat_zero", "repeat", 0),
    _key("repeat_words", "repeat", "x"),
    _key("repeat_state_unknown", "repeat_state", "fresh-ish"),
    _key("namespace_internal", "namespace", "rep1-"),
    _key("registry_bad_port", "registry", ["127.0.0.1:99999"]),
    _key("registry_with_path", "registry", ["127.0.0.1:5000/../admin"]),
    _key("node_bad_address", "client_info.client_list", ["not a host:port"]),
    _key("slurm_nodes_zero", "slurm.nodes", 0, commands=("config", "slurm")),
    _key("deploy_port_zero", "deploy.port", 0, commands=("config", "deploy")),
    _entry("repository_map_unknown_field", "repository_map", repository_map="{prefix}{tenant}/{repo}"),
    _entry("repository_map_no_repo", "repository_map", repository="ns/", repository_map="{prefix}{user}"),
    _entry("repository_prefix_invalid", "repository", repository="Upper Case/"),
    _entry("two_secret_sources", "password_file", username="u", password="p", password_file="pw.txt"),
    _entry("credential_helper_path", "credential_helper", credential_helper="../../bin/sh"),
    _entry("credential_ttl_without_helper", "credential_ttl", username="u", password="p", credential_ttl="1h"),
    _entry("password_command_empty", "password_command", username="u", password_command=[]),
    _entry("create_repository_no_name", "create_repository", create_repository=["aws", "ecr", "create-repository"]),
    Case("trace_directory", _trace_is("trace_dir.json", "dir"), commands=TRACE_READERS,
         extra_names=("trace_dir.json",)),
    Case("trace_missing", _trace_is("no_such_trace.json", "missing"), commands=TRACE_READERS,
         extra_names=("no_such_trace.json",)),
    _plugin("capacity_percent_over", {"capacity": "500%"}),
    _plugin("capacity_percent_zero", {"capacity": "0%"}),
    _plugin("capacity_zero", {"capacity": 0}),
    _plugin("capacity_fraction", {"capacity": 1.5}),
    _plugin("capacity_negative", {"capacity": -5}),
    _plugin("capacity_words", {"capacity": "abc"}),
    _plugin("capacity_nan", {"capacity": float("nan")}),
    _plugin("plugin_unknown_arg", {"capacity": "10%", "capactiy": "5%"}, key="simulate.args.capactiy"),
    _plugin("plugin_percent_of_bogus", {"capacity": "10%", "percent_of": "bogus"}, key="simulate.args.percent_of"),
    _plugin("plugin_buckets_zero", {"capacity": "10%", "timeline_buckets": 0}, key="simulate.args.timeline_buckets"),
    _plugin("plugin_ssd_multiplier_zero", {"capacity": "10%", "ssd_multiplier": 0}, key="simulate.args.ssd_multiplier",
            name="two-level"),
    _plugin("plugin_unknown_name", {"capacity": "10%"}, key="simulate.name", name="no-such-plugin"),
    _plugin("sweep_empty_list", {"capacity": []}),
]  # fmt: skip

# the case ids count on the file name: ids must not repeat within a kind
for _cases in (TRACE_CASES, LOG_CASES, CONFIG_CASES):
    assert len({c.id for c in _cases}) == len(_cases)


# -- workload profiles (generate --profile, analyze trace --profile) --------------------------------------------


def _profile(name: str, change: Callable[[dict], None]) -> Callable[[Path, Any], Path]:
    def write(folder: Path, env: Any) -> Path:
        data = yaml.safe_load(PROFILE.read_text())
        change(data)
        path = folder / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write


PROFILE_CASES: list[Case] = [
    Case("valid", _profile("valid.yaml", lambda data: None), valid=True),
    Case("profile_junk", _file("junk.yaml", b"%%% {{ not: yaml: [\n")),
    Case("profile_alias_bomb", _file("alias_bomb.yaml", ALIAS_BOMB.replace("client_info:", "generator:").encode())),
    Case("profile_deep", _file("deep.yaml", b"[" * DEEP + b"]" * DEEP)),
    Case("profile_top_list", _file("top_list.yaml", b"- generator\n- targets\n")),
    Case("profile_empty", _file("empty.yaml", b"")),
    Case("profile_unknown_key", _profile("unknown_key.yaml", _set("generator.bogus", 1)), key="generator.bogus"),
    Case("profile_negative_clients", _profile("neg_clients.yaml", _set("generator.clients", -5)),
         key="generator.clients"),
    Case("profile_ratio_over_one", _profile("ratio_over.yaml", _set("generator.push_ratio", 7)),
         key="generator.push_ratio"),
    Case("profile_nan", _profile("nan.yaml", _set("generator.repo_skew", float("nan"))), key="generator.repo_skew"),
    Case("profile_directory", _directory),
    Case("profile_missing", _missing),
]  # fmt: skip


# -- replay results (analyze results, cost) ---------------------------------------------------------------------


def _run_dir(name: str, change: Callable[[Path], None]) -> Callable[[Path, Any], Path]:
    """A copy of the environment's real run directory with ``change`` applied to it."""

    def write(folder: Path, env: Any) -> Path:
        import shutil

        path = folder / name
        shutil.copytree(env.good_run, path)
        change(path)
        return path

    return write


def _summary_with(value: str) -> Callable[[Path], None]:
    """summary.json with every float replaced by a non-finite JSON literal (NaN, Infinity)."""

    def mark(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: mark(v) for k, v in node.items()}
        if isinstance(node, list):
            return [mark(v) for v in node]
        return "@@" if isinstance(node, float) else node

    def change(run: Path) -> None:
        data = mark(json.loads((run / "summary.json").read_text()))
        (run / "summary.json").write_text(json.dumps(data).replace('"@@"', value))

    return change


def _truncate(name: str) -> Callable[[Path], None]:
    def change(run: Path) -> None:
        data = (run / name).read_bytes()
        (run / name).write_bytes(data[: len(data) // 2])

    return change


def _replace(name: str, data: bytes | None) -> Callable[[Path], None]:
    def change(run: Path) -> None:
        if data is None:
            (run / name).unlink()
        else:
            (run / name).write_bytes(data)

    return change


def _run_file(folder: Path, env: Any) -> Path:
    path = folder / "run_is_file"
    path.write_text("not a run directory\n")
    return path


def _run_missing(folder: Path, env: Any) -> Path:
    return folder / "run_missing"


def _broken(id_: str, name: str, change: Callable[[Path], None]) -> Case:
    """A case: the real run directory with its file ``name`` changed; the error may name that file.

    summary.json is optional (an interrupted run has none) and only ``analyze results`` reads it, so its
    cases run there alone; a run directory without one is no case at all.
    """
    commands = ("analyze_results",) if name == "summary.json" else ()
    return Case(id_, _run_dir(f"run_{id_}", change), extra_names=(name,), commands=commands)


RESULTS_CASES: list[Case] = [
    Case("valid", _run_dir("run_valid", lambda run: None), valid=True),
    _broken("summary_nan", "summary.json", _summary_with("NaN")),
    _broken("summary_infinity", "summary.json", _summary_with("Infinity")),
    _broken("summary_truncated", "summary.json", _truncate("summary.json")),
    _broken("summary_not_object", "summary.json", _replace("summary.json", b"[1, 2]")),
    _broken("requests_junk", "requests.csv", _replace("requests.csv", b"\x00\xff junk\n,,,\n\"unclosed\n")),
    _broken("requests_empty", "requests.csv", _replace("requests.csv", b"")),
    _broken("requests_missing", "requests.csv", _replace("requests.csv", None)),
    Case("run_is_file", _run_file),
    Case("run_missing", _run_missing),
]  # fmt: skip
