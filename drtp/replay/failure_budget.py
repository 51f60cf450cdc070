"""``max_failed``: how many failed trace requests a run may have and still exit 0.

A run against a real registry under load rarely gets every request through, and
a wrapper script needs to say how many failures it accepts before the run's
numbers stop meaning anything: an absolute count (``3``) or a share of the
trace's requests (``"0.5%"``).  Parsed strictly, because a typo silently read as
"anything goes" would turn every broken run into a success.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

_COUNT = re.compile(r"\d+")
_PERCENT = re.compile(r"(\d+(?:\.\d+)?|\.\d+)\s*%")
EXPECTED = "a count (an integer ≥ 0) or a percentage of the trace's requests such as '1%' or '0.5%'"


@dataclass(frozen=True)
class FailureBudget:
    """Failed trace requests tolerated: ``count`` of them, or ``percent`` of the trace's requests."""

    count: int | None = None
    percent: Fraction | None = None  # exact, so that "100%" of any total allows every request

    def limit(self, total: int) -> int:
        """The most failed requests allowed among ``total`` trace requests."""
        if self.percent is None:
            return self.count or 0
        return math.floor(self.percent * total / 100)

    def allows(self, failed: int, total: int) -> bool:
        return failed <= self.limit(total)

    def __str__(self) -> str:
        if self.percent is None:
            return str(self.count or 0)
        return f"{float(self.percent):g}%"


def parse_max_failed(value: object) -> FailureBudget:
    """A budget from the config's value (int or str) or the option's text; ValueError says what is wrong.

    The message does not name the key or option: the caller does, since it knows which one it read.
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"expected {EXPECTED}, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"expected {EXPECTED}, got {value} (negative)")
        return FailureBudget(count=value)
    text = value.strip()
    if _COUNT.fullmatch(text):
        return FailureBudget(count=int(text))
    m = _PERCENT.fullmatch(text)
    if not m:
        raise ValueError(f"expected {EXPECTED}, got {value!r}")
    percent = Fraction(m.group(1))
    if percent > 100:
        raise ValueError(f"expected {EXPECTED}, got {value!r} (more than 100%)")
    return FailureBudget(percent=percent)
