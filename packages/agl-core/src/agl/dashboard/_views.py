"""The dashboard's read-only views: what the pages need that the store's plain routes do not
compute. Each is built from a :class:`~agl.store.Store` (in process, or the HTTP client of a
store server), never from a database directly.

Routes, under ``/v1/views``:

=======================================================  ==========================================
``GET /rollouts/{id}``                                   a rollout, its attempts, one attempt's
                                                         spans, LLM calls and rewards
``GET /rollouts/{id}/calls/{index}/tokens``              one call's token ids and logprobs
``GET /rollouts/{id}/training``                          the rollout's group and the LightningRL
                                                         transitions built from it, kept or
                                                         dropped and why, and the calls whose
                                                         history was re-rendered
                                                         (``prefix_mismatch``)
``GET /resources/{id}/diff``                             a resource set against another version
=======================================================  ==========================================
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from fastapi import APIRouter, Request

from agl import semconv
from agl._errors import NotFoundError
from agl._ids import SegmentId
from agl._resources import ResourcesUpdate
from agl._results import fetch_results, reward_of, summarize
from agl._rollouts import Rollout
from agl._spans import Span
from agl.lightning import LLMCall, TransitionBuilder, extract_calls
from agl.store._base import Store

__all__ = ["MAX_SPANS", "create_views"]

MAX_SPANS = 5_000
"""The most spans one rollout view carries (the first ones, in sequence order)."""

MAX_GROUP = 512
"""The most rollouts a training view reads for one group."""

StoreFor = Callable[[Request], Awaitable[Store]]

Credit = Literal["final", "step", "discounted"]
"""LightningRL's built-in credit assignments, as the training view offers them."""

Advantage = Literal["grpo", "rloo", "reinforce"]
"""LightningRL's built-in advantage estimators."""


def create_views(store_for: StoreFor) -> APIRouter:
    """The views' routes; ``store_for(request)`` gives the store a request reads."""
    router = APIRouter(prefix="/v1/views", tags=["dashboard"])

    @router.get("/rollouts/{rollout_id}")
    async def rollout(
        request: Request, rollout_id: SegmentId, attempt_id: SegmentId | None = None
    ) -> dict[str, Any]:
        """A rollout, its attempts, and one attempt's spans, LLM calls and rewards."""
        return await rollout_view(await store_for(request), rollout_id, attempt_id)

    @router.get("/rollouts/{rollout_id}/calls/{index}/tokens")
    async def tokens(
        request: Request, rollout_id: SegmentId, index: int, attempt_id: SegmentId | None = None
    ) -> dict[str, Any]:
        """One LLM call's token ids and logprobs."""
        return await call_tokens(await store_for(request), rollout_id, index, attempt_id)

    @router.get("/rollouts/{rollout_id}/training")
    async def training(
        request: Request,
        rollout_id: SegmentId,
        credit: Credit = "final",
        advantage: Advantage = "grpo",
        trajectory: bool = False,
    ) -> dict[str, Any]:
        """The rollout's group and LightningRL's transitions of it, kept or dropped and why."""
        builder = TransitionBuilder(credit=credit, advantage=advantage, trajectory=trajectory)
        return await training_view(await store_for(request), rollout_id, builder)

    @router.get("/resources/{resources_id}/diff")
    async def diff(
        request: Request, resources_id: SegmentId, against: SegmentId | None = None
    ) -> dict[str, Any]:
        """A resource set against another version (default: the one before it)."""
        return await resources_diff(await store_for(request), resources_id, against)

    return router


# --- the views --------------------------------------------------------------------------------


async def rollout_view(store: Store, rollout_id: str, attempt_id: str | None) -> dict[str, Any]:
    """What the rollout page shows."""
    rollout = await store.get_rollout(rollout_id)
    attempts = await store.query_attempts(rollout_id)
    chosen = attempt_id or rollout.latest_attempt_id
    if chosen is not None and all(a.attempt_id != chosen for a in attempts):
        raise NotFoundError(
            f"rollout {rollout_id!r} has no attempt {chosen!r}",
            field="attempt_id",
            value=chosen,
        )
    spans = await store.query_spans(rollout_id, chosen) if chosen else []
    calls = extract_calls(spans).calls
    return {
        "rollout": rollout.model_dump(mode="json"),
        "attempts": [a.model_dump(mode="json") for a in attempts],
        "attempt_id": chosen,
        "spans": [_span(span) for span in spans[:MAX_SPANS]],
        "spans_total": len(spans),
        "calls": [_call(call) for call in calls],
        "rewards": [
            {"span_id": s.span_id, "value": value, "time": s.start_time_unix_nano / 1e9}
            for s in spans
            if (value := reward_of(s)) is not None
        ],
        "error": summarize(rollout, attempts, spans).error,
    }


