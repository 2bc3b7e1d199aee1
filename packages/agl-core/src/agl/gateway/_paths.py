"""Where things are on a gateway: the per-attempt OpenAI base URL and its flush route.

An agent calls ``{gateway}/rollout/{rollout_id}/attempt/{attempt_id}/v1`` (the endpoint of the
LLM resource, filled in by the runner, see :meth:`agl.LLM.for_attempt`). Beside it,
``POST {gateway}/rollout/{rollout_id}/attempt/{attempt_id}/flush`` returns once every call the
gateway has answered so far is in the store: the runner calls it after the agent returns and
before it reports the attempt finished, so whoever sees the rollout finished (the algorithm,
building transitions) also sees its calls' token ids, wherever the gateway runs.
"""

from __future__ import annotations

__all__ = ["ATTEMPT", "FLUSH", "OPENAI", "flush_url", "is_gateway_endpoint"]

ATTEMPT = "/rollout/{rollout_id}/attempt/{attempt_id}"
"""The path of one attempt on a gateway."""

OPENAI = ATTEMPT + "/v1"
"""The OpenAI-compatible base path an agent calls for one attempt."""

FLUSH = ATTEMPT + "/flush"
"""The route that returns once the attempt's recorded calls are in the store."""


def is_gateway_endpoint(template: str) -> bool:
    """Whether an LLM endpoint template names a gateway (ends in :data:`OPENAI`)."""
    return template.rstrip("/").endswith(OPENAI)


def flush_url(template: str, rollout_id: str, attempt_id: str) -> str | None:
    """The flush URL for one attempt of a gateway endpoint template; None for other endpoints."""
    if not is_gateway_endpoint(template):
        return None
    base = template.rstrip("/").removesuffix(OPENAI)
    return base + FLUSH.format(rollout_id=rollout_id, attempt_id=attempt_id)
