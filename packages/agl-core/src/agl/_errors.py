"""The exceptions agl raises.

Every error agl raises on purpose derives from :class:`AglError`, so one ``except AglError``
catches them all. The hierarchy::

    AglError
    ├── InvalidInputError        bad input: names the field, the value and what was expected
    │   └── TemplateFormatError  a prompt template could not be filled in
    ├── NotFoundError            an id the store does not know (rollout, attempt, resources)
    ├── ConflictError            a write the current state forbids (e.g. a late result from a
    │                            superseded attempt, a transition out of a final status)
    ├── UnauthorizedError        the store server wants a bearer token this client did not send
    ├── StoreUnavailableError    the store cannot serve now, after the client's retries: retry later
    │   └── StoreFullError       the store's disk is full: nothing of the write was kept; retry
    │                            once the operator has made room
    └── StoreError               anything else a store reports (a server-side failure)

The HTTP store server maps each to a 4xx status code (``StoreError`` to 500; the two
retryable ones to 503 with a ``Retry-After`` header) with a JSON body
``{"error": {"type": ..., "message": ..., "field": ..., "value": ...}}``; the HTTP client turns
that body back into the same exception class, so code behaves the same against every backend.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "AglError",
    "ConflictError",
    "InvalidInputError",
    "NotFoundError",
    "StoreError",
    "StoreFullError",
    "StoreUnavailableError",
    "TemplateFormatError",
    "UnauthorizedError",
]


class AglError(Exception):
    """Base class of every error agl raises on purpose.

    Attributes:
        message: What went wrong, in one sentence a user can act on.
        field: The dotted path of the offending input field (``spans[3].trace_id``), if any.
        value: The offending value, if it is small enough to show.
    """

    status_code: int = 500

    def __init__(self, message: str, *, field: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.value = value

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-able error body the HTTP server sends for this error."""
        body: dict[str, Any] = {"type": type(self).__name__, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        if self.value is not None:
            body["value"] = _shorten(self.value)
        return body


class InvalidInputError(AglError, ValueError):
    """Input that does not have the expected shape, type or value."""

    status_code = 422


class TemplateFormatError(InvalidInputError):
    """A prompt template could not be formatted with the given variables."""


class NotFoundError(AglError, LookupError):
    """An id the store does not know."""

    status_code = 404


class ConflictError(AglError):
    """A write that the current state does not allow."""

    status_code = 409


class UnauthorizedError(AglError):
    """A request without the bearer token the store server requires."""

    status_code = 401


class StoreUnavailableError(AglError, ConnectionError):
    """The store cannot serve now (after the client's retries): unreachable, or out of room.

    Retryable: nothing of a refused write was kept, and sending it again later is the remedy.
    """

    status_code = 503


class StoreFullError(StoreUnavailableError):
    """The store's disk is full: it wrote nothing of this call; retry once there is room.

    A :class:`StoreUnavailableError`, so everything that waits out an unreachable store (the span
    senders, runners) waits this out too. The message names the disk and what to free.
    """


class StoreError(AglError):
    """A failure inside the store that is not the caller's fault."""

    status_code = 500


ERRORS_BY_NAME: dict[str, type[AglError]] = {
    cls.__name__: cls
    for cls in (
        AglError,
        ConflictError,
        InvalidInputError,
        NotFoundError,
        StoreError,
        StoreFullError,
        StoreUnavailableError,
        TemplateFormatError,
        UnauthorizedError,
    )
}


def _shorten(value: Any, limit: int = 200) -> Any:
    """Return ``value`` itself when it is a short scalar, else a truncated ``repr`` (NaN and
    infinities too: JSON has no number for them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, bool | int | float) or (isinstance(value, str) and len(value) <= limit):
        return value
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
