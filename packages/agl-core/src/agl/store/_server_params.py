"""What the store server's routers share: their path and paging parameters and body checks."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import Path, Query
from pydantic import BaseModel, ValidationError

from agl._ids import SegmentId
from agl._resources import ResourcesUpdate
from agl.store._engine import MAX_OFFSET, MAX_PAGE_SIZE
from agl.store._server_errors import MalformedBody, validation_error
from agl.store._storable import refuse_unstorable

__all__ = [
    "AttemptIdParam",
    "LimitParam",
    "OffsetParam",
    "RolloutIdParam",
    "parse_body",
    "parse_resources",
    "refuse_unstorable_body",
]

M = TypeVar("M", bound=BaseModel)

LimitParam = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)]
OffsetParam = Annotated[int, Query(ge=0, le=MAX_OFFSET)]
RolloutIdParam = Annotated[SegmentId, Path()]
AttemptIdParam = Annotated[SegmentId, Path()]


def refuse_unstorable_body(body: BaseModel) -> None:
    """A 400 naming the first field no store can keep as it is (:mod:`agl.store._storable`)."""
    refuse_unstorable(body.model_dump(mode="python", exclude_defaults=True), "", MalformedBody)


def parse_body(model: type[M], raw: bytes) -> M:
    """``raw`` validated as ``model`` in one pass; a 422 naming the bad fields if it is not."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise validation_error(exc.errors(include_url=False), prefix=()) from None


def parse_resources(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` (resource name to its JSON) as typed resources; a 422 naming the bad fields."""
    try:
        return ResourcesUpdate.model_validate(
            {"resources_id": "-", "version": 1, "resources": raw}
        ).resources
    except ValidationError as exc:
        raise validation_error(exc.errors(include_url=False), prefix=()) from None
