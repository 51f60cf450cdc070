"""Progress of long work on stderr: a tqdm bar on a terminal, plain lines where batch jobs can read them.

A bar redraws one line with carriage returns, which a Slurm job's log or a
``2> file`` redirect turns into noise, and tqdm switches itself off there: a
long run would print nothing at all.  Off a terminal, :func:`progress` prints
one plain line every :attr:`ProgressSettings.interval_s` seconds instead
(done/total, rate, failures when the caller reports them, elapsed and ETA),
and a final line at the end when the caller asks for one or a line was printed
before — a short command stays silent, so that a refused input still gets
exactly one line on stderr.

The commands that run for long (``run``, ``warmup``, ``experiment``,
``demo``) set the cadence, or silence progress, with :func:`configure` from
their ``--progress-interval`` and ``-q`` options (drtp.cli_options).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO, TypeVar

T = TypeVar("T")

DEFAULT_INTERVAL_S = 10.0
WRAP_STEP = 256  # items an iterator wrapper counts before it reports them (and looks at the clock) once


@dataclass(frozen=True)
class ProgressSettings:
    """How progress shows, for every bar of this process."""

    interval_s: float = DEFAULT_INTERVAL_S  # seconds between plain lines off a terminal
    quiet: bool = False  # no progress at all (neither bar nor lines)


_settings = ProgressSettings()


def configure(interval_s: float | None = None, quiet: bool = False) -> ProgressSettings:
    """Set how the bars of this process show (a command calls it once, from its options); returns the settings."""
    global _settings
    _settings = ProgressSettings(DEFAULT_INTERVAL_S if interval_s is None else interval_s, quiet)
    return _settings


def settings() -> ProgressSettings:
    return _settings


def clock_text(seconds: float) -> str:
    """``0:07``, ``12:30``, ``3:02:09``: a duration as a clock reads it (whole seconds)."""
    s = max(0, int(seconds))
    hours, rest = divmod(s, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def rate_text(per_s: float) -> str:
    """A rate with the digits a reader needs: ``1,240``, ``12.5``, ``0.25``."""
    if per_s >= 100:
        return f"{per_s:,.0f}"
    if per_s >= 1:
        return f"{per_s:.1f}"
    return f"{per_s:.2f}"


@dataclass(frozen=True)
class Snapshot:
    """Where a piece of work stands at one moment."""

    desc: str
    unit: str
    done: int
    total: int | None
    failed: int | None  # None: the caller does not count failures
    elapsed_s: float


def format_line(snap: Snapshot, final: bool = False) -> str:
    """One plain progress line, e.g. ``replay: 12,400/50,000 (24.8%) 1,240 req/s, 3 failed, elapsed 0:10, ETA 0:30``.

    The rate is the average since the start; the ETA assumes it holds for the rest.
    """
    rate = snap.done / snap.elapsed_s if snap.elapsed_s > 0 else 0.0
    parts = [f"{snap.desc}: {snap.done:,}"]
    if snap.total:
        parts[0] += f"/{snap.total:,} ({100 * snap.done / snap.total:.1f}%)"
    elif snap.total is not None:  # nothing to do at all
        parts[0] += "/0"
    parts[0] += f" {rate_text(rate)} {snap.unit}/s"
    if snap.failed is not None:
        parts.append(f"{snap.failed:,} failed")
    parts.append(f"elapsed {clock_text(snap.elapsed_s)}")
    if final:
        parts.append("finished")
    elif snap.total is not None:
        left = snap.total - snap.done
        parts.append("ETA " + (clock_text(left / rate) if rate > 0 and math.isfinite(left / rate) else "?"))
    return ", ".join(parts)


class Progress:
    """What a caller of :func:`progress` advances; prints nothing itself (the quiet form)."""

    def __init__(self, total: int | None) -> None:
        self.total = total
        self.done = 0
        self.failed: int | None = None

    def update(self, n: int = 1) -> None:
        self.done += n

    def set_failed(self, failed: int) -> None:
        """The failures so far (replay, warmup): they show on the bar and in the lines."""
        self.failed = failed

    def tick(self) -> None:
        """Called while nothing advances (waiting for results): lets a plain line come on time anyway."""

    def wrap(self, items: Iterable[T]) -> Iterator[T]:
        """Yield items, counting each (reported in steps of WRAP_STEP, so a cheap item stays cheap)."""
        pending = 0
        try:
            for item in items:
                yield item
                pending += 1
                if pending == WRAP_STEP:
                    self.update(pending)
                    pending = 0
        finally:
            if pending:
                self.update(pending)

    def close(self, completed: bool) -> None:
        """The work ended (``completed`` False: it ended with an exception, which says what happened)."""


class PlainLines(Progress):
    """Off a terminal: one plain line every ``interval_s`` seconds of ``clock``, a final line at the end."""

    def __init__(
        self,
        total: int | None,
        desc: str,
        unit: str,
        interval_s: float,
        final_line: bool,
        stream: TextIO,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(total)
        self.desc = desc
        self.unit = unit
        self.interval_s = interval_s
        self.final_line = final_line
        self.stream = stream
        self.clock = clock
        self.started = clock()
        self.next_line_at = self.started + interval_s
        self.lines = 0

    def snapshot(self) -> Snapshot:
        return Snapshot(self.desc, self.unit, self.done, self.total, self.failed, self.clock() - self.started)

    def update(self, n: int = 1) -> None:
        self.done += n
        self.tick()

    def tick(self) -> None:
        now = self.clock()
        if now >= self.next_line_at:
            self._print(format_line(self.snapshot()))
            self.next_line_at += self.interval_s
            if self.next_line_at <= now:  # checked late: the next line an interval after this one, not a burst
                self.next_line_at = now + self.interval_s

    def close(self, completed: bool) -> None:
        if completed and (self.final_line or self.lines):
            self._print(format_line(self.snapshot(), final=True))

    def _print(self, line: str) -> None:
        self.lines += 1
        print(line, file=self.stream, flush=True)


class Bar(Progress):
    """On a terminal: tqdm's bar, failures in its postfix."""

    def __init__(self, total: int | None, desc: str, unit: str, stream: TextIO) -> None:
        super().__init__(total)
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc=desc, unit=unit, mininterval=0.5, unit_scale=True, file=stream)

    def update(self, n: int = 1) -> None:
        self.done += n
        self.bar.update(n)

    def set_failed(self, failed: int) -> None:
        if failed != self.failed:
            self.failed = failed
            self.bar.set_postfix(failed=failed, refresh=False)

    def close(self, completed: bool) -> None:
        self.bar.close()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


@contextmanager
def progress(
    total: int | None,
    desc: str,
    unit: str = "it",
    *,
    final_line: bool = False,
    quiet: bool = False,
    stream: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[Progress]:
    """A progress display for work of ``total`` items (None: unknown) on stderr (or ``stream``).

    ``final_line``: off a terminal, always end with a line (long runs whose log should say how they ended);
    otherwise the final line comes only after other lines.  ``quiet``: show nothing (nor does ``-q``).
    """
    stream = sys.stderr if stream is None else stream
    s = _settings
    if s.quiet or quiet:
        shown: Progress = Progress(total)
    elif _is_terminal(stream):
        shown = Bar(total, desc, unit, stream)
    else:
        shown = PlainLines(total, desc, unit, s.interval_s, final_line, stream, clock)
    completed = False
    try:
        yield shown
        completed = True
    finally:
        shown.close(completed)
