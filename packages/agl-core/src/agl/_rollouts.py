"""Rollouts, attempts and workers, and the state machine that moves them.

A **rollout** is one task for the agent to run (an input plus how to run it). Each try at it
is an **attempt**: a runner claims the rollout from the store, which creates a new attempt, and
reports the attempt's progress. A rollout's status follows its latest attempt.

Attempt statuses::

    preparing ──► running ──► succeeded
        │            │
        └────────────┴──────► failed | timeout | unresponsive | cancelled | released

``preparing`` is where a claimed attempt starts; the runner moves it to ``running``. The five
statuses on the right are final: once there, an attempt never changes again, and a late report
for it (a result from a runner the store already gave up on) is refused with a
:class:`~agl.ConflictError`. The store itself sets ``timeout`` (the attempt ran longer
than ``RolloutConfig.timeout_seconds``) and ``unresponsive`` (no heartbeat for
``RolloutConfig.unresponsive_seconds``). A runner that stops before an attempt finishes (it was
asked to shut down) ends it as ``released``: the rollout goes back to the queue, and a released
attempt does not count towards ``max_attempts``, since the task itself never failed. The store
releases a claim too when it never hears of it again (still ``preparing``, no heartbeat, no
span, when one of those limits passes): the claim's answer reached no runner, or its runner
died before starting it, so the agent never ran.

Rollout statuses::

    queuing ──► preparing ──► running ──► succeeded
       ▲            │            │
       │            └─────┬──────┘
       │                  ▼ an attempt ends failed / timeout / unresponsive / released
       └── requeuing ◄── released, or retry? (outcome in config.retry_on and attempts
                          │  < max_attempts, released attempts not counted)
                          │ no
                          ▼
                        failed

    any non-final status ──cancel──► cancelled

``queuing`` and ``requeuing`` rollouts are the ones a runner can claim. ``succeeded``,
``failed`` and ``cancelled`` are final, so a rollout is never counted as finished twice.
"""

from __future__ import annotations

import os
from enum import StrEnum
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictFloat,
    field_validator,
)

from agl._ids import SegmentId
from agl._json_numbers import Integer

__all__ = [
    "Attempt",
    "AttemptStatus",
    "Claim",
    "Rollout",
    "RolloutConfig",
    "RolloutMode",
    "RolloutPage",
    "RolloutRequest",
    "RolloutStatus",
    "Worker",
    "new_id",
]

RolloutMode = Literal["train", "val", "test"]


class AttemptStatus(StrEnum):
    """Where one attempt at a rollout stands. See the module docstring for the transitions."""

    PREPARING = "preparing"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMEOUT = "timeout"
    UNRESPONSIVE = "unresponsive"
    CANCELLED = "cancelled"
    RELEASED = "released"

    @property
    def is_final(self) -> bool:
        """True for statuses an attempt never leaves."""
        return self not in (AttemptStatus.PREPARING, AttemptStatus.RUNNING)


