"""Numbers as JSON Schema means them, for the fields of agl's models and HTTP bodies.

Pydantic's lax mode takes ``true`` as 1 and ``"7"`` as 7, which the OpenAPI documents
(``"type": "integer"``) do not allow; its strict mode refuses ``7.0``, which JSON Schema counts
as an integer. :data:`Integer` takes exactly what the document says: an integer, or a number
with no fractional part; never a boolean or text. For non-integers, ``StrictFloat`` already
does (it takes integers, and neither booleans nor text).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

__all__ = ["NOT_BOOL_OR_TEXT", "Integer"]


def _not_bool_or_text(value: Any) -> Any:
    if isinstance(value, bool | str | bytes):
        raise PydanticCustomError(
            "int_type", "Input should be a whole number, not {kind}", {"kind": type(value).__name__}
        )
    return value


NOT_BOOL_OR_TEXT = BeforeValidator(_not_bool_or_text)
"""The check itself, for an ``Annotated[int, Field(ge=1), NOT_BOOL_OR_TEXT] | None`` (a bound put
after it in an optional field would reach the JSON schema as ``ge``, not ``minimum``)."""

Integer = Annotated[int, NOT_BOOL_OR_TEXT]
"""An integer field that refuses booleans and text (``7.0`` is 7, as in JSON Schema)."""
