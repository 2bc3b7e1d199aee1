"""Fitting a step's variable sample count to verl's data-parallel and micro-batch layout."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl import DataProto

from agl_verl.batching import fit_batch


def batch(rows: int) -> DataProto:
    return DataProto.from_dict(
        tensors={"input_ids": torch.arange(rows).unsqueeze(1)},
        non_tensors={"uid": np.array([str(i) for i in range(rows)], dtype=object)},
    )


@pytest.mark.parametrize(
    ("rows", "dp", "mini", "micro", "kept", "mini_batches"),
    [
        (16, 2, 2, 2, 16, 2),  # divides: nothing dropped
        (17, 2, 2, 2, 16, 2),  # one over: one dropped
        (13, 4, 1, 1, 12, 1),
        (6, 2, 4, 1, 6, 3),  # too few samples for 4 mini-batches: 3 of 2
        (3, 4, 2, 1, 0, 0),  # fewer samples than ranks: no update
        (10, 1, 1, 4, 8, 1),  # micro-batches of 4
    ],
)
def test_the_fewest_samples_are_dropped(
    rows: int, dp: int, mini: int, micro: int, kept: int, mini_batches: int
) -> None:
    fitted = fit_batch(batch(rows), dp_size=dp, mini_batches=mini, micro_batch_size=micro)
    assert fitted.dropped == rows - kept
    assert fitted.mini_batches == mini_batches
    if kept == 0:
        assert fitted.data is None
        return
    assert fitted.data is not None
    assert len(fitted.data) == kept
    assert fitted.mini_batch_size * fitted.mini_batches == kept
    assert fitted.mini_batch_size % (dp * micro) == 0
    # the kept rows are distinct originals, in their original order
    ids = fitted.data.batch["input_ids"][:, 0].tolist()
    assert ids == sorted(set(ids))
    assert fitted.data.non_tensor_batch["uid"].tolist() == [str(i) for i in ids]


def test_the_callers_batch_is_never_modified() -> None:
    original = batch(8)
    fitted = fit_batch(original, dp_size=2, mini_batches=1)
    assert fitted.data is not None
    fitted.data.reorder(torch.arange(7, -1, -1))
    assert original.batch["input_ids"][:, 0].tolist() == list(range(8))


def test_the_same_seed_drops_the_same_samples() -> None:
    first = fit_batch(batch(11), dp_size=4, mini_batches=1, seed=3)
    second = fit_batch(batch(11), dp_size=4, mini_batches=1, seed=3)
    assert first.data is not None
    assert second.data is not None
    assert torch.equal(first.data.batch["input_ids"], second.data.batch["input_ids"])


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        fit_batch(batch(4), dp_size=0, mini_batches=1)
