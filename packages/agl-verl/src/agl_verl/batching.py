"""Fitting a step's samples to verl's data-parallel layout.

An agent makes as many calls as it likes, so a step's sample count varies; verl's workers need
it divisible by the data-parallel size times the number of mini-batches times the micro-batch
size (verl asserts each pass splits evenly). :func:`fit_batch`
drops the fewest samples that makes it so (chosen at random with a seed, counted in the
metrics, never padded with copies that would train twice on the same sample).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from verl import DataProto

__all__ = ["FittedBatch", "fit_batch"]


@dataclass
class FittedBatch:
    """The batch verl trains on, and how it was cut.

    Attributes:
        data: The samples kept (None when fewer samples than one per rank and mini-batch).
        dropped: Samples left out to make the count divisible.
        mini_batches: Mini-batches (optimizer steps) per PPO epoch.
        mini_batch_size: Samples per mini-batch, over all data-parallel ranks.
    """

    data: DataProto | None
    dropped: int
    mini_batches: int
    mini_batch_size: int


def fit_batch(
    data: DataProto, *, dp_size: int, mini_batches: int, micro_batch_size: int = 1, seed: int = 0
) -> FittedBatch:
    """Keep a multiple of ``dp_size * mini_batches * micro_batch_size`` samples.

    ``mini_batches`` is what verl would do with a full batch (``train_batch_size //
    ppo_mini_batch_size``); a small step uses fewer rather than empty ones.
    ``micro_batch_size`` is the per-GPU micro-batch every worker pass splits its share into
    (the least common multiple of the actor's, the log-prob and the reference passes' sizes;
    1 with ``use_dynamic_bsz``, which packs micro-batches by tokens instead).
    """
    if dp_size < 1 or mini_batches < 1 or micro_batch_size < 1:
        raise ValueError(
            "dp_size, mini_batches and micro_batch_size must be positive, got "
            f"{dp_size}, {mini_batches}, {micro_batch_size}"
        )
    total = len(data)
    per_mini_batch = dp_size * micro_batch_size
    mini_batches = max(1, min(mini_batches, total // per_mini_batch))
    unit = per_mini_batch * mini_batches
    keep = total - total % unit
    if keep == 0:
        return FittedBatch(None, total, 0, 0)
    if keep < total:
        rng = np.random.default_rng(seed)
        index = np.sort(rng.choice(total, size=keep, replace=False))
    else:
        index = np.arange(total)
    # Always a new batch: verl's balancing reorders it in place, the caller's stays as it was.
    data = data.select_idxs(index)
    return FittedBatch(data, total - keep, mini_batches, keep // mini_batches)
