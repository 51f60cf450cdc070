"""Untrusted data into typed structs, with an error that names the key.

Config files, simulation arguments, workload profiles and pricing tables are
YAML a user wrote; each is validated by msgspec against a struct.  msgspec's
own message (``Expected `int` >= 1, got `int` - at `$.client_info.port```) is
written for programmers; :func:`explain` turns it into the line a user reads
(``key 'client_info.port': expected an integer ≥ 1, got 0``), and
:func:`convert` validates and raises that line as a :class:`ConfigError`.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Annotated, Any, Literal, TypeVar

import msgspec

from drtp.errors import ConfigError

__all__ = ["convert", "explain"]

T = TypeVar("T")

_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "true or false",
    "array": "a list",
    "object": "a mapping of keys",
    "null": "nothing",
}
_BACKTICKED = re.compile(r"`([^`]+)`")
_MISSING = object()
_PATH_PART = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def convert(data: Any, into: type[T], where: str, prefix: str = "", list_allowed: bool = False) -> T:
    """``data`` validated into ``into``; anything wrong is a ConfigError ``"{where}: key '…': …"``.

    ``prefix`` is put before every key path (``simulate.args.``) when ``data``
    sits inside a larger file; ``list_allowed`` adds the keys that would do to
    an unknown-key error.
    """
    try:
        return msgspec.convert(data, into)
    except msgspec.ValidationError as e:
        text = explain(e, data, prefix=prefix, root=into)
        if list_allowed and text.startswith("unknown key"):
            text += f" (allowed: {', '.join(_fields_at(_path_of(str(e)), into))})"
        raise ConfigError(f"{where}: {text}") from None


def explain(
    e: msgspec.ValidationError, data: Any = _MISSING, prefix: str = "", root: type | None = None, plain: bool = False
) -> str:
    """Turn msgspec's message into 'unknown key x.y' / "key 'x.y': expected an integer ≥ 1, got 0".

    ``data`` is what was validated (to show the value refused), ``prefix`` is
    put before every key path (``simulate.args.``), ``root`` is the struct
    validated against (to list a key's choices).  ``plain`` keeps msgspec's
    own words and only drops its ``$`` root marker: a trace record's fields
    are the trace format's dotted names (``http.response.status``), which
    read as they are.
    """
    msg = str(e)
    if plain:
        msg = msg.replace("`$.", "`").replace(" - at `$`", "")
        return msg.replace("Object missing required field", "missing field")
    key = re.fullmatch(r"Expected `str` - at `key` in `\$\.?(.*)`", msg)
    if key:
        return f"key '{_join(prefix, key.group(1)) or '(top level)'}': every key in it must be a name (a string)"
    m = re.match(r"(.*?)(?: - at `\$(.*)`)?$", msg)
    text, at = (m.group(1), (m.group(2) or "")) if m else (msg, "")
    at = at.lstrip(".")
    name = _join(prefix, at) or "(top level)"
    field = re.search(r"field `([^`]+)`", text)
    if text.startswith("Object contains unknown field") and field:
        return f"unknown key '{_join(_join(prefix, at), field.group(1))}'"
    if text.startswith("Object missing required field") and field:
        return f"missing key '{_join(_join(prefix, at), field.group(1))}'"
    detail = text[0].lower() + text[1:] if text else "invalid value"
    value = _value_at(data, at)
    wrong_type = re.search(r", got `[^`]+`$", detail) is not None
    detail = re.sub(r", got `[^`]+`$", "", detail)
    detail = _BACKTICKED.sub(_words, detail).replace(">=", "≥").replace("<=", "≤")
    detail = re.sub(r"(\d)\.0\b", r"\1", detail)  # msgspec's bound 0.0 of a float key reads as 0
    if detail.startswith("invalid enum value"):
        allowed = _allowed_values(at, root) if root is not None else []
        if allowed:
            return f"key '{name}': {_shown(value)} is not one of {', '.join(allowed)}"
        return f"key '{name}': {detail}"
    if value is not _MISSING and not isinstance(value, (dict, list)):
        detail += f", got {_shown(value)}"
    elif wrong_type and isinstance(value, (dict, list)):  # a whole section is too long to show: its type says enough
        detail += f", got {type(value).__name__}"
    return f"key '{name}': {detail}"


def _shown(value: Any, width: int = 60) -> str:
    """A value as an error line shows it: its repr, cut short (a key may hold a whole file)."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _words(match: re.Match) -> str:
    """msgspec's `int | null` as 'an integer or nothing'."""
    return " or ".join(_TYPE_WORDS.get(t.strip(), t.strip()) for t in match.group(1).split("|"))


def _path_of(msg: str) -> str:
    """msgspec's path of the object an error is in (``a.b[2]``; ``""`` at the top)."""
    m = re.search(r" - at `\$(.*)`$", msg)
    return m.group(1).lstrip(".") if m else ""


def _value_at(data: Any, at: str) -> Any:
    """The value at msgspec's path (``a.b[2].c``) in the data given, or ``_MISSING``."""
    for m in _PATH_PART.finditer("." + at if at else ""):
        key, index = m.group(1), m.group(2)
        if index is not None and isinstance(data, list) and int(index) < len(data):
            data = data[int(index)]
        elif key is not None and isinstance(data, dict) and key in data:
            data = data[key]
        else:
            return _MISSING
    return data


def _type_at(at: str, root: type) -> Any:
    """The type declared at msgspec's path, with Optional, list and Annotated taken off."""
    tp: Any = root
    for m in _PATH_PART.finditer("." + at if at else ""):
        if m.group(2) is not None:
            continue  # a list index: the element type was unwrapped below
        hints = typing.get_type_hints(tp, include_extras=True) if isinstance(tp, type) else {}
        tp = hints.get(m.group(1))
        for _ in range(3):  # unwrap Optional / list / Annotated down to the key's own type
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if typing.get_origin(tp) in (typing.Union, types.UnionType, list, Annotated) and args:
                tp = args[0]
    return tp


def _allowed_values(at: str, root: type) -> list[str]:
    """The choices of the Literal key at msgspec's path, for an error that says what would do."""
    tp = _type_at(at, root)
    return [str(a) for a in typing.get_args(tp)] if typing.get_origin(tp) is Literal else []


def _fields_at(at: str, root: type) -> tuple[str, ...]:
    """The keys of the struct at msgspec's path, as a file spells them."""
    return getattr(_type_at(at, root), "__struct_encode_fields__", ())


def _join(at: str, key: str) -> str:
    """``a.b`` + ``c``; a prefix that ends in a dot (``simulate.args.``) takes the key as is."""
    if not at or not key:
        return key or at.rstrip(".")
    return f"{at}{key}" if at.endswith(".") else f"{at}.{key}"
