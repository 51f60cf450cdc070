"""The trace generator: exact counts, realistic mix, determinism, push-then-pull."""

from __future__ import annotations

from collections import Counter

from drtp.trace.generate import GenerateOptions, generate
from drtp.trace.reader import read_trace, write_ibm


def test_generated_trace_parses_with_requested_count(generated_trace):
    recs = read_trace([generated_trace])
    assert len(recs) == 5000
    stamps = [r.timestamp for r in recs]
    assert stamps == sorted(stamps)
    span = (stamps[-1] - stamps[0]).total_seconds()
    assert 0.5 * 3600 < span < 1.5 * 3600


def test_generated_mix_looks_like_a_registry_workload(generated_trace):
    recs = read_trace([generated_trace])
    methods = Counter(r.method for r in recs)
    n = len(recs)
    assert methods["GET"] / n > 0.6  # published IBM traces: GET > 60 % in every zone
    assert 0.08 < methods["HEAD"] / n < 0.25  # HEAD 10–22 %
    assert methods["PATCH"] > 0 and methods["POST"] > 0
    assert 1.5 < methods["PUT"] / methods["PATCH"] < 7  # PUT 1.9–5.8× PATCH
    kinds = Counter(r.kind for r in recs if r.method == "GET")
    assert kinds["manifest"] > 0 and kinds["blob"] > 0
    assert len({r.client for r in recs}) > 20 and len({r.repository for r in recs}) > 20
    # skewed popularity: the top 10 % of repositories take a large share of requests
    per_repo = Counter(r.repository for r in recs).most_common()
    top = sum(c for _, c in per_repo[: max(1, len(per_repo) // 10)])
    assert top / n > 0.3
    # layer sizes: lognormal, most below 1 MB but a tail above 10 MB
    sizes = [r.size for r in recs if r.method == "GET" and r.kind == "blob"]
    assert 0.45 < sum(s < 1e6 for s in sizes) / len(sizes) < 0.9
    assert any(s > 10e6 for s in sizes)


def test_pushed_layers_are_pulled_later(generated_trace):
    recs = read_trace([generated_trace])
    pushed = {}
    pulled_after_push = 0
    for r in recs:
        if r.method == "PUT" and r.kind == "blob":
            pushed.setdefault(r.reference, r.timestamp)
        elif r.method == "GET" and r.kind == "blob" and r.reference in pushed:
            pulled_after_push += 1
    assert pushed and pulled_after_push > 0


def test_same_seed_same_trace(tmp_path):
    opts = GenerateOptions(requests=500, seed=42)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_ibm(a, generate(opts))
    write_ibm(b, generate(opts))
    assert a.read_bytes() == b.read_bytes()
    write_ibm(b, generate(GenerateOptions(requests=500, seed=43)))
    assert a.read_bytes() != b.read_bytes()


def test_max_layer_size_is_respected():
    recs = list(generate(GenerateOptions(requests=2000, seed=3, max_layer_size=50_000)))
    assert len(recs) == 2000
    assert max(r["http.response.written"] for r in recs) <= 60_000  # manifests may be up to 60 KB


def test_profiles_load_and_bad_profiles_are_named(tmp_path):
    import pytest

    from drtp.errors import ConfigError
    from drtp.trace.profiles import builtin_profiles, load_profile, options_for

    assert builtin_profiles() == ["dal", "dev", "fra", "lon", "prs", "stg", "syd"]
    dal = load_profile("dal")
    opts = options_for(dal, 1000)
    assert opts.push_ratio == dal["generator"]["push_ratio"] and opts.requests == 1000
    assert abs(opts.span_s - 1000 / dal["requests_per_day"] * 86_400) < 1e-6
    bad = tmp_path / "bad.yaml"
    bad.write_text("generator: {push_ratio: 0.1, bogus: 1}\n")
    with pytest.raises(ConfigError, match="unknown key 'generator.bogus'"):
        load_profile(str(bad))
    bad.write_text("targets: {pull_ratio: 0.9}\n")
    with pytest.raises(ConfigError, match=r"targets.pull_ratio': expected \[value, tolerance\]"):
        load_profile(str(bad))
    with pytest.raises(ConfigError, match="unknown profile 'mars'"):
        load_profile("mars")
