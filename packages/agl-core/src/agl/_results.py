"""What a finished rollout amounts to: its outcome, rewards and LLM calls, read from the store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agl import semconv
from agl._rollouts import Attempt, AttemptStatus, Rollout, RolloutStatus
from agl._spans import Span
from agl.store._base import Store
from agl.tracing._same_call import same_call_groups

__all__ = [
    "FitResult",
    "RolloutResult",
    "fetch_results",
    "final_reward",
    "reward_of",
    "span_type",
    "summarize",
]


@dataclass(frozen=True)
class RolloutResult:
    """A finished rollout with the facts an algorithm or a report needs.

    Attributes:
        rollout: The rollout as the store holds it.
        attempts: Its attempts, first to latest.
        spans: The spans of the latest attempt, in sequence order.
        rewards: The primary value of every reward span of the latest attempt, in order.
        reward: The final reward: the last of ``rewards`` (None when there is none).
        llm_calls: LLM calls the latest attempt made (gateway calls, else instrumented calls,
            one per response id when two instrumentations recorded a call).
        error: Why the latest attempt did not succeed (None when it did).
    """

    rollout: Rollout
    attempts: list[Attempt]
    spans: list[Span] = field(repr=False)
    rewards: list[float]
    reward: float | None
    llm_calls: int
    error: str | None

    @property
    def status(self) -> RolloutStatus:
        return self.rollout.status

    @property
    def succeeded(self) -> bool:
        return self.rollout.status == RolloutStatus.SUCCEEDED

    @property
    def retried(self) -> bool:
        """True when the rollout took more than one attempt."""
        return len(self.attempts) > 1


def span_type(span: Span) -> str | None:
    """The span's ``agl.span.type``, if it has one."""
    value = span.attributes.get(semconv.AGL_SPAN_TYPE)
    return value if isinstance(value, str) else None


def reward_of(span: Span) -> float | None:
    """The primary reward a reward span records; None for any other span."""
    value = span.attributes.get(semconv.AGL_REWARD)
    if span_type(span) != semconv.SPAN_TYPE_REWARD or isinstance(value, bool):
        return None
    return float(value) if isinstance(value, int | float) else None


def final_reward(spans: Sequence[Span]) -> float | None:
    """The reward of the last reward span (in sequence order), or None.

    Pass the spans of one attempt, normally the latest: its last reward is the rollout's.
    """
    rewards = _rewards(spans)
    return rewards[-1] if rewards else None


def _instrumented_calls(spans: list[Span]) -> int:
    """LLM calls, a call two instrumentations recorded counted once."""
    return len(
        same_call_groups([span for span in spans if span_type(span) == semconv.SPAN_TYPE_LLM])
    )


def summarize(rollout: Rollout, attempts: list[Attempt], spans: list[Span]) -> RolloutResult:
    """Build a :class:`RolloutResult` from a rollout, its attempts and its spans (any attempt)."""
    latest = rollout.latest_attempt_id
    own = [span for span in spans if span.attempt_id == latest]
    rewards = _rewards(own)
    gateway = sum(1 for span in own if span_type(span) == semconv.SPAN_TYPE_GATEWAY)
    llm = _instrumented_calls(own)
    error = None
    if rollout.status != RolloutStatus.SUCCEEDED:
        last = attempts[-1] if attempts else None
        if last is not None and last.status != AttemptStatus.SUCCEEDED:
            error = f"{last.status.value}: {last.reason}" if last.reason else last.status.value
        else:
            error = rollout.status.value
    return RolloutResult(
        rollout=rollout,
        attempts=attempts,
        spans=own,
        rewards=rewards,
        reward=rewards[-1] if rewards else None,
        llm_calls=gateway or llm,
        error=error,
    )


async def fetch_results(
    store: Store, rollouts: Sequence[Rollout], *, concurrency: int = 32
) -> list[RolloutResult]:
    """Read the attempts and spans of finished rollouts (a few at a time) and summarize them."""
    limit = asyncio.Semaphore(concurrency)

    async def one(rollout: Rollout) -> RolloutResult:
        async with limit:
            attempts, spans = await asyncio.gather(
                store.query_attempts(rollout.rollout_id),
                store.query_spans(rollout.rollout_id, rollout.latest_attempt_id),
            )
        return summarize(rollout, attempts, spans)

    return list(await asyncio.gather(*(one(rollout) for rollout in rollouts)))


def _rewards(spans: Sequence[Span]) -> list[float]:
    return [value for span in spans if (value := reward_of(span)) is not None]


@dataclass
class FitResult:
    """What a run did."""

    run_dir: Path
    store_url: str
    history: list[dict[str, float]]
    """Every metrics row logged, ``step`` included."""
    totals: dict[str, int]
    """Rollouts run in all, and how many succeeded, failed, were cancelled or retried."""
    duration_s: float
    results: list[RolloutResult] = field(default_factory=list, repr=False)
    """For :meth:`Trainer.dev`: every rollout's result, in dataset order."""

    def last(self, key: str) -> float | None:
        """The last logged value of a metric, or None."""
        for row in reversed(self.history):
            if key in row:
                return row[key]
        return None
