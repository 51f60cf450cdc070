"""The one rewriter of msgspec's validation errors: every file a user writes gets the same one-line wording."""

from __future__ import annotations

import re
from typing import Literal

import msgspec
import pytest

from drtp.analysis.cost import load_pricing
from drtp.errors import ConfigError
from drtp.schema import convert, explain
from drtp.trace.profiles import load_profile
from drtp.trace.records import TraceRecord


class Inner(msgspec.Struct, forbid_unknown_fields=True):
    mode: Literal["fast", "slow"] = "fast"
    count: int = 1


class Outer(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    inner: Inner = msgspec.field(default_factory=Inner)
    renamed: int = msgspec.field(default=0, name="spelled-so")


def _error(data: object) -> str:
    with pytest.raises(ConfigError) as e:
        convert(data, Outer, "f.yaml", prefix="simulate.args.", list_allowed=True)
    return str(e.value)


def test_convert_returns_the_struct():
    assert convert({"name": "x", "inner": {"count": 3}}, Outer, "f.yaml") == Outer(name="x", inner=Inner(count=3))


def test_errors_name_the_file_and_the_key_path():
    assert _error({"name": "x", "bogus": 1}) == (
        "f.yaml: unknown key 'simulate.args.bogus' (allowed: name, inner, spelled-so)"
    )
    assert _error({"name": "x", "inner": {"bogus": 1}}) == (
        "f.yaml: unknown key 'simulate.args.inner.bogus' (allowed: mode, count)"
    )
    assert _error({}) == "f.yaml: missing key 'simulate.args.name'"
    assert _error({"name": "x", "inner": {"count": "3"}}) == (
        "f.yaml: key 'simulate.args.inner.count': expected an integer, got '3'"
    )
    assert _error({"name": "x", "inner": {"mode": "warp"}}) == (
        "f.yaml: key 'simulate.args.inner.mode': 'warp' is not one of fast, slow"
    )
    assert _error({"name": "x", 1: 2}) == ("f.yaml: key 'simulate.args': every key in it must be a name (a string)")


def test_unknown_key_without_the_allowed_list():
    with pytest.raises(ConfigError) as e:
        convert({"name": "x", "bogus": 1}, Outer, "f.yaml")
    assert str(e.value) == "f.yaml: unknown key 'bogus'"


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"[]", "Expected `object`, got `array`"),
        (b'{"host": 1}', "Expected `str`, got `int` - at `host`"),
        (b'{"host": "h", "http.response.status": 99}', "Expected `int` >= 100 - at `http.response.status`"),
    ],
)
def test_plain_keeps_msgspec_words_for_trace_records(raw, text):
    with pytest.raises(msgspec.ValidationError) as e:
        msgspec.json.decode(raw, type=TraceRecord)
    assert explain(e.value, plain=True) == text


def test_plain_names_a_missing_record_field():
    record = msgspec.json.encode(
        {
            "host": "h",
            "http.request.duration": 0.1,
            "http.request.method": "GET",
            "http.request.remoteaddr": "c",
            "http.request.uri": "v2/a/b/blobs/x",
            "http.response.status": 200,
            "http.response.written": 1,
            "id": "i",
        }
    )
    with pytest.raises(msgspec.ValidationError) as e:
        msgspec.json.decode(record, type=TraceRecord)
    assert explain(e.value, plain=True) == "missing field `timestamp`"


def test_profile_keys_are_checked_by_the_rewriter(tmp_path):
    bad = tmp_path / "p.yaml"

    def error(text: str) -> str:
        bad.write_text(text)
        with pytest.raises(ConfigError) as e:
            load_profile(str(bad))
        return str(e.value)

    assert error("generator: {clients: 5}\nnotes: x\n") == f"{bad}: unknown key 'notes'"
    assert error("generator: [1, 2]\n") == f"{bad}: key 'generator': expected a mapping of keys, got list"
    assert error("targets: {a: [1, 2]}\ngenerator: {clients: 5, bogus: 1}\n") == f"{bad}: unknown key 'generator.bogus'"
    bad.write_text("generator: {clients: 5, requests_per_day: 100}\ndescription: test\n")
    profile = load_profile(str(bad))
    assert profile["generator"] == {"clients": 5} and profile["requests_per_day"] == 100
    bad.write_text("generator:\ntargets: {a: [1, 0.5]}\n")  # an empty key is no key
    assert load_profile(str(bad))["generator"] == {}


def test_a_section_of_the_wrong_kind_is_named_by_its_type():
    with pytest.raises(ConfigError) as e:
        convert({"name": "x", "inner": [1, 2]}, Outer, "f.yaml")
    assert str(e.value) == "f.yaml: key 'inner': expected a mapping of keys, got list"


def test_pricing_errors_name_the_plan(tmp_path):
    bad = tmp_path / "x.yaml"
    bad.write_text("plans:\n  small: {monthly_fee: -1}\n")
    with pytest.raises(
        ConfigError, match=rf"^{re.escape(str(bad))}: key 'plans.small.monthly_fee': expected a number ≥ 0, got -1$"
    ):
        load_pricing([bad])
    bad.write_text("plans:\n  small: {monthly_fee: .inf}\n")
    with pytest.raises(ConfigError, match=r"key 'plans.small.monthly_fee': expected a number ≤ \d+, got inf$"):
        load_pricing([bad])
    bad.write_text("provider: P\nplans:\n  small: {monthly_fee: 2, limits: one user}\n")
    (plan,) = load_pricing([bad])
    assert (plan.provider, plan.name, plan.monthly_fee, plan.limits) == ("P", "small", 2.0, "one user")
