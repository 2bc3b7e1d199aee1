"""LLM calls, read back from one attempt's spans: joined, attributed to agents, with rewards.

A rollout records each LLM call up to twice: the **gateway** span holds what the engine saw
(prompt and response token ids, logprobs), the **instrumented** span (from the agent's
framework) sits in the agent's span tree, under the agent that made the call. This module
pairs the two, decides which agent each call belongs to and which rewards follow it:

- **Join** on the response id (``gen_ai.response.id``, recorded on both sides). A gateway span
  whose twin has no response id (or that has none itself) is paired with the next unpaired
  instrumented span in call order; a call seen on one side only is kept with what that side
  knows. A call two instrumentations recorded counts once
  (:func:`~agl.tracing._same_call.same_call_groups`). An LLM span is recognised by semantic
  conventions (:func:`~agl.tracing.is_llm_span`: ``agl.span.type``,
  ``gen_ai.operation.name``, ``gen_ai.system``), never by its name, so tool-calling and
  structured-output calls of every framework count.
- **Repair** the span tree (:mod:`agl.lightning._span_tree`): a span whose parent is missing
  from the attempt, or whose parent's time range does not contain it (context lost across a
  thread or a callback), is re-attached to the innermost span that does contain it.
- **Attribute** each call to the nearest enclosing span that names an agent
  (``agl.agent.name``, set by :func:`agl.agent_span` and the framework adapters); the call's own
  span may name it too. Gateway-only calls are attributed by time.
- **Rewards**: the last reward span of the attempt is the *final* reward (the same reading as
  :func:`agl._results.final_reward`); every earlier one is a *step* reward, given to the call
  its ``agl.link.response_id`` names, else to the latest call that ended before the reward was
  emitted.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agl import semconv
from agl._spans import Span
from agl.lightning._span_tree import agent_by_time, agent_of, repaired_parents
from agl.tracing._conventions import is_llm_span
from agl.tracing._same_call import same_call_groups

__all__ = ["AttemptCalls", "LLMCall", "extract_calls"]

_GATEWAY = semconv.SPAN_TYPE_GATEWAY
_REWARD = semconv.SPAN_TYPE_REWARD
_AGENT_NAME = semconv.AGL_AGENT_NAME
_TYPE = semconv.AGL_SPAN_TYPE
_RESPONSE_ID = semconv.GEN_AI_RESPONSE_ID


@dataclass(slots=True)
class LLMCall:
    """One LLM call of a rollout, as credit assignment sees it.

    Attributes:
        rollout_id / attempt_id: Where the call happened.
        index: Position of the call in its attempt (0, 1, ...), in the order calls started.
        agent: The agent the call belongs to (None when no agent span encloses it).
        response_id: The response's ``id`` (``gen_ai.response.id``), when known.
        prompt_ids / response_ids / logprobs: The engine's tokens (None when not recorded).
        request / response: The call's request and response as JSON text, when recorded.
        step_rewards: Rewards emitted for this call (linked by response id, or following it).
        weight_version: The version of the weights that produced the response, when the engine
            named it (``agl.llm.weight_version``).
        span_id: The span the call was read from (the gateway's when there is one).
        start_ns / end_ns: When the call started and ended.
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
    weight_version: int | None = None
    span_id: str | None = None
    start_ns: int = 0
    end_ns: int = 0

    @property
    def has_tokens(self) -> bool:
        """Whether the engine's prompt and response token ids were recorded."""
        return self.prompt_ids is not None and self.response_ids is not None

    def messages(self) -> list[Any] | None:
        """The request's ``messages`` (chat calls), parsed from :attr:`request`."""
        if self.request is None:
            return None
        try:
            body = json.loads(self.request)
        except ValueError:
            return None
        messages = body.get("messages") if isinstance(body, dict) else None
        return messages if isinstance(messages, list) else None


@dataclass(slots=True)
class AttemptCalls:
    """The LLM calls of one attempt, and what was odd about its spans.

    Attributes:
        calls: The calls, in the order they started.
        final_reward: The attempt's final reward (its last reward span), or None.
        counts: How many spans needed help: ``reparented_spans`` (tree repairs),
            ``joined_by_order`` (pairs made without a response id), ``gateway_only`` /
            ``instrumented_only`` (calls seen on one side), ``unmatched_rewards`` (step rewards
            emitted before any call, or linked to a response id no call has),
            ``duplicate_llm_spans`` (a call two instrumentations recorded, such as a LangChain
            model over the OpenAI client: one span per response id is kept).
    """

    rollout_id: str
    attempt_id: str
    calls: list[LLMCall]
    final_reward: float | None
    counts: dict[str, int]


def extract_calls(spans: Sequence[Span]) -> AttemptCalls:
    """Read the LLM calls of one attempt from its spans (in sequence order).

    Pass the spans of a single attempt, as :attr:`agl.RolloutResult.spans` holds them.
    """
    counts = {
        "reparented_spans": 0,
        "joined_by_order": 0,
        "gateway_only": 0,
        "instrumented_only": 0,
        "unmatched_rewards": 0,
        "duplicate_llm_spans": 0,
    }
    if not spans:
        return AttemptCalls("", "", [], None, counts)
    rollout_id, attempt_id = spans[0].rollout_id, spans[0].attempt_id
    gateway: list[Span] = []
    llm: list[Span] = []
    rewards: list[Span] = []
    named: dict[str, str] = {}  # span id -> agent name, for spans that name one
    by_id: dict[str, Span] = {}
    for span in spans:
        attributes = span.attributes
        by_id[span.span_id] = span
        kind = attributes.get(_TYPE)
        if kind == _GATEWAY:
            gateway.append(span)
            continue
        if kind == _REWARD:
            rewards.append(span)
        elif is_llm_span(attributes):
            llm.append(span)
        name = attributes.get(_AGENT_NAME)
        if isinstance(name, str) and name:
            named[span.span_id] = name

    parents = repaired_parents(spans, by_id, counts)
    llm = _one_span_per_response(llm, parents, named, counts)
    pairs = _join(gateway, llm, counts)
    agent_spans = [by_id[span_id] for span_id in named]
    calls = []
    for gate, inst in pairs:
        if inst is not None:
            agent = agent_of(inst.span_id, parents, named)
        else:
            assert gate is not None
            agent = agent_by_time(gate, agent_spans, named)
        calls.append(_call(rollout_id, attempt_id, gate, inst, agent))
    calls.sort(key=lambda call: call.start_ns)
    for index, call in enumerate(calls):
        call.index = index

    final = None
    if rewards:
        final = _reward_value(rewards[-1])
        _give_step_rewards(rewards[:-1], calls, counts)
    return AttemptCalls(rollout_id, attempt_id, calls, final, counts)


# --- joining gateway and instrumented spans ----------------------------------------------------


def _one_span_per_response(
    llm: list[Span],
    parents: dict[str, str | None],
    named: dict[str, str],
    counts: dict[str, int],
) -> list[Span]:
    """One instrumented span per call: the first inside an agent, else the first.

    Two instrumentations can record the same call (a LangChain chat model and the OpenAI client
    it drives); :func:`~agl.tracing._same_call.same_call_groups` tells which spans are one call
    (the response id, or for a failed call, time and input messages).
    """
    kept: set[str] = set()
    for group in same_call_groups(llm):
        counts["duplicate_llm_spans"] += len(group) - 1
        chosen = next(
            (span for span in group if agent_of(span.span_id, parents, named) is not None),
            group[0],
        )
        kept.add(chosen.span_id)
    if not counts["duplicate_llm_spans"]:
        return llm
    return [span for span in llm if span.span_id in kept]


def _join(
    gateway: list[Span], llm: list[Span], counts: dict[str, int]
) -> list[tuple[Span | None, Span | None]]:
    if not gateway:
        counts["instrumented_only"] += len(llm)
        return [(None, span) for span in llm]
    if not llm:
        counts["gateway_only"] += len(gateway)
        return [(span, None) for span in gateway]
    by_response: dict[Any, Span] = {}
    for span in llm:
        response_id = span.attributes.get(_RESPONSE_ID)
        if response_id is not None:
            by_response.setdefault(response_id, span)
    pairs: list[tuple[Span | None, Span | None]] = []
    lone_gateway = []
    for span in gateway:
        twin = by_response.pop(span.attributes.get(_RESPONSE_ID), None)
        if twin is not None:
            pairs.append((span, twin))
        else:
            lone_gateway.append(span)
    if lone_gateway or len(pairs) < len(llm):
        paired = {id(inst) for _, inst in pairs}
        # Instrumented spans without a response id can still be twins of gateway spans
        # without a match: pair them in call order. Spans that have a response id no gateway
        # span has are calls that did not go through the gateway.
        lone_llm = [
            span
            for span in llm
            if id(span) not in paired and span.attributes.get(_RESPONSE_ID) is None
        ]
        lone_gateway.sort(key=_start)
        lone_llm.sort(key=_start)
        matched = min(len(lone_gateway), len(lone_llm))
        counts["joined_by_order"] += matched
        pairs.extend(zip(lone_gateway[:matched], lone_llm[:matched], strict=True))
        counts["gateway_only"] += len(lone_gateway) - matched
        pairs.extend((span, None) for span in lone_gateway[matched:])
        paired.update(id(span) for span in lone_llm[:matched])
        rest = [span for span in llm if id(span) not in paired]
        counts["instrumented_only"] += len(rest)
        pairs.extend((None, span) for span in rest)
    return pairs


def _start(span: Span) -> int:
    return span.start_time_unix_nano


def _call(
    rollout_id: str,
    attempt_id: str,
    gate: Span | None,
    inst: Span | None,
    agent: str | None,
) -> LLMCall:
    # Token ids come from whichever side recorded them (the gateway, normally).
    sides = [side.attributes for side in (gate, inst) if side is not None]
    first = gate if gate is not None else inst
    assert first is not None
    timing = inst if inst is not None else gate
    assert timing is not None
    return LLMCall(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        index=0,
        agent=agent,
        response_id=_first_str(sides, _RESPONSE_ID),
        prompt_ids=_first_list(sides, semconv.AGL_PROMPT_TOKEN_IDS),
        response_ids=_first_list(sides, semconv.AGL_RESPONSE_TOKEN_IDS),
        logprobs=_first_list(sides, semconv.AGL_RESPONSE_LOGPROBS),
        request=_first_str(sides, semconv.AGL_REQUEST_JSON),
        response=_first_str(sides, semconv.AGL_RESPONSE_JSON),
        weight_version=_first_int(sides, semconv.AGL_WEIGHT_VERSION),
        span_id=first.span_id,
        start_ns=timing.start_time_unix_nano,
        end_ns=timing.end_time_unix_nano or timing.start_time_unix_nano,
    )


def _first_str(sides: list[dict[str, Any]], key: str) -> str | None:
    for attributes in sides:
        value = attributes.get(key)
        if isinstance(value, str):
            return value
    return None


def _first_int(sides: list[dict[str, Any]], key: str) -> int | None:
    for attributes in sides:
        value = attributes.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _first_list(sides: list[dict[str, Any]], key: str) -> Any:
    for attributes in sides:
        value = attributes.get(key)
        if isinstance(value, list):
            return value
    return None


# --- rewards ----------------------------------------------------------------------------------


def _reward_value(span: Span) -> float | None:
    value = span.attributes.get(semconv.AGL_REWARD)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _give_step_rewards(rewards: list[Span], calls: list[LLMCall], counts: dict[str, int]) -> None:
    by_response = {call.response_id: call for call in calls if call.response_id is not None}
    ends = sorted((call.end_ns, call.index) for call in calls)
    end_times = [end for end, _ in ends]
    for span in rewards:
        value = _reward_value(span)
        if value is None:
            continue
        linked = span.attributes.get(semconv.AGL_LINK_RESPONSE_ID)
        if linked is not None:
            target = by_response.get(linked) if isinstance(linked, str) else None
        else:
            position = bisect.bisect_right(end_times, span.start_time_unix_nano)
            target = calls[ends[position - 1][1]] if position > 0 else None
        if target is None:
            counts["unmatched_rewards"] += 1
        else:
            target.step_rewards.append(value)
