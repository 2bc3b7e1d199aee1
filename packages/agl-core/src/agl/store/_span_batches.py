"""Span batches: split by size for the wire, and stored for what is good in them.

:meth:`Store.add_spans <agl.store._base.Store.add_spans>` is all or nothing: one span naming a
rollout the store does not hold refuses the batch, naming that span's index. The senders of
spans (the tracer's and the gateway's :class:`~agl.tracing._exporter.SpanSender`, the OTLP
route) must not lose a hundred good spans for one bad one, so they go through
:func:`add_spans_keeping_good`: it sends the batch, and when the store names a bad span, takes
it out (with every other span of the same rollout attempt, when that attempt is what the store
does not know) and sends the rest again, until the store takes them. Sending again is harmless:
a span already stored keeps its sequence id.

:func:`byte_chunks` cuts a batch of encoded spans into requests under a size, which the HTTP
client uses so that a batch of large spans is not one request over the server's body limit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from agl._errors import AglError, InvalidInputError, NotFoundError
from agl._spans import Span
from agl.store._base import Store

__all__ = [
    "RejectedSpan",
    "SpanBatchOutcome",
    "add_spans_keeping_good",
    "byte_chunks",
    "renumbered",
    "summary",
]

_INDEX = re.compile(r"^spans\[(\d+)\]")


@dataclass(frozen=True)
class RejectedSpan:
    """A span the store refused: its index in the batch and the store's reason."""

    index: int
    message: str


@dataclass
class SpanBatchOutcome:
    """What became of a batch: each span's sequence id (None where refused), and the refusals
    in index order."""

    sequence_ids: list[int | None]
    rejected: list[RejectedSpan] = field(default_factory=list)

    @property
    def stored(self) -> int:
        """How many spans of the batch the store holds now."""
        return len(self.sequence_ids) - len(self.rejected)

    def refusals(self, shown: int = 3) -> str:
        """The first ``shown`` refusals' reasons, and how many more there are, in one line."""
        return summary([r.message for r in self.rejected], shown)


async def add_spans_keeping_good(store: Store, spans: Sequence[Span]) -> SpanBatchOutcome:
    """Store the spans of ``spans`` the store takes; report the others by index.

    Errors other than a refused span (the store unreachable, say) are raised as they are; the
    spans stored before them stay stored, and sending the batch again is harmless.
    """
    left = list(range(len(spans)))
    ids: list[int | None] = [None] * len(spans)
    rejected: list[RejectedSpan] = []
    while left:
        try:
            stored = await store.add_spans([spans[i] for i in left])
        except (NotFoundError, InvalidInputError) as exc:
            bad = _named_index(exc, len(left))
            if bad is None:  # the store named no span: none of these can be told apart
                rejected += [RejectedSpan(i, exc.message) for i in left]
                break
            culprit = spans[left[bad]]
            out = {bad}
            if isinstance(exc, NotFoundError):  # its rollout or attempt: theirs go with it
                out = {n for n, i in enumerate(left) if _same_attempt(spans[i], culprit)}
            rejected += [
                RejectedSpan(left[n], _renumber(exc.message, bad, left[n])) for n in sorted(out)
            ]
            left = [i for n, i in enumerate(left) if n not in out]
            continue
        for i, sequence_id in zip(left, stored, strict=True):
            ids[i] = sequence_id
        break
    rejected.sort(key=lambda r: r.index)
    return SpanBatchOutcome(ids, rejected)


def summary(messages: Sequence[str], shown: int = 3) -> str:
    """The first ``shown`` of ``messages``, and how many more there are, in one line."""
    more = len(messages) - shown
    return "; ".join(messages[:shown]) + (f"; and {more} more" if more > 0 else "")


def byte_chunks(encoded: Sequence[bytes], max_bytes: int) -> list[tuple[int, int]]:
    """``(start, end)`` ranges of ``encoded`` whose items, joined, stay within ``max_bytes``
    (a single item over it is a range of its own)."""
    ranges: list[tuple[int, int]] = []
    start, size = 0, 0
    for i, item in enumerate(encoded):
        if i > start and size + len(item) + 1 > max_bytes:
            ranges.append((start, i))
            start, size = i, 0
        size += len(item) + 1
    if encoded:
        ranges.append((start, len(encoded)))
    return ranges


def renumbered(exc: AglError, offset: int) -> AglError:
    """``exc`` about ``spans[k]`` of a part of a batch, as about ``spans[k + offset]`` of the
    whole (the same error when it names no span)."""
    if not offset or exc.field is None:
        return exc
    match = _INDEX.match(exc.field)
    if match is None:
        return exc
    index = int(match[1])
    field_ = f"spans[{index + offset}]" + exc.field[match.end() :]
    return type(exc)(_renumber(exc.message, index, index + offset), field=field_, value=exc.value)


def _named_index(exc: AglError, size: int) -> int | None:
    match = _INDEX.match(exc.field or "")
    if match is None or int(match[1]) >= size:
        return None
    return int(match[1])


def _same_attempt(one: Span, other: Span) -> bool:
    return (one.rollout_id, one.attempt_id) == (other.rollout_id, other.attempt_id)


def _renumber(message: str, old: int, new: int) -> str:
    return message.replace(f"spans[{old}]", f"spans[{new}]", 1)
