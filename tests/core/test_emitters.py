"""Emitters record the agent's own facts as spans of the current rollout."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

import agl
from agl import RolloutRequest, semconv
from agl.store._memory import MemoryStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def traced() -> AsyncIterator[tuple[agl.Store, agl.Tracer, str, str]]:
    async with MemoryStore() as store:
        await store.enqueue_rollouts([RolloutRequest(input=1)])
        [claim] = await store.dequeue_rollouts()
        with agl.Tracer(store) as tracer:
            yield store, tracer, claim.rollout.rollout_id, claim.attempt.attempt_id


async def recorded(
    traced: tuple[agl.Store, agl.Tracer, str, str], body: Any
) -> dict[str, agl.Span]:
    store, tracer, rollout_id, attempt_id = traced
    async with tracer.rollout(rollout_id, attempt_id):
        result = body()
        if hasattr(result, "__await__"):
            await result
    return {span.name: span for span in await store.query_spans(rollout_id)}


async def test_emit_reward_number(traced: Any) -> None:
    spans = await recorded(traced, lambda: agl.emit_reward(0.75))
    reward = spans["agl.reward"]
    assert reward.attributes[semconv.AGL_SPAN_TYPE] == "reward"
    assert reward.attributes[semconv.AGL_REWARD] == 0.75
    assert reward.attributes[semconv.AGL_REWARD_PRIMARY] == "reward"
    assert reward.parent_id == spans["agl.rollout"].span_id


async def test_emit_reward_named_with_primary_and_link(traced: Any) -> None:
    spans = await recorded(
        traced,
        lambda: agl.emit_reward(
            {"exact": 1.0, "format": 0.5}, primary="exact", response_id="chatcmpl-42"
        ),
    )
    attributes = spans["agl.reward"].attributes
    assert attributes[semconv.AGL_REWARD] == 1.0
    assert attributes[semconv.AGL_REWARD_PREFIX + "format"] == 0.5
    assert attributes[semconv.AGL_REWARD_PRIMARY] == "exact"
    assert attributes[semconv.AGL_LINK_RESPONSE_ID] == "chatcmpl-42"


@pytest.mark.parametrize(
    ("value", "primary", "field"),
    [
        (math.nan, None, "value"),
        (True, None, "value"),
        ("1.0", None, "value"),
        ({"a": 1.0, "b": 2.0}, None, "primary"),
        ({"a": 1.0}, "b", "primary"),
        ({}, None, "value"),
        ({"a": math.inf}, None, "value['a']"),
    ],
)
async def test_emit_reward_rejects_what_is_not_a_reward(
    traced: Any, value: Any, primary: str | None, field: str
) -> None:
    _, tracer, rollout_id, attempt_id = traced
    async with tracer.rollout(rollout_id, attempt_id):
        with pytest.raises(agl.InvalidInputError) as caught:
            agl.emit_reward(value, primary=primary)
    assert caught.value.field == field


async def test_emitters_outside_a_rollout_raise_or_return_the_span() -> None:
    with pytest.raises(agl.NoRolloutError, match="outside a rollout"):
        agl.emit_reward(1.0)
    with pytest.raises(agl.NoRolloutError, match="emit_message"):
        agl.emit_message("hello")
    span = agl.emit_reward(0.5, require_rollout=False)
    assert span.attributes[semconv.AGL_REWARD] == 0.5
    assert span.end_time is not None


async def test_emit_message_object_annotation_exception(traced: Any) -> None:
    class Plan(BaseModel):
        steps: list[str]

    def body() -> None:
        agl.emit_message("thinking about it")
        agl.emit_object(Plan(steps=["look", "leap"]))
        agl.emit_annotation({"difficulty": "hard", "retries": 2, "tags": ["a", "b"]})
        try:
            raise ValueError("bad tool output")
        except ValueError as exc:
            agl.emit_exception(exc)

    spans = await recorded(traced, body)
    assert spans["agl.message"].attributes[semconv.AGL_MESSAGE] == "thinking about it"
    obj = spans["agl.object"].attributes
    assert json.loads(str(obj[semconv.AGL_OBJECT_JSON])) == {"steps": ["look", "leap"]}
    assert obj[semconv.AGL_OBJECT_TYPE].endswith("Plan")  # type: ignore[union-attr]
    annotation = spans["agl.annotation"].attributes
    assert annotation[semconv.AGL_ANNOTATION_PREFIX + "difficulty"] == "hard"
    assert annotation[semconv.AGL_ANNOTATION_PREFIX + "tags"] == ["a", "b"]
    error = spans["agl.exception"]
    assert error.status.code == agl.StatusCode.ERROR
    [event] = error.events
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "ValueError"
    assert "bad tool output" in str(event.attributes["exception.message"])


async def test_bad_emitter_arguments_are_refused(traced: Any) -> None:
    _, tracer, rollout_id, attempt_id = traced
    async with tracer.rollout(rollout_id, attempt_id):
        with pytest.raises(agl.InvalidInputError):
            agl.emit_message(42)  # type: ignore[arg-type]
        with pytest.raises(agl.InvalidInputError, match="annotation 'x'"):
            agl.emit_annotation({"x": {"nested": 1}})
        with pytest.raises(agl.InvalidInputError):
            agl.emit_exception("not an exception")  # type: ignore[arg-type]


async def test_operation_records_inputs_outputs_and_errors(traced: Any) -> None:
    @agl.operation
    def add(a: int, b: int = 2) -> int:
        return a + b

    @agl.operation("search")
    async def search(query: str) -> list[str]:
        return [query.upper()]

    @agl.operation
    def broken() -> None:
        raise KeyError("missing")

    async def body() -> None:
        assert add(1) == 3
        assert await search("q") == ["Q"]
        with agl.operation("manual") as op:
            op.set_output({"done": True})
        with pytest.raises(KeyError):
            broken()

    spans = await recorded(traced, body)
    added = spans[add.__qualname__].attributes
    assert json.loads(str(added[semconv.AGL_OPERATION_INPUT])) == {"a": 1}
    assert json.loads(str(added[semconv.AGL_OPERATION_OUTPUT])) == 3
    assert spans["search"].attributes[semconv.AGL_OPERATION_NAME] == "search"
    assert json.loads(str(spans["search"].attributes[semconv.AGL_OPERATION_OUTPUT])) == ["Q"]
    assert json.loads(str(spans["manual"].attributes[semconv.AGL_OPERATION_OUTPUT])) == {
        "done": True
    }
    assert spans[broken.__qualname__].status.code == agl.StatusCode.ERROR


async def test_operation_outside_a_rollout_just_runs() -> None:
    @agl.operation
    def double(x: int) -> int:
        return 2 * x

    assert double(4) == 8
    with agl.operation("block") as op:
        op.set_output(1)


async def test_agent_span_marks_blocks_and_functions(traced: Any) -> None:
    @agl.agent_span("checker")
    def check(text: str) -> bool:
        agl.emit_message(f"checking {text}")
        return True

    @agl.agent_span("writer")
    async def write() -> str:
        agl.emit_object({"draft": 1})
        return "draft"

    async def body() -> None:
        with agl.agent_span("planner"):
            assert await write() == "draft"
        assert check("x") is True
        with pytest.raises(ValueError, match="inner"), agl.agent_span("failing"):
            raise ValueError("inner")

    spans = await recorded(traced, body)
    planner, writer, checker = spans["agent planner"], spans["agent writer"], spans["agent checker"]
    assert planner.attributes[semconv.AGL_SPAN_TYPE] == "agent"
    assert planner.attributes[semconv.AGL_AGENT_NAME] == "planner"
    assert writer.parent_id == planner.span_id
    assert spans["agl.object"].parent_id == writer.span_id
    assert spans["agl.message"].parent_id == checker.span_id
    assert checker.parent_id == spans["agl.rollout"].span_id
    assert spans["agent failing"].status.code == agl.StatusCode.ERROR


async def test_agent_span_outside_a_rollout_just_runs() -> None:
    @agl.agent_span("solo")
    def solo() -> int:
        return 7

    assert solo() == 7
    with agl.agent_span("block"):
        pass
    with pytest.raises(agl.InvalidInputError, match="agent name"):
        agl.agent_span("")
