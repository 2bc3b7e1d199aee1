"""Argument checks shared by the store backends, so every backend words its errors alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

from agl._errors import InvalidInputError
from agl._ids import check_id
from agl._resources import Resource
from agl._rollouts import RolloutRequest
from agl._spans import Span

T = TypeVar("T")

MAX_WAIT_SECONDS = 3600.0
"""The longest ``dequeue_rollouts(wait=)`` / ``wait_for_rollouts(timeout=)`` any store takes."""

MAX_POLL_SECONDS = 60.0
"""The longest the store server holds one long-poll request; more is a 400. The HTTP client
waits longer by polling again, so a store's callers see no difference."""


def as_list(values: object, field: str, item_type: type[T]) -> list[T]:
    """Check a batch argument: a sequence whose items all have the expected type."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise InvalidInputError(
            f"{field} must be a list of {item_type.__name__}, got {type(values).__name__}",
            field=field,
        )
    items = list(values)
    for index, item in enumerate(items):
        if not isinstance(item, item_type):
            raise InvalidInputError(
                f"{field}[{index}] must be a {item_type.__name__}, got {type(item).__name__}",
                field=f"{field}[{index}]",
            )
    return items


def check_request_ids(requests: Sequence[RolloutRequest]) -> None:
    """Check the ids rollout requests name, as the models do: a request built without
    validation (``model_construct``) is refused as the store server refuses its JSON."""
    for index, request in enumerate(requests):
        for field in ("rollout_id", "resources_id"):
            value = getattr(request, field)
            if value is not None:
                check_id(value, f"requests[{index}].{field}", segment=True)


def check_span_ids(spans: Sequence[Span]) -> None:
    """Check the rollout and attempt ids of a batch of spans (see :func:`check_request_ids`).

    A batch names few attempts: each (rollout, attempt) pair is checked once, where it first
    appears, which is where the error points to.
    """
    checked: set[tuple[str, str]] = set()
    for index, span in enumerate(spans):
        pair = (span.rollout_id, span.attempt_id)
        if type(pair[0]) is str and type(pair[1]) is str and pair in checked:
            continue
        check_id(span.rollout_id, f"spans[{index}].rollout_id", segment=True)
        check_id(span.attempt_id, f"spans[{index}].attempt_id", segment=True)
        checked.add(pair)


def as_resources(resources: object) -> dict[str, Resource]:
    """Check a set of resources to publish: a mapping of names to Resource instances."""
    if not isinstance(resources, Mapping):
        raise InvalidInputError(
            f"resources must be a mapping of name to Resource, got {type(resources).__name__}",
            field="resources",
        )
    members = dict(resources)
    for name, member in members.items():
        check_id(name, "resources", what="a resource name")
        if not isinstance(member, Resource):
            raise InvalidInputError(
                f"resources[{name!r}] must be a Resource, got {type(member).__name__}",
                field=f"resources.{name}",
            )
    return members


def redact(url: str) -> str:
    """The URL without its password, for messages and logs (even a malformed one)."""
    parts = urlsplit(url)
    credentials, at, host = parts.netloc.rpartition("@")
    if not at or ":" not in credentials:
        return url
    user = credentials.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


SPAN_PAGE_SIZE = 1_000
"""Spans per answer of a store server's span query at most (and by default): a rollout's trace
of any length is read in pages (:class:`~agl.store.HttpStore` reads them all), so the server
never holds all of it at once."""

MAX_ENQUEUE = 10_000
"""Rollouts one enqueue request to a store server may carry (:class:`~agl.store.HttpStore`
splits larger calls): one request is one transaction, and a bigger one would hold every other
request up while it is written."""
