"""Text every store and wire can carry: lone UTF-16 surrogates replaced.

Python strings may hold lone surrogates (``"\\ud800"``), which JSON parsers produce from an
escaped ``\\ud800`` and which no UTF-8 encoder accepts: a span holding one cannot be stored in
SQLite or PostgreSQL or sent as JSON, and would take the good spans of its batch down with it.
Spans are made valid when they are built, each lone surrogate replaced by U+FFFD.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["lone_surrogate_at", "valid_json", "valid_text"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (``text`` itself when it has none)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def valid_json(value: Any) -> Any:
    """A JSON value with :func:`valid_text` applied to every string and key (the same object
    when nothing needed replacing)."""
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, list):
        if not any(isinstance(item, str | list | dict) for item in value):
            return value  # numbers: token ids, logprobs
        items = [valid_json(item) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if isinstance(value, dict):
        pairs = [(valid_text(k), valid_json(v)) for k, v in value.items()]
        same = all(
            k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, value.items(), strict=True)
        )
        return value if same else dict(pairs)
    return value


def lone_surrogate_at(value: Any, path: str = "") -> str | None:
    """The path (``a.b[2]``) of the first string or key in a JSON value that holds a lone
    surrogate, or None: for servers that refuse such text rather than store it altered."""
    if isinstance(value, str):
        return None if valid_text(value) is value else path
    if isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, str | list | dict) and (
                found := lone_surrogate_at(item, f"{path}[{index}]")
            ):
                return found
    elif isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and valid_text(key) is not key:
                return valid_text(where)
            if found := lone_surrogate_at(item, where):
                return found
    return None
