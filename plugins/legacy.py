"""Plugins written for the original trace player: a ``.py`` file with ``init(requests[, args])``.

The original master handed such a plugin the parsed trace as a time-ordered
list of dicts ``{'delay', 'uri', 'size', 'method', 'duration', 'client'}``
``delay`` being seconds since the first request, holding the
GET and PUT requests with a non-zero size (its ``get_requests`` kept nothing
else).  drtp builds exactly that list — the trace's ``limit`` applies to the
records read, before this filter — and calls ``init(requests, args)`` when the
function takes two parameters (``args`` is ``{}`` when the config has none),
``init(requests)`` otherwise.

Whatever ``init`` returns is kept: a dict becomes ``summary.json``, a list of
dicts or a pandas DataFrame becomes ``result.csv``.

A file may instead define ``Plugin``, a :class:`~drtp.plugins.base.SimPlugin`
subclass: it then runs like a built-in (the trace as columns, argument checks, sweeps).
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd

from drtp.errors import ConfigError, DrtpError
from drtp.plugins.base import SimPlugin, SimResult
from drtp.trace.records import TraceRecord

LEGACY_METHODS = ("GET", "PUT")


def is_plugin_path(name: str) -> bool:
    return name.endswith(".py") or "/" in name or "\\" in name


def load_module(path: Path) -> ModuleType:
    """Import a plugin file; errors name the file."""
    if path.is_dir():
        raise ConfigError(f"simulate.name: {path} is a directory, not a plugin .py file")
    if not path.is_file():
        raise ConfigError(f"simulate.name: plugin file {path} not found")
    spec = importlib.util.spec_from_file_location(f"drtp_user_plugin_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"simulate.name: {path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))  # the original ran plugins from their folder: allow sibling imports
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:  # the file as Python 3 cannot read it: name the line (Python 2 is the usual cause)
        where = f"{path}:{e.lineno}" if e.lineno else str(path)
        if construct := python2_construct(e):
            raise DrtpError(
                f"{where}: cannot load plugin: this is Python 2 code ({construct}); plugins run under Python 3: "
                f"convert it, e.g. pip install fissix && python -m fissix -w {path} (2to3's maintained fork)"
            ) from None
        raise DrtpError(f"{where}: cannot load plugin: SyntaxError: {e.msg}") from None
    except (Exception, SystemExit) as e:  # a user's module: report, never a traceback (nor a silent exit)
        raise DrtpError(f"{_where(path, e)}: cannot load plugin: {type(e).__name__}: {e}") from None
    finally:
        sys.path.remove(str(path.parent))
    if not callable(getattr(module, "init", None)) and user_plugin_class(module) is None:
        raise ConfigError(
            f"simulate.name: {path} has no init(requests) or init(requests, args) function and no Plugin class"
        )
    return module


# Python 2 lines Python 3 cannot parse, by what Python 3 says or what the line holds (the original's
# plugins were Python 2; its print statements and ``except X, e`` are what users meet first)
_PY2_MESSAGES = (
    ("Missing parentheses in call to 'print'", "print statement"),
    ("Missing parentheses in call to 'exec'", "exec statement"),
    ("multiple exception types must be parenthesized", "except X, e"),
    ("leading zeros in decimal integer literals", "octal literal 0NNN"),
    ("Function parameters cannot be parenthesized", "tuple parameter"),
)
_PY2_LINES = (
    (re.compile(r"^\s*raise\s+[\w.]+\s*,"), "raise X, message"),
    (re.compile(r"<>"), "<> operator"),
    (re.compile(r"`"), "backquotes"),
    (re.compile(r"\b\d+[lL]\b"), "long literal NNNL"),
    (re.compile(r"\b[uU][rR]['\"]"), "ur'' string"),
)


def python2_construct(e: SyntaxError) -> str | None:
    """The Python 2 construct that made Python 3 refuse a line (``"print statement"``), or None."""
    for text, construct in _PY2_MESSAGES:
        if text in (e.msg or ""):
            return construct
    for pattern, construct in _PY2_LINES:
        if e.text and pattern.search(e.text):
            return construct
    return None


def _where(path: Path, e: BaseException) -> str:
    """``path:line`` of the deepest line of the plugin file in the exception's traceback (else the path)."""
    here = path.resolve()
    lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if Path(f.filename).resolve() == here]
    return f"{path}:{lines[-1]}" if lines else str(path)


def user_plugin_class(module: ModuleType) -> type[SimPlugin] | None:
    """A drtp-style plugin in a user's file: a ``Plugin`` class derived from SimPlugin."""
    cls = getattr(module, "Plugin", None)
    return cls if isinstance(cls, type) and issubclass(cls, SimPlugin) else None


def legacy_requests(records: Iterable[TraceRecord]) -> list[dict]:
    """The original contract's request list: GET and PUT requests with size > 0, time-ordered."""
    out: list[dict] = []
    start: float | None = None
    for r in records:
        if r.method not in LEGACY_METHODS or r.size <= 0:
            continue
        t = r.time
        if start is None:
            start = t
        out.append(
            {
                "delay": t - start,
                "uri": r.uri,
                "size": r.size,
                "method": r.method,
                "duration": r.duration,
                "client": r.client,
            }
        )
    return out


def run_legacy(module: ModuleType, path: Path, records: Iterable[TraceRecord], args: dict[str, Any]) -> SimResult:
    """Call the plugin's ``init`` with the original request dicts and keep what it returns."""
    init = module.init
    try:
        n_params = len(inspect.signature(init).parameters)
    except (TypeError, ValueError):
        n_params = 2
    requests = legacy_requests(records)
    try:
        value = init(requests, args) if n_params >= 2 else init(requests)
    except (Exception, SystemExit) as e:
        raise DrtpError(f"{_where(path, e)}: plugin init() failed: {type(e).__name__}: {e}") from None
    summary: dict[str, Any] = {"plugin": str(path), "requests": len(requests)}
    tables: dict[str, pd.DataFrame] = {}
    if isinstance(value, dict):
        summary["result"] = value
    elif isinstance(value, pd.DataFrame):
        tables["result"] = value
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        tables["result"] = pd.DataFrame(value)
    elif value is not None:
        summary["result"] = repr(value)
    return SimResult(summary, tables, kind="custom")
