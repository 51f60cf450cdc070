"""Progress bars on stderr for long work (tqdm; silent when stderr is not a terminal)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


class _Bar:
    def __init__(self, bar: tqdm) -> None:
        self.bar = bar

    def wrap(self, items: Iterable[T]) -> Iterator[T]:
        """Yield items, advancing the bar by one each."""
        for item in items:
            yield item
            self.bar.update(1)

    def update(self, n: int = 1) -> None:
        self.bar.update(n)


@contextmanager
def progress(total: int | None, desc: str, unit: str = "it"):
    bar = tqdm(total=total, desc=desc, unit=unit, disable=None, mininterval=0.5, unit_scale=True)
    try:
        yield _Bar(bar)
    finally:
        bar.close()
