"""Settings objects: typed groups of an algorithm's options, checked when built.

An algorithm takes its options in groups (``loop=agl.LoopSettings(...)``,
``sampling=agl.SamplingSettings(...)``, a plugin's own learner or budget settings), each a
frozen dataclass that refuses a bad value when it is built, naming the field. :func:`settings`
is how a constructor takes one: the object itself, None for the default, or a mapping of its
fields (from a config file, say).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import JsonValue

from agl._errors import InvalidInputError

__all__ = ["SamplingSettings", "check_at_least", "settings"]

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
