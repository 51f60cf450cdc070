"""Cold-pull storms: ``drtp generate --storm N`` and ``drtp convert --storm N`` (the shape of the trace)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from drtp.cli import main
from drtp.trace.reader import read_trace


def _pulls(records) -> dict[str, list[tuple[float, str, str]]]:
    """Per client, its (time, method, uri) in trace order."""
    out: dict[str, list[tuple[float, str, str]]] = defaultdict(list)
    for r in records:
        out[r.client].append((r.time, r.method, r.uri))
    return out


def test_generated_storm_is_n_clients_pulling_each_image_at_once(tmp_path: Path) -> None:
    out = tmp_path / "storm.json"
    assert main(["generate", "--storm", "4", "--storm-images", "3", "--seed", "7", "-o", str(out)]) == 0
    records = read_trace([out])
    per_client = _pulls(records)
    assert len(per_client) == 4  # N distinct clients
    sequences = list(per_client.values())
    for seq in sequences[1:]:
        assert seq == sequences[0]  # the same objects at the same timestamps, in the same order
    seq = sequences[0]
    manifests = [i for i, (_, _, uri) in enumerate(seq) if "/manifests/" in uri]
    assert len(manifests) == 3  # one pull per image
    repos = {seq[i][2].split("/manifests/")[0] for i in manifests}
    assert len(repos) == 3  # each image from its own repository: every storm is cold
    for start, end in zip(manifests, [*manifests[1:], len(seq)], strict=True):
        pull = seq[start:end]
        assert all(method == "GET" for _, method, _ in pull)
        assert all("/blobs/" in uri for _, _, uri in pull[1:]) and len(pull) > 1  # manifest, then its layers
        assert [t for t, _, _ in pull] == sorted(t for t, _, _ in pull)
    assert len(records) == 4 * len(seq)
    assert [r.time for r in records] == sorted(r.time for r in records)


def test_storm_transform_copies_each_pull_to_n_clients_at_its_timestamp(tmp_path: Path) -> None:
    trace, out = tmp_path / "t.json", tmp_path / "s.json"
    assert main(["generate", "-n", "300", "--seed", "3", "-o", str(trace)]) == 0
    assert main(["convert", "--storm", "3", str(trace), "-o", str(out)]) == 0
    before, after = read_trace([trace]), read_trace([out])
    by_id = defaultdict(list)
    for r in after:
        by_id[r.id.split("~")[0]].append(r)
    pulls = [r for r in before if r.method in ("GET", "HEAD") and "/blobs/uploads/" not in r.uri]
    assert pulls and len(pulls) < len(before)  # the trace has pushes too
    assert len(after) == len(before) + 2 * len(pulls)
    for r in before:
        copies = by_id[r.id]
        expect = 3 if r in pulls else 1
        assert len(copies) == expect
        assert len({c.client for c in copies}) == expect  # distinct clients
        assert {(c.time, c.method, c.uri, c.size, c.status) for c in copies} == {
            (r.time, r.method, r.uri, r.size, r.status)
        }


@pytest.mark.parametrize(
    "argv, message",
    [
        (["generate", "--storm", "0"], "--storm"),
        (["generate", "--storm", "3", "-n", "10"], "-n/--requests"),
        (["generate", "--storm-images", "3"], "--storm-images"),
        (["generate", "--storm", "20000"], "--storm"),
        (["convert", "--storm", "0", "in.json"], "--storm"),
    ],
)
def test_bad_storm_values_are_one_line_and_exit_2(tmp_path: Path, capsys, argv, message) -> None:
    with pytest.raises(SystemExit) as e:
        raise SystemExit(main([*argv, "-o", str(tmp_path / "x.json")]))
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert not (tmp_path / "x.json").exists()
