"""``repository_map``: how a trace's repository names become names a registry accepts (unit tests).

The end-to-end checks against the real registry are in tests/test_realreg_repo_names.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drtp.config import config_from_dict
from drtp.errors import ConfigError
from drtp.master.run.plan import with_names
from drtp.registry.name_maps import mapping_error
from drtp.registry.names import NAME, name_error
from drtp.registry.repo_names import PROBE, RepositoryMap
from drtp.trace.records import TraceRecord, mount_of, parse_uri

# short components of the grammar, separators "__" and "--" included
component = st.from_regex(r"[a-z0-9]{1,8}(?:(?:[._]|__|-{1,2})[a-z0-9]{1,8}){0,2}", fullmatch=True)
trace_name = st.lists(component, min_size=1, max_size=4).map("/".join)
assert NAME.fullmatch("a__b--c/d.e_f")  # the strategy's shapes are names
prefix = st.sampled_from(["", "ns/", "org/team/", "run7-", "ns/x_"])
TEMPLATES = ["{prefix}{user}_{repo}", "{prefix}{user}--{repo}", "{prefix}{name}", "{user}/{prefix}{repo}"]
mode = st.sampled_from(["prefix", "flatten", *TEMPLATES])


def entry(**over) -> dict:
    return {"id": "hub", "url": "http://127.0.0.1:5000", "insecure": True, **over}


def levels(name: str) -> int:
    return name.count("/") + 1


def test_the_three_modes_on_the_shapes_of_trace_names():
    flat = RepositoryMap("flatten", "ns/")
    assert flat.map("user/repo") == "ns/user-repo"  # Docker Hub's namespace/name
    assert flat.map("alone") == "ns/alone"  # one level: kept
    assert flat.map("a/b/c") == "ns/a-b-c"
    assert RepositoryMap("prefix", "ns/").map("user/repo") == "ns/user/repo"  # today's behaviour
    tpl = RepositoryMap("{prefix}{user}_{repo}", "ns/")
    assert tpl.map("user/repo") == "ns/user_repo"
    assert tpl.map("a/b/c") == "ns/a_b-c"  # {repo}: the levels after the first, joined by '-'
    assert tpl.map("alone") == "ns/alone"
    assert RepositoryMap("{prefix}{name}", "group/project/").map("a/b") == "group/project/a/b"
    # the probe is a one-level name like any other: two levels under a namespace prefix
    for m in ("prefix", "flatten", "{prefix}{user}_{repo}"):
        assert RepositoryMap(m, "ns/").probe() == f"ns/{PROBE}"


@settings(max_examples=300, deadline=None)
@given(mode, prefix, trace_name)
def test_a_mapped_name_is_valid_or_refused_and_flatten_adds_no_level(m, p, name):
    names = RepositoryMap(m, p, "c.yaml: registries[hub]")
    try:
        mapped = names.map(name)
    except ConfigError as e:  # only a name too long for the grammar may be refused here
        assert "longer than" in str(e) and "registries[hub]" in str(e) and "\n" not in str(e)
        return
    assert name_error(mapped) is None
    assert names.map(name) == mapped  # stable
    assert names.repositories() == ([] if names.identity else [mapped])  # the identity records nothing
    if m == "prefix":
        assert mapped == p + name
    elif m == "flatten":
        assert levels(mapped) == levels(p + "x")
        assert mapped == p + name.replace("/", "-")
    if "/" not in name:
        assert mapped == p + name


@settings(max_examples=200, deadline=None)
@given(prefix, trace_name, trace_name, st.booleans())
def test_prefix_never_collides_and_flatten_collides_only_on_equal_joined_names(p, a, b, rejoin):
    if rejoin:  # half the cases: b is a with its first level joined to the next, a collision if a has two levels
        b = a.replace("/", "-", 1)
    pre, flat = RepositoryMap("prefix", p), RepositoryMap("flatten", p)
    assert (pre.map(a) == pre.map(b)) == (a == b)
    flat.map(a)
    if a != b and a.replace("/", "-") == b.replace("/", "-"):
        with pytest.raises(ConfigError) as e:
            flat.map(b)
        assert repr(a) in str(e.value) and repr(b) in str(e.value)
    else:
        assert flat.map(b) != flat.map(a) or a == b


def test_a_collision_names_both_trace_names_the_entry_and_the_key():
    names = RepositoryMap("flatten", "ns/", "c.yaml: registries[hub]")
    names.map("a/b-c")
    with pytest.raises(ConfigError) as e:
        names.map("a-b/c")
    msg = str(e.value)
    assert msg.startswith("c.yaml: registries[hub]: key 'repository_map'")
    assert "'a/b-c' and 'a-b/c'" in msg and "'ns/a-b-c'" in msg and "\n" not in msg
    tpl = RepositoryMap("{prefix}{user}_{repo}", "ns/")
    tpl.map("a_b/c")
    with pytest.raises(ConfigError, match="'a_b/c' and 'a/b_c'"):
        tpl.map("a/b_c")


@settings(max_examples=200, deadline=None)
@given(mode, prefix, trace_name, trace_name, st.sampled_from(["", "/"]), st.sampled_from(["raw", "quoted"]))
def test_a_uri_and_its_mount_source_are_mapped_alike(m, p, target, source, lead, quoting):
    names = RepositoryMap(m, p)
    src = source if quoting == "raw" else source.replace("/", "%2F")
    uri = f"{lead}v2/{target}/blobs/uploads/?mount=L1&from={src}&x=from=y"
    try:
        out = names.map_uri(uri)
    except ConfigError:  # too long, or the two collide: refused, never sent
        return
    parts = parse_uri(out)
    assert parts is not None and parts.repository == names.map(target)
    assert out.startswith(lead + "v2/")
    assert mount_of(out).source == names.map(source)
    assert out.endswith("&x=from=y")  # only the from= parameter is a name
    plain = f"{lead}v2/{target}/manifests/v1"
    assert names.map_uri(plain) == f"{lead}v2/{names.map(target)}/manifests/v1"


def test_with_names_maps_every_record_and_leaves_the_identity_alone():
    rec = TraceRecord(
        "h", 0.1, "GET", "c1", "v2/u/r/blobs/L1", 200, 10, "id1", __import__("datetime").datetime.now().astimezone()
    )
    (out,) = next(with_names([[rec]], RepositoryMap("flatten", "ns/")))
    assert out.uri == "v2/ns/u-r/blobs/L1" and out.repository == "ns/u-r"
    same = next(with_names([[rec]], RepositoryMap()))
    assert same[0] is rec
    hooks = RepositoryMap.from_entry(
        config_from_dict({"registries": [entry(create_repository=["mk", "{repository}"])]}).registries[0]
    )
    next(with_names([[rec]], hooks))  # no prefix, but the hook needs every name
    assert hooks.repositories() == ["u/r"]


@pytest.mark.parametrize(
    ("over", "key", "words"),
    [
        ({"repository_map": "{prefix}{usr}_{repo}"}, "repository_map", "unknown placeholder {usr}"),
        ({"repository_map": "{prefix}{user:>9}{repo}"}, "repository_map", "unknown placeholder {user:>9}"),
        ({"repository_map": "{0}{repo}"}, "repository_map", "unknown placeholder {0}"),
        ({"repository_map": "{prefix}{user}"}, "repository_map", "neither {repo} nor {name}"),
        ({"repository_map": "{prefix}{repo"}, "repository_map", "template"),
        ({"repository_map": "flat"}, "repository_map", "neither prefix, flatten nor a template"),
        ({"repository_map": "{prefix}{user}/_{repo}", "repository": "ns/"}, "repository_map", "'ns/user0/_repo0'"),
        ({"repository_map": "flatten", "repository": "NS/"}, "repository_map", "not a Distribution name"),
        ({"repository": "ns//"}, "repository", "not a Distribution name"),
        ({"create_repository": ["aws", "ecr", "create-repository"]}, "create_repository", "{repository}"),
        ({"create_repository": ["", "{repository}"]}, "create_repository", "{repository}"),
    ],
)
def test_a_bad_mapping_is_one_line_naming_the_key(over, key, words):
    with pytest.raises(ConfigError) as e:
        config_from_dict({"registries": [entry(**over)]}, source="c.yaml")
    msg = str(e.value)
    assert msg.startswith(f"c.yaml: key 'registries[0].{key}': ") and words in msg and "\n" not in msg


def test_good_mappings_load():
    for m in ("prefix", "flatten", *TEMPLATES):
        assert mapping_error(m, "ns/") is None
        cfg = config_from_dict({"registries": [entry(repository_map=m, repository="ns/")]})
        assert cfg.registries[0].repository_map == m


def test_a_name_made_too_long_by_the_map_is_refused_when_met():
    names = RepositoryMap("{prefix}{user}-{repo}-{name}", "ns/", "c.yaml: registries[hub]")
    long = "u/" + "r" * 130  # 130 characters: within the grammar, twice over 255 after the map
    with pytest.raises(ConfigError, match=r"registries\[hub\]: key 'repository_map'.*longer than 255"):
        names.map(long)


@pytest.mark.parametrize(
    ("uri", "mapped"),
    [
        ("v2/a/manifests/blobs/L1", "v2/ns/a-manifests/blobs/L1"),  # a level named like a kind
        ("/v2/a/blobs/manifests/v1", "/v2/ns/a-blobs/manifests/v1"),
        ("v2/manifests/x/manifests/manifests/v1", "v2/ns/manifests-x-manifests/manifests/v1"),
        ("v2/blobs/blobs/blobs/uploads/u1?x=1", "v2/ns/blobs-blobs/blobs/uploads/u1?x=1"),
        (
            "v2/u/r/blobs/uploads/?mount=L&from=manifests%2Fblobs",
            "v2/ns/u-r/blobs/uploads/?mount=L&from=ns/manifests-blobs",
        ),
        ("/v2/", "/v2/"),  # not an object URI: left alone
        ("v2/_catalog", "v2/_catalog"),
    ],
)
def test_a_uri_s_repository_is_found_whatever_its_levels_are_called(uri, mapped):
    names = RepositoryMap("flatten", "ns/")
    assert names.map_uri(uri) == mapped
    if parse_uri(uri) is not None:
        assert parse_uri(mapped).repository == names.map(parse_uri(uri).repository)
