"""Emitters: the agent states facts of its own (rewards, messages, objects, ...) as spans.

Each emitter records one span in the current rollout (see :class:`agl.Tracer`), as a child of
the span that is current where it is called, and returns it (an OpenTelemetry
``ReadableSpan``). Outside a rollout they raise :class:`NoRolloutError`, since a fact nobody
can attribute would be lost silently; pass ``require_rollout=False`` to get the span back
without sending it anywhere (useful in unit tests of agent code).
:func:`operation` is the exception: outside a rollout it simply runs the code, untraced, so
decorated functions stay usable anywhere.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar, overload

from agl import semconv
from agl._errors import AglError, InvalidInputError

__all__ = [
    "NoRolloutError",
    "agent_span",
    "emit_annotation",
    "emit_exception",
    "emit_message",
    "emit_object",
    "emit_reward",
    "operation",
]

F = TypeVar("F", bound=Callable[..., Any])


class NoRolloutError(AglError):
    """An emitter was called outside any rollout."""

    status_code = 400


def emit_reward(
    value: float | Mapping[str, float],
    *,
    primary: str | None = None,
    response_id: str | None = None,
    require_rollout: bool = True,
) -> Any:
    """Record a reward: a number, or named numbers with one primary.

    Args:
        value: The reward, or ``{"name": value, ...}`` for several.
        primary: Which named reward is the one to train on (needed when there are several).
        response_id: Link the reward to one LLM response (its ``id``), so credit assignment
            gives it to that call instead of the call it follows.
        require_rollout: Raise outside a rollout (the default); if False, return the span
            without sending it.
    """
    if isinstance(value, Mapping):
        rewards = {str(name): _finite(number, f"value[{name!r}]") for name, number in value.items()}
        if not rewards:
            raise InvalidInputError("emit_reward needs at least one reward", field="value")
        if primary is None:
            if len(rewards) > 1:
                raise InvalidInputError(
                    f"emit_reward got several rewards {sorted(rewards)}: say which is primary",
                    field="primary",
                )
            primary = next(iter(rewards))
        if primary not in rewards:
            raise InvalidInputError(
                f"primary reward {primary!r} is not one of {sorted(rewards)}",
                field="primary",
                value=primary,
            )
    else:
        rewards = {"reward": _finite(value, "value")}
        primary = "reward"
    attributes: dict[str, Any] = {
        semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_REWARD,
        semconv.AGL_REWARD: rewards[primary],
        semconv.AGL_REWARD_PRIMARY: primary,
        **{semconv.AGL_REWARD_PREFIX + name: number for name, number in rewards.items()},
    }
    if response_id is not None:
        attributes[semconv.AGL_LINK_RESPONSE_ID] = response_id
    return _record("agl.reward", attributes, require_rollout)


def emit_message(message: str, *, require_rollout: bool = True) -> Any:
    """Record a free-form message from the agent."""
    if not isinstance(message, str):
        raise InvalidInputError(
            f"message must be a string, got {type(message).__name__}", field="message"
        )
    attributes = {semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_MESSAGE, semconv.AGL_MESSAGE: message}
    return _record("agl.message", attributes, require_rollout)


def emit_object(obj: Any, *, require_rollout: bool = True) -> Any:
    """Record any object, serialized to JSON (pydantic models and dataclasses included)."""
    attributes = {
        semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_OBJECT,
        semconv.AGL_OBJECT_JSON: _to_json(obj),
        semconv.AGL_OBJECT_TYPE: type(obj).__qualname__,
    }
    return _record("agl.object", attributes, require_rollout)


def emit_exception(exc: BaseException, *, require_rollout: bool = True) -> Any:
    """Record an exception (type, message and traceback) as a failed span."""
    if not isinstance(exc, BaseException):
        raise InvalidInputError(
            f"emit_exception needs an exception, got {type(exc).__name__}", field="exc"
        )
    from opentelemetry.trace import Status, StatusCode

    def fill(span: Any) -> None:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))

    attributes = {semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_EXCEPTION}
    return _record("agl.exception", attributes, require_rollout, fill)


def emit_annotation(annotations: Mapping[str, Any], *, require_rollout: bool = True) -> Any:
    """Record key-value annotations (strings, numbers, booleans or lists of them)."""
    if not isinstance(annotations, Mapping) or not annotations:
        raise InvalidInputError("annotations must be a non-empty mapping", field="annotations")
    attributes: dict[str, Any] = {semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_ANNOTATION}
    for key, value in annotations.items():
        if not _is_attribute_value(value):
            raise InvalidInputError(
                f"annotation {key!r} must be a string, number, boolean or a list of one of "
                f"those, got {type(value).__name__}",
                field=f"annotations.{key}",
            )
        attributes[semconv.AGL_ANNOTATION_PREFIX + str(key)] = value
    return _record("agl.annotation", attributes, require_rollout)


class _Operation:
    """A recorded operation: the open span, so the body can set its output."""

    def __init__(self, span: Any) -> None:
        self.span = span

    def set_input(self, value: Any) -> None:
        if self.span is not None:
            self.span.set_attribute(semconv.AGL_OPERATION_INPUT, _to_json(value))

    def set_output(self, value: Any) -> None:
        if self.span is not None:
            self.span.set_attribute(semconv.AGL_OPERATION_OUTPUT, _to_json(value))


@contextlib.contextmanager
def _operation_span(name: str) -> Iterator[_Operation]:
    from agl.tracing._tracer import current_binding

    binding = current_binding()
    if binding is None:
        yield _Operation(None)
        return
    attributes = {
        semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_OPERATION,
        semconv.AGL_OPERATION_NAME: name,
    }
    with binding.tracer.otel_tracer.start_as_current_span(name, attributes=attributes) as span:
        yield _Operation(span)


@overload
def operation(target: F) -> F: ...
@overload
def operation(target: str | None = None) -> Any: ...
def operation(target: Any = None) -> Any:
    """Record a function call or a block as an operation span with inputs and output.

    Use as ``@operation``, ``@operation("name")``, or ``with operation("name") as op:
    op.set_output(...)``. Sync and async functions both work; an exception is recorded on the
    span and propagates. Outside a rollout the code runs untraced.
    """
    if callable(target):
        return _decorate(target, target.__qualname__)
    name = target

    class _Either:
        def __call__(self, func: F) -> F:
            return _decorate(func, name or func.__qualname__)

        def __enter__(self) -> _Operation:
            self._cm = _operation_span(name or "operation")
            return self._cm.__enter__()

        def __exit__(self, *exc_info: Any) -> bool | None:
            return self._cm.__exit__(*exc_info)

    return _Either()


def _decorate(func: F, name: str) -> F:
    signature = inspect.signature(func)

    def inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return {"args": list(args), "kwargs": kwargs}
        return dict(bound.arguments)

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            with _operation_span(name) as op:
                op.set_input(inputs(args, kwargs))
                result = await func(*args, **kwargs)
                op.set_output(result)
                return result

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _operation_span(name) as op:
            op.set_input(inputs(args, kwargs))
            result = func(*args, **kwargs)
            op.set_output(result)
            return result

    return wrapper  # type: ignore[return-value]


class agent_span:  # lowercase: used like a function, `with agl.agent_span("writer"):`
    """Mark a block or a function as the work of one agent: every LLM call inside is its call.

    ::

        with agl.agent_span("writer"):
            draft = await client.chat.completions.create(...)
        @agl.agent_span("checker")
        async def check(draft: str) -> bool: ...

    Credit assignment gives each LLM call to the nearest enclosing agent span, so in a
    multi-agent system each agent's calls can go to its own optimizer. Framework adapters mark
    their agents the same way. Outside a rollout the code runs untraced.
    """

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidInputError(
                f"an agent name must be a non-empty string, got {name!r}", field="name"
            )
        self.name = name
        self._stack: list[contextlib.AbstractContextManager[Any]] = []

    def __enter__(self) -> Any:
        from agl.tracing._tracer import current_binding

        binding = current_binding()
        if binding is None:
            manager: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        else:
            attributes = {
                semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_AGENT,
                semconv.AGL_AGENT_NAME: self.name,
            }
            manager = binding.tracer.otel_tracer.start_as_current_span(
                f"agent {self.name}", attributes=attributes
            )
        self._stack.append(manager)
        return manager.__enter__()

    def __exit__(self, *exc_info: Any) -> bool | None:
        return self._stack.pop().__exit__(*exc_info)

    def __call__(self, func: F) -> F:
        name = self.name
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with agent_span(name):
                    return await func(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with agent_span(name):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


# --- helpers ----------------------------------------------------------------------------------


def _record(
    name: str,
    attributes: dict[str, Any],
    require_rollout: bool,
    fill: Callable[[Any], None] | None = None,
) -> Any:
    """Start and end one span in the current rollout; return it."""
    from agl.tracing._tracer import current_binding

    binding = current_binding()
    if binding is not None:
        tracer = binding.tracer.otel_tracer
    elif require_rollout:
        raise NoRolloutError(
            f"{name.replace('agl.', 'emit_')} was called outside a rollout, so the fact would "
            "belong to no rollout; call it inside `async with tracer.rollout(...)` (the runner "
            "does this for agents), or pass require_rollout=False to only get the span back"
        )
    else:
        tracer = _detached_tracer()
    with tracer.start_as_current_span(name, attributes=attributes) as span:
        if fill is not None:
            fill(span)
    return span


@functools.cache
def _detached_tracer() -> Any:
    """A tracer whose spans go nowhere: for emitters called with require_rollout=False."""
    from opentelemetry.sdk.trace import TracerProvider

    return TracerProvider().get_tracer("agl.detached")


def _finite(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInputError(
            f"a reward must be a finite number, got {value!r}", field=field, value=value
        )
    return float(value)


def _is_attribute_value(value: Any) -> bool:
    scalar = (str, bool, int, float)
    if isinstance(value, scalar):
        return True
    return isinstance(value, list | tuple) and all(isinstance(item, scalar) for item in value)


def _to_json(value: Any) -> str:
    import pydantic_core

    return pydantic_core.to_json(value, serialize_unknown=True).decode()
