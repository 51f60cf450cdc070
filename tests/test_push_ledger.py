"""The push ledger (drtp.master.run.push_ledger): what its writer appends, what its reader makes of torn, corrupt,
cleared and concurrently written lines, and where ``drtp clean`` looks for it."""

from __future__ import annotations

import json
import threading

import pytest

from drtp.errors import DrtpError
from drtp.master.run.push_ledger import (
    CONFIG_PUSH,
    MOUNT_FALLBACK,
    Push,
    PushLedger,
    append,
    ledger_path,
    mark_cleared,
    read_ledger,
    registry_key,
)
from drtp.registry.manifest import CONFIG_DIGEST
from drtp.replay.messages import AuxResult, ReplayRequest, ReplayResult

REG = "127.0.0.1:5000"
BASE = "http://127.0.0.1:5000"
MANIFEST = "sha256:" + "a1" * 32
LAYER = "sha256:" + "b2" * 32


def request(seq: int, method: str, kind: str, op: str, reference: str = "v1", repo: str = "team/app") -> ReplayRequest:
    return ReplayRequest(seq, f"t{seq}", "client0", method, kind, op, REG, repo, reference, 100, 201)


def result(seq: int, status: int, digest: str | None = None, aux: list[AuxResult] | None = None) -> ReplayResult:
    ok = 200 <= status < 300
    return ReplayResult(seq, status, ok, 0.1, 0.01, digest=digest, outcome="ok" if ok else "http", aux=aux or [])


def helper(what: str, status: int = 201) -> AuxResult:
    return AuxResult("PUT", what, status, 0.1, 0.01, 10)


def test_a_run_appends_what_the_registry_accepted_and_nothing_else(tmp_path):
    ledger = PushLedger(tmp_path / "warmup-map.jsonl", "/results/run-1")
    ledger.add(
        "node-a",
        [
            (request(0, "PUT", "manifest", "manifest-put"), result(0, 201, MANIFEST)),
            (request(1, "PUT", "blob", "upload-close", "L1"), result(1, 201, LAYER)),
            (request(2, "PUT", "blob", "upload-close", "L2"), result(2, 500)),  # refused: not stored
            (request(3, "PATCH", "blob", "upload-chunk", "uploads/u1"), result(3, 202)),  # no object yet
            # a manifest PUT the registry refused after the node pushed the minimal config blob: the blob is drtp's
            (
                request(4, "PUT", "manifest", "manifest-put", "v2", "team/solo"),
                result(4, 400, aux=[helper(CONFIG_PUSH)]),
            ),
            # a mount the registry answered with an upload: the blob uploaded there is drtp's
            (
                request(5, "POST", "blob", "upload-open", "uploads/m", "team/other"),
                result(5, 202, LAYER, aux=[helper(MOUNT_FALLBACK)]),
            ),
        ],
    )
    path = tmp_path / "warmup-map.pushes-127.0.0.1_5000.jsonl"
    assert ledger_path(tmp_path / "warmup-map.jsonl", BASE) == path
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert {line["event"] for line in lines} == {"push"} and {line["run"] for line in lines} == {"/results/run-1"}
    assert {line["registry"] for line in lines} == {BASE}
    assert [(e["kind"], e["repository"], e["digest"], e.get("tag", "")) for e in lines] == [
        ("manifest", "team/app", MANIFEST, "v1"),
        ("blob", "team/app", CONFIG_DIGEST, ""),
        ("blob", "team/app", LAYER, ""),
        ("blob", "team/solo", CONFIG_DIGEST, ""),
        ("blob", "team/other", LAYER, ""),
    ]
    assert ledger.written == 5
    assert [(p.kind, p.repository) for p in read_ledger(path).pushes] == [(e["kind"], e["repository"]) for e in lines]


def test_each_registry_gets_its_own_ledger_beside_the_map(tmp_path):
    other = ReplayRequest(0, "t0", "c", "PUT", "blob", "upload-close", "https://reg.example:8443/", "x/y", "L", 1, 201)
    ledger = PushLedger(tmp_path / "maps" / "warmup-open.jsonl", "run")
    ledger.add(
        "n", [(other, result(0, 201, LAYER)), (request(1, "PUT", "blob", "upload-close"), result(1, 201, LAYER))]
    )
    assert sorted(p.name for p in (tmp_path / "maps").iterdir()) == [
        "warmup-open.pushes-127.0.0.1_5000.jsonl",
        "warmup-open.pushes-reg.example_8443.jsonl",
    ]
    assert registry_key("https://reg.example:8443/v2-mirror/") == "reg.example_8443_v2-mirror"


def _push(i: int) -> bytes:
    digest = "sha256:" + f"{i:064x}"
    return json.dumps(
        {"event": "push", "registry": BASE, "kind": "blob", "repository": "r/x", "digest": digest}
    ).encode()


