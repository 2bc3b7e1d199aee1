"""The store's checks of a span batch's ids, made once per (rollout, attempt) pair."""

from __future__ import annotations

import pytest

from agl import InvalidInputError, Span
from agl.store._checks import check_span_ids


def _span(rollout_id: object, attempt_id: object) -> Span:
    good = Span.create(rollout_id="ro-1", attempt_id="at-1", name="s")
    return good.model_copy(update={"rollout_id": rollout_id, "attempt_id": attempt_id})


def test_a_batch_of_good_ids_repeated_passes() -> None:
    check_span_ids([_span("ro-1", "at-1") for _ in range(5)] + [_span("ro-2", "at-2")])


@pytest.mark.parametrize(
    ("bad", "field"),
    [(("ro/1", "at-1"), "spans[3].rollout_id"), (("ro-1", ["at-1"]), "spans[3].attempt_id")],
)
def test_the_first_span_with_a_bad_id_is_named(bad: tuple[object, object], field: str) -> None:
    batch = [_span("ro-1", "at-2") for _ in range(3)] + [_span(*bad) for _ in range(3)]
    with pytest.raises(InvalidInputError) as caught:
        check_span_ids(batch)
    assert caught.value.field == field
