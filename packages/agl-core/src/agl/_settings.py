"""Settings objects: typed groups of an algorithm's options, checked when built.

An algorithm takes its options in groups (``loop=agl.LoopSettings(...)``,
``sampling=agl.SamplingSettings(...)``, a plugin's own learner or budget settings), each a
frozen dataclass that refuses a bad value when it is built, naming the field. :func:`settings`
is how a constructor takes one: the object itself, None for the default, or a mapping of its
fields (from a config file, say).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import JsonValue

from agl._errors import InvalidInputError

__all__ = ["LoopSettings", "SamplingSettings", "check_at_least", "settings"]

T = TypeVar("T")


def settings(name: str, value: T | Mapping[str, Any] | None, default: T) -> T:
    """``value`` as a settings object of ``default``'s class.

    Args:
        name: The argument's name, for errors (``"loop"``).
        value: An instance of the class; None (``default``); or a mapping of its fields.
        default: What None means; its class is the one expected.

    Raises:
        InvalidInputError: ``value`` is of another type, or a mapping with a field the class
            does not have (the error names the argument and the fields it takes).
    """
    cls = type(default)
    if value is None:
        return default
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(str(key) for key in value if key not in fields)
        if unknown:
            raise InvalidInputError(
                f"{name}: {cls.__name__} has no field {', '.join(map(repr, unknown))} "
                f"(it has {', '.join(sorted(fields))})",
                field=name,
                value=dict(value),
            )
        return dataclasses.replace(default, **value)  # type: ignore[type-var]
    raise InvalidInputError(
        f"{name} must be a {cls.__name__} (or a mapping of its fields), got {type(value).__name__}",
        field=name,
    )


def check_at_least(
    owner: str,
    name: str,
    value: object,
    low: float,
    *,
    integer: bool = False,
    optional: bool = False,
    above: bool = False,
) -> None:
    """Refuse ``value`` unless it is a number ``>= low`` (``> low`` with ``above``).

    Args:
        owner: The settings class, for the message (``"LoopSettings"``).
        name: The field (the error's ``field``).
        value: What was given.
        low: The bound.
        integer: Only integers will do.
        optional: None is allowed.
        above: The bound itself is refused.

    Raises:
        InvalidInputError: Naming the field, the bound and the value (booleans are refused).
    """
    if value is None and optional:
        return
    kinds = int if integer else (int, float)
    if (
        isinstance(value, bool)
        or not isinstance(value, kinds)
        or not (value > low if above else value >= low)
    ):
        kind = "an integer" if integer else "a number"
        raise InvalidInputError(
            f"{owner}.{name} must be {kind} {'>' if above else '>='} {low}"
            f"{' or None' if optional else ''}, got {value!r}",
            field=name,
            value=value,
        )


@dataclass(frozen=True)
class SamplingSettings:
    """How agents sample from a model an algorithm trains: published in its :class:`LLM`.

    Attributes:
        temperature: The sampling temperature (1.0 keeps importance ratios exact, as the
            engines report the model's own logprobs).
        max_tokens: The longest completion (None: the server's limit).
    """

    temperature: float = 1.0
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        check_at_least("SamplingSettings", "temperature", self.temperature, 0)
        check_at_least(
            "SamplingSettings", "max_tokens", self.max_tokens, 1, integer=True, optional=True
        )

    def parameters(self) -> dict[str, JsonValue]:
        """The request parameters, as :attr:`LLM.sampling_parameters` holds them."""
        parameters: dict[str, JsonValue] = {"temperature": self.temperature}
        if self.max_tokens is not None:
            parameters["max_tokens"] = self.max_tokens
        return parameters


@dataclass(frozen=True)
class LoopSettings:
    """How the loop cuts a run into steps.

    Attributes:
        n_epochs: Passes over the training tasks.
        batch_size: Tasks per step (all in one step if None).
        n_samples: Rollouts per task (the group of a group baseline).
        max_steps: Stop after this many steps (counted from the start of training, resumed
            steps included), even mid-epoch; None runs every epoch.
        step_timeout: Seconds a step (or validation) waits for its rollouts; those not
            finished by then are cancelled and count as failed for training (None: wait).
        max_staleness: How many weight versions the data of an update may lag behind the
            weights it trains. 0 (the default) is the synchronous loop: a step's rollouts all
            finish, then the update runs, then the next step's rollouts start. With ``k >= 1``
            rollouts and updates overlap: the rollouts of the next ``k`` steps are launched
            ahead and keep running while an update runs, and each step trains on the
            ``batch_size`` groups that finished first (oldest launched first), so a long
            rollout does not hold the step up. An algorithm whose weights are versioned
            (:meth:`~agl.StepAlgorithm.policy_version`) then drops, and counts as
            ``transitions/dropped/stale``, every group with a call produced by weights more
            than ``k`` versions older than those it trains: groups are kept or dropped whole.
    """

    n_epochs: int = 1
    batch_size: int | None = None
    n_samples: int = 1
    max_steps: int | None = None
    step_timeout: float | None = None
    max_staleness: int = 0

    def __post_init__(self) -> None:
        for name, low in (("n_epochs", 1), ("batch_size", 1), ("n_samples", 1), ("max_steps", 1)):
            optional = name in ("batch_size", "max_steps")
            check_at_least(
                "LoopSettings", name, getattr(self, name), low, integer=True, optional=optional
            )
        check_at_least(
            "LoopSettings", "step_timeout", self.step_timeout, 0, optional=True, above=True
        )
        check_at_least("LoopSettings", "max_staleness", self.max_staleness, 0, integer=True)

    def total_steps(self, n_tasks: int) -> tuple[int, int]:
        """(steps the loop runs, steps per epoch) over ``n_tasks`` training tasks."""
        per_epoch = 1 if self.batch_size is None else math.ceil(n_tasks / self.batch_size)
        total = per_epoch * self.n_epochs
        if self.max_steps is not None:
            total = min(total, self.max_steps)
        return total, per_epoch
