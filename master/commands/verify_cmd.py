"""``drtp verify``: check that a registry still holds, byte for byte, what drtp's records say it pushed there."""

from __future__ import annotations

import argparse
from pathlib import Path


def cmd_verify(args: argparse.Namespace) -> int:
    from drtp.cli_options import apply_progress_options, config_from_args
    from drtp.master.commands.verify import run_verify

    apply_progress_options(args)
    cfg = config_from_args(args)
    out = Path(args.output) if args.output else None
    return run_verify(cfg, [Path(d) for d in args.run or []], args.registry, args.threads, out)


def register(sub) -> None:
    from drtp.cli_options import add_config_options, add_progress_options, positive_int

    p = sub.add_parser(
        "verify",
        help="read back every object drtp's records say a registry holds and check its digest (losses: exit 1)",
        description="Fetch every manifest and blob drtp's records say the registry holds — the warmup maps, the "
        "push ledgers beside them and the requests.csv of the runs given with --run (what 'drtp clean' reads), "
        "minus what the runs' trace deleted — hashing each body as it streams in. Per repository: ok, missing "
        "(404), short (the answer ended before its Content-Length), corrupt (the bytes do not match the digest), "
        "unreadable (another status, no answer); each object referenced (a manifest one of its recorded tags "
        "still names, or a blob such a manifest names: its loss is data lost) or unreferenced (a garbage "
        "collector may remove it). Writes verify.json (-o; default: in the last --run directory, else beside the "
        "warmup map) and prints one line per class. Exit codes: 0 no referenced object missing, short or "
        "corrupt; 1 one is; 2 bad input (config, records, --registry); 3 a registry could not be reached.",
    )
    add_config_options(p)
    p.add_argument(
        "--registry", metavar="ID", help="verify only this registry: an id of registries:, or an item of registry:"
    )
    p.add_argument(
        "--run",
        nargs="+",
        metavar="DIR",
        action="extend",
        help="run directories whose pushes and deletes (requests.csv) count too, for runs the ledgers do not hold",
    )
    p.add_argument("--threads", type=positive_int, default=8, help="objects fetched at once (default 8)")
    p.add_argument("-o", "--output", metavar="PATH", help="where verify.json goes")
    add_progress_options(p)
    p.set_defaults(func=cmd_verify)
