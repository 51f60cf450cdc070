"""The options every command that reads trace files shares, and the reader they ask for.

Beside the trace's readers rather than with the other option types
(drtp.cli_options), so that the options shared by every command need nothing
of the trace: ``--format`` offers :data:`~drtp.trace.formats.FORMATS` without
importing the readers, which are imported only when a command reads.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from drtp.cli_options import duration, positive_int
from drtp.trace.formats import FORMATS

if TYPE_CHECKING:
    from drtp.trace.reader import TraceReader


def add_trace_options(p: argparse.ArgumentParser, limits: bool = True) -> None:
    """Options every command that reads trace files shares (and, with ``limits``, how much to read)."""
    p.add_argument(
        "--format",
        default="auto",
        choices=FORMATS,
        help="input format (default: detected from the file)",
    )
    p.add_argument("--skip-bad", action="store_true", help="skip and count malformed records instead of stopping")
    p.add_argument("--sort-files", action="store_true", help="sort each file in memory (files not in time order)")
    if not limits:
        return
    limit = p.add_mutually_exclusive_group()
    limit.add_argument("--requests", type=positive_int, metavar="N", help="read only the first N records")
    limit.add_argument("--seconds", type=duration, metavar="S", help="read only the first S seconds of the trace")


def reader_from_args(args: argparse.Namespace) -> TraceReader:
    """The reader of ``args.files`` that the options of :func:`add_trace_options` ask for."""
    from drtp.trace.reader import TraceReader

    limit_type, amount = (None, None)
    if args.requests is not None:
        limit_type, amount = "requests", args.requests
    elif args.seconds is not None:
        limit_type, amount = "seconds", args.seconds
    return TraceReader(
        args.files,
        fmt=args.format,
        skip_bad=args.skip_bad,
        sort_files=args.sort_files,
        limit_type=limit_type,
        amount=amount,
    )
