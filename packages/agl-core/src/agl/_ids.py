"""Identifiers: the one rule for every id a client chooses and a store takes.

Rollout, attempt, resource-set, worker and request ids, metrics run and metric names, resource
names and a rollout query's ``search`` are checked by :func:`check_id` wherever they enter:
every store backend's Python API, the store server's bodies, queries and paths (its OpenAPI
document states the same rule, through :data:`Id` and :data:`SegmentId`), the gateway's URL
path, OTLP spans and the CLI. The rule:

- text of 1 to :data:`MAX_ID_LENGTH` (256) characters;
- no control characters (``U+0000``-``U+001F``, ``U+007F``-``U+009F``; NUL included): no store
  keeps NUL in text (PostgreSQL refuses it) and the others garble logs and terminals;
- an id the HTTP API addresses as one URL path segment (rollout, attempt and resource-set ids:
  ``segment=True``) also holds no ``/``, ``%``, ``?``, ``#`` or whitespace, and is not ``.`` or
  ``..``.

A refusal is an :class:`~agl.InvalidInputError` naming the field and what is wrong, with the
value shortened (a 100,000-character id is not echoed back whole).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

from agl._errors import InvalidInputError

__all__ = [
    "ID_PATTERN",
    "ID_SCHEMA",
    "MAX_ID_LENGTH",
    "SEGMENT_PATTERN",
    "SEGMENT_SCHEMA",
    "Id",
    "PathId",
    "SegmentId",
    "check_id",
    "check_ids",
    "id_problem",
    "keys_are_ids",
    "shown",
]

MAX_ID_LENGTH = 256
"""The longest id, in characters."""

_CONTROL = r"\x00-\x1f\x7f-\x9f"
ID_PATTERN = f"^[^{_CONTROL}]+$"
"""An id as a regular expression (JSON Schema's dialect too): no control characters."""

_SEGMENT_CHARS = r"/%?#\s" + _CONTROL
SEGMENT_PATTERN = (
    f"^(?:[^.{_SEGMENT_CHARS}]|[^.{_SEGMENT_CHARS}][^{_SEGMENT_CHARS}]"
    f"|[^{_SEGMENT_CHARS}][^.{_SEGMENT_CHARS}]|[^{_SEGMENT_CHARS}]{{3,}})$"
)
"""An id that is one URL path segment as it is: no ``/``, ``%``, ``?``, ``#``, whitespace or
control characters, and not ``.`` or ``..``."""

_CONTROL_CHAR = re.compile(f"[{_CONTROL}]")
_SEGMENT = re.compile(SEGMENT_PATTERN)
_SEGMENT_BAD = re.compile(f"[{_SEGMENT_CHARS}]")
_SEGMENT_RULE = (
    "an id must be addressable as one URL path segment (no '/', '%', '?', '#', whitespace or "
    "control characters; not '.' or '..')"
)


def id_problem(value: object, *, segment: bool = False) -> str | None:
    """What is wrong with ``value`` as an id, as a phrase ("is empty"), or None if nothing is.

    Args:
        value: The id to check.
        segment: Whether the id must also be one URL path segment (rollout, attempt and
            resource-set ids).
    """
    if not isinstance(value, str):
        return f"must be text, got {type(value).__name__}"
    if not value:
        return "is empty"
    if len(value) > MAX_ID_LENGTH:
        return f"is {len(value):,} characters long; an id has at most {MAX_ID_LENGTH}"
    control = sorted(set(_CONTROL_CHAR.findall(value)))
    if control:
        shown = ", ".join(repr(char) for char in control[:5])
        return f"holds control characters ({shown}); an id has none"
    if segment and not _SEGMENT.fullmatch(value):
        bad = sorted(set(_SEGMENT_BAD.findall(value)))
        what = f"holds {', '.join(repr(char) for char in bad)}" if bad else f"is {value!r}"
        return f"{what}: {_SEGMENT_RULE}"
    return None


def check_id(value: Any, field: str, *, segment: bool = False, what: str | None = None) -> str:
    """Return ``value`` if it is an id (see the module docstring), else raise.

    Args:
        value: The id to check.
        field: The field that holds it, as the error names it.
        segment: Whether the id must also be one URL path segment.
        what: What the message calls the id (default: ``field``).

    Raises:
        InvalidInputError: naming ``field``, what is wrong and the (shortened) value.
    """
    problem = id_problem(value, segment=segment)
    if problem is not None:
        raise InvalidInputError(
            f"{what or field} {problem} (got {shown(value)})", field=field, value=value
        )
    return value  # type: ignore[no-any-return]


def check_ids(
    values: Sequence[Any], field: str, *, segment: bool = False, item_field: str = ""
) -> list[str]:
    """Check each id of a list; the error names ``field[index]`` (``field[index].item_field``
    when the ids are a field of each item)."""
    suffix = f".{item_field}" if item_field else ""
    return [
        check_id(value, f"{field}[{index}]{suffix}", segment=segment)
        for index, value in enumerate(values)
    ]


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters: how a refused value is echoed."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _validator(segment: bool) -> AfterValidator:
    def check(value: str) -> str:
        problem = id_problem(value, segment=segment)
        if problem is not None:
            raise PydanticCustomError("agl_id", "{problem}", {"problem": problem})
        return value

    return AfterValidator(check)


_SCHEMA = {"type": "string", "minLength": 1, "maxLength": MAX_ID_LENGTH}
ID_SCHEMA: dict[str, Any] = {**_SCHEMA, "pattern": ID_PATTERN}
"""The JSON schema of an id."""

Id = Annotated[str, _validator(False), WithJsonSchema(ID_SCHEMA)]
"""A field holding an id (a worker id, a run name): pydantic checks it by :func:`id_problem`
and the JSON schema states the same rule."""

SEGMENT_SCHEMA: dict[str, Any] = {**_SCHEMA, "pattern": SEGMENT_PATTERN}
"""The JSON schema of an id that is one URL path segment."""

SegmentId = Annotated[str, _validator(True), WithJsonSchema(SEGMENT_SCHEMA)]
"""A field holding an id that is one URL path segment (rollout, attempt and resource-set ids)."""

PathId = Annotated[str, WithJsonSchema(SEGMENT_SCHEMA)]
"""A path parameter documented as :data:`SegmentId` but checked by the route itself (with
:func:`check_id`), so that the refusal is in the server's own error format (the gateway's
wires)."""


def keys_are_ids(schema: dict[str, Any]) -> None:
    """Say in an object's JSON schema that its keys are ids (for ``dict[Id, ...]``): pydantic
    states a key's pattern as ``patternProperties``, which lets other keys through."""
    pattern_properties = schema.pop("patternProperties", {})
    if pattern_properties:
        schema["additionalProperties"] = next(iter(pattern_properties.values()))
    schema["propertyNames"] = ID_SCHEMA
