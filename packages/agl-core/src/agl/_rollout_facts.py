"""What a store holds, as facts and JSON: span trees, span facts, LLM call counts, rewards.

Pure functions over rollouts, attempts and spans, read from any store. ``agl rollouts`` prints
them (as JSON with ``--json``, as tables through :mod:`agl.cli._rollout_views`); both views are
built from the same facts (:func:`span_facts`, :func:`agl._results.reward_of`,
:func:`llm_calls`), so the two never disagree.

Spans are recognised by their ``agl.span.type`` attribute (see :mod:`agl.semconv`), never by
their names.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from agl import semconv
from agl._results import final_reward, reward_of, span_type
from agl._rollouts import Attempt, Rollout, RolloutPage
from agl._spans import Span, StatusCode
from agl.tracing._same_call import same_call_groups

__all__ = [
    "LLM_SPAN_TYPES",
    "SpanNode",
    "latest_spans",
    "llm_calls",
    "reward_rows",
    "rollout_detail_json",
    "rollout_page_json",
    "span_facts",
    "span_tree",
]

LLM_SPAN_TYPES = (semconv.SPAN_TYPE_LLM, semconv.SPAN_TYPE_GATEWAY)
"""Span types of LLM calls: recorded by an agent's instrumentation, or by the gateway."""


@dataclass(frozen=True)
class SpanNode:
    """A span with its children, as :func:`span_tree` nests them."""

    span: Span
    children: tuple[SpanNode, ...] = ()


def span_tree(spans: Sequence[Span]) -> list[SpanNode]:
    """Nest spans under their parents; return the roots.

    A span whose parent is not among ``spans`` (not flushed yet, or lost) becomes a root, so
    nothing is hidden. Siblings are ordered by start time, then by sequence id.
    """

    def key(span: Span) -> tuple[str, str]:
        return (span.trace_id, span.span_id)

    def order(span: Span) -> tuple[int, int]:
        return (span.start_time_unix_nano, span.sequence_id or 0)

    known = {key(span) for span in spans}
    children: dict[tuple[str, str], list[Span]] = defaultdict(list)
    roots: list[Span] = []
    for span in spans:
        parent = (span.trace_id, span.parent_id) if span.parent_id is not None else None
        if parent is not None and parent in known and parent != key(span):
            children[parent].append(span)
        else:
            roots.append(span)

    placed: set[tuple[str, str]] = set()

    def build(span: Span) -> SpanNode:
        placed.add(key(span))
        below = sorted((c for c in children[key(span)] if key(c) not in placed), key=order)
        return SpanNode(span, tuple(build(child) for child in below))

    tree = [build(span) for span in sorted(roots, key=order)]
    # Spans whose parents form a cycle (corrupt data) have no root: show them at the top.
    tree.extend(build(span) for span in spans if key(span) not in placed)
    return tree


def span_facts(span: Span) -> dict[str, JsonValue]:
    """Return the few facts worth showing for a span, by its type.

    Rewards (the primary value and, when there are several, every named one), model and token
    counts of LLM calls, type and message of exceptions, the text of messages, the names of
    tools and operations, annotations, and the status description of any failed span.
    """
    attributes = span.attributes
    kind = span_type(span)
    facts: dict[str, JsonValue] = {}
    if kind == semconv.SPAN_TYPE_REWARD:
        facts["reward"] = attributes.get(semconv.AGL_REWARD)
        named = {
            key.removeprefix(semconv.AGL_REWARD_PREFIX): value
            for key, value in attributes.items()
            if key.startswith(semconv.AGL_REWARD_PREFIX)
        }
        if set(named) - {"reward"}:
            facts["primary"] = attributes.get(semconv.AGL_REWARD_PRIMARY)
            facts["rewards"] = named
    elif kind in LLM_SPAN_TYPES:
        model = attributes.get(semconv.GEN_AI_RESPONSE_MODEL) or attributes.get(
            semconv.GEN_AI_REQUEST_MODEL
        )
        usage = {
            "model": model,
            "input_tokens": attributes.get(semconv.GEN_AI_USAGE_INPUT_TOKENS),
            "output_tokens": attributes.get(semconv.GEN_AI_USAGE_OUTPUT_TOKENS),
        }
        facts.update((name, value) for name, value in usage.items() if value is not None)
    elif kind == semconv.SPAN_TYPE_EXCEPTION:
        event = next((e for e in span.events if e.name == "exception"), None)
        if event is not None:
            facts["type"] = event.attributes.get("exception.type")
            facts["message"] = event.attributes.get("exception.message")
    elif kind == semconv.SPAN_TYPE_MESSAGE:
        facts["message"] = attributes.get(semconv.AGL_MESSAGE)
    elif kind == semconv.SPAN_TYPE_TOOL:
        facts["tool"] = attributes.get(semconv.AGL_TOOL_NAME)
    elif kind == semconv.SPAN_TYPE_OPERATION:
        facts["operation"] = attributes.get(semconv.AGL_OPERATION_NAME)
    elif kind == semconv.SPAN_TYPE_OBJECT:
        facts["object_type"] = attributes.get(semconv.AGL_OBJECT_TYPE)
    elif kind == semconv.SPAN_TYPE_ANNOTATION:
        facts.update(
            (key.removeprefix(semconv.AGL_ANNOTATION_PREFIX), value)
            for key, value in attributes.items()
            if key.startswith(semconv.AGL_ANNOTATION_PREFIX)
        )
    if span.status.code == StatusCode.ERROR and span.status.description and not facts:
        facts["error"] = span.status.description
    return facts


