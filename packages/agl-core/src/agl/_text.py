"""Text every store and wire can carry: lone UTF-16 surrogates replaced.

Python strings may hold lone surrogates (``"\\ud800"``), which JSON parsers produce from an
escaped ``\\ud800`` and which no UTF-8 encoder accepts: a span holding one cannot be stored in
SQLite or PostgreSQL or sent as JSON, and would take the good spans of its batch down with it.
Spans are made valid when they are built, each lone surrogate replaced by U+FFFD.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["valid_json", "valid_text"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (``text`` itself when it has none)."""
    if text.isascii():  # the common case, checked without encoding a copy
        return text
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
