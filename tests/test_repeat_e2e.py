"""Repeated runs against the real registry: ``drtp experiment --repeat`` interleaved across two registries and
judged by ``drtp analyze compare``, and ``drtp run --repeat``'s namespaces, exit code, Ctrl-C and resume."""

from __future__ import annotations

import json
from dataclasses import asdict

import pandas as pd
import pytest
import yaml

from drtp.analysis.compare import compare_runs, load_side
from drtp.cli import main
from drtp.master.run import replay as master_run
from drtp.master.run.warmup import run_warmup
from drtp.registry.local import LocalRegistry
from tests.conftest import ibm_record, write_json
from tests.faultproxy import FaultProxy, is_replayed
from tests.replay_support import TOKEN, make_trace, write_config

pytestmark = pytest.mark.registry

SLOWER_S = 0.015  # the proxy holds each blob GET's answer this long


def is_blob_get(method: str, path: str) -> bool:
    return method == "GET" and "/blobs/" in path and "/uploads/" not in path


def blob_get_latency(method: str, path: str) -> float:
    """The slower registry: the same one, each blob GET answered 15 ms later."""
    return SLOWER_S if is_blob_get(method, path) else 0.0


def _started(stdout: str) -> list[str]:
    """The parts a series started, in order (its ``== registry KEY (URL)`` lines)."""
    return [line.split()[2] for line in stdout.splitlines() if line.startswith("== ") and line.endswith(")")]


def test_four_interleaved_runs_a_side_find_a_15ms_slower_blob_get_worse(tmp_path, nodes, capsys) -> None:
    # 40 layer pulls of 8 layers in 2 repositories, one at a time (one node, one slot): the median of each
    # run's 40 blob GETs stands on its own, even on a machine busy with other work
    records = [
        ibm_record(
            i, **{"http.request.uri": f"v2/user0/repo{i % 2}/blobs/layer{i % 8}", "http.response.written": 20_000}
        )
        for i in range(40)
    ]
    trace = write_json(tmp_path / "trace.json", records)
    with LocalRegistry(tmp_path / "registry") as reg, FaultProxy(reg.host, latency=blob_get_latency) as proxy:
        cfg = {
            "trace": {"location": str(tmp_path), "traces": [trace.name]},
            "client_info": {"client_list": [nodes[0].address], "token": TOKEN, "threads": 1},
            "warmup": {"output": str(tmp_path / "warmup.jsonl"), "threads": 4},
            # one registry twice: each entry keeps to repositories of its own
            "registries": [
                {"id": "base", "url": reg.url, "insecure": True, "repository": "base-"},
                {"id": "slow", "url": f"http://{proxy.address}", "insecure": True, "repository": "slow-"},
            ],
        }
        (tmp_path / "exp.yaml").write_text(yaml.safe_dump(cfg))
        exp = tmp_path / "exp"
        capsys.readouterr()
        code = main(["experiment", "-c", str(tmp_path / "exp.yaml"), "--repeat", "4", "--out", str(exp), "-q"])
        assert code == 0, capsys.readouterr().err[-2000:]
        assert not proxy.errors
        slowed = [f for f in proxy.forwarded if is_blob_get(f.method, f.path) and is_replayed(f.method, f.path)]
    status = json.loads((exp / "experiment.json").read_text())
    # interleaved: A B A B …, each run in <id>/rep-<k>/
    assert list(status) == [f"{r}/rep-{k}" for k in range(1, 5) for r in ("base", "slow")]
    assert all(s["ok"] and s["exit_code"] == 0 and s["failed"] == 0 for s in status.values())
    for r in ("base", "slow"):
        for k in range(1, 5):
            summary = json.loads((exp / r / f"rep-{k}" / "summary.json").read_text())
            assert (summary["registry_id"], summary["repetition"], summary["repeat"]) == (r, k, 4)
            assert summary["namespace"] == f"rep{k}-"
    # each repetition replayed into its own repositories, warmed for it: <entry prefix>rep<k>-<trace name>
    assert slowed and all(f.path.startswith("/v2/slow-rep") for f in slowed)
    assert {f.path.split("/")[2].split("-")[1] for f in slowed} == {f"rep{k}" for k in range(1, 5)}

    out = tmp_path / "cmp"
    capsys.readouterr()
    code = main(
        ["analyze", "compare", "--baseline", str(exp / "base"), "--candidate", str(exp / "slow"), "--out", str(out)]
    )
    table = capsys.readouterr().out
    print(table)  # the table of these runs, for whoever reads the test's output
    assert code == 0
    data = json.loads((out / "compare.json").read_text())
    assert data["method"] == "runs" and data["latency"] == "latency_s" and data["left_out"] == []
    rows = {(r["slice"], r["stat"]): r for r in data["rows"]}
    get_blob = rows[("GET blob", "p50")]
    assert get_blob["baseline_runs"] == get_blob["candidate_runs"] == 4
    assert get_blob["verdict"] == "worse", get_blob
    assert get_blob["ci_low"] > 0 and get_blob["p_value"] < 0.05
    # the change is the candidate's median over the baseline's, of the runs' own p50s
    p50s = {
        side: sorted(
            json.loads((exp / side / f"rep-{k}" / "summary.json").read_text())["per_method"]["GET blob"]["latency_s"][
                "p50"
            ]
            * 1000
            for k in range(1, 5)
        )
        for side in ("base", "slow")
    }
    assert get_blob["baseline"] == pytest.approx(sum(p50s["base"][1:3]) / 2)
    assert get_blob["candidate"] == pytest.approx(sum(p50s["slow"][1:3]) / 2)
    assert min(p50s["slow"]) >= SLOWER_S * 1000  # every slowed run's median blob GET waited the 15 ms
    frame = pd.read_csv(out / "compare.csv")
    assert len(frame) == len(data["rows"])
    line = frame[(frame.slice == "GET blob") & (frame.stat == "p50")].iloc[0]
    assert line.verdict == "worse" and line.ci_low > 0
    assert any(row.startswith("GET blob") and "worse" in row for row in table.splitlines() if " p50 " in row)


