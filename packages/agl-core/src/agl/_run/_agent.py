"""Agents: ``@agl.rollout`` on a plain function, or a :class:`LitAgent` subclass.

::

    @agl.rollout
    async def solve(task: dict, llm: agl.LLM, prompt_template: agl.PromptTemplate) -> float:
        async with llm.openai_client() as client:  # AsyncOpenAI for llm.endpoint
            ...
        return 1.0 if answer == task["answer"] else 0.0

An agent function receives the rollout's input as its first argument and, **by parameter
name**, whatever else it asks for:

- ``llm``: the rollout's :class:`~agl.LLM` resource (the one named ``llm``, else the only LLM).
  When it is served through the gateway, its endpoint already names this rollout and attempt.
- ``prompt_template``: likewise, the rollout's :class:`~agl.PromptTemplate`.
- any other name: the resource published under that name (``main_llm``, ``system_prompt``).
- ``resources``: every resource, by name; ``rollout`` / ``attempt``: the store's records.

A parameter the rollout cannot fill and that has no default fails the attempt with a reason
naming the parameter and the resources there are. The function may be sync (it runs on a
worker thread) or async, and returns a float reward, a dict of named rewards (the primary one
is ``reward``, the only one, or the one given as ``primary_reward``), or ``None`` when it
reports rewards itself with :func:`agl.emit_reward`. Anything else fails the attempt with a
reason saying what came back.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, overload

from agl._errors import AglError, InvalidInputError
from agl._resources import LLM, PromptTemplate, Resource
from agl._rollouts import Attempt, Rollout, RolloutMode

__all__ = [
    "AgentError",
    "AttemptInputs",
    "FunctionAgent",
    "LitAgent",
    "Rewards",
    "load_agent",
    "normalize_result",
    "rollout",
]

Rewards = dict[str, float]

_BY_TYPE: dict[str, type[Resource]] = {"llm": LLM, "prompt_template": PromptTemplate}


class AgentError(AglError):
    """The agent could not be called as written, or returned something that is not a reward."""


@dataclass(frozen=True)
class AttemptInputs:
    """What an agent may ask for in one attempt (the runner builds this)."""

    task: Any
    rollout: Rollout
    attempt: Attempt
    resources: Mapping[str, Resource]


class LitAgent:
    """Base class for agents that keep state between rollouts.

    Override :meth:`rollout`, and :meth:`training_rollout` / :meth:`validation_rollout` when
    training and validation should behave differently. Each may be sync or async and asks for
    what it needs by parameter name, as described in :mod:`agl._run._agent`::

        class Solver(agl.LitAgent):
            def __init__(self) -> None:
                self.calls = 0

            async def rollout(self, task, llm):
                ...

    Attributes:
        name: The agent's name in traces and reports (the class name by default).
        primary_reward: Which of several named rewards a returned dict trains on.
    """

    name: str = ""
    primary_reward: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("name"):
            cls.name = cls.__name__

    def rollout(self, task: Any, /, *args: Any, **kwargs: Any) -> Any:
        """Run the agent on one task; return a reward, named rewards, or None."""
        raise NotImplementedError(f"{type(self).__qualname__} does not define rollout()")

    def training_rollout(self, task: Any, /, *args: Any, **kwargs: Any) -> Any:
        """Run one training rollout (by default, :meth:`rollout`)."""
        return self.rollout(task, *args, **kwargs)

    def validation_rollout(self, task: Any, /, *args: Any, **kwargs: Any) -> Any:
        """Run one validation or test rollout (by default, :meth:`rollout`)."""
        return self.rollout(task, *args, **kwargs)

    def entry_point(self, mode: RolloutMode) -> Callable[..., Any]:
        """The method that runs a rollout of ``mode``: the most specific one overridden."""
        wanted = "training_rollout" if mode == "train" else "validation_rollout"
        for name in (wanted, "rollout"):
            if getattr(type(self), name) is not getattr(LitAgent, name):
                method: Callable[..., Any] = getattr(self, name)
                return method
        raise AgentError(
            f"agent {self.name!r} ({type(self).__qualname__}) overrides none of rollout(), "
            "training_rollout(), validation_rollout()"
        )

    def bind(self, inputs: AttemptInputs) -> Callable[[], Any]:
        """Return a no-argument callable running the right entry point with its inputs filled."""
        function = self.entry_point(inputs.rollout.mode)
        args, kwargs = _arguments(function, inputs, self.name)
        return functools.partial(function, *args, **kwargs)

    def check(self) -> None:
        """Raise :class:`AgentError` now if no entry point can take a task."""
        for mode in ("train", "val"):
            _check_signature(self.entry_point(mode), self.name)


class FunctionAgent(LitAgent):
    """A plain function made into an agent by :func:`rollout`. Calling it calls the function."""

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        primary_reward: str | None = None,
    ) -> None:
        _check_signature(function, name or function.__name__)
        self.function = function
        self.name = name or function.__name__
        self.primary_reward = primary_reward
        functools.update_wrapper(self, function)

    def entry_point(self, mode: RolloutMode) -> Callable[..., Any]:
        return self.function

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        # Runner processes receive the agent pickled. The module attribute is this object, not
        # the function, so pickle it by reference to the attribute.
        module, qualname = self.function.__module__, self.function.__qualname__
        if "<locals>" not in qualname and _resolve(module, qualname) is self:
            return (_resolve, (module, qualname))
        state = {"name": self.name, "primary_reward": self.primary_reward}
        return (FunctionAgent, (self.function,), state)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.name = state["name"]
        self.primary_reward = state["primary_reward"]

    def __repr__(self) -> str:
        return f"FunctionAgent({self.function.__module__}.{self.function.__qualname__})"


@overload
def rollout(function: Callable[..., Any], /) -> FunctionAgent: ...
@overload
def rollout(
    *, name: str | None = None, primary_reward: str | None = None
) -> Callable[[Callable[..., Any]], FunctionAgent]: ...
def rollout(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    primary_reward: str | None = None,
) -> Any:
    """Make a sync or async function an agent: ``@agl.rollout`` or ``@agl.rollout(name=...)``.

    See :mod:`agl._run._agent` for what the function receives and may return.
    """
    if function is not None:
        return FunctionAgent(function, name=name, primary_reward=primary_reward)
    return lambda target: FunctionAgent(target, name=name, primary_reward=primary_reward)


def load_agent(spec: str) -> LitAgent:
    """Import an agent from ``package.module:attribute``.

    The attribute may be an agent (``@agl.rollout`` function or :class:`LitAgent` instance), a
    :class:`LitAgent` subclass (instantiated without arguments), or a plain function (wrapped
    with :func:`rollout`).
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise InvalidInputError(
            f"agent {spec!r} is not of the form 'package.module:function'", field="agent"
        )
    try:
        target = _resolve(module_name, attribute)
    except ImportError as exc:
        raise InvalidInputError(f"cannot import agent module {module_name!r}: {exc}") from exc
    except AttributeError as exc:
        raise InvalidInputError(
            f"module {module_name!r} has no attribute {attribute!r}", field="agent"
        ) from exc
    return _to_agent(target, repr(spec))


