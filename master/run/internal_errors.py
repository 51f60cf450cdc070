"""What a bug in drtp becomes once a run is under way: the run's figures kept, the bug named, exit 3.

An unexpected exception (not a :class:`~drtp.errors.DrtpError`: a bug) in the master's run or in one of
its outputs — requests.csv and summary.json (master.outputs.results), stats_history.csv (master.outputs.stats_history),
the replayer's health (master.outputs.replayer_health), the registries' metrics (master.outputs.registry_metrics), live
metrics, the original's results file — must cost a figure, never the run.  A bug in the master's own
loop stops the run and cancels it on the client nodes (master.run.replay); one on an output's own thread stops that
output only.  Either way every other output still closes, summary.json is written from what arrived,
``complete: false`` with the error named, and the command exits 3.  :class:`InternalErrors` is the run's record of them:
each is named once on stderr (its type and message, one line, the run's secrets masked), its traceback
goes to ``internal-errors.txt`` in the run directory for a bug report, and an output that failed is not
called again (:meth:`InternalErrors.step`): its closing step would run the code that just failed.
"""

from __future__ import annotations

import base64
import sys
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from drtp.errors import DrtpError, RunError, one_line

T = TypeVar("T")

TRACEBACKS_FILE = "internal-errors.txt"
MAX_LINE = 300  # characters of an error's line: the type and the start of the message
MASK = "***"


class InternalRunError(RunError):
    """A bug in drtp stopped the run or cost one of its outputs (exit 3); summary.json is marked incomplete.

    A series of runs (an experiment, repetitions, a ramp) stops after it: the next part must not start
    while the failed one's nodes may still send, nor meet the same bug blindly."""


def error_line(e: BaseException, secrets: Iterable[str] = ()) -> str:
    """``Type: message`` in one line of at most :data:`MAX_LINE` characters, each of ``secrets`` (and its
    base64 form, as a basic-auth header carries it) masked."""
    text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    return one_line(_masked(text, secrets))[:MAX_LINE]


def _masked(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK).replace(base64.b64encode(secret.encode()).decode(), MASK)
    return text


class InternalErrors:
    """The bugs met by one run, by where they happened (``"replay"``, ``"stats history"``…): each named once."""

    def __init__(self, out_dir: Path, secrets: Callable[[], Iterable[str]] = tuple) -> None:
        """``secrets``: the values no line or traceback may show (the nodes' token, the registries' passwords)."""
        self.path = out_dir / TRACEBACKS_FILE
        self.secrets = secrets
        self.errors: dict[str, str] = {}  # where -> its first error's line

    def __bool__(self) -> bool:
        return bool(self.errors)

    def add(self, where: str, e: BaseException) -> None:
        """Record ``e`` (a bug) in ``where``: its line on stderr and in summary.json, its traceback in the file."""
        if where in self.errors:
            return
        secrets = [s for s in self.secrets() if s]
        self.errors[where] = line = error_line(e, secrets)
        kept = f"traceback in {self.path}"
        try:
            with open(self.path, "a") as f:
                f.write(f"{where}:\n" + _masked("".join(traceback.format_exception(e)), secrets) + "\n")
        except OSError as err:
            kept = f"its traceback could not be written to {self.path}: {err.strerror or err}"
        print(f"drtp: internal error in {where}: {line} (a bug in drtp; {kept})", file=sys.stderr, flush=True)

    def step(self, where: str, fn: Callable[..., T], *args) -> T | None:
        """``fn(*args)``, unless ``where`` failed before (None then); a bug in it is recorded, not raised (None).

        A :class:`DrtpError` (a failed write, a refused path) is no bug: it goes on up as before."""
        if where in self.errors:
            return None
        try:
            return fn(*args)
        except DrtpError:
            raise
        except Exception as e:  # noqa: BLE001 - a bug costs this output, never the others
            self.add(where, e)
            return None

    def summary(self) -> dict:
        """summary.json's ``internal_errors`` (empty when none)."""
        return {"internal_errors": dict(self.errors)} if self.errors else {}

    def describe(self) -> str:
        """The errors in a few words for ``incomplete_reason``: where, and the first one's line."""
        where, line = next(iter(self.errors.items()))
        more = f" (and in {', '.join(list(self.errors)[1:])})" if len(self.errors) > 1 else ""
        return f"internal error in {where} ({line}){more}"
