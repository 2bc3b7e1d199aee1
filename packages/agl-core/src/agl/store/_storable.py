"""What a store refuses to keep altered: lone surrogates and numbers that are not finite.

JSON bodies may carry ``NaN``, ``Infinity`` and escaped lone UTF-16 surrogates (``"\\ud800"``).
No database keeps them as they are (a non-finite number would come back as ``null``, a
surrogate fails to encode), so the store server refuses a body holding one with a 400 naming
the field, before anything is stored, instead of storing something else or failing with a 500;
the stores in this process refuse such rollouts and resources too (``InvalidInputError``).
"""

from __future__ import annotations

import math
from typing import Any

from agl._errors import InvalidInputError
from agl._text import valid_text

__all__ = ["refuse_unstorable", "unstorable_at"]


def refuse_unstorable(
    value: Any, path: str, error: type[InvalidInputError] = InvalidInputError
) -> None:
    """Raise ``error`` naming the first value of ``value`` (found at ``path``) that cannot be
    stored as it is; return when there is none."""
    found = unstorable_at(value, path)
    if found is not None:
        field, problem = found
        raise error(f"{field}: {problem}, which cannot be stored", field=field)


def unstorable_at(value: Any, path: str = "") -> tuple[str, str] | None:
    """The path (``a.b[2]``) of the first value in a JSON value that cannot be stored as it
    is, and what is wrong with it; None when every value can."""
    if isinstance(value, str):
        if valid_text(value) is not value:
            return path, "the text holds a lone UTF-16 surrogate (such as \\ud800)"
    elif isinstance(value, float):
        if not math.isfinite(value):
            return path, f"{value} is not a finite number"
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if (found := unstorable_at(item, f"{path}[{index}]")) is not None:
                return found
    elif isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and valid_text(key) is not key:
                return valid_text(where), "the key holds a lone UTF-16 surrogate (such as \\ud800)"
            if (found := unstorable_at(item, where)) is not None:
                return found
    return None
