"""Turn what a store holds into tables, trees and JSON, for ``agl rollouts``.

Pure functions: the CLI reads rollouts, attempts and spans from a store and hands them here.
Each view comes twice, as a rich renderable for people and as a JSON-able dict for scripts,
and both are built from the same facts (:func:`span_facts`, :func:`agl.results.reward_of`,
:func:`llm_calls`), so the two never disagree.

Spans are recognised by their ``agl.span.type`` attribute (see :mod:`agl.semconv`), never by
their names.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue
from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from agl import semconv
from agl.results import final_reward, reward_of, span_type
from agl.rollouts import Attempt, Rollout, RolloutPage
from agl.spans import Span, StatusCode
from agl.tracing.same_call import same_call_groups

__all__ = [
    "SpanNode",
    "llm_calls",
    "rollout_detail_json",
    "rollout_detail_view",
    "rollout_page_json",
    "rollout_page_table",
    "span_facts",
    "span_tree",
]

_STATUS_STYLES = {
    "succeeded": "green",
    "failed": "red",
    "timeout": "red",
    "unresponsive": "red",
    "cancelled": "yellow",
    "released": "yellow",
    "preparing": "cyan",
    "running": "cyan",
    "queuing": "blue",
    "requeuing": "blue",
}
_LLM_TYPES = (semconv.SPAN_TYPE_LLM, semconv.SPAN_TYPE_GATEWAY)


# --- facts ------------------------------------------------------------------------------------


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
    elif kind in _LLM_TYPES:
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
    counts = {kind: {"calls": 0, "input_tokens": 0, "output_tokens": 0} for kind in _LLM_TYPES}
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


def _rewards(attempts: Sequence[Attempt], spans: Sequence[Span]) -> list[dict[str, Any]]:
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


def _latest_spans(rollout: Rollout, spans: Sequence[Span]) -> list[Span]:
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
        "rewards": _rewards(attempts, spans),
        "final_reward": final_reward(_latest_spans(rollout, spans)),
    }


# --- rich -------------------------------------------------------------------------------------


def rollout_page_table(page: RolloutPage, latest_spans: Mapping[str, Sequence[Span]]) -> Table:
    """Return a table of one page of rollouts, the total in its caption.

    ``latest_spans`` maps rollout ids to the spans of their latest attempts (for the reward).
    """
    shown = (
        f"{page.offset + 1}-{page.offset + len(page.rollouts)} of {page.total}"
        if page.rollouts
        else f"none of {page.total}"
    )
    # Compact, so that the ids, which people copy into `show`, stay whole in 80 columns: only
    # the input and start columns give way (the input is cut, the start wraps).
    table = Table(
        caption=f"rollouts {shown}",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    for name in ("rollout", "status", "mode"):
        table.add_column(name, no_wrap=True)
    table.add_column("attempts", justify="right", no_wrap=True)
    table.add_column("started", justify="right")  # may wrap to date over time
    table.add_column("duration", justify="right", no_wrap=True)
    table.add_column("reward", justify="right", no_wrap=True)
    table.add_column("input")
    for rollout in page.rollouts:
        reward = final_reward(latest_spans.get(rollout.rollout_id, ()))
        table.add_row(
            Text(rollout.rollout_id),
            _status(rollout.status),
            rollout.mode,
            f"{rollout.num_attempts}/{rollout.config.max_attempts}",
            _time(rollout.start_time, short=True),
            _duration(_elapsed(rollout.start_time, rollout.end_time)),
            "-" if reward is None else _number(reward),
            Text(_clip(_compact(rollout.input), 200), no_wrap=True, overflow="ellipsis"),
        )
    return table


def rollout_detail_view(
    rollout: Rollout, attempts: Sequence[Attempt], spans: Sequence[Span]
) -> RenderableType:
    """Return the rollout's fields and config, a span tree per attempt, rewards and LLM calls."""
    by_attempt: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        by_attempt[span.attempt_id].append(span)
    parts: list[RenderableType] = [_rollout_panel(rollout)]
    parts.extend(_attempt_tree(attempt, by_attempt[attempt.attempt_id]) for attempt in attempts)
    if not attempts:
        parts.append(Text("No attempts yet.", style="dim"))
    parts.append(_rewards_table(rollout, attempts, spans))
    if attempts:
        parts.append(_llm_table(attempts, by_attempt))
    return Group(*parts)


