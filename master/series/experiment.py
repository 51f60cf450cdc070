"""An experiment: warmup + run of the same trace against each registry of ``registries:``, in turn.

Unattended: one registry's failure — unreachable, refused credentials,
a warmup that fails, a run that dies — is recorded and the next registry
runs.  Each registry's run goes to ``<experiment>/<id>/`` (requests.csv,
summary.json tagged with ``registry_id``), with its own warmup map
(``<warmup.output stem>-<id><suffix>``), so ``drtp analyze results
<experiment>/*/`` compares them side by side.  ``experiment.json`` records per
registry: ok (the run completed), its exit code (drtp.exit_codes: 1 when more
of its trace requests failed than ``max_failed`` allows), the error (one line),
and the run's headline numbers; the command exits with the highest code.

With ``repeat: N`` (``--repeat N``) each registry runs N times, interleaved (repetition 1 of
every registry, then repetition 2 …; drtp.master.series.repeat says why), into
``<experiment>/<id>/rep-<k>/``, and experiment.json has an entry ``<id>/rep-<k>`` per run.
``drtp run --repeat N`` goes through the same series (:func:`run_series`) with one registry list.

A part that a bug in drtp stopped (master.run.internal_errors) stops the series: its nodes were told to
cancel, but the next part must not start while they may still send, nor meet the same bug blindly.
Its entry says ``internal_error: true``; each part after it gets an entry ``not_run: true``; exit 3.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import re
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from drtp.cli_options import refusal
from drtp.config import Config, RegistryEntry
from drtp.config.checks import check_access_logs
from drtp.config_overrides import Override
from drtp.errors import ConfigError, DrtpError
from drtp.exit_codes import ExitCode
from drtp.master.outputs.results_dir import write_failed
from drtp.master.run.internal_errors import InternalRunError
from drtp.master.run.replay import run_replay
from drtp.master.run.settings import RunSettings, derive_config
from drtp.master.run.verdict import judge
from drtp.master.run.warmup import run_warmup
from drtp.master.series.repeat import Part, check_layout, check_series, repetition_config
from drtp.outputs import prepare_output_dir
from drtp.registry.auth import config_auth
from drtp.replay.run_dirs import rep_dir

if TYPE_CHECKING:  # prometheus-client is imported only by a run that exports
    from drtp.master.outputs.live_metrics import LiveMetrics


def run_name(i: int, registry: str) -> str:
    """The id of the ``i``-th address of a ``registry:`` list replayed as an entry of its own
    (``slurm.each_registry``): ``<i>-<address>`` with everything but letters, digits and dots made ``_``."""
    return f"{i}-" + re.sub(r"[^A-Za-z0-9.]+", "_", registry.split("//")[-1]).strip("_")


def registry_config(cfg: Config, entry: RegistryEntry) -> Config:
    """The config of one registry's part: that registry only, its own warmup map."""
    out = Path(cfg.warmup.output)
    origin = f"registry {entry.id}"
    return derive_config(
        cfg,
        [
            Override("registry", [entry.url.rstrip("/")], origin),
            Override("registries", [msgspec.to_builtins(entry)], origin),
            Override("warmup.output", str(out.with_name(f"{out.stem}-{entry.id}{out.suffix}")), origin),
        ],
    )


def default_experiment_dir(cfg: Config) -> Path:
    return cfg.path(cfg.results) / f"experiment-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"


def _write_status(path: Path, status: dict) -> None:
    try:
        path.write_text(json.dumps(status, indent=2, default=str))
    except OSError as e:  # without its record the experiment cannot be resumed or judged: stop (exit 3)
        raise write_failed(path, e) from None


def check_experiment(cfg: Config) -> None:
    """What must hold before any registry runs (also checked by ``drtp slurm submit`` and ``drtp deploy`` before
    they copy or submit anything): a ``registries:`` list, unique ids, every entry's credentials readable."""
    if not cfg.registries:
        raise ConfigError(f"{cfg.source}: missing key 'registries' (the registries of the experiment)")
    ids = [e.id for e in cfg.registries]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ConfigError(f"{cfg.source}: registries: duplicate id(s) {', '.join(sorted(dup))}")
    config_auth(cfg)  # a mistake in any entry (http without insecure, missing password…) stops before any run


def experiment_parts(cfg: Config, out: Path) -> list[Part]:
    """The runs of an experiment: each registry in turn, or, with ``repeat: N``, repetition 1 of every
    registry, then repetition 2 of every registry… (interleaved: A B A B …) into ``<id>/rep-<k>/``."""
    parts = []
    for k in range(1, cfg.repeat + 1):
        for entry in cfg.registries:
            sub = registry_config(cfg, entry)
            if cfg.repeat == 1:
                parts.append(Part(entry.id, sub, out / entry.id, entry.url, warm=True, registry_id=entry.id))
            else:
                run_dir = rep_dir(out / entry.id, k)
                sub = repetition_config(sub, k)
                parts.append(Part(f"{entry.id}/rep-{k}", sub, run_dir, entry.url, True, entry.id, k))
    return parts


