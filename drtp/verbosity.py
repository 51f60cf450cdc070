"""How much drtp logs: warnings only, unless ``-v`` or the config's ``verbose: true`` asks for more.

drtp's modules log under the ``drtp`` logger (``drtp.config``,
``drtp.master.outputs.original_output``, ``drtp.client``…).  Nothing is set up until
more than warnings is asked for, so a command that configures logging itself
(``drtp client``) keeps its own setup; once asked, one stderr handler on the
``drtp`` logger prints the records, and a later request only ever raises the
level (``-vv`` is not lowered by ``verbose: true``).
"""

from __future__ import annotations

import sys

LOGGER = "drtp"
FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def set_verbosity(level: int) -> None:
    """0: warnings only (nothing changes); 1: INFO; 2 or more: DEBUG.  Never lowers a level set before."""
    if level <= 0:
        return
    import logging  # here: a command that logs nothing starts without it

    wanted = logging.INFO if level == 1 else logging.DEBUG
    logger = logging.getLogger(LOGGER)
    if not any(getattr(h, "drtp_verbosity", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        handler.drtp_verbosity = True  # type: ignore[attr-defined]  # marks the handler this module added
        logger.addHandler(handler)
        logger.propagate = False  # a root handler set up elsewhere would print each record twice
    if logger.level == logging.NOTSET or logger.level > wanted:
        logger.setLevel(wanted)
