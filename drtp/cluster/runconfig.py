"""What a cluster job runs: the run config made from the user's, which command replays it, its checks.

``drtp slurm submit`` and ``drtp deploy`` start the same replay that ``drtp experiment`` or ``drtp warmup``
+ ``drtp run`` start on one machine; this module decides which, from the config's registries:

* a ``registries:`` list without ``registry:`` → ``drtp experiment`` (each entry in turn);
* ``registry: [a, b, …]`` with ``slurm.each_registry: true`` → also ``drtp experiment``: each address becomes
  an entry ``<i>-<address>`` (with the credentials, prefix and paths of the ``registries:`` entry of that
  address, if there is one), so every run keeps exactly its own entry;
* otherwise → one ``drtp warmup`` + ``drtp run`` over ``registry:``, with only the ``registries:`` entries
  of those addresses.

It works on the raw YAML mapping (``${VAR}`` unexpanded, so the files the jobs read hold no secret) and
knows where registry entries name files: the job runs elsewhere (a compute node, a deploy host), so
those are made absolute or copied.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import msgspec

from drtp.config import Config, config_from_dict
from drtp.errors import ConfigError
from drtp.replay.messages import registry_base

EXPERIMENT, RUN = "experiment", "run"
# keys of a registries: entry that name a file
ENTRY_FILE_KEYS = ("ca_file", "password_file")
# keys of a registries: entry that are a command (an argv list): its program may be a file beside the config
ENTRY_COMMAND_KEYS = ("password_command", "create_repository", "delete_repository")
# keys of an events: entry that are a command (an argv list; ``until`` may be a duration instead)
EVENT_COMMAND_KEYS = ("run", "until")
# keys of a registries: entry that obtain its secret by running something
SECRET_SOURCE_KEYS = ("credential_helper", "password_command")
STAND_IN = "obtained-where-the-master-runs"


def _entries_by_url(data: dict) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for entry in data.get("registries") or []:
        if isinstance(entry, dict) and isinstance(entry.get("url"), str):
            out.setdefault(registry_base(entry["url"]), entry)
    return out


def run_config_data(data: dict, each_registry: bool) -> dict:
    """The config the master replays (a new mapping; ``data`` is left as it is)."""
    data = json.loads(json.dumps(data))  # a deep copy
    registry = data.get("registry") or []
    registry = [registry] if isinstance(registry, str) else registry
    if data.get("registries") and not registry:
        return data
    by_url = _entries_by_url(data)
    if each_registry and len(registry) >= 2:
        from drtp.master.series.experiment import run_name

        entries = []
        for i, reg in enumerate(registry, 1):
            url = registry_base(reg)
            entry = dict(by_url.get(url) or {"url": url, "insecure": url.startswith("http://")})
            entry["id"] = run_name(i, reg)
            entries.append(entry)
        data.pop("registry", None)
        data["registries"] = entries
        return data
    if "registries" in data:  # one run over registry:: only the entries it names (their auth)
        data["registries"] = [e for u, e in by_url.items() if u in {registry_base(r) for r in registry}]
    return data


def replay_mode(run_data: dict) -> str:
    """``experiment`` or ``run``: the command that replays a run config (of :func:`run_config_data`)."""
    return EXPERIMENT if run_data.get("registries") and not run_data.get("registry") else RUN


def each_registry_of(data: dict) -> bool:
    s = data.get("slurm")
    return bool(isinstance(s, dict) and s.get("each_registry"))


def _without_secret_sources(data: dict) -> dict:
    """``data`` with each entry's credential helper and password command left out (a stand-in password in their
    place): they run where the master runs (its job's node, the deploy host), not where the job is submitted."""
    for entry in data.get("registries") or []:
        if not isinstance(entry, dict):
            continue
        helper, command = (entry.pop(k, None) for k in SECRET_SOURCE_KEYS)
        if helper or command:
            entry.pop("credential_ttl", None)  # a stand-in is never asked for again
        if (helper or command) and not entry.get("password") and not entry.get("password_file"):
            entry["password"] = STAND_IN
        if helper and not entry.get("username"):  # a helper answers the user name too
            entry["username"] = STAND_IN
    return data


def missing_entry_files(data: dict, base: Path) -> list[str]:
    """``registries[<id>].<key>: <file>`` for each file a raw config's entries name that does not exist."""
    import os

    entries = data.get("registries") or []
    missing: list[str] = []

    def probe(value: str, key: str, i: int) -> str:
        p = Path(os.path.expanduser(value))
        if not (p if p.is_absolute() else base / p).is_file():
            rid = entries[i].get("id", i) if isinstance(entries[i], dict) else i
            missing.append(f"registries[{rid}].{key}: {value}")
        return value

    map_entry_paths(json.loads(json.dumps(data)), probe)

    def probe_event(value: str, key: str, i: int) -> str:
        p = Path(os.path.expanduser(value))
        if not (p if p.is_absolute() else base / p).is_file():
            event = data["events"][i]
            missing.append(f"events[{event.get('name', i) if isinstance(event, dict) else i}].{key}: {value}")
        return value

    map_event_paths(json.loads(json.dumps(data)), probe_event)
    return missing


def check_run_config(cfg: Config, raw: dict | None = None) -> str:
    """Everything the replay checks before it sends a request, checked here before a file is copied or a job
    submitted; the replay mode. A mistake is a ConfigError (one line, exit 2).

    ``raw``: the config file as written, whose registry entries' files must exist (the keys of entries this
    drtp's schema may not know yet, such as commands, are read from it).
    """
    from drtp.master.series.experiment import check_experiment
    from drtp.registry.auth import config_auth

    if raw is not None and (missing := missing_entry_files(raw, Path(cfg.base_dir))):
        raise ConfigError(f"{cfg.source}: {missing[0]}: no such file")
    data = _without_secret_sources(msgspec.to_builtins(cfg))
    for internal in ("base_dir", "source"):
        data.pop(internal, None)
    run_data = run_config_data(data, bool(cfg.slurm and cfg.slurm.each_registry))
    run_cfg = config_from_dict(run_data, source=cfg.source, base_dir=cfg.base_dir)
    run_cfg.require("trace")
    mode = replay_mode(run_data)
    if mode == EXPERIMENT:
        check_experiment(run_cfg)
        return mode
    run_cfg.require("registry")
    # every entry's credentials, those of addresses this run does not use too
    config_auth(config_from_dict(data, source=cfg.source, base_dir=cfg.base_dir))
    named = next((e for e in run_cfg.registries if e.repository or e.repository_map != "prefix"), None)
    if len(run_cfg.registry) > 1 and named is not None:
        key = "repository" if named.repository else "repository_map"
        raise ConfigError(
            f"{cfg.source}: registries[{named.id}].{key}: one run spread over {len(run_cfg.registry)} "
            "registries keeps no entry's names; give only 'registries:' (one run per entry) or set "
            "slurm.each_registry"
        )
    return mode


def map_entry_paths(data: dict, fn: Callable[[str, str, int], str]) -> None:
    """Replace, in place, every file a ``registries:`` entry names by ``fn(value, key, index of the entry)``.

    Files: ``ca_file``, ``password_file``; and a command's program (``argv[0]`` of ``password_command``,
    ``create_repository``, ``delete_repository``) when it is a relative path with a ``/`` (a bare name is
    looked up on PATH, as ``credential_helper``'s ``docker-credential-NAME`` is). Values holding ``${VAR}``
    are left alone: only the machine that runs the job can expand them.
    """
    for i, entry in enumerate(data.get("registries") or []):
        if not isinstance(entry, dict):
            continue
        _map_paths(entry, fn, i, "")
        if isinstance(entry.get("upstream"), dict):  # a cache's upstream names its files as an entry does
            _map_paths(entry["upstream"], fn, i, "upstream.")


def _map_paths(entry: dict, fn: Callable[[str, str, int], str], i: int, prefix: str) -> None:
    """:func:`map_entry_paths` of one entry, or of its ``upstream:`` (``prefix`` "upstream.": the key ``fn`` gets)."""
    for key in ENTRY_FILE_KEYS:
        value = entry.get(key)
        if isinstance(value, str) and value and "${" not in value:
            entry[key] = fn(value, prefix + key, i)
    for key in ENTRY_COMMAND_KEYS:
        argv = entry.get(key)
        if not (isinstance(argv, list) and argv and isinstance(argv[0], str)):
            continue
        prog = argv[0]
        if "/" in prog and not prog.startswith(("/", "~", "${")) and "${" not in prog:
            entry[key] = [fn(prog, prefix + key, i), *argv[1:]]


def _relative_program(argv: object) -> bool:
    """Whether ``argv`` is a command whose program is a relative path with a ``/`` (a file beside the config)."""
    if not (isinstance(argv, list) and argv and isinstance(argv[0], str)):
        return False
    prog = argv[0]
    return "/" in prog and not prog.startswith(("/", "~")) and "${" not in prog


def map_event_paths(data: dict, fn: Callable[[str, str, int], str]) -> None:
    """Replace, in place, the program of each ``events:`` command (``run``, an ``until`` command) given as a
    relative path with a ``/`` by ``fn(value, key, index of the event)``: the job runs it from another folder
    (a Slurm job reads the experiment's copy of the config; a deploy host its own copy of the program)."""
    for i, event in enumerate(data.get("events") or []):
        if not isinstance(event, dict):
            continue
        for key in EVENT_COMMAND_KEYS:
            argv = event.get(key)
            if _relative_program(argv):
                event[key] = [fn(argv[0], key, i), *argv[1:]]


def absolute_entry_paths(data: dict, base: Path) -> None:
    """Make the files of :func:`map_entry_paths` and the events' programs of :func:`map_event_paths` absolute
    (relative ones are relative to the config's folder)."""
    import os

    def absolute(value: str, _key: str, _i: int) -> str:
        p = Path(os.path.expanduser(value))
        return str(p if p.is_absolute() else base / p)

    map_entry_paths(data, absolute)
    map_event_paths(data, absolute)
