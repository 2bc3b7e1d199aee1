"""An attempt's span tree, repaired, and the agent each span belongs to.

A span whose parent is missing from the attempt, or whose parent's time range does not contain
it (context lost across a thread or a callback), is re-attached to the innermost span that does
contain it; so are extra roots. A span belongs to the agent of the nearest enclosing span that
names one (``agl.agent.name``); a call only the gateway saw, by time. Part of reading an
attempt's calls (:mod:`agl.lightning._calls`).
"""

from __future__ import annotations

from collections.abc import Sequence

from agl import semconv
from agl._spans import Span

__all__ = ["agent_by_time", "agent_of", "contains", "repaired_parents"]

_GATEWAY = semconv.SPAN_TYPE_GATEWAY
_TYPE = semconv.AGL_SPAN_TYPE


def contains(outer: Span, inner: Span) -> bool:
    """Whether ``inner`` lies within ``outer``'s time range (an open ``outer`` holds all after
    its start)."""
    outer_end = outer.end_time_unix_nano
    inner_end = inner.end_time_unix_nano
    if outer.start_time_unix_nano > inner.start_time_unix_nano:
        return False
    if outer_end is None:
        return True
    return inner_end is not None and inner_end <= outer_end


def repaired_parents(
    spans: Sequence[Span], by_id: dict[str, Span], counts: dict[str, int]
) -> dict[str, str | None]:
    """Each span's parent, with lost or implausible parents replaced by time containment."""
    parents: dict[str, str | None] = {}
    lost = []
    for span in spans:
        parent_id = span.parent_id
        parent = by_id.get(parent_id) if parent_id is not None else None
        if parent is not None and (parent is span or not contains(parent, span)):
            parent = None
        if parent is None and parent_id is not None:
            lost.append(span)
        parents[span.span_id] = parent.span_id if parent is not None else None
    for span in lost:
        home = _innermost_container(span, spans)
        if home is not None:
            parents[span.span_id] = home.span_id
            counts["reparented_spans"] += 1
    # Roots that are not the attempt's outermost span (a thread that lost its context
    # entirely) are re-attached the same way.
    lost_ids = {span.span_id for span in lost}
    roots = [
        span
        for span in spans
        if parents[span.span_id] is None
        and span.span_id not in lost_ids
        and span.attributes.get(_TYPE) != _GATEWAY
    ]
    if len(roots) > 1:
        for span in roots:
            home = _innermost_container(span, spans)
            if home is not None:
                parents[span.span_id] = home.span_id
                counts["reparented_spans"] += 1
    return parents


def _innermost_container(span: Span, spans: Sequence[Span]) -> Span | None:
    best: Span | None = None
    for other in spans:
        if other is span or other.attributes.get(_TYPE) == _GATEWAY:
            continue
        if not contains(other, span) or contains(span, other):
            continue
        if best is None or contains(best, other):
            best = other
    return best


def agent_of(span_id: str, parents: dict[str, str | None], named: dict[str, str]) -> str | None:
    """The agent the nearest span from ``span_id`` up that names one names (None: none does)."""
    current: str | None = span_id
    seen = 0
    while current is not None and seen <= len(parents):
        name = named.get(current)
        if name is not None:
            return name
        current = parents.get(current)
        seen += 1
    return None


def agent_by_time(call: Span, agent_spans: list[Span], named: dict[str, str]) -> str | None:
    """The agent of the innermost agent span whose time range holds ``call`` (a call only the
    gateway saw has no place in the tree)."""
    best: Span | None = None
    for span in agent_spans:
        if contains(span, call) and (best is None or contains(best, span)):
            best = span
    return named[best.span_id] if best is not None else None