def test_run_repeat_replays_each_repetition_into_its_own_repositories_and_exits_with_the_worst(
    tmp_path, nodes, capsys
) -> None:
    trace = make_trace(tmp_path / "trace.json", requests=40, span=5.0)

    def fail_second(index: int, method: str, path: str) -> str | None:
        """503 for the replayed GETs of repetition 2 (its repositories' names say which it is)."""
        return "503" if method == "GET" and path.startswith("/v2/rep2-") else None

    with LocalRegistry(tmp_path / "registry") as reg, FaultProxy(reg.host, plan=fail_second) as proxy:
        write_config(tmp_path, trace, [proxy.address], [n.address for n in nodes])
        out = tmp_path / "run"
        capsys.readouterr()
        code = main(["run", "-c", str(tmp_path / "config.yaml"), "--repeat", "2", "--out", str(out), "-q"])
        err = capsys.readouterr().err
        repos = {f.path.split("/")[2] for f in proxy.forwarded if f.path.startswith("/v2/") and f.path != "/v2/"}
    assert code == 1, err[-2000:]
    assert "Traceback" not in err
    said = [line for line in err.splitlines() if "rep-2" in line]
    assert len(said) == 1 and said[0].startswith("drtp run: error: repetition rep-2: "), err
    one = json.loads((out / "rep-1" / "summary.json").read_text())
    two = json.loads((out / "rep-2" / "summary.json").read_text())
    assert one["failed"] == 0 and two["failed"] > 0 and one["trace_requests"] == two["trace_requests"] == 40
    status = json.loads((out / "experiment.json").read_text())
    assert [(k, s["exit_code"]) for k, s in status.items()] == [("rep-1", 0), ("rep-2", 1)]
    # every repository the run wrote or read is one of a repetition's: nothing went to the trace's own names
    trace_repos = {r for r in repos if not r.startswith(("rep1-", "rep2-"))}
    assert trace_repos <= {"drtp-preflight"} and {r[:5] for r in repos if r.startswith("rep")} == {"rep1-", "rep2-"}
    for k in (1, 2):  # each warmed up for itself
        assert (tmp_path / f"warmup-map-rep{k}.jsonl").stat().st_size > 0
        rows = pd.read_csv(out / f"rep-{k}" / "requests.csv")
        assert rows[~rows.auxiliary].repository.str.startswith(f"rep{k}-").all()
    assert not (tmp_path / "warmup-map.jsonl").exists()  # the trace's own names were never warmed


