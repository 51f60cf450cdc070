"""Property tests: whatever a config, profile or plugin argument holds, drtp answers with a value or a DrtpError.

Hypothesis feeds arbitrary bytes, arbitrary text and structured random YAML
(nested mappings and lists of random scalars, anchors and aliases, deep
nesting) to the loaders.  Anything but a result or a :class:`DrtpError` — a
TypeError, a RecursionError, a hang — is a failure.  Each test runs a bounded
number of examples so the module stays well under a minute; the only time
guard is a generous per-example alarm, never an assertion on speed.
"""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drtp.config import Config, config_from_dict, load_config
from drtp.errors import ConfigError, DrtpError
from drtp.plugins.base import find_plugin, parse_plugin_args
from drtp.plugins.sweep import grid
from drtp.trace.profiles import load_profile
from drtp.units import parse_duration, parse_size
from drtp.yamlfile import MAX_DEPTH, parse_yaml
from tests.conftest import hang_guard

FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
HANG_GUARD_S = 20  # one example taking this long is a hang, not a slow machine


def answers(call) -> object:
    """The call's value, or None when it raised a DrtpError; any other exception fails the test."""
    with hang_guard(HANG_GUARD_S):
        try:
            return call()
        except DrtpError as e:
            assert "\n" not in str(e), f"an error of more than one line: {e!r}"
            return None


# -- building blocks: YAML scalars as a user might type them (and as nobody should) ------------------

SCALARS = st.one_of(
    st.sampled_from(
        [
            "0",
            "-1",
            "1",
            "1.5",
            ".nan",
            ".inf",
            "-.inf",
            "true",
            "null",
            "~",
            "''",
            "5%",
            "500%",
            "0%",
            "1e400",
            "9" * 30,
            "64MiB",
            "-3KB",
            "1h",
            "-1h",
            "abc",
            "2017-08-01",
            "!!binary aGk=",
            "[]",
            "{}",
        ]
    ),  # fmt: skip
    st.integers(min_value=-(10**20), max_value=10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda f: repr(f) if math.isfinite(f) else ".nan"),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12).map(
        lambda s: yaml.safe_dump(s).split("\n...")[0].strip()
    ),
)
KEYS = st.sampled_from(
    [
        "client_info", "trace", "registry", "registries", "warmup", "simulate", "results", "slurm", "deploy",
        "verbose", "threads", "timeout", "connect_timeout", "batch", "inflight", "retries", "speedup", "limit",
        "amount", "type", "location", "traces", "capacity", "args", "name", "port", "generator", "targets",
        "clients", "requests_per_day", "push_ratio", "bogus", "1", "<<",
    ]
)  # fmt: skip


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())


@st.composite
def yaml_documents(draw) -> str:
    """A random YAML document: nested block mappings and flow lists of scalars, with anchors and aliases."""
    anchors: list[str] = []

    def value(depth: int) -> str:
        kind = draw(st.integers(0, 5 if depth < 6 else 1))
        if kind == 0 or depth >= 6:
            return draw(SCALARS)
        if kind == 1 and anchors:
            return "*" + draw(st.sampled_from(anchors))
        if kind == 2:
            items = [value(depth + 1) for _ in range(draw(st.integers(0, 4)))]
            return "[" + ", ".join(i.replace("\n", " ") for i in items) + "]"
        if kind == 3:
            name = f"a{len(anchors)}"
            body = mapping(depth + 1)
            anchors.append(name)
            return f"&{name}\n" + _indent(body, 2) if body else f"&{name} {{}}"
        body = mapping(depth + 1)
        return "\n" + _indent(body, 2) if body else "{}"

    def mapping(depth: int) -> str:
        lines = []
        for key in draw(st.lists(KEYS, max_size=4, unique=True)):
            v = value(depth)
            lines.append(f"{key}:{'' if v.startswith(chr(10)) else ' '}{v}")
        return "\n".join(lines)

    return mapping(0)


def deep(n: int, opening: str, closing: str) -> str:
    return "a: " + opening * n + "1" + closing * n


# -- the properties ----------------------------------------------------------------------------------


@FUZZ
@given(data=st.binary(max_size=2000))
def test_any_bytes_as_a_config_file_give_a_config_or_a_drtp_error(tmp_path, data):
    path = tmp_path / "config.yaml"
    path.write_bytes(data)
    result = answers(lambda: load_config(path))
    assert result is None or isinstance(result, Config)