def as_agent(agent: Any) -> LitAgent:
    """Accept an agent, a LitAgent subclass, a plain function or a ``module:function`` string."""
    if isinstance(agent, str):
        return load_agent(agent)
    return _to_agent(agent, "the agent")


def _to_agent(target: Any, label: str) -> LitAgent:
    """An agent from an agent, a LitAgent subclass (instantiated) or a function; checked."""
    if isinstance(target, LitAgent):
        agent = target
    elif isinstance(target, type) and issubclass(target, LitAgent):
        agent = target()
    elif callable(target):
        agent = FunctionAgent(target)
    else:
        raise InvalidInputError(
            f"{label} is a {type(target).__name__}, not an agent or a function", field="agent"
        )
    agent.check()
    return agent


def normalize_result(value: Any, primary: str | None = None) -> tuple[Rewards, str] | None:
    """Turn what an agent returned into ``(rewards, primary name)``; None for no reward.

    Raises:
        AgentError: the value is not a finite number, a dict of finite numbers, or None.
    """
    if value is None:
        return None
    if isinstance(value, bool | int | float) and not isinstance(value, complex):
        number = float(value)
        if not math.isfinite(number):
            raise AgentError(f"agent returned a non-finite reward ({number})")
        return {"reward": number}, "reward"
    if isinstance(value, Mapping):
        rewards: Rewards = {}
        for key, number in value.items():
            if (
                not isinstance(key, str)
                or isinstance(number, bool)
                or not isinstance(number, int | float)
            ):
                raise AgentError(
                    f"agent returned a dict whose entry {key!r}: {_preview(number)} is not "
                    "a named number; return {'name': float, ...}"
                )
            if not math.isfinite(number):
                raise AgentError(f"agent returned a non-finite reward {key!r}: {number}")
            rewards[key] = float(number)
        if not rewards:
            raise AgentError("agent returned an empty dict of rewards")
        if primary is None:
            if "reward" in rewards:
                primary = "reward"
            elif len(rewards) == 1:
                primary = next(iter(rewards))
            else:
                raise AgentError(
                    f"agent returned several rewards {sorted(rewards)} and none is named "
                    "'reward'; say which one to train on with primary_reward=..."
                )
        if primary not in rewards:
            raise AgentError(f"primary reward {primary!r} is not among {sorted(rewards)}")
        return rewards, primary
    raise AgentError(
        f"agent returned {_preview(value)} ({type(value).__name__}); an agent returns a float "
        "reward, a dict of named rewards, or None (after agl.emit_reward)"
    )


