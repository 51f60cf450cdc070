"""``drtp client``: run a client node that executes the master's replay requests."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from drtp.replay.signing import MIN_TOKEN_LEN, resolve_token

TOKEN_HELP = (
    f"the shared secret (the master's client_info.token, at least {MIN_TOKEN_LEN} characters) is read from "
    "--token-file PATH or $DRTP_TOKEN; --token VALUE works but shows the secret to every user of the machine (ps)"
)


def warn_if_token_in_argv(token: str | None, option: str = "--token") -> None:
    """One line on stderr: a secret given on the command line is visible in the process list."""
    if token:
        print(
            f"drtp: warning: {option} shows the shared secret in 'ps' to every user of this machine; "
            "use --token-file PATH or DRTP_TOKEN",
            file=sys.stderr,
            flush=True,
        )


def cmd_client(args: argparse.Namespace) -> int:
    from drtp.client.server import NodeService

    token = resolve_token(args.token, "drtp client", args.token_file)  # a bad one: only its error line
    warn_if_token_in_argv(args.token if args.token_file is None else None)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    service = NodeService(token)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        service.serve(args.host, args.port)
    except KeyboardInterrupt:
        pass
    except OSError as e:
        from drtp.errors import DrtpError

        raise DrtpError(f"cannot listen on {args.host}:{args.port}: {e.strerror}") from None
    return 0


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r} (0–65535)")
    return port


def register(sub) -> None:
    p = sub.add_parser(
        "client",
        help="run a client node (executes replay requests sent by the master)",
        description="A client node: a small HTTP service that takes batches of replay requests from its master "
        "(signed with the shared secret), sends them to the registry and streams the results back.",
        epilog=TOKEN_HELP,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=8081, help="port to listen on (default 8081)")
    p.add_argument("--token-file", metavar="PATH", help="file holding the shared secret (default: $DRTP_TOKEN)")
    p.add_argument("--token", help="the shared secret itself (visible in ps: prefer --token-file or $DRTP_TOKEN)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every HTTP call")
    p.set_defaults(func=cmd_client)