async def call_tokens(
    store: Store, rollout_id: str, index: int, attempt_id: str | None
) -> dict[str, Any]:
    """Call ``index`` of the attempt's LLM calls: its token ids and logprobs."""
    rollout = await store.get_rollout(rollout_id)
    spans = await store.query_spans(rollout_id, attempt_id or rollout.latest_attempt_id)
    calls = extract_calls(spans).calls
    if not 0 <= index < len(calls):
        raise NotFoundError(
            f"rollout {rollout_id!r} has {len(calls)} LLM calls, no call {index}",
            field="index",
            value=index,
        )
    call = calls[index]
    return {
        "prompt_ids": call.prompt_ids,
        "response_ids": call.response_ids,
        "logprobs": call.logprobs,
    }


async def training_view(
    store: Store, rollout_id: str, builder: TransitionBuilder
) -> dict[str, Any]:
    """The rollout's group, and what ``builder`` makes of it."""
    rollout = await store.get_rollout(rollout_id)
    members = await _group(store, rollout)
    results = await fetch_results(store, members)
    batch = builder.build(results)
    report = batch.report
    rows = []
    for result in results:
        rid = result.rollout.rollout_id
        mine = [t for t in batch if t.rollout_id == rid]
        calls = extract_calls(result.spans).calls
        rows.append(
            {
                "rollout_id": rid,
                "status": result.rollout.status.value,
                "reward": result.reward,
                "calls": len(calls),
                "transitions": len(mine),
                "dropped": report.rollout_reasons.get(rid),
                "prefix_mismatch": sum(1 for m in report.prefix_mismatches if m[0] == rid),
                "metadata": result.rollout.metadata,
            }
        )
    transitions = [
        {
            "rollout_id": t.rollout_id,
            "call_index": t.call_index,
            "agent": t.agent,
            "reward": t.reward,
            "advantage": t.advantage,
            "weight": t.weight,
            "prompt_tokens": len(t.prompt_ids),
            "response_tokens": len(t.response_ids),
            "weight_version": t.weight_version,
        }
        for t in batch
    ]
    dropped_calls = [
        {"rollout_id": rid, "call_index": index, "reason": reason}
        for (rid, index), reason in sorted(report.call_reasons.items())
    ]
    return {
        "rollout_id": rollout_id,
        "group": _group_label(rollout),
        "settings": {
            "credit": repr(builder.credit),
            "advantage": repr(builder.advantage),
            "trajectory": builder.trajectory,
        },
        "rollouts": rows,
        "transitions": transitions,
        "dropped_calls": dropped_calls,
        # calls whose re-rendered history LightningRL trained on their own (never merged)
        "prefix_mismatch": [
            {"rollout_id": rid, "call_index": index, "position": position}
            for rid, index, position in report.prefix_mismatches
        ],
        "summary": report.summary(),
    }


async def resources_diff(store: Store, resources_id: str, against: str | None) -> dict[str, Any]:
    """Each resource of the set against its value in ``against`` (default: the version
    before), with a unified diff of a prompt's text (or of the resource's JSON)."""
    after = await store.get_resources(resources_id)
    if after is None:
        raise NotFoundError(f"no resources {resources_id!r}", field="resources_id")
    before = None
    if against is not None:
        try:
            before = await store.get_resources(against)
        except NotFoundError:
            before = None
        if before is None:
            raise NotFoundError(
                f"no resources {against!r} to compare with", field="against", value=against
            )
    elif after.version > 1:
        before = await _version(store, after.version - 1)
    old = {} if before is None else before.resources
    names = sorted(set(old) | set(after.resources))
    return {
        "resources_id": resources_id,
        "version": after.version,
        "against": None if before is None else before.resources_id,
        "against_version": None if before is None else before.version,
        "resources": [
            _resource_diff(
                name,
                old[name].model_dump(mode="json") if name in old else None,
                after.resources[name].model_dump(mode="json") if name in after.resources else None,
            )
            for name in names
        ],
    }