def _rollout_panel(rollout: Rollout) -> Panel:
    config = rollout.config
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    rows: list[tuple[str, RenderableType]] = [
        ("status", _status(rollout.status)),
        ("mode", rollout.mode),
        ("attempts", f"{rollout.num_attempts} of at most {config.max_attempts}"),
        ("enqueued", _time(rollout.enqueue_time)),
        ("started", _time(rollout.start_time)),
        ("ended", _time(rollout.end_time)),
        ("duration", _duration(_elapsed(rollout.start_time, rollout.end_time))),
        ("resources", Text(rollout.resources_id or "-")),
        (
            "config",
            f"timeout {_duration(config.timeout_seconds)}, "
            f"unresponsive after {_duration(config.unresponsive_seconds)}, "
            f"retry on {', '.join(sorted(config.retry_on)) or 'nothing'}",
        ),
    ]
    if rollout.metadata:
        rows.append(("metadata", Text(_clip(_compact(rollout.metadata), 500))))
    rows.append(("input", Text(_clip(_compact(rollout.input), 2000))))
    for label, value in rows:
        grid.add_row(label, value)
    return Panel(grid, title=Text(f"rollout {rollout.rollout_id}"), title_align="left")


def _attempt_tree(attempt: Attempt, spans: Sequence[Span]) -> Tree:
    label = Text.assemble(
        (f"attempt {attempt.sequence} ", "bold"),
        (attempt.attempt_id, ""),
        "  ",
        _status(attempt.status),
        f"  worker {attempt.worker_id or '-'}",
        f"  started {_time(attempt.start_time)}",
        f"  ended {_time(attempt.end_time)}",
        f"  ({_duration(_elapsed(attempt.start_time, attempt.end_time))})",
    )
    if attempt.reason:
        label.append(f"  reason: {attempt.reason}", style="italic")
    tree = Tree(label)
    nodes = span_tree(spans)
    if not nodes:
        tree.add(Text("no spans", style="dim"))
    for node in nodes:
        _add_node(tree, node)
    return tree


def _add_node(parent: Tree, node: SpanNode) -> None:
    span = node.span
    label = Text(span.name, style="red" if span.status.code == StatusCode.ERROR else "")
    kind = span_type(span)
    if kind:
        label.append(f" [{kind}]", style="dim")
    label.append(f" {_duration(span.duration_seconds)}", style="dim")
    facts = span_facts(span)
    if facts:
        label.append("  " + "  ".join(f"{k}={_fact(v)}" for k, v in facts.items()))
    branch = parent.add(label)
    for child in node.children:
        _add_node(branch, child)


def _rewards_table(
    rollout: Rollout, attempts: Sequence[Attempt], spans: Sequence[Span]
) -> RenderableType:
    rows = _rewards(attempts, spans)
    if not rows:
        return Text("rewards: none recorded", style="dim")
    final = final_reward(_latest_spans(rollout, spans))
    table = Table(
        title="rewards",
        title_justify="left",
        caption=f"final reward: {'-' if final is None else _number(final)} (latest attempt)",
        caption_justify="left",
    )
    table.add_column("attempt", justify="right")
    table.add_column("span")
    table.add_column("primary")
    table.add_column("value", justify="right")
    for row in rows:
        table.add_row(
            str(row["attempt"] or "?"),
            Text(f"{row['name']} {row['span_id']}"),
            Text(str(row["primary"] or "-")),
            _number(row["value"]),
        )
    return table


def _llm_table(attempts: Sequence[Attempt], by_attempt: Mapping[str, Sequence[Span]]) -> Table:
    table = Table(title="LLM calls", title_justify="left")
    table.add_column("attempt", justify="right")
    for kind in _LLM_TYPES:
        table.add_column(f"{kind} calls", justify="right")
        table.add_column(f"{kind} tokens in/out", justify="right")
    for attempt in attempts:
        counts = llm_calls(by_attempt.get(attempt.attempt_id, ()))
        cells = [str(attempt.sequence)]
        for kind in _LLM_TYPES:
            count = counts[kind]
            cells += [str(count["calls"]), f"{count['input_tokens']}/{count['output_tokens']}"]
        table.add_row(*cells)
    return table


# --- formatting -------------------------------------------------------------------------------


def _status(status: str) -> Text:
    return Text(str(status), style=_STATUS_STYLES.get(str(status), ""))


def _time(seconds: float | None, short: bool = False) -> str:
    """Local time; ``short`` leaves out the year."""
    if seconds is None:
        return "-"
    return time.strftime(
        "%m-%d %H:%M:%S" if short else "%Y-%m-%d %H:%M:%S", time.localtime(seconds)
    )


def _elapsed(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else end - start


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.2f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _number(value: Any) -> str:
    return f"{value:.6g}" if _is_number(value) else str(value)


def _fact(value: Any) -> str:
    return _number(value) if _is_number(value) else _clip(_compact(value), 120)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _compact(value: Any) -> str:
    """A value on one line: strings as they are, anything else as compact JSON."""
    if isinstance(value, str):
        return value.replace("\n", " ")
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