# --- helpers --------------------------------------------------------------------------------


def _resolve(module_name: str, qualname: str) -> Any:
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def _preview(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_signature(function: Callable[..., Any], name: str) -> None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError) as exc:
        raise AgentError(f"agent {name!r}: cannot read its signature ({exc})") from exc
    parameters = list(signature.parameters.values())
    takes_task = parameters and parameters[0].kind in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
    )
    if not takes_task:
        raise AgentError(
            f"agent {name!r} must take the task as its first positional parameter, "
            f"e.g. def {getattr(function, '__name__', 'agent')}(task, llm): ..."
        )


def _arguments(
    function: Callable[..., Any], inputs: AttemptInputs, name: str
) -> tuple[list[Any], dict[str, Any]]:
    """Positional and keyword arguments for one call: the task first, the rest by name."""
    parameters = list(inspect.signature(function).parameters.values())
    args: list[Any] = [inputs.task]
    kwargs: dict[str, Any] = {}
    for parameter in parameters[1:]:
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        found, value = _lookup(parameter.name, inputs)
        if not found:
            if parameter.default is inspect.Parameter.empty:
                raise AgentError(
                    f"agent {name!r} asks for {parameter.name!r}, which this rollout does not "
                    f"have; its resources are {sorted(inputs.resources) or 'none'} (also "
                    "available: resources, rollout, attempt)"
                )
            continue
        if parameter.kind == inspect.Parameter.POSITIONAL_ONLY:
            args.append(value)
        else:
            kwargs[parameter.name] = value
    return args, kwargs


def _lookup(name: str, inputs: AttemptInputs) -> tuple[bool, Any]:
    if name in inputs.resources:
        return True, inputs.resources[name]
    if name == "resources":
        return True, dict(inputs.resources)
    if name == "rollout":
        return True, inputs.rollout
    if name == "attempt":
        return True, inputs.attempt
    kind = _BY_TYPE.get(name)
    if kind is not None:
        matches = [value for value in inputs.resources.values() if isinstance(value, kind)]
        if len(matches) == 1:
            return True, matches[0]
        if len(matches) > 1:
            names = sorted(
                key for key, value in inputs.resources.items() if isinstance(value, kind)
            )
            raise AgentError(
                f"the rollout has several {kind.__name__} resources {names}; name the "
                f"parameter after the one the agent wants instead of {name!r}"
            )
    return False, None
