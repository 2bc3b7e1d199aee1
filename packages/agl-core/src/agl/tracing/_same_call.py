"""Which instrumented LLM spans record the same call.

Two instrumentations can record one call: a framework's model span (LangChain's ``ChatOpenAI``)
and the span of the OpenAI client it drives. openinference does not make its spans current, so
the inner span need not be the child of the outer one. They are recognised as one call:

- by the response id the server sent (``gen_ai.response.id``), recorded on both;
- for a call without one (it failed, so no response came), by time and content: one span lies
  within the other's time range and both record the same input messages (either may lack
  them).

Every reader that counts calls (credit assignment, rollout summaries, ``agl rollouts show``)
groups them here, so they never disagree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agl import semconv
from agl._spans import Span

__all__ = ["same_call_groups"]


def same_call_groups(llm_spans: Sequence[Span]) -> list[list[Span]]:
    """Group LLM spans by the call they record, in the order each call's first span comes.

    Args:
        llm_spans: The instrumented LLM spans of one attempt (not the gateway's).
    """
    groups: list[list[Span]] = []
    by_response: dict[Any, list[Span]] = {}
    without_id: list[list[Span]] = []
    for span in llm_spans:
        response_id = span.attributes.get(semconv.GEN_AI_RESPONSE_ID)
        if response_id is not None:
            group = by_response.get(response_id)
            if group is None:
                group = by_response[response_id] = []
                groups.append(group)
            group.append(span)
            continue
        twin = next((g for g in without_id if _same_call(g[0], span)), None)
        if twin is not None:
            twin.append(span)
            continue
        group = [span]
        without_id.append(group)
        groups.append(group)
    return groups


def _same_call(one: Span, other: Span) -> bool:
    if not (_within(one, other) or _within(other, one)):
        return False
    mine, theirs = _messages(one), _messages(other)
    return mine is None or theirs is None or mine == theirs


def _within(inner: Span, outer: Span) -> bool:
    if inner.start_time_unix_nano < outer.start_time_unix_nano:
        return False
    if outer.end_time_unix_nano is None:
        return True
    return (
        inner.end_time_unix_nano is not None
        and inner.end_time_unix_nano <= outer.end_time_unix_nano
    )


def _messages(span: Span) -> Any:
    """The span's input messages, parsed (key order aside), or None when it has none."""
    text = span.attributes.get(semconv.GEN_AI_INPUT_MESSAGES)
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text
