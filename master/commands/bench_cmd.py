"""``drtp bench``: a synthetic push/pull/manifest benchmark against a registry (drtp.master.commands.bench),
written as a replay's results (requests.csv, summary.json)."""

from __future__ import annotations

import argparse
from pathlib import Path

from drtp.cli_options import add_config_options, config_from_args, positive_int, positive_size, sizes
from drtp.errors import DrtpError
from drtp.outputs import check_output_file, prepare_output_dir


def read_ca_file(path: Path) -> str:
    """The PEM text of ``--ca-file``; a missing, unreadable or binary file is a one-line error."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise DrtpError(f"--ca-file {path}: cannot read ({getattr(e, 'strerror', None) or 'not PEM text'})") from None
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise DrtpError(f"--ca-file {path}: no PEM certificate in it (-----BEGIN CERTIFICATE-----)")
    return text


def cmd_bench(args: argparse.Namespace) -> int:
    import datetime as _dt
    import os

    import msgspec

    from drtp.config_overrides import Override
    from drtp.master.commands.bench import Bench, append_dataset, print_summary
    from drtp.master.run.settings import derive_config
    from drtp.registry.auth import entry_auth
    from drtp.registry.names import name_error
    from drtp.registry.repo_hooks import create_repositories
    from drtp.registry.repo_names import RepositoryMap
    from drtp.replay.messages import RegistryAuth

    auth = None
    registry = args.registry
    results = Path("results")
    names, entry_cfg = RepositoryMap(), None
    if args.config:
        cfg = config_from_args(args)
        results = cfg.path(cfg.results)
        entry = next((e for e in cfg.registries if e.id == args.registry), None)
        if entry is not None:
            auth, registry = entry_auth(entry, cfg), entry.url.rstrip("/")
            names = RepositoryMap.from_entry(entry, cfg.source)  # the entry's names, as a replay would use
            only = Override("registries", [msgspec.to_builtins(entry)], f"--registry {entry.id}")
            entry_cfg = derive_config(cfg, [only])  # that entry's hooks alone
    if auth is None:
        if not registry.startswith(("http://", "https://")):
            raise DrtpError(f"--registry {registry!r}: give an id of the config's registries: or http(s)://host:port")
        if registry.startswith("http://") and not args.insecure:
            raise DrtpError(f"--registry {registry}: plain http needs --insecure")
        password = os.environ.get("DRTP_REGISTRY_PASSWORD") if args.username else None
        if args.username and not password:
            raise DrtpError("--username needs the password in $DRTP_REGISTRY_PASSWORD")
        ca = read_ca_file(Path(args.ca_file)) if args.ca_file else None
        auth = RegistryAuth(registry, args.username, password, ca, args.insecure and registry.startswith("https"))
    if why := name_error(f"{args.repository}/{args.mode}"):
        raise DrtpError(f"--repository {args.repository!r}: {why}")
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else results / f"bench-{args.mode}-{stamp}"
    prepare_output_dir(out, "--out")
    if args.append:
        check_output_file(Path(args.append), "--append")
    from drtp.master.run.preflight import preflight

    bench = Bench(
        registry, auth, args.mode, args.size, layers=args.layers, iterations=args.iterations,
        concurrency=args.concurrency, chunk=args.chunk or 0, repository=args.repository, names=names,
    )  # fmt: skip
    probe = names.probe()
    if entry_cfg is not None:  # the entry's create_repository hook, for the repositories bench writes to
        create_repositories(entry_cfg, [probe, bench.repo], quiet=True)
    preflight(registry, auth, args.registry, probe)
    summary = bench.run(out)
    print_summary(summary)
    print(f"results in {out}/ (requests.csv, summary.json)")
    if args.append:
        n = append_dataset(Path(args.append), out.name, out / "requests.csv")
        print(f"appended {n} rows to {args.append}")
    return 0 if summary["failed"] == 0 else 1


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="synthetic push/pull/manifest benchmark against a registry (replay-format results)",
        description="Push (HEAD, POST, PUT or PATCH+PUT per layer, config, manifest), pull (manifest and layers) or "
        "put/get manifests of N random layers, --iterations images by --concurrency threads; writes requests.csv "
        "and summary.json like 'drtp run'.",
    )
    p.add_argument("mode", choices=["push", "pull", "manifest"])
    p.add_argument("--registry", required=True, help="an id of the config's registries:, or http(s)://host:port")
    add_config_options(p, required=False, help="YAML config with a registries: list (credentials, CA)")
    p.add_argument("--username", help="with a URL: user (password from $DRTP_REGISTRY_PASSWORD)")
    p.add_argument("--ca-file", help="with a URL: CA bundle (PEM)")
    p.add_argument("--insecure", action="store_true", help="with a URL: allow http, or https without verification")
    p.add_argument("--layers", type=positive_int, default=3, help="layers per image (default 3)")
    p.add_argument(
        "--size", type=sizes, default=[1_000_000], help="layer size(s), comma-separated, used in turn (default 1MB)"
    )
    p.add_argument("--iterations", type=positive_int, default=1, help="images to push/pull (default 1)")
    p.add_argument("--concurrency", type=positive_int, default=1, help="images in parallel (default 1)")
    p.add_argument(
        "--chunk", type=positive_size, help="chunked upload: PATCH pieces of this size (default: monolithic PUT)"
    )
    p.add_argument(
        "--repository",
        default="drtp-bench",
        help="images go to repository <this>/<mode>, named as the entry's repository_map says (default drtp-bench)",
    )
    p.add_argument("--out", help="run directory (default: <results>/bench-<mode>-<date>-<time>)")
    p.add_argument("--append", help="also append the rows to this dataset CSV (with a 'run' column)")
    p.set_defaults(func=cmd_bench)
