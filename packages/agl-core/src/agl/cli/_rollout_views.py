"""``agl rollouts`` for people: a page of rollouts as a table, one rollout as panels and trees.

Rendered with rich from the facts of :mod:`agl._rollout_facts`, which ``--json`` prints as is.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from agl._results import final_reward, span_type
from agl._rollout_facts import (
    LLM_SPAN_TYPES,
    SpanNode,
    latest_spans,
    llm_calls,
    reward_rows,
    span_facts,
    span_tree,
)
from agl._rollouts import Attempt, Rollout, RolloutPage
from agl._spans import Span, StatusCode

__all__ = ["rollout_detail_view", "rollout_page_table"]

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
    rows = reward_rows(attempts, spans)
    if not rows:
        return Text("rewards: none recorded", style="dim")
    final = final_reward(latest_spans(rollout, spans))
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
    for kind in LLM_SPAN_TYPES:
        table.add_column(f"{kind} calls", justify="right")
        table.add_column(f"{kind} tokens in/out", justify="right")
    for attempt in attempts:
        counts = llm_calls(by_attempt.get(attempt.attempt_id, ()))
        cells = [str(attempt.sequence)]
        for kind in LLM_SPAN_TYPES:
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
