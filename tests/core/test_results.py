"""A rollout's summary: its LLM calls, counted once however many instrumentations saw them."""

from __future__ import annotations

from agl import Rollout, Span, semconv
from agl._results import summarize


def _llm(response_id: str | None) -> Span:
    attributes = {semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_LLM}
    if response_id is not None:
        attributes[semconv.GEN_AI_RESPONSE_ID] = response_id
    return Span.create(rollout_id="r", attempt_id="a", name="llm", attributes=attributes)


def test_a_call_two_instrumentations_recorded_counts_once() -> None:
    rollout = Rollout(rollout_id="r", input={}, enqueue_time=0.0, latest_attempt_id="a")
    spans = [_llm("resp-1"), _llm("resp-1"), _llm("resp-2"), _llm(None), _llm(None)]
    assert summarize(rollout, [], spans).llm_calls == 4  # resp-1, resp-2, and two without ids