# --- helpers ----------------------------------------------------------------------------------


def _span(span: Span) -> dict[str, Any]:
    return {
        "span_id": span.span_id,
        "parent_id": span.parent_id,
        "name": span.name,
        "type": span.attributes.get(semconv.AGL_SPAN_TYPE),
        "status": span.status.code.value,
        "status_message": span.status.description,
        "start": span.start_time_unix_nano / 1e9,
        "end": None if span.end_time_unix_nano is None else span.end_time_unix_nano / 1e9,
        "attributes": span.attributes,
        "events": [event.model_dump(mode="json") for event in span.events],
    }


def _call(call: LLMCall) -> dict[str, Any]:
    response = _json(call.response)
    request = _json(call.request)
    choices = response.get("choices") if isinstance(response, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else {}
    message = choice.get("message") if isinstance(choice, dict) else None
    return {
        "index": call.index,
        "agent": call.agent,
        "span_id": call.span_id,
        "response_id": call.response_id,
        "model": (request or {}).get("model") if isinstance(request, dict) else None,
        "messages": call.messages(),
        "tools": len(request.get("tools") or []) if isinstance(request, dict) else 0,
        "reply": message if isinstance(message, dict) else None,
        "finish_reason": choice.get("finish_reason") if isinstance(choice, dict) else None,
        "usage": response.get("usage") if isinstance(response, dict) else None,
        "prompt_tokens": None if call.prompt_ids is None else len(call.prompt_ids),
        "response_tokens": None if call.response_ids is None else len(call.response_ids),
        "has_logprobs": call.logprobs is not None,
        "weight_version": call.weight_version,
        "step_rewards": call.step_rewards,
        "latency_ms": (call.end_ns - call.start_ns) / 1e6 if call.end_ns else None,
        "start": call.start_ns / 1e9,
    }


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _group_label(rollout: Rollout) -> str | None:
    metadata = rollout.metadata
    group = metadata.get("group_id")
    if isinstance(group, str | int) and not isinstance(group, bool):
        return str(group)
    index = metadata.get("task_index")
    if isinstance(index, int) and not isinstance(index, bool):
        return f"task {index}"
    return None


async def _group(store: Store, rollout: Rollout) -> list[Rollout]:
    """The rollouts trained together with ``rollout``: those enqueued in the same call (the
    samples of one step) with the same ``group_id``, or else the same ``task_index``."""
    label = _group_label(rollout)
    if label is None:
        return [rollout]
    key = _group_key(rollout)
    page = await store.query_rollouts(
        limit=MAX_GROUP,
        since=rollout.enqueue_time,
        until=math.nextafter(rollout.enqueue_time, math.inf),
    )
    members = [r for r in page.rollouts if _group_key(r) == key]
    return members or [rollout]


def _group_key(rollout: Rollout) -> tuple[str, Any]:
    metadata = rollout.metadata
    if "group_id" in metadata:
        return ("group_id", metadata["group_id"])
    return ("task_index", metadata.get("task_index"))


async def _version(store: Store, version: int) -> ResourcesUpdate | None:
    """The resource set published as ``version`` (versions count 1, 2, ... newest last)."""
    total = (await store.query_resources(limit=1)).total
    offset = total - version
    if not 0 <= offset < total:
        return None
    found = (await store.query_resources(limit=1, offset=offset)).resources
    return found[0] if found and found[0].version == version else None


def _resource_diff(name: str, before: Any, after: Any) -> dict[str, Any]:
    old_text, new_text = _text(before), _text(after)
    lines = list(
        difflib.unified_diff(
            old_text.splitlines(), new_text.splitlines(), "before", "after", lineterm="", n=3
        )
    )
    return {
        "name": name,
        "type": (after or before or {}).get("type"),
        "before": before,
        "after": after,
        "text_before": old_text if _is_prompt(before) else None,
        "text_after": new_text if _is_prompt(after) else None,
        "changed": before != after,
        "diff": lines,
    }


def _is_prompt(resource: Any) -> bool:
    return isinstance(resource, dict) and isinstance(resource.get("template"), str)


def _text(resource: Any) -> str:
    """What is compared: a prompt's template, else the resource as indented JSON."""
    if resource is None:
        return ""
    if _is_prompt(resource):
        return str(resource["template"])
    return json.dumps(resource, indent=2, sort_keys=True)