@FUZZ
@given(text=st.text(max_size=500))
def test_any_text_as_a_config_gives_a_config_or_a_drtp_error(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    result = answers(lambda: load_config(path))
    assert result is None or isinstance(result, Config)


@FUZZ
@given(doc=yaml_documents())
def test_structured_yaml_gives_a_config_or_a_drtp_error(tmp_path, doc):
    path = tmp_path / "config.yaml"
    path.write_text(doc)
    result = answers(lambda: load_config(path))
    if result is not None:  # whatever got through is within the ranges the types promise
        ci = result.client_info
        assert 1 <= ci.threads <= 1024 and ci.timeout > 0 and math.isfinite(ci.timeout)
        assert ci.connect_timeout > 0 and math.isfinite(ci.connect_timeout) and ci.speedup > 0
        if result.trace and result.trace.limit:
            assert result.trace.limit.amount > 0


@FUZZ
@given(doc=yaml_documents())
def test_structured_yaml_gives_a_profile_or_a_drtp_error(tmp_path, doc):
    path = tmp_path / "profile.yaml"
    path.write_text(doc)
    result = answers(lambda: load_profile(str(path)))
    assert result is None or isinstance(result["generator"], dict)


@FUZZ
@given(data=st.dictionaries(st.sampled_from(["client_info", "trace", "simulate", "x"]), st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=20,
)))  # fmt: skip
def test_any_python_data_gives_a_config_or_a_drtp_error(data):
    result = answers(lambda: config_from_dict(data))
    assert result is None or isinstance(result, Config)


ARG_VALUES = st.one_of(
    SCALARS.map(lambda s: answers(lambda: parse_yaml(f"v: {s}", "<arg>")) or {"v": s}).map(lambda d: d.get("v")),
    st.integers(),
    st.floats(),
    st.booleans(),
    st.text(max_size=10),
    st.lists(st.one_of(st.integers(), st.floats(), st.text(max_size=6)), max_size=4),
)


@FUZZ
@given(
    plugin=st.sampled_from(["lru", "two-level", "cache", "prefetch", "libcachesim:S3-FIFO", "libcachesim:MQ"]),
    args=st.dictionaries(
        st.sampled_from(
            [
                "capacity",
                "threshold",
                "ssd_multiplier",
                "timeline_buckets",
                "lm_thresh",
                "ml_thresh",
                "policy",
                "percent_of",
                "per_server",
                "params",
                "bogus",
            ]
        ),  # fmt: skip
        ARG_VALUES,
        max_size=4,
    ),
)
def test_any_plugin_arguments_give_args_or_a_drtp_error(plugin, args):
    cls = find_plugin(plugin)

    def check():
        return [parse_plugin_args(cls, point, "config.yaml") for point in grid(args, "config.yaml")]

    answers(check)


@FUZZ
@given(value=ARG_VALUES)
def test_sizes_and_durations_are_whole_finite_and_never_negative(value):
    size = answers(lambda: _as_drtp(parse_size, value))
    assert size is None or (isinstance(size, int) and 0 <= size < 2**63)
    seconds = answers(lambda: _as_drtp(parse_duration, value))
    assert seconds is None or (math.isfinite(seconds) and seconds >= 0)


def _as_drtp(parse, value):
    """The parsers raise ValueError (callers add the key or option): the same contract, as a DrtpError."""
    try:
        return parse(value)
    except ValueError as e:
        raise DrtpError(str(e)) from None


@pytest.mark.parametrize(("opening", "closing"), [("[", "]"), ("{a: ", "}")])
def test_nesting_100000_deep_is_refused_at_once(tmp_path, opening, closing):
    path = tmp_path / "deep.yaml"
    path.write_text(deep(100_000, opening, closing))
    with (
        hang_guard(HANG_GUARD_S),
        pytest.raises(DrtpError, match=rf"deep.yaml:1:\d+: not valid YAML: nested deeper than {MAX_DEPTH}"),
    ):
        load_config(path)


@pytest.mark.parametrize("key", ["\n", "a\r\nb", "\u2028", "\x1b[31m", "\x85"])
def test_a_key_holding_a_line_break_is_named_on_one_line(key: str) -> None:
    """A key quoted in the error is escaped, so the message stays one line (hypothesis found '\\n')."""
    with pytest.raises(ConfigError) as caught:
        config_from_dict({"client_info": {key: None}})
    assert str(caught.value).splitlines() == [str(caught.value)]
    assert key.encode("unicode_escape").decode("ascii") in str(caught.value)