class RolloutStatus(StrEnum):
    """Where a rollout stands. See the module docstring for the transitions."""

    QUEUING = "queuing"
    PREPARING = "preparing"
    RUNNING = "running"
    REQUEUING = "requeuing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        """True for statuses a rollout never leaves."""
        return self in (RolloutStatus.SUCCEEDED, RolloutStatus.FAILED, RolloutStatus.CANCELLED)

    @property
    def is_claimable(self) -> bool:
        """True for statuses from which a runner may claim the rollout."""
        return self in (RolloutStatus.QUEUING, RolloutStatus.REQUEUING)


RETRYABLE_OUTCOMES = frozenset(
    {AttemptStatus.FAILED, AttemptStatus.TIMEOUT, AttemptStatus.UNRESPONSIVE}
)


DEFAULT_UNRESPONSIVE_SECONDS = 300.0
"""How long an attempt may go without a heartbeat by default (:class:`RolloutConfig`)."""


MIN_LIMIT_SECONDS = 0.1
"""The shortest ``timeout_seconds`` / ``unresponsive_seconds`` a rollout may set: less is no
time to start an attempt, let alone to hear from it."""


class RolloutConfig(BaseModel):
    """How the store runs a rollout: time limits and retries.

    Numbers must be numbers (``true`` is not 1), time limits at least :data:`MIN_LIMIT_SECONDS`
    (and finite: no store keeps infinity), and ``retry_on`` names each outcome once: what the
    store server's OpenAPI document says, the server and every backend enforce.
    """

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    timeout_seconds: StrictFloat | None = Field(
        default=None,
        ge=MIN_LIMIT_SECONDS,
        description="An attempt running longer than this is timed out.",
    )
    unresponsive_seconds: StrictFloat | None = Field(
        default=DEFAULT_UNRESPONSIVE_SECONDS,
        ge=MIN_LIMIT_SECONDS,
        description="An attempt with no heartbeat for this long is marked unresponsive (None: "
        "never). Runners beat at least every 10 s, and at a third of this limit when it is "
        "shorter; the default gives a rollout held by a runner that died (SIGKILL, a lost "
        "host, a worker that hung up mid-claim) back to the store within 5 minutes.",
    )
    max_attempts: Integer = Field(default=1, ge=1, description="Tries in all, the first included.")
    retry_on: frozenset[AttemptStatus] = Field(
        default=RETRYABLE_OUTCOMES,
        description="Attempt outcomes that lead to another attempt while tries are left.",
        # The schema says which outcomes are accepted (the validator below enforces it).
        json_schema_extra={
            "items": {"enum": [str(status.value) for status in sorted(RETRYABLE_OUTCOMES)]},
            "uniqueItems": True,
        },
    )

    @field_validator("retry_on", mode="before")
    @classmethod
    def _each_outcome_once(cls, value: object) -> object:
        if isinstance(value, list | tuple):
            seen: set[object] = set()
            for item in value:
                key = getattr(item, "value", item)
                if key in seen:
                    raise ValueError(f"names {key!r} twice; name each outcome once")
                seen.add(key)
        return value

    @field_validator("retry_on")
    @classmethod
    def _only_failures_retry(cls, value: frozenset[AttemptStatus]) -> frozenset[AttemptStatus]:
        wrong = sorted(status.value for status in value - RETRYABLE_OUTCOMES)
        if wrong:
            raise ValueError(
                f"cannot retry on {wrong}; expected a subset of "
                f"{sorted(status.value for status in RETRYABLE_OUTCOMES)}"
            )
        return value


class RolloutRequest(BaseModel):
    """What to enqueue: one task for the agent.

    Give ``rollout_id`` to make the enqueue idempotent: enqueueing an id the store already holds
    returns the stored rollout and changes nothing, so a retried request never runs a task twice.
    An id is one URL path segment of the HTTP store's API, the same in every backend: 1 to 256
    characters, no ``/``, ``%``, ``?``, ``#``, whitespace or control characters, and not ``.``
    or ``..`` (:mod:`agl._ids`).
    """

    model_config = ConfigDict(defer_build=True, extra="forbid")

    input: JsonValue
    mode: RolloutMode = "train"
    config: RolloutConfig = Field(default_factory=RolloutConfig)
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    resources_id: SegmentId | None = None
    rollout_id: SegmentId | None = None


class Rollout(BaseModel):
    """A task in the store and where it stands. Times are Unix seconds."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    rollout_id: str
    input: JsonValue
    mode: RolloutMode = "train"
    config: RolloutConfig = Field(default_factory=RolloutConfig)
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    resources_id: str | None = None
    status: RolloutStatus = RolloutStatus.QUEUING
    enqueue_time: float
    start_time: float | None = None
    end_time: float | None = None
    num_attempts: int = 0
    latest_attempt_id: str | None = None


class Attempt(BaseModel):
    """One try at a rollout, created when a runner claims it. Times are Unix seconds."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    rollout_id: str
    attempt_id: str
    sequence: int = Field(ge=1, description="1 for the first try, 2 for the first retry, ...")
    status: AttemptStatus = AttemptStatus.PREPARING
    worker_id: str | None = None
    start_time: float
    last_heartbeat_time: float | None = None
    end_time: float | None = None
    reason: str | None = Field(default=None, description="Why the attempt ended as it did.")


class Claim(BaseModel):
    """A rollout a runner has claimed, with the attempt the claim created."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    rollout: Rollout
    attempt: Attempt


class RolloutPage(BaseModel):
    """One page of a rollout query, in enqueue order (or its reverse, when asked)."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    rollouts: list[Rollout]
    total: int = Field(description="How many rollouts match the query in all.")
    offset: int
    next_offset: int | None = Field(description="The offset of the next page, None at the end.")


class Worker(BaseModel):
    """A runner the store has heard from. Times are Unix seconds."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    worker_id: str
    first_seen_time: float
    last_seen_time: float
    last_dequeue_time: float | None = None
    num_claimed: int = 0


def new_id(prefix: str) -> str:
    """Return a fresh id such as ``ro-3f2a9c0d1e5b7a44`` (64 random bits)."""
    return f"{prefix}-{os.urandom(8).hex()}"