def test_a_torn_last_line_is_ignored_and_cut_off_before_the_next_append(tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_bytes(_push(1) + b"\n" + _push(2) + b"\n" + _push(3)[:40])  # a writer died mid-line
    read = read_ledger(path)
    assert len(read.pushes) == 2 and read.end == len(_push(1)) + len(_push(2)) + 2
    append(path, _push(4) + b"\n")
    assert path.read_bytes() == b"".join(_push(i) + b"\n" for i in (1, 2, 4))
    assert len(read_ledger(path).pushes) == 3


def test_a_corrupt_line_before_the_last_is_refused_naming_file_and_line(tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_bytes(_push(1) + b"\n" + b'{"event": "push", "regis\n' + _push(3) + b"\n")
    with pytest.raises(DrtpError, match=rf"^{path}: line 2: not a push ledger record"):
        read_ledger(path)
    bad = json.loads(_push(4))
    bad["digest"] = "sha256:../../v2"
    path.write_bytes(_push(1) + b"\n" + json.dumps(bad).encode() + b"\n")
    with pytest.raises(DrtpError, match=rf"^{path}: line 2: digest 'sha256:../../v2' is not algorithm:hex"):
        read_ledger(path)


def test_cleared_lines_end_the_pushes_read_before_them_not_those_written_after(tmp_path):
    ledger = PushLedger(tmp_path / "m.jsonl", "run-1")
    put = (request(0, "PUT", "blob", "upload-close"), result(0, 201, LAYER))
    ledger.add("n", [put])
    path = ledger_path(tmp_path / "m.jsonl", BASE)
    read = read_ledger(path)
    assert read.objects() == {("blob", "team/app", LAYER)}
    ledger.add("n", [put])  # the same blob pushed again while the clean ran
    assert mark_cleared(path, BASE, sorted(read.objects()), read.end) == 1
    again = read_ledger(path)
    assert len(again.pushes) == 1 and again.pushes[0].digest == LAYER  # the later push still counts
    mark_cleared(path, BASE, sorted(again.objects()), again.end)
    assert read_ledger(path).pushes == []


def test_concurrent_appends_from_one_master_never_interleave(tmp_path):
    """Threads of one process, each with a ledger writer of its own on the same file (a master whose runs share a
    map), append big batches at once: every line is whole and every push is there once."""
    threads, batches, per_batch = 6, 30, 80

    def writer(t: int) -> None:
        ledger = PushLedger(tmp_path / "m.jsonl", f"run-{t}")
        for b in range(batches):
            pairs = []
            for i in range(per_batch):
                seq = (t * batches + b) * per_batch + i
                pairs.append((request(seq, "PUT", "blob", "upload-close"), result(seq, 201, "sha256:" + f"{seq:064x}")))
            ledger.add("n", pairs)

    workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    path = ledger_path(tmp_path / "m.jsonl", BASE)
    pushes = read_ledger(path).pushes
    assert len(pushes) == threads * batches * per_batch
    assert len({p.digest for p in pushes}) == len(pushes)
    assert all(isinstance(p, Push) for p in pushes)
    assert path.read_bytes().endswith(b"\n")


def test_clean_finds_the_maps_and_ledgers_of_repetitions_beside_the_map(tmp_path):
    """``drtp run --repeat 2`` wrote ``<stem>-rep<k>`` maps and ledgers; a config without ``repeat:`` still finds
    them (and nothing that only looks alike), and the map itself only when it is there too."""
    from drtp.config import config_from_dict
    from drtp.master.commands.clean_records import warmup_maps

    cfg = config_from_dict({"registry": [REG], "warmup": {"output": str(tmp_path / "map.jsonl")}}, base_dir=".")
    assert warmup_maps(cfg, [BASE]) == {tmp_path / "map.jsonl": {BASE}}  # nothing there: the map is looked for
    for name in ("map-rep1.jsonl", "map-rep2.pushes-127.0.0.1_5000.jsonl", "map-repx.jsonl", "map-rep3.csv"):
        (tmp_path / name).write_text("")
    reps = {tmp_path / "map-rep1.jsonl": {BASE}, tmp_path / "map-rep2.jsonl": {BASE}}
    assert warmup_maps(cfg, [BASE]) == reps
    (tmp_path / "map.pushes-127.0.0.1_5000.jsonl").write_text("")  # a run without repetitions, too
    assert warmup_maps(cfg, [BASE]) == {tmp_path / "map.jsonl": {BASE}, **reps}
    bare = config_from_dict({"registry": [REG], "warmup": {"output": str(tmp_path / "bare")}}, base_dir=".")
    (tmp_path / "bare-rep4").write_text("")  # a map named without a suffix
    assert warmup_maps(bare, [BASE]) == {tmp_path / "bare-rep4": {BASE}}