def part_tags(part: Part, repeat: int) -> dict:
    """What summary.json says of the part it belongs to: the registry's id (an experiment's), and which
    replicate it is (a repetition's), for the analyses that group runs; written with the run's own figures,
    an interrupted run's too."""
    tags: dict = {}
    if part.registry_id is not None:
        tags["registry_id"] = part.registry_id
    if part.repetition is not None:
        tags.update(
            repetition=part.repetition,
            repeat=repeat,
            repeat_state=part.cfg.repeat_state,
            namespace=part.cfg.namespace,
        )
    return tags


def run_experiment(
    cfg: Config, settings: RunSettings | Path | None = None, live: LiveMetrics | None = None, **fields
) -> dict:
    """Each registry's warmup and run in turn; returns experiment.json's content (every entry has ``exit_code``).

    ``settings``' objectives (``--slo``), ``max_replayer_limited`` and failure budget are judged on each
    registry's run; ``live``: one exporter of live metrics for every registry's run (its ``registry`` label
    tells them apart).  Scripts and tests may give the experiment's folder and :class:`RunSettings`' fields as
    keywords instead (``run_experiment(cfg, out, quiet=True)``).
    """
    if not isinstance(settings, RunSettings):
        settings = RunSettings(out_dir=settings, **fields)
    elif fields:
        raise TypeError(f"run_experiment: give {', '.join(fields)} in settings")
    check_experiment(cfg)
    check_access_logs(cfg)  # here, on the master, before any warmup: not where a job is only submitted
    out = settings.out_dir or default_experiment_dir(cfg)
    parts = experiment_parts(cfg, out)
    verify_with = cfg if cfg.verify else None
    return run_series(parts, out, settings, repeat=cfg.repeat, what="experiment", live=live, verify_with=verify_with)


