"""Repeated runs (``--repeat N``, ``repeat: N``): the same replay N times, each a replicate of the others.

One run a side cannot say whether two registries differ (``drtp analyze compare`` needs
4 runs a side for a verdict): runs of one setup differ with the machine, the network and
the registry's caches, so the run is the unit of evidence.  Repetitions are what make
runs replicates:

* **Interleaved.** An experiment runs repetition 1 of every registry, then repetition 2 of
  every registry, and so on (A B A B …, drtp.master.series.experiment): a drift of the
  machine or the network over the series then touches every side alike, instead of
  all of A's runs before all of B's.
* **Each from the same state.** A trace that pushes changes the registry: a second
  replay into the same repositories finds the layers and tags the first one pushed
  (uploads become mounts or no-ops, pulls of new tags succeed), so it measures
  something else.  With ``repeat_state: fresh`` (the default) repetition ``k`` replays
  into repositories of its own — every repository name gets the prefix ``rep<k>-``
  after the registry's own prefix (``repository:``; drtp.registry.repo_names), so
  ``user/repo`` becomes ``rep2-user/repo`` — warmed up for it, with its own warmup
  map (``<warmup.output stem>-rep<k><suffix>``).  The price: N times the warmup's
  pushes and the registry's storage.  ``repeat_state: reuse`` replays every
  repetition into the same repositories, each after the one before: no extra
  storage, but repetition 2 on measures a registry that already holds what
  repetition 1 pushed.

Each repetition's results go to ``rep-<k>/`` (k from 1) of the run's directory (an
experiment's: of each registry's), a run directory like any other, whose summary.json
says ``repetition`` and ``repeat``.  The series is recorded in ``experiment.json``
(one entry per repetition, as an experiment's per registry, each with the series'
``repeat`` and ``repeat_state``), which ``--resume`` reads to skip the finished ones; a
resume with another ``repeat`` or ``repeat_state`` would mix repositories or count runs of
another series, so it is refused (:func:`check_series`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from drtp.config import Config
from drtp.config_overrides import Override
from drtp.errors import DrtpError
from drtp.master.run.settings import derive_config
from drtp.replay.run_dirs import rep_dir, run_dirs_in


def namespace(k: int) -> str:
    """The repository prefix of repetition ``k`` under ``repeat_state: fresh``."""
    return f"rep{k}-"


def repetition_map(path: Path, k: int) -> Path:
    """The warmup map of repetition ``k`` under ``fresh``: ``<stem>-rep<k><suffix>`` beside ``path``."""
    return path.with_name(f"{path.stem}-rep{k}{path.suffix}")


def repetition_config(cfg: Config, k: int) -> Config:
    """The config repetition ``k`` replays with: under ``fresh``, its namespace and its own warmup map; under
    ``reuse``, the config itself (the same repositories and map for every repetition)."""
    if cfg.repeat_state == "reuse":
        return cfg
    own_map = Override("warmup.output", str(repetition_map(Path(cfg.warmup.output), k)), f"repetition {k}")
    return derive_config(cfg, [own_map], namespace=namespace(k))


def repetition_configs(cfg: Config) -> list[Config]:
    """The config of each repetition, in order (one, ``cfg`` itself, when the config repeats nothing)."""
    if cfg.repeat <= 1:
        return [cfg]
    return [repetition_config(cfg, k) for k in range(1, cfg.repeat + 1)]


@dataclass(frozen=True)
class Part:
    """One run of a series (drtp.master.series.experiment.run_series): a registry's, a repetition's, or both."""

    key: str  # its name in experiment.json: the registry's id, "rep-<k>", or "<id>/rep-<k>"
    cfg: Config  # the config it replays with (one registry; a repetition's namespace and warmup map)
    run_dir: Path
    url: str  # the registry (or registries) it replays against, for experiment.json
    warm: bool  # warm up before it: an experiment always does, a run's repetition in a namespace of its own
    registry_id: str | None = None
    repetition: int | None = None


def run_parts(cfg: Config, out: Path) -> list[Part]:
    """The repetitions of ``drtp run --repeat N`` (one registry list, replayed N times in turn)."""
    url = ", ".join(cfg.registry)
    fresh = cfg.repeat_state == "fresh"
    return [
        Part(f"rep-{k}", sub, rep_dir(out, k), url, warm=fresh, repetition=k)
        for k, sub in enumerate(repetition_configs(cfg), 1)
    ]


def check_series(status: dict, path: Path, repeat: int, repeat_state: str) -> None:
    """Before a ``--resume``: every entry of experiment.json (``status``, read from ``path``) was run with this
    ``repeat`` and, for repetitions, this ``repeat_state``; entries written before these were recorded pass."""
    for key, entry in status.items():
        was = entry.get("repeat") if isinstance(entry, dict) else None
        if was is None:
            continue
        state = entry.get("repeat_state")
        if was != repeat or (repeat > 1 and state != repeat_state):
            raise DrtpError(
                f"--resume: {path}: {key} was run with repeat {was}, repeat_state {state}, not repeat {repeat}, "
                f"repeat_state {repeat_state}: resume with the settings the series was started with"
            )


def check_layout(run_dirs: list[Path], repeat: int) -> None:
    """Before a ``--resume``: each run directory (a registry's, or the run's) holds the layout this series
    continues, not the other one (a single run where repetitions are asked for, or the reverse), which the
    resumed series would mix with or pass over."""
    for run_dir in run_dirs:
        reps = run_dirs_in(run_dir) != [run_dir]
        if repeat > 1 and not reps and (run_dir / "requests.csv").exists():
            raise DrtpError(
                f"--resume: {run_dir} holds a single run (requests.csv), not repetitions (rep-<k>/): "
                "resume it without --repeat (repeat: 1)"
            )
        if repeat <= 1 and reps:
            raise DrtpError(
                f"--resume: {run_dir} holds repetitions (rep-<k>/): resume them with the --repeat N "
                "(repeat: N) they were started with"
            )