def test_reuse_replays_every_repetition_into_the_same_repositories_and_compare_judges_rate_mode_on_response(
    tmp_path, nodes, capsys
) -> None:
    trace = make_trace(tmp_path / "trace.json", requests=40, span=5.0)
    with LocalRegistry(tmp_path / "registry") as reg, FaultProxy(reg.host) as proxy:
        cfg = write_config(tmp_path, trace, [proxy.address], [n.address for n in nodes], rate=100.0)
        run_warmup(cfg, quiet=True)  # reuse: the run is warmed up as any run is, before it
        data = yaml.safe_load((tmp_path / "config.yaml").read_text())
        data.update(repeat=2, repeat_state="reuse")
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
        out = tmp_path / "run"
        assert main(["run", "-c", str(tmp_path / "config.yaml"), "--out", str(out), "-q"]) == 0
        repos = {f.path.split("/")[2] for f in proxy.forwarded if f.path.startswith("/v2/") and f.path != "/v2/"}
    assert not any(r.startswith("rep") for r in repos)  # the trace's own names, both times
    assert json.loads((out / "rep-2" / "summary.json").read_text())["repeat_state"] == "reuse"
    capsys.readouterr()
    assert main(["analyze", "compare", "--baseline", str(out / "rep-1"), "--candidate", str(out / "rep-2")]) == 0
    assert "from each request's intended start (response_s" in capsys.readouterr().out
    comparison = compare_runs([str(out / "rep-1")], [str(out / "rep-2")])
    assert comparison.meta["latency"] == "response_s"
    rows = {(r.slice, r.stat): asdict(r) for r in comparison.rows}
    for side, k in (("baseline", 1), ("candidate", 2)):
        summary = json.loads((out / f"rep-{k}" / "summary.json").read_text())
        assert summary["mode"] == "rate"
        # as --slo judges a rate run: from the intended start, which the actual start is always after
        assert rows[("all", "mean")][side] == summary["response_s"]["mean"] * 1000
        assert summary["response_s"]["mean"] > summary["latency_s"]["mean"]


def test_an_interrupted_repetition_keeps_the_finished_ones_and_resume_runs_the_rest(
    tmp_path, nodes, capsys, monkeypatch
) -> None:
    trace = make_trace(tmp_path / "trace.json", requests=40, span=5.0)
    real_send = master_run.Replay._send

    def ctrl_c_in_rep_2(self, *args, **kwargs):
        if self.out_dir.name == "rep-2" and self.done >= 5:
            raise KeyboardInterrupt
        return real_send(self, *args, **kwargs)

    with LocalRegistry(tmp_path / "registry") as reg:
        write_config(tmp_path, trace, [reg.host], [n.address for n in nodes], batch=1, inflight=2)
        out = tmp_path / "run"
        config = str(tmp_path / "config.yaml")
        monkeypatch.setattr(master_run.Replay, "_send", ctrl_c_in_rep_2)
        assert main(["run", "-c", config, "--repeat", "3", "--out", str(out), "-q"]) == 130
        monkeypatch.setattr(master_run.Replay, "_send", real_send)
        first = json.loads((out / "rep-1" / "summary.json").read_text())
        cut = json.loads((out / "rep-2" / "summary.json").read_text())
        assert first["complete"] and first["requests"] == 40
        assert cut["complete"] is False and cut["incomplete_reason"] == "interrupted" and cut["requests"] < 40
        # the interrupted repetition's summary says which replicate it is, as a finished one's does
        assert (cut["repetition"], cut["repeat"], cut["repeat_state"], cut["namespace"]) == (2, 3, "fresh", "rep2-")
        assert list(json.loads((out / "experiment.json").read_text())) == ["rep-1"]
        assert not (out / "rep-3").exists()
        # compare leaves the cut repetition out, by name
        left: list[str] = []
        dirs, _ = load_side([str(out)], "--baseline", left)
        assert dirs == [out / "rep-1"] and len(left) == 1 and "rep-2" in left[0] and "interrupted" in left[0]

        # resumed with other settings than it was started with: refused before anything runs
        for other in (["--repeat", "2"], ["--repeat", "3", "--set", "repeat_state=reuse"]):
            capsys.readouterr()
            assert main(["run", "-c", config, *other, "--out", str(out), "--resume", "-q"]) == 2
            err = capsys.readouterr().err.strip()
            assert err.startswith("drtp run: error: --resume: ") and "\n" not in err, err
            assert "rep-1 was run with repeat 3, repeat_state fresh" in err, err
        assert not (out / "rep-3").exists()
        # an entry of a part this series does not have: dropped, not counted in the exit code
        status = json.loads((out / "experiment.json").read_text())
        stale = {**status["rep-1"], "ok": False, "exit_code": 3, "error": "stale"}
        (out / "experiment.json").write_text(json.dumps({**status, "rep-9": stale}))

        capsys.readouterr()
        assert main(["run", "-c", config, "--repeat", "3", "--out", str(out), "--resume"]) == 0
        printed = capsys.readouterr().out
        assert list(json.loads((out / "experiment.json").read_text())) == ["rep-1", "rep-2", "rep-3"]
        assert "rep-9 is not a part of this series: its entry dropped" in printed
    assert "== repetition rep-1: done before, skipped" in printed
    assert _started(printed) == ["rep-2", "rep-3"]
    again = json.loads((out / "rep-2" / "summary.json").read_text())
    assert again["complete"] and again["requests"] == 40  # the resumed repetition has the whole trace, once
    rows = pd.read_csv(out / "rep-2" / "requests.csv")
    assert rows[~rows.auxiliary].trace_id.is_unique
    assert json.loads((out / "rep-3" / "summary.json").read_text())["requests"] == 40


