"""Reading the YAML files drtp is given (configs, profiles, pricing tables), bounded.

Every YAML file a user hands drtp goes through :func:`read_yaml`, so every one
gets the same limits and the same one-line errors.  YAML can describe far more
than it spells out: an alias (``*a``) repeats a whole anchored subtree, so ten
lines of nested aliases ("billion laughs") stand for 10^9 values and hang
whatever walks them, and a line of 100,000 ``[`` recurses Python's stack away.
The loader therefore counts the values a document expands to (aliases
included) and the depth of nesting while it composes the document, and stops
at the first value over a limit — long before any walk of the data starts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from drtp.errors import ConfigError

MAX_DEPTH = 64  # nesting of mappings and lists; drtp's deepest file needs 5
MAX_VALUES = 100_000  # values after aliases are expanded; a large sweep config has a few hundred
MAX_BYTES = 8 << 20  # a config is a few KB; anything this large is not one
_SPACES = re.compile(r"\s+")


class _LimitError(yaml.MarkedYAMLError):
    """A document over one of the loader's limits (reported like a syntax error, with its position)."""


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with a limit on nesting depth and on the values aliases expand to."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._values = 0
        self._weights: dict[int, int] = {}  # id(node) -> values it stands for, for aliases to it

    def _count(self, n: int, mark: yaml.Mark) -> None:
        self._values += n
        if self._values > MAX_VALUES:
            raise _LimitError(
                problem=f"more than {MAX_VALUES:,} values once aliases are expanded (an alias bomb?)",
                problem_mark=mark,
            )

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        """Compose as PyYAML does, counting each value once per place it appears and the depth."""
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            weight = self._weights.get(id(node))
            if weight is None:  # the alias sits inside its own anchor: a structure that contains itself
                problem = f"alias *{event.anchor} refers to a value that contains it"
                raise _LimitError(problem=problem, problem_mark=event.start_mark)
            self._count(weight, event.start_mark)
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _LimitError(problem=f"nested deeper than {MAX_DEPTH} levels", problem_mark=event.start_mark)
        before = self._values
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._count(1, event.start_mark)
        self._weights[id(node)] = self._values - before
        return node


def _one_line(text: object) -> str:
    return _SPACES.sub(" ", str(text)).strip()


def parse_yaml(text: str, source: str) -> Any:
    """The data of one YAML document; a ConfigError ``source:line:col: …`` when it is not valid or too big."""
    loader = None
    try:
        loader = BoundedLoader(text)  # the reader checks the characters here already
        return loader.get_single_data()
    except yaml.reader.ReaderError as e:
        raise ConfigError(
            f"{source}: not valid YAML: character #x{e.character:04x} at position {e.position} is not allowed"
        ) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = _one_line(e.problem or e.context or "invalid")
        context = f" ({_one_line(e.context)})" if e.context and e.problem else ""
        raise ConfigError(f"{where}: not valid YAML: {problem}{context}") from None
    except yaml.YAMLError as e:  # errors without a position (e.g. a bad character in the reader)
        raise ConfigError(f"{source}: not valid YAML: {_one_line(e)}") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise ConfigError(f"{source}: not valid YAML: {_one_line(e)}") from None
    except RecursionError:  # the depth limit should come first; never a traceback all the same
        raise ConfigError(f"{source}: not valid YAML: nested too deep") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_text(path: Path) -> str:
    """A small UTF-8 text file (a leading BOM is read past); one-line errors for what is not one."""
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory, not a YAML file")
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror or type(e).__name__})") from None
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_BYTES >> 20} MiB: not a YAML config")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}): not a YAML file") from None


def read_yaml(path: str | Path) -> Any:
    """A YAML file's data (None when it is empty); unreadable, invalid or oversized files raise a ConfigError."""
    path = Path(path)
    return parse_yaml(read_text(path), str(path))


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """A YAML file whose top level must be a mapping of keys (an empty file is an empty mapping)."""
    data = read_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a single value ({type(data).__name__})"
        raise ConfigError(f"{path}: the top level must be a mapping of keys (key: value), not {kind}")
    for key in data:
        if not isinstance(key, str):
            raise ConfigError(f"{path}: key {key!r} at the top level is not a name")
    return data
