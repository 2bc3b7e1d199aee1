"""The JSON bodies of the store's HTTP API: what each route takes and returns.

Every body refuses fields it does not know (a misspelt field is a 422 naming it, not ignored).
They are the server's OpenAPI schemas; the client (:mod:`agl.store._http`) sends and reads the
same shapes.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from agl._metric_rows import MetricsRow
from agl._rollouts import (
    ROLLOUT_ID_PATTERN,
    Attempt,
    AttemptStatus,
    Claim,
    Rollout,
    RolloutRequest,
    Worker,
)
from agl._spans import Span
from agl.store._checks import MAX_ENQUEUE, MAX_POLL_SECONDS
from agl.store._repeats import MAX_REQUEST_ID_LENGTH

__all__ = [
    "AttemptUpdateBody",
    "AttemptsBody",
    "ClaimsBody",
    "DequeueBody",
    "EnqueueBody",
    "ErrorBody",
    "MetricsBody",
    "ResourceJson",
    "ResourcesBody",
    "RolloutsBody",
    "RunsBody",
    "SequenceIdsBody",
    "SpansBody",
    "SpansPage",
    "WaitBody",
    "WorkersBody",
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EnqueueBody(_Body):
    requests: list[RolloutRequest] = Field(
        max_length=MAX_ENQUEUE, description=f"at most {MAX_ENQUEUE:,} rollouts a request"
    )


class RolloutsBody(_Body):
    rollouts: list[Rollout]


_POLL = (
    f"Seconds to hold the request at most (a long poll), at most {MAX_POLL_SECONDS:g}: "
    "wait longer by asking again."
)


_REQUEST_ID = (
    "Makes the request safe to repeat: the same request with the same id, within an hour, is "
    "answered as the first one was and changes nothing (one URL path segment)."
)


_RequestId = Annotated[
    str,
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_REQUEST_ID_LENGTH,
            "pattern": ROLLOUT_ID_PATTERN,
            "description": _REQUEST_ID,
        }
    ),
]


class DequeueBody(_Body):
    limit: int = Field(default=1, ge=1, le=10_000)
    worker_id: str | None = None
    wait: float = Field(default=0.0, ge=0, le=MAX_POLL_SECONDS, description=_POLL)
    request_id: _RequestId | None = None


class ClaimsBody(_Body):
    claims: list[Claim]


class WaitBody(_Body):
    rollout_ids: list[str]
    timeout: float = Field(ge=0, le=MAX_POLL_SECONDS, description=_POLL)


class AttemptUpdateBody(_Body):
    status: AttemptStatus | None = None
    heartbeat: bool = True
    reason: str | None = None


class AttemptsBody(_Body):
    attempts: list[Attempt]


class SpansBody(_Body):
    spans: list[Span]


class SpansPage(_Body):
    spans: list[Span]
    next_after: int | None = Field(
        description="Pass as `after` for the next page; null when this page is the last."
    )


class SequenceIdsBody(_Body):
    sequence_ids: list[int]


class ResourceJson(BaseModel):
    """One resource as JSON: a ``type`` tag (``llm``, ``prompt_template``, or a plugin's) and
    that type's fields. A type this server does not know is kept as it is."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(min_length=1)


class ResourcesBody(_Body):
    resources: dict[Annotated[str, Field(min_length=1)], ResourceJson] = Field(
        description="name (not empty) -> resource, by its type tag"
    )
    resources_id: (
        Annotated[
            str,
            WithJsonSchema(
                {"type": "string", "minLength": 1, "maxLength": 128, "pattern": ROLLOUT_ID_PATTERN}
            ),
        ]
        | None
    ) = Field(default=None, description="one URL path segment, as a rollout id")


class MetricsBody(_Body):
    rows: list[MetricsRow]
    request_id: _RequestId | None = None


class RunsBody(_Body):
    runs: list[str]


class WorkersBody(_Body):
    workers: list[Worker]


class ErrorBody(_Body):
    error: dict[str, Any]
