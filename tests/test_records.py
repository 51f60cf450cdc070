from hypothesis import given
from hypothesis import strategies as st

from drtp.trace.records import IBM_URI_LINES, URI_LINES, TraceRecord, parse_uri
from tests.conftest import ibm_record


def test_parse_uri_shapes():
    assert parse_uri("v2/ca64kj67/as87d65g/blobs/b26s986d") == ("ca64kj67/as87d65g", "blob", "b26s986d")
    assert parse_uri("/v2/a/b/manifests/latest") == ("a/b", "manifest", "latest")
    assert parse_uri("v2/library/x/y/manifests/1.0") == ("library/x/y", "manifest", "1.0")
    assert parse_uri("v2/a/b/blobs/uploads/") == ("a/b", "blob", "uploads/")
    assert parse_uri("/v2/a/b/blobs/uploads/uuid-1?_state=x&digest=sha256:1") == ("a/b", "blob", "uploads/uuid-1")
    for bad in [
        "v2/",
        "/v2/_catalog",
        "v2/a/tags/list",
        "v2/manifests/x",
        "v2//b/blobs/x",
        "x2/a/blobs/y",
        "v2/a/blobs/",
        "v2/a/b/blobs/uploads/x/y",
        "",
        "v2/a/manifests/x/",
    ]:
        assert parse_uri(bad) is None, bad


segment = st.sampled_from(["a", "ab", "v2", "blobs", "manifests", "uploads", "", "x?y", "sha256:1f"])


@given(st.lists(segment, min_size=1, max_size=7), st.booleans())
def test_chunk_uri_check_never_accepts_what_parse_uri_rejects(segments, slash):
    uri = ("/" if slash else "") + "/".join(segments)
    for pattern in (URI_LINES, IBM_URI_LINES):
        if pattern.fullmatch(uri + "\n"):
            assert parse_uri(uri) is not None, uri


@given(
    st.lists(st.sampled_from(["a", "b1", "c-d"]), min_size=1, max_size=3),
    st.sampled_from(["manifests/t", "blobs/sha256:" + "9" * 64, "blobs/uploads/", "blobs/uploads/u1"]),
)
def test_chunk_uri_check_accepts_valid_uris(name, tail):
    uri = "v2/" + "/".join(name) + "/" + tail
    assert parse_uri(uri) is not None
    assert URI_LINES.fullmatch(uri + "\n")


def test_record_properties_and_round_trip():
    import msgspec

    rec = msgspec.json.decode(msgspec.json.encode(ibm_record(3)), type=TraceRecord)
    assert (rec.method, rec.client, rec.size, rec.kind, rec.repository) == (
        "GET",
        "client0",
        1003,
        "blob",
        "user1/repo3",
    )
    assert rec.time == rec.timestamp.timestamp()
    again = msgspec.json.decode(msgspec.json.encode(rec.to_ibm()), type=TraceRecord)
    assert again == rec