def run_series(
    parts: list[Part],
    out: Path,
    settings: RunSettings,
    repeat: int = 1,
    what: str = "experiment",
    live: LiveMetrics | None = None,
    verify_with: Config | None = None,
) -> dict:
    """Run ``parts`` in order (an experiment's registries, a run's repetitions, or both), unattended: a part that
    fails is recorded and the next one runs; experiment.json records each; returns its content.

    ``settings``: the series' (each part's run gets them with its own folder and tags; ``resume`` skips the parts
    done before); ``what`` names the command in its lines (``drtp experiment``, ``drtp run``); ``live``: one
    exporter of live metrics for every part's run; ``verify_with``: the config whose records ``drtp verify``
    reads after each registry's run (``verify: true``; :func:`verify_part`).
    """
    quiet, resume = settings.quiet, settings.resume
    prog = f"drtp {what}"
    if resume:
        check_layout(list(dict.fromkeys(p.run_dir.parent if repeat > 1 else p.run_dir for p in parts)), repeat)
    made = prepare_output_dir(out)
    status_path = out / "experiment.json"
    status: dict = json.loads(status_path.read_text()) if resume and status_path.exists() else {}
    series = {"repeat": repeat, "repeat_state": parts[0].cfg.repeat_state if parts else "fresh"}
    if resume:
        check_series(status, status_path, **series)
        # entries of parts this series does not have (a registry since removed from the config) would count in
        # the exit code and pass for this series' runs: experiment.json keeps the current parts only
        for key in [k for k in status if k not in {p.key for p in parts}]:
            del status[key]
            if not quiet:
                print(f"{status_path}: {key} is not a part of this series: its entry dropped")
    for s in status.values():  # written before exit codes were recorded
        s.setdefault("exit_code", int(ExitCode.OK if s.get("ok") else ExitCode.CANNOT_RUN))
    name = "repetition" if what == "run" else "registry"
    stopped_by: str | None = None  # the part a bug in drtp stopped: the rest do not run
    for part in parts:
        run_dir = part.run_dir
        if stopped_by is not None:
            why = f"not run: a bug in drtp stopped {name} {stopped_by} (its summary.json names it)"
            status[part.key] = {"ok": False, **series, "exit_code": int(ExitCode.CANNOT_RUN), "url": part.url}
            status[part.key].update(error=why, not_run=True)
            continue
        prior = status.get(part.key, {})
        if resume and prior.get("ok") and (run_dir / "summary.json").exists():
            if not quiet:
                print(f"== {name} {part.key}: done before, skipped")
            continue
        if not quiet:
            into = f"; repositories {part.cfg.namespace}…" if part.cfg.namespace else ""
            print(f"== {name} {part.key} ({part.url}{into})", flush=True)
        t0 = time.perf_counter()
        try:
            sub = part.cfg
            if part.warm:
                run_warmup(sub, quiet=quiet)
            resumed = resume and (run_dir / "requests.csv").exists()
            own = dataclasses.replace(settings, out_dir=run_dir, resume=resumed, tags=part_tags(part, repeat))
            summary = run_replay(sub, own, live=live)
            verdict = judge(summary, settings.budget, list(settings.objectives), settings.max_replayer_limited)
            status[part.key] = {
                "ok": True,
                **series,
                "exit_code": int(verdict.code),
                "url": part.url,
                "requests": summary["requests"],
                "failed": summary["failed"],
                "throughput_rps": summary["throughput_rps"],
                "latency_p50_s": summary["latency_s"].get("p50"),
                "objectives": {j.objective.text: j.held for j in verdict.objectives},
                "replayer_limited": summary["replayer_limited"],
                "wall_s": time.perf_counter() - t0,
            }
            if part.repetition is not None:
                status[part.key]["repetition"] = part.repetition
            if verify_with is not None and part.registry_id is not None:
                checked = verify_part(verify_with, part, quiet)
                status[part.key]["verify"] = checked
                status[part.key]["exit_code"] = max(status[part.key]["exit_code"], checked["exit_code"])
            if verdict.message and not quiet:
                what_line = f"{name} {part.key}: {verdict.message}"
                line = refusal(prog, what_line) if verdict.code else f"{prog}: warning: {what_line}"
                print(line, file=sys.stderr, flush=True)
        except DrtpError as e:
            status[part.key] = {"ok": False, **series, "exit_code": int(e.exit_code), "url": part.url, "error": str(e)}
            if isinstance(e, InternalRunError):
                status[part.key]["internal_error"] = True
                stopped_by = part.key
            if e.exit_code == ExitCode.BAD_INPUT:
                # the trace and config are the same for every part: the next one would be refused alike
                if made and len(status) == 1:  # nothing was run: no folder claims otherwise
                    shutil.rmtree(out, ignore_errors=True)
                else:
                    _write_status(status_path, status)
                raise
        except Exception as e:  # noqa: BLE001 - unattended: a bug in one part must not stop the rest
            # (one met before its run started its nodes, or after they finished: a bug while they ran is an
            # InternalRunError, above, which stops the series)
            error = f"{type(e).__name__}: {e}"[:500]
            code = int(ExitCode.CANNOT_RUN)
            status[part.key] = {"ok": False, **series, "exit_code": code, "url": part.url, "error": error}
            (out / f"{part.key.replace('/', '-')}-error.txt").write_text(traceback.format_exc())
        if not status[part.key]["ok"] and not quiet:
            print(f"{name} {part.key}: FAILED: {status[part.key]['error']}", flush=True)
        _write_status(status_path, status)
    if stopped_by is not None:
        _write_status(status_path, status)
        left = [p.key for p in parts if status[p.key].get("not_run")]
        if left and not quiet:
            print(f"stopped after a bug in drtp in {name} {stopped_by}: not run: {', '.join(left)}", flush=True)
    if not quiet:
        _closing_lines(status, parts, out, name, repeat)
    return status


def verify_part(cfg: Config, part: Part, quiet: bool) -> dict:
    """``drtp verify`` of the part's registry after its run (``verify: true``): the records of ``cfg`` and the
    run's own requests.csv; verify.json goes into the run's folder, beside summary.json.  What experiment.json
    records: its exit code (1: a referenced object is lost; 3: the registry could not be reached), and the
    error when there is one.  The run's entry takes the higher of its own exit code and this one."""
    from drtp.master.commands.verify import run_verify

    try:
        code = run_verify(cfg, [part.run_dir], part.registry_id, output=part.run_dir / "verify.json", quiet=quiet)
    except DrtpError as e:
        return {"exit_code": int(e.exit_code), "error": str(e)}
    return {"exit_code": code, "file": "verify.json"}


def _closing_lines(status: dict, parts: list[Part], out: Path, name: str, repeat: int) -> None:
    """What ran, and the command that compares it."""
    good = [i for i, s in status.items() if s["ok"]]
    head = "experiment" if name == "registry" else "run"
    counted = "registries" if repeat == 1 else "runs"
    print(f"{head}: {len(good)} of {len(status)} {counted} ok → {out}/ (experiment.json)")
    if not good:
        return
    if repeat == 1:
        runs = " ".join(str(out / i) for i in good)
        print(f"compare: drtp analyze results {runs} --out {out / 'analysis'}")
        return
    sides = list(dict.fromkeys(p.run_dir.parent for p in parts))  # each registry's folder of rep-<k>/
    if len(sides) >= 2:
        print(f"compare: drtp analyze compare --baseline {sides[0]} --candidate {sides[1]} --out {out / 'compare'}")