def test_resume_refuses_a_directory_of_the_other_layout(tmp_path, capsys) -> None:
    trace = make_trace(tmp_path / "trace.json", requests=10)
    write_config(tmp_path, trace, ["127.0.0.1:5000"], ["127.0.0.1:9"])
    single, reps = tmp_path / "single", tmp_path / "reps"
    single.mkdir()
    (single / "requests.csv").write_text("")
    (reps / "rep-1").mkdir(parents=True)
    config = str(tmp_path / "config.yaml")
    for argv, expected in (
        (["--repeat", "2", "--out", str(single)], "holds a single run"),
        (["--out", str(reps)], "holds repetitions"),
    ):
        capsys.readouterr()
        assert main(["run", "-c", config, "--resume", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("drtp run: error: --resume: ") and expected in err and "\n" not in err


def test_warmup_with_repeat_warms_each_repetitions_repositories(tmp_path) -> None:
    """``drtp warmup`` of a config with ``repeat: 2`` (what a Slurm or deploy job runs before ``drtp run``) warms
    the repositories each repetition will replay into, each into its own map."""
    import urllib.request

    trace = make_trace(tmp_path / "trace.json", requests=40, span=5.0)
    with LocalRegistry(tmp_path / "registry") as reg:
        write_config(tmp_path, trace, [reg.host], ["127.0.0.1:9"])
        data = yaml.safe_load((tmp_path / "config.yaml").read_text())
        (tmp_path / "config.yaml").write_text(yaml.safe_dump({**data, "repeat": 2}))
        assert main(["warmup", "-c", str(tmp_path / "config.yaml"), "-q"]) == 0
        with urllib.request.urlopen(f"{reg.url}/v2/_catalog?n=1000") as answer:
            catalog = json.load(answer)["repositories"]
    maps = {k: [json.loads(line) for line in (tmp_path / f"warmup-map-rep{k}.jsonl").read_text().splitlines()]
            for k in (1, 2)}  # fmt: skip
    for k, entries in maps.items():
        assert entries and all(e["repository"].startswith(f"rep{k}-") for e in entries)
    warmed = {e["repository"] for entries in maps.values() for e in entries}
    assert warmed <= set(catalog) and {r.split("-")[0] for r in warmed} == {"rep1", "rep2"}
    assert not (tmp_path / "warmup-map.jsonl").exists()
