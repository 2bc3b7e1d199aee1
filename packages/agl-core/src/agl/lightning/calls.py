"""LLM calls, read back from a rollout's spans: joined, attributed to agents, with their rewards.

(Work in progress: the joining code lands in this module.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["LLMCall"]


@dataclass(slots=True)
class LLMCall:
    """One LLM call of a rollout, as credit assignment sees it.

    Attributes:
        rollout_id / attempt_id: Where the call happened.
        index: Position of the call in its rollout (0, 1, ...), in the order calls were made.
        agent: The agent the call belongs to (None when no agent span encloses it).
        response_id: The response's ``id`` (``gen_ai.response.id``), when known.
        prompt_ids / response_ids / logprobs: The engine's tokens (None when not recorded).
        request / response: The call's JSON bodies as recorded (None when not recorded).
        step_rewards: Rewards emitted for this call (linked by response id, or following it).
        span_id: The span the call was read from (the gateway's when there is one).
    """

    rollout_id: str
    attempt_id: str
    index: int
    agent: str | None = None
    response_id: str | None = None
    prompt_ids: list[int] | None = None
    response_ids: list[int] | None = None
    logprobs: list[float] | None = None
    request: str | None = None
    response: str | None = None
    step_rewards: list[float] = field(default_factory=list)
    span_id: str | None = None
