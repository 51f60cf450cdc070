"""``drtp slurm …`` (experiments as Slurm jobs) and ``drtp deploy`` (the same from a laptop, over SSH)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from drtp.cli_options import add_config_options, config_from_args, effective_config_from_args, positive_float


def _experiment(args: argparse.Namespace):
    from drtp.cluster.submission import find_experiment, latest
    from drtp.errors import DrtpError

    if args.exp:
        return find_experiment(args.exp, None)
    if not args.config:
        raise DrtpError("give -c CONFIG (its latest experiment) or --exp FOLDER")
    return latest(config_from_args(args))


def cmd_submit(args: argparse.Namespace) -> int:
    from drtp.cluster.submission import Experiment
    from drtp.errors import DrtpError

    if args.resume:
        exp, cfg = _resumed(args)
    elif not args.config:
        raise DrtpError("drtp slurm submit: give -c CONFIG (or --resume EXP)")
    else:
        if args.name is not None and "/" in args.name:
            raise DrtpError(f"--name {args.name!r}: a name, not a path")
        cfg = effective_config_from_args(args).config
        exp = Experiment.create(Path(args.config), cfg, args.name, args.overrides)
    exp.submit(cfg, resume=bool(args.resume))
    jobs = exp.state["jobs"]
    print(f"experiment {exp.name} in {exp.dir}" + (" (resumed)" if args.resume else ""))
    print(f"client job {jobs['clients']['id']} (log {jobs['clients']['log']})")
    print(f"master job {jobs['master']['id']} (log {jobs['master']['log']})", flush=True)
    if args.no_wait:
        return 0
    try:
        return exp.wait(poll=cfg.slurm.poll)
    except KeyboardInterrupt:
        print(
            f"\ndrtp: stopped following; the jobs go on. 'drtp slurm wait --exp {exp.dir}' follows them again, "
            f"'drtp slurm cancel --exp {exp.dir}' cancels them",
            file=sys.stderr,
        )
        return 130


def _resumed(args: argparse.Namespace):
    """The experiment ``--resume EXP`` names, ready for new jobs, and its own config (``--set`` laid over it).

    The jobs replay the experiment's copy of the config (as submitted, with absolute paths): what ran before
    and what runs now are the same experiment. ``-c`` only says where a bare name is (its slurm.workdir).
    """
    from drtp.cluster.runconfig import check_run_config
    from drtp.cluster.submission import find_experiment

    where = config_from_args(args) if args.config else None
    exp = find_experiment(args.resume, where)
    copied = exp.dir / "config.yaml"
    cfg = effective_config_from_args(args, copied).config
    cfg.require("slurm")
    check_run_config(cfg)
    exp.prepare_resume()
    carry_set_options(copied, args.overrides)
    return exp, cfg


def cmd_wait(args: argparse.Namespace) -> int:
    exp = _experiment(args)
    return exp.wait(poll=args.poll)


def cmd_status(args: argparse.Namespace) -> int:
    exp = _experiment(args)
    infos = exp.poll()
    exp.save()
    print(f"experiment {exp.name} ({exp.dir})")
    print(exp.status_line(infos))
    for role, job in exp.state["jobs"].items():
        print(f"  {role}: job {job['id']} {job.get('state', 'UNKNOWN')} log {job['log']}")
    for rid, st in exp.registry_status().items():  # drtp experiment's record, as far as it got
        if st.get("ok"):
            what = f"done, exit {st.get('exit_code')}, {st.get('requests')} requests, {st.get('failed')} failed"
        else:
            what = f"FAILED, exit {st.get('exit_code')}: {st.get('error')}"
        print(f"  registry {rid}: {what}")
    if exp.state.get("gathered"):
        print(f"results in {exp.state['gathered']}")
    for p in exp.problems():
        print(f"drtp: {p}")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    exp = _experiment(args)
    ids = exp.cancel()
    print(f"cancelled jobs {' '.join(ids)} of {exp.name}")
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from drtp.cluster import slurm
    from drtp.cluster.runconfig import check_run_config

    cfg = config_from_args(args)
    s = cfg.require("slurm")
    mode = check_run_config(cfg)
    exp_dir = str(cfg.path(s.workdir).resolve() / "EXPERIMENT")
    print(slurm.render_clients(s, exp_dir, "drtp-EXPERIMENT"))
    print(slurm.render_master(s, exp_dir, "drtp-EXPERIMENT", "CLIENT_JOB", mode))
    return 0


def cmd_nodes(args: argparse.Namespace) -> int:
    from drtp.cluster.submission import Experiment, resolve_clients

    exp = Experiment(Path(args.exp))
    resolve_clients(exp, timeout=args.timeout if args.timeout is not None else _register_timeout(exp))
    return 0


def _register_timeout(exp) -> float:
    cfg = config_from_args(argparse.Namespace(), exp.dir / "config.yaml")  # the job's DRTP_CONFIG__* apply
    return cfg.slurm.register_timeout if cfg.slurm else 300.0


def carry_set_options(copied: Path, overrides: list) -> None:
    """Lay ``--set`` keys over the experiment's copy of the config: the Slurm jobs read that copy.

    The environment's ``DRTP_CONFIG__*`` keys need no copy: the jobs inherit the environment.
    """
    if not overrides:
        return
    import yaml

    from drtp.config_overrides import apply_overrides
    from drtp.yamlfile import read_yaml_mapping

    copied.write_text(yaml.safe_dump(apply_overrides(read_yaml_mapping(copied), overrides), sort_keys=False))


def cmd_deploy(args: argparse.Namespace) -> int:
    import os

    from drtp.cluster.deploy import run_deploy
    from drtp.config_overrides import ENV_PREFIX
    from drtp.errors import ConfigError

    # the remote side runs the copied file in its own environment: keys set here would not reach it
    carried = [f"--set {ov.key}" for ov in args.overrides] + sorted(n for n in os.environ if n.startswith(ENV_PREFIX))
    if carried:
        raise ConfigError(
            f"drtp deploy: {carried[0]} would not reach {args.config}'s deploy host (it runs the config file "
            "as copied): write the key into the file"
        )
    effective_config_from_args(args)  # verbose: true, and the config checked before anything is copied

    return run_deploy(Path(args.config), name=args.name, copy_only=args.copy_only, out=sys.stdout)


def register(sub) -> None:
    p = sub.add_parser(
        "slurm",
        help="run an experiment as Slurm jobs (submit, status, wait, cancel)",
        description="Run the replay on a Slurm cluster: a client job (one drtp client per task) and a master "
        "job (drtp experiment for a registries: list, else warmup then run), rendered from the config's slurm: "
        "section.",
    )
    ssub = p.add_subparsers(dest="slurm_command", metavar="ACTION", required=True)

    q = ssub.add_parser(
        "submit",
        help="submit the client and master jobs, follow them, gather the results",
        description="Check the config, copy it into <slurm.workdir>/<NAME>/ and submit a client job (one drtp client "
        "per task) and a master job. The master replays on those clients what 'drtp experiment' runs for a "
        "'registries:' list (or slurm.each_registry: each registry: address in turn): preflight, warmup and run "
        "per registry, one registry's failure not stopping the next, results in <results>/<NAME>/<id>/ and each "
        "registry's status in <results>/<NAME>/experiment.json (the jobs' own in jobs.json); otherwise "
        "'drtp warmup' + 'drtp run'. Files named by registry entries (ca_file, password_file, a command's "
        "program given as a relative path) are made absolute for the jobs. Exit code: the master's (the highest "
        "of its registries' runs: 130 > 3 > 2 > 1 > 0), one line per registry that failed; 1 when a job was "
        "cancelled, timed out or vanished.",
    )
    add_config_options(q, required=False, help="YAML config file (with a slurm: section; with --resume: optional)")
    q.add_argument("--name", help="experiment name (default exp-<date>-<time>)")
    q.add_argument("--no-wait", action="store_true", help="submit and return (follow later with 'drtp slurm wait')")
    q.add_argument(
        "--resume",
        metavar="EXP",
        help="submit new jobs for experiment EXP (its folder, or its name under -c CONFIG's slurm.workdir), with "
        "its own config.yaml: registries done are skipped, an interrupted run continues",
    )
    q.set_defaults(func=cmd_submit)

    for action, func, text in (
        ("status", cmd_status, "show the jobs of an experiment"),
        ("wait", cmd_wait, "follow an experiment until it ends, then gather its results"),
        ("cancel", cmd_cancel, "cancel the jobs of an experiment"),
    ):
        q = ssub.add_parser(action, help=text)
        add_config_options(q, required=False, help="YAML config file: its latest experiment")
        q.add_argument("--exp", help="the experiment folder (<slurm.workdir>/<name>)")
        if action == "wait":
            q.add_argument("--poll", type=positive_float, default=2.0, help="seconds between polls (default 2)")
        q.set_defaults(func=func)

    q = ssub.add_parser("render", help="print the sbatch scripts the config makes (nothing is submitted)")
    add_config_options(q)
    q.set_defaults(func=cmd_render)

    q = ssub.add_parser("nodes", help="(inside the master job) wait for the client tasks, write run-config.yaml")
    q.add_argument("--exp", required=True, help="the experiment folder")
    q.add_argument("--timeout", type=positive_float, help="seconds to wait (default slurm.register_timeout)")
    q.set_defaults(func=cmd_nodes)

    p = sub.add_parser(
        "deploy",
        help="copy drtp, the config and traces to a host over SSH, run there, pull the results back",
        description="Copy the project, config and trace files to deploy.host (through deploy.jump if set), "
        "prepare a venv there, run the experiment (through Slurm, or client nodes on deploy.client_hosts) "
        "and copy the results back into the local results folder. Files already there are skipped.",
    )
    add_config_options(p, help="YAML config file (with a deploy: section; --set is refused: the remote runs the file)")
    p.add_argument("--name", help="experiment name (default <config name>)")
    p.add_argument("--copy-only", action="store_true", help="copy and install, run nothing")
    p.set_defaults(func=cmd_deploy)
