"""Training metrics as a store keeps them: one :class:`MetricsRow` per logged step of a run.

The trainer sends every step it logs (:meth:`agl.AlgorithmContext.log`) to the run's store as
well as to its files, so anything that reads the store (a dashboard, over the store's HTTP API)
can draw a run's reward and loss curves without its run directory.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, field_validator

from agl._ids import Id, keys_are_ids
from agl._json_numbers import Integer

__all__ = ["MetricsPage", "MetricsRow"]


class MetricsRow(BaseModel):
    """The figures one run logged for one step.

    Attributes:
        run: The run's name (the trainer uses its run directory's name): an id, 1 to 256
            characters and no control characters (:mod:`agl._ids`).
        step: The training step, from 0.
        time: When the step was logged (Unix seconds).
        values: Metric name (an id, as ``run``) -> value, a number (``true`` is not 1). Only
            finite numbers are kept: NaN and infinities (and JSON's ``null``, which stands for
            them) are dropped, not stored.
    """

    model_config = ConfigDict(defer_build=True, extra="forbid")

    run: Id
    step: Integer = Field(ge=0)
    time: StrictFloat = Field(allow_inf_nan=False)
    values: dict[Id, StrictFloat] = Field(default_factory=dict, json_schema_extra=keys_are_ids)

    @field_validator("values", mode="before")
    @classmethod
    def _drop_nulls(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {name: number for name, number in value.items() if number is not None}
        return value

    @field_validator("values")
    @classmethod
    def _drop_non_finite(cls, value: dict[str, float]) -> dict[str, float]:
        return {name: number for name, number in value.items() if math.isfinite(number)}


class MetricsPage(BaseModel):
    """One page of a metrics query, in the order the rows were added.

    A run resumed from a checkpoint logs the steps after it again: where a step has several
    rows, the last one is the one that counts.
    """

    model_config = ConfigDict(defer_build=True, extra="forbid")

    rows: list[MetricsRow]
    total: int = Field(description="How many rows match the query in all.")
    offset: int
    next_offset: int | None = Field(description="The offset of the next page, None at the end.")
