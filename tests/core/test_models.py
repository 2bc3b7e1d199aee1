"""The data model validates what it is given and says what was wrong."""

from __future__ import annotations

import time
import types
from pathlib import Path

import pytest
from pydantic import ValidationError

import agl
from agl import AttemptStatus, RolloutConfig, RolloutRequest, RolloutStatus, Span
from agl._spans import new_span_id, new_trace_id


def test_span_ids_must_be_lowercase_hex_of_the_right_length() -> None:
    good = Span.create(rollout_id="ro", attempt_id="at", name="x")
    assert len(good.trace_id) == 32
    assert len(good.span_id) == 16
    for field, value in [("trace_id", "XYZ"), ("span_id", "0" * 15), ("parent_id", "g" * 16)]:
        with pytest.raises(ValidationError) as caught:
            Span.model_validate({**good.model_dump(), field: value})
        assert caught.value.errors()[0]["loc"] == (field,)


def test_span_rejects_unknown_fields_and_bad_attribute_values() -> None:
    base = Span.create(rollout_id="ro", attempt_id="at", name="x").model_dump()
    with pytest.raises(ValidationError):
        Span.model_validate({**base, "surprise": 1})
    with pytest.raises(ValidationError):
        Span.model_validate({**base, "attributes": {"obj": object()}})


def test_span_duration() -> None:
    span = Span.create(
        rollout_id="ro",
        attempt_id="at",
        name="x",
        start_time_unix_nano=0,
        end_time_unix_nano=2_500_000_000,
    )
    assert span.duration_seconds == 2.5
    open_span = span.model_copy(update={"end_time_unix_nano": None})
    assert open_span.duration_seconds is None


def test_new_ids_are_unique_and_valid() -> None:
    assert len({new_trace_id() for _ in range(1000)}) == 1000
    assert len({new_span_id() for _ in range(1000)}) == 1000


def test_rollout_config_checks_its_values() -> None:
    with pytest.raises(ValidationError, match="max_attempts"):
        RolloutConfig(max_attempts=0)
    with pytest.raises(ValidationError, match="timeout_seconds"):
        RolloutConfig(timeout_seconds=-1)
    with pytest.raises(ValidationError, match="cannot retry on"):
        RolloutConfig(retry_on=frozenset({AttemptStatus.SUCCEEDED}))


def test_rollout_request_round_trips_through_json() -> None:
    request = RolloutRequest(
        input={"q": [1, 2]}, mode="test", config=RolloutConfig(max_attempts=2), metadata={"k": "v"}
    )
    assert RolloutRequest.model_validate_json(request.model_dump_json()) == request
    with pytest.raises(ValidationError, match="mode"):
        RolloutRequest(input=1, mode="eval")  # type: ignore[arg-type]


def test_status_predicates_match_the_state_machine() -> None:
    assert {s for s in RolloutStatus if s.is_final} == {"succeeded", "failed", "cancelled"}
    assert {s for s in RolloutStatus if s.is_claimable} == {"queuing", "requeuing"}
    assert {s for s in AttemptStatus if not s.is_final} == {"preparing", "running"}


@pytest.mark.parametrize(
    ("rollout_id", "named"),
    [("task/1", "'/'"), ("50%", "'%'"), ("a?b", "'?'"), ("a b", "' '"), ("..", "is '..'")],
)
def test_a_rollout_id_no_url_can_address_is_refused_naming_why(rollout_id: str, named: str) -> None:
    """Every backend accepts the same ids, and each is one path segment of the HTTP API."""
    with pytest.raises(ValidationError, match=f"(?s)rollout_id.*{named}.*one URL path segment"):
        RolloutRequest(input=1, rollout_id=rollout_id)
    assert RolloutRequest(input=1, rollout_id="task-1.run:2@x~y").rollout_id == "task-1.run:2@x~y"


@pytest.mark.anyio
@pytest.mark.parametrize("url", ["memory://", "sqlite"])
async def test_by_default_a_claim_nobody_beats_for_is_given_up_on(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that claimed a rollout and died (SIGKILL, a lost host, a dequeue whose client
    hung up) no longer holds it ``running`` for ever: the default config has a limit."""
    from agl.store import _stateful

    assert RolloutConfig().unresponsive_seconds == 300
    clock = types.SimpleNamespace(offset=0.0)
    real = time.time
    monkeypatch.setattr(
        _stateful,
        "time",
        types.SimpleNamespace(time=lambda: real() + clock.offset, monotonic=time.monotonic),
    )
    url = url if url != "sqlite" else f"sqlite:///{tmp_path / 'agl.db'}"
    async with agl.open_store(url) as store:
        [rollout, orphan] = await store.enqueue_rollouts(
            [RolloutRequest(input={"task": 1}), RolloutRequest(input={"task": 2})]
        )
        [claim, orphaned] = await store.dequeue_rollouts(2, worker_id="sigkilled")
        await store.update_attempt(rollout.rollout_id, claim.attempt.attempt_id, status="running")
        clock.offset = 290.0
        assert (await store.get_rollout(rollout.rollout_id)).status == RolloutStatus.RUNNING
        assert (await store.get_rollout(orphan.rollout_id)).status == RolloutStatus.PREPARING
        clock.offset = 310.0
        [attempt] = await store.query_attempts(rollout.rollout_id)
        assert attempt.attempt_id == claim.attempt.attempt_id
        assert attempt.status == AttemptStatus.UNRESPONSIVE
        assert attempt.reason == "no heartbeat for unresponsive_seconds=300"
        assert (await store.get_rollout(rollout.rollout_id)).status == RolloutStatus.FAILED
        # A claim the store never heard of again never started: back in the queue, not counted.
        [attempt] = await store.query_attempts(orphan.rollout_id)
        assert attempt.attempt_id == orphaned.attempt.attempt_id
        assert attempt.status == AttemptStatus.RELEASED
        assert attempt.reason == (
            "never started: no word from sigkilled within unresponsive_seconds=300 of the "
            "claim; back in the queue without using up a try"
        )
        assert (await store.get_rollout(orphan.rollout_id)).status == RolloutStatus.REQUEUING
