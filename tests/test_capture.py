"""Capture of real registry traffic: skopeo pushes, re-tags and pulls; the log becomes a trace."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from drtp.errors import DrtpError
from drtp.trace.anonymize import Anonymizer, PlainNames
from drtp.trace.capture import capture_files, follow_file
from drtp.trace.reader import TraceReader, write_ibm
from tests.conftest import registry_log_line
from tests.images import build_image, random_files

needs_skopeo = pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo is not installed")

REPO = "acme-team/webapp"


def skopeo(*args: str) -> None:
    out = subprocess.run(["skopeo", *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def traffic(tmp_path_factory):
    """Real traffic: two images sharing a layer pushed, one re-tagged, one pulled twice."""
    from drtp.registry.local import LocalRegistry

    base = tmp_path_factory.mktemp("skopeo")
    shared = random_files(2, 20_000, seed=1)
    img1 = build_image(base / "img1", [shared, random_files(1, 30_000, seed=2)])
    img2 = build_image(base / "img2", [shared, random_files(3, 10_000, seed=3)])
    with LocalRegistry(base / "registry") as reg:
        dest = f"docker://{reg.host}/{REPO}"
        skopeo("copy", "--dest-tls-verify=false", f"dir:{base / 'img1'}", f"{dest}:release-one")
        skopeo("copy", "--dest-tls-verify=false", f"dir:{base / 'img2'}", f"{dest}:release-two")
        skopeo("copy", "--src-tls-verify=false", "--dest-tls-verify=false", f"{dest}:release-one", f"{dest}:stable-tag")
        for n in (1, 2):
            skopeo("copy", "--src-tls-verify=false", f"{dest}:release-two", f"dir:{base / f'pull{n}'}")
        yield {"log": reg.log_path, "img1": img1, "img2": img2, "host": reg.host, "base": base}


def logged(log: Path) -> list[dict]:
    """Object requests as the registry logged them: the ground truth of what skopeo did."""
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    return [
        x
        for x in lines
        if x.get("msg", "").startswith("response completed")
        and re.search(r"/(manifests|blobs)/", x["http.request.uri"])
    ]


@needs_skopeo
def test_capture_matches_what_skopeo_did(traffic, tmp_path):
    # the live registry answers for the re-tagged manifest, which the log never shows pulled
    cap, records = capture_files([traffic["log"]], Anonymizer("salt-one"), registry_url=f"http://{traffic['host']}")
    out = tmp_path / "captured.json"
    write_ibm(out, records)
    trace = list(TraceReader([out]))
    truth = logged(traffic["log"])
    assert Counter(r.method for r in trace) == Counter(x["http.request.method"] for x in truth)
    assert len(trace) == len(truth) == cap.stats.requests
    assert [r.timestamp for r in trace] == sorted(r.timestamp for r in trace)

    img1, img2 = traffic["img1"], traffic["img2"]
    pushed_blobs = {*img1["layers"], img1["config"], *img2["layers"], img2["config"]}
    put_blobs = [r for r in trace if r.method == "PUT" and r.kind == "blob"]
    assert len(put_blobs) == len(pushed_blobs) == 5  # the shared layer is uploaded once
    assert len({r.reference for r in put_blobs}) == 5
    # every upload's size is resolved: PATCH sizes (skopeo uploads in PATCH) add up to the pushed bytes
    patch_bytes = sum(r.size for r in trace if r.method == "PATCH")
    put_bytes = sum(r.size for r in put_blobs)
    layer_bytes = sum(img1["sizes"]) + sum(img2["sizes"]) - img1["sizes"][0]
    assert patch_bytes + put_bytes > layer_bytes
    assert cap.stats.unresolved_sizes == 0 and cap.stats.sizes_from_registry == 1
    # POST, PATCH and PUT of one upload share a token
    tokens = Counter(
        re.search(r"upload=(\w+)|uploads/(\w+)$", r.uri).group(0)[-8:]
        for r in trace
        if r.is_upload or "upload=" in r.uri
    )
    assert len(tokens) == 5 and set(tokens.values()) == {3}
    # three manifests were pushed, their sizes resolved from the later pulls
    put_manifests = [r for r in trace if r.method == "PUT" and r.kind == "manifest"]
    assert len(put_manifests) == 3 and all(r.size > 300 for r in put_manifests)
    # two pulls of release-two fetch its layers and config twice, with their real sizes
    gets = Counter((r.reference, r.size) for r in trace if r.method == "GET" and r.kind == "blob")
    assert sum(gets.values()) >= 6 and all(size > 0 for _, size in gets)


@needs_skopeo
def test_nothing_of_the_original_names_survives(traffic, tmp_path):
    cap, records = capture_files([traffic["log"]], Anonymizer("salt-one"))
    out = tmp_path / "captured.json"
    write_ibm(out, records)
    text = out.read_text()
    raw = traffic["log"].read_text()
    secrets = {"acme", "webapp", "release", "stable", "127.0.0.1", traffic["host"]}
    for digest in [*traffic["img1"]["layers"], *traffic["img2"]["layers"], traffic["img1"]["config"]]:
        secrets.add(digest.split(":")[1][:12])
    secrets.update(re.findall(r"uploads/([0-9a-f-]{36})", raw))
    secrets.update(x["http.request.id"] for x in logged(traffic["log"]))
    for secret in secrets:
        assert secret not in text, secret


@needs_skopeo
def test_same_salt_same_tokens_other_salt_unlinkable(traffic, tmp_path):
    def tokens(salt: str) -> tuple[list[str], set[str]]:
        _, records = capture_files([traffic["log"]], Anonymizer(salt))
        recs = list(records)
        uris = [r["http.request.uri"] for r in recs]
        return uris, {t for u in uris for t in re.findall(r"[0-9a-f]{8,}", u)}

    a_uris, a = tokens("salt-one")
    b_uris, _ = tokens("salt-one")
    _, c = tokens("salt-two")
    assert a_uris == b_uris
    assert a and c and not (a & c)


@needs_skopeo
def test_follow_mode_writes_the_same_records(traffic):
    _, records = capture_files([traffic["log"]], Anonymizer("s"))
    whole = sorted(json.dumps(r, sort_keys=True) for r in records)
    _, followed = follow_file(traffic["log"], Anonymizer("s"), None, delay=0.0, stop_after=0.5)
    assert sorted(json.dumps(r, sort_keys=True) for r in followed) == whole


@needs_skopeo
def test_capture_cli(traffic, tmp_path):
    out = tmp_path / "cli.json"
    res = subprocess.run(
        [sys.executable, "-m", "drtp.cli", "capture", str(traffic["log"]), "-o", str(out), "--salt", "x"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert "unresolved 1" in res.stdout  # the re-tagged manifest: never pulled, so not in the log
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "drtp.cli",
            "capture",
            str(traffic["log"]),
            "-o",
            str(out),
            "--salt",
            "x",
            "--registry",
            f"http://{traffic['host']}",
        ],
        capture_output=True,
        text=True,
    )
    assert "from the registry 1, unresolved 0" in res.stdout
    assert len(list(TraceReader([out]))) == len(logged(traffic["log"]))
    res = subprocess.run(
        [sys.executable, "-m", "drtp.cli", "capture", str(traffic["log"]), "-o", str(out)],
        capture_output=True,
        text=True,
        env={"PATH": __import__("os").environ["PATH"]},
    )
    assert res.returncode == 2 and "salt" in res.stderr


@needs_skopeo
def test_captured_trace_replays_on_a_fresh_registry(traffic, tmp_path):
    """The round trip: real skopeo traffic → capture → warmup + replay against another registry."""
    from tests.skopeo_capture import replay_session

    _, records = capture_files([traffic["log"]], Anonymizer("replay"), registry_url=f"http://{traffic['host']}")
    trace = tmp_path / "captured.json"
    n = write_ibm(trace, records)
    replayed = replay_session(trace, tmp_path)
    df, summary = replayed.requests, replayed.summary
    main = df[~df.auxiliary]
    assert len(main) == n == summary["requests"]
    bad = main[~main.ok | (main.status != main.expected_status)]
    assert bad.empty, bad[["method", "kind", "reference", "status", "expected_status", "error"]].to_string()


# -- bad logs: counted and named, or refused; never a traceback or an empty trace -------------


def _capture(tmp_path: Path, text: str | bytes) -> tuple:
    log = tmp_path / "registry.log"
    log.write_bytes(text if isinstance(text, bytes) else text.encode())
    cap, records = capture_files([log], Anonymizer("salt"))
    return cap, list(records)


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({"time": "garbage"}, "time 'garbage'"),
        ({"time": "2024-01-01T00:00:01"}, "with a zone"),  # no time zone
        ({"time": "9999-01-01T00:00:00Z"}, "between 1970 and 2099"),
        ({"time": 12}, "invalid log line"),
        ({"http.response.duration": "abc"}, "not a Go duration"),
        ({"http.response.duration": "99999999h"}, "longer than"),
        ({"http.response.status": 1000}, "status 1000"),
        ({"http.response.written": -1}, "written -1"),
        ({"http.request.method": "BREW"}, "unknown method"),
        ({"http.request.uri": "/v2/library/../manifests/latest"}, "not a Distribution name"),
        ({"http.request.uri": "/v2/library/alpine/manifests/x\r\nHost: y"}, "neither a tag"),
    ],
)
def test_bad_request_lines_are_left_out_counted_and_named(tmp_path, bad, reason):
    lines = [registry_log_line(**{"http.request.id": f"r{i}"}) for i in range(5)]
    lines[2] = registry_log_line(**bad)
    cap, records = _capture(tmp_path, "\n".join(lines) + "\n")
    assert len(records) == 4 == cap.stats.requests
    assert cap.stats.bad_lines == 1
    warning = cap.stats.warning()
    assert "registry.log line 3" in warning and reason in warning and "\n" not in warning


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", ""),
        ("\n\n", ""),
        ("hello\nworld\n", "2 bad line"),
        (bytes(range(256)) * 20, "bad line"),
        (
            registry_log_line(time="garbage") + "\n" + registry_log_line(**{"http.response.duration": "x"}) + "\n",
            "2 bad line",
        ),
        (registry_log_line(**{"http.request.uri": "/v2/"}) + "\n", "not for a manifest or blob"),
        ('{"msg": "listening on :5000", "time": "2024-01-01T00:00:00Z"}\n', ""),
        ('{"a":' * 50_000 + "\n", "nested too deeply"),
    ],
)
def test_a_log_without_requests_is_an_error(tmp_path, text, why):
    with pytest.raises(DrtpError, match=rf"no registry requests in .*registry.log.*{why}") as err:
        _capture(tmp_path, text)
    assert "\n" not in str(err.value)


def test_byte_order_mark_and_directories(tmp_path):
    cap, records = _capture(tmp_path, b"\xef\xbb\xbf" + (registry_log_line() + "\n").encode())
    assert len(records) == 1 and cap.stats.bad_lines == 0
    with pytest.raises(DrtpError, match="is a directory"):
        capture_files([tmp_path], Anonymizer("salt"))
    with pytest.raises(DrtpError, match="log file not found"):
        capture_files([tmp_path / "none.log"], Anonymizer("salt"))


def test_garbage_upload_state_is_ignored(tmp_path):
    # the registry's _state token is base64 of an HMAC and JSON; a forged one must not break capture
    import base64

    def state(payload: bytes) -> str:
        return base64.urlsafe_b64encode(bytes(32) + payload).decode().rstrip("=")

    uri = "/v2/library/alpine/blobs/uploads/u-1?_state="
    lines = [
        registry_log_line(
            **{"http.request.method": "PATCH", "http.request.uri": uri + state(b"[" * 5000), "http.request.id": "a"}
        ),
        registry_log_line(
            **{
                "http.request.method": "PATCH",
                "http.request.uri": uri + state(b'{"Offset": "x"}'),
                "http.request.id": "b",
            }
        ),
        registry_log_line(
            **{"http.request.method": "PATCH", "http.request.uri": uri + state(b'{"Offset": 5, "StartedAt": "junk"}')}
        ),
        registry_log_line(**{"http.request.method": "PATCH", "http.request.uri": uri + "%%%"}),
    ]
    cap, records = _capture(tmp_path, "\n".join(lines) + "\n")
    assert len(records) == 4 and cap.stats.bad_lines == 0
    assert all(0 <= r["http.response.written"] for r in records)


def test_captured_records_read_back(tmp_path):
    lines = [
        registry_log_line(**{"http.request.id": f"r{i}", "time": f"2024-01-01T00:00:{i:02d}.5Z"}) for i in range(10)
    ]
    cap, records = _capture(tmp_path, "\n".join(lines) + "\n")
    out = tmp_path / "trace.json"
    write_ibm(out, records)
    assert len(list(TraceReader([out]))) == 10


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "drtp.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def test_capture_cli_reports_bad_lines_and_refuses_empty_logs(tmp_path):
    log = tmp_path / "some-bad.log"
    log.write_text(
        "\n".join([registry_log_line(), "not json", registry_log_line(**{"http.response.duration": "1h1h1x"})]) + "\n"
    )
    res = _cli("capture", str(log), "-o", "out.json", "--salt", "s", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("\n") == 1 and "left out 2 bad log line(s)" in res.stderr and "line 2" in res.stderr
    assert "wrote 1 records" in res.stdout
    for name, text in [("empty.log", ""), ("random.log", "\x00\x01garbage\n" * 10)]:
        (tmp_path / name).write_text(text)
        for command in (["capture", name, "-o", "o.json", "--salt", "s"], ["convert", name, "-o", "o.json"]):
            res = _cli(*command, cwd=tmp_path)
            assert res.returncode == 2, (command, res.stderr)
            assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    res = _cli("convert", "some-bad.log", "--format", "registry-log", "-o", "c.json", cwd=tmp_path)
    assert res.returncode == 0 and "left out 2 bad log line(s)" in res.stderr


def test_a_log_whose_requests_all_become_unusable_is_an_error(tmp_path):
    # found by the fuzz test: a GET of an upload URL with no digest anywhere makes no valid trace URI
    # when names are kept (convert), so pass 2 writes nothing: that is an error, not an empty trace
    log = tmp_path / "registry.log"
    log.write_text(registry_log_line(**{"http.request.uri": "/v2/library/alpine/blobs/uploads/"}) + "\n")
    with pytest.raises(DrtpError, match=r"no registry requests in .*registry.log make trace records \(left out 1"):
        capture_files([log], PlainNames())