def llm_calls(spans: Sequence[Span]) -> dict[str, dict[str, int]]:
    """Count LLM calls and their tokens, separately for ``llm`` and ``gateway`` spans.

    The two are kept apart because the same call is often recorded twice, by the agent's
    instrumentation and by the gateway; adding them up would count it twice. A call two
    instrumentations recorded (a LangChain model over the OpenAI client) is one ``llm`` call,
    with the tokens its spans report (the largest count of them).
    """
    counts = {kind: {"calls": 0, "input_tokens": 0, "output_tokens": 0} for kind in LLM_SPAN_TYPES}
    instrumented = [span for span in spans if span_type(span) == semconv.SPAN_TYPE_LLM]
    gateway = [[span] for span in spans if span_type(span) == semconv.SPAN_TYPE_GATEWAY]
    for kind, calls in (
        (semconv.SPAN_TYPE_LLM, same_call_groups(instrumented)),
        (semconv.SPAN_TYPE_GATEWAY, gateway),
    ):
        counts[kind]["calls"] = len(calls)
        for name, key in (
            ("input_tokens", semconv.GEN_AI_USAGE_INPUT_TOKENS),
            ("output_tokens", semconv.GEN_AI_USAGE_OUTPUT_TOKENS),
        ):
            counts[kind][name] = sum(max(_count(span, key) for span in group) for group in calls)
    return counts


def _count(span: Span, key: str) -> int:
    """An integer attribute of the span (0 when it has none)."""
    value = span.attributes.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def reward_rows(attempts: Sequence[Attempt], spans: Sequence[Span]) -> list[dict[str, Any]]:
    """Every reward span of a rollout: its attempt (id and number), span, primary key, value."""
    sequence = {attempt.attempt_id: attempt.sequence for attempt in attempts}
    return [
        {
            "attempt_id": span.attempt_id,
            "attempt": sequence.get(span.attempt_id),
            "span_id": span.span_id,
            "name": span.name,
            "primary": span.attributes.get(semconv.AGL_REWARD_PRIMARY),
            "value": value,
        }
        for span in spans
        if (value := reward_of(span)) is not None
    ]


def latest_spans(rollout: Rollout, spans: Sequence[Span]) -> list[Span]:
    """The spans of the rollout's latest attempt."""
    return [span for span in spans if span.attempt_id == rollout.latest_attempt_id]


# --- JSON -------------------------------------------------------------------------------------


def rollout_page_json(
    page: RolloutPage, latest_spans: Mapping[str, Sequence[Span]]
) -> dict[str, Any]:
    """Return a page of rollouts as ``{"rollouts": [...], "total": N}``.

    Each rollout carries ``reward``, the final reward of its latest attempt or None;
    ``latest_spans`` maps rollout ids to the spans of their latest attempts.
    """
    rollouts = [
        {
            **rollout.model_dump(mode="json"),
            "reward": final_reward(latest_spans.get(rollout.rollout_id, ())),
        }
        for rollout in page.rollouts
    ]
    return {"rollouts": rollouts, "total": page.total}


def _node_json(node: SpanNode) -> dict[str, Any]:
    span = node.span
    return {
        "span_id": span.span_id,
        "trace_id": span.trace_id,
        "parent_id": span.parent_id,
        "sequence_id": span.sequence_id,
        "name": span.name,
        "type": span_type(span),
        "status": span.status.code.value,
        "start_time_unix_nano": span.start_time_unix_nano,
        "end_time_unix_nano": span.end_time_unix_nano,
        "duration_seconds": span.duration_seconds,
        "facts": span_facts(span),
        "children": [_node_json(child) for child in node.children],
    }


def rollout_detail_json(
    rollout: Rollout, attempts: Sequence[Attempt], spans: Sequence[Span]
) -> dict[str, Any]:
    """Return a rollout, its attempts with span trees and LLM call counts, and its rewards.

    Spans appear as trees of ``{name, type, facts, children, ...}``, not with all their
    attributes (token ids and request bodies would drown the rest); read those from the store.
    """
    by_attempt: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        by_attempt[span.attempt_id].append(span)
    attempts_json = [
        {
            **attempt.model_dump(mode="json"),
            "spans": [_node_json(node) for node in span_tree(by_attempt[attempt.attempt_id])],
            "llm_calls": llm_calls(by_attempt[attempt.attempt_id]),
        }
        for attempt in attempts
    ]
    return {
        "rollout": rollout.model_dump(mode="json"),
        "attempts": attempts_json,
        "rewards": reward_rows(attempts, spans),
        "final_reward": final_reward(latest_spans(rollout, spans)),
    }
