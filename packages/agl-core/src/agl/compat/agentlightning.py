"""Agent Lightning's glue names on agl: porting an agent written for it is an import change.

::

    import agl.compat.agentlightning as agl   # was: import agentlightning as agl

    class Solver(agl.LitAgent[dict]):
        async def training_rollout_async(self, task, resources, rollout):
            llm = resources["main_llm"]
            base_url = llm.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id)
            ...
            return reward

    trainer = agl.Trainer(algorithm=..., n_workers=2, initial_resources={"main_llm": ...})
    trainer.fit(Solver(trained_agents="writer|rewriter"), train_dataset=..., val_dataset=...)

What each name becomes in agl:

========================================  ===================================================
Agent Lightning                           agl
========================================  ===================================================
``LitAgent[T]``, its ``rollout`` /       :class:`agl.LitAgent`; each method is called as
``training_rollout`` /                    ``(task, resources, rollout)``, sync or async, the
``validation_rollout`` and their          ``*_async`` one when it is overridden
``*_async`` versions
``LitAgent(trained_agents="regex")``     the RL algorithm trains the agents whose names the
                                          expression matches whole (``TransitionBuilder(agents=
                                          "re:...")``)
``rollout.attempt.attempt_id``            the attempt the rollout runs as
``llm.get_base_url(rollout_id,            ``llm.endpoint``: the runner already made it the
attempt_id)``                             attempt's own gateway URL
``Trainer(n_workers=,                     ``agl.Trainer(n_runners=, resources=)``
initial_resources=)``
``trainer.dev(agent, train_dataset=)``   ``agl.Trainer.dev(agent, dataset)``
========================================  ===================================================

Everything else is agl's own API (``agl.rollout``, ``agl.emit_reward``, ``agl.PromptTemplate``,
the algorithms), re-exported here so the one import serves both.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import agl
from agl._errors import InvalidInputError
from agl._resources import Resource
from agl._results import FitResult
from agl._rollouts import Attempt, Rollout, RolloutMode
from agl._run._agent import AttemptInputs
from agl._train._algorithm import StepAlgorithm
from agl._train._datasets import DatasetSource

__all__ = [
    "LLM",
    "AttemptedRollout",
    "LitAgent",
    "PromptTemplate",
    "ProxyLLM",
    "Trainer",
    "emit_reward",
    "rollout",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

emit_reward = agl.emit_reward
rollout = agl.rollout
PromptTemplate = agl.PromptTemplate


class LLM(agl.LLM):
    """:class:`agl.LLM` with Agent Lightning's ``get_base_url``."""

    def get_base_url(self, rollout_id: str | None = None, attempt_id: str | None = None) -> str:
        """The base URL to call: the endpoint, with this attempt's ids filled in if asked."""
        if rollout_id is not None and attempt_id is not None:
            return self.for_attempt(rollout_id, attempt_id).endpoint
        return self.endpoint


ProxyLLM = LLM
"""Agent Lightning's name for an LLM served through its proxy: agl's gateway does this."""


@dataclass(frozen=True)
class AttemptedRollout:
    """The rollout as Agent Lightning hands it over: agl's :class:`~agl.Rollout` fields, and
    ``attempt``, the attempt it runs as."""

    rollout: Rollout
    attempt: Attempt

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rollout, name)


class LitAgent(agl.LitAgent, Generic[T]):
    """Agent Lightning's ``LitAgent[T]``: override ``rollout`` (or ``training_rollout`` /
    ``validation_rollout``), or their ``*_async`` versions, each taking
    ``(task, resources, rollout)``.

    Args:
        trained_agents: A regular expression of the agent names RL trains (matched against the
            whole name); None trains every agent.
    """

    _METHODS: ClassVar[dict[str, tuple[str, ...]]] = {
        "train": ("training_rollout_async", "training_rollout", "rollout_async", "rollout"),
        "val": ("validation_rollout_async", "validation_rollout", "rollout_async", "rollout"),
    }

    def __init__(self, *, trained_agents: str | None = None) -> None:
        self.trained_agents = trained_agents

    def rollout(self, task: T, resources: Mapping[str, Any], rollout: Any) -> Any:
        """Run one rollout (training and validation alike, unless those are overridden)."""
        raise NotImplementedError(f"{type(self).__qualname__} does not define rollout()")

    async def rollout_async(self, task: T, resources: Mapping[str, Any], rollout: Any) -> Any:
        """:meth:`rollout`, as a coroutine."""
        raise NotImplementedError(f"{type(self).__qualname__} does not define rollout_async()")

    def training_rollout(self, task: T, resources: Mapping[str, Any], rollout: Any) -> Any:
        return self.rollout(task, resources, rollout)

    def validation_rollout(self, task: T, resources: Mapping[str, Any], rollout: Any) -> Any:
        return self.rollout(task, resources, rollout)

    async def training_rollout_async(
        self, task: T, resources: Mapping[str, Any], rollout: Any
    ) -> Any:
        return await self.rollout_async(task, resources, rollout)

    async def validation_rollout_async(
        self, task: T, resources: Mapping[str, Any], rollout: Any
    ) -> Any:
        return await self.rollout_async(task, resources, rollout)

    def entry_point(self, mode: RolloutMode) -> Callable[..., Any]:
        """The most specific method overridden for ``mode``, async ones first."""
        for name in self._METHODS["train" if mode == "train" else "val"]:
            if getattr(type(self), name) is not getattr(LitAgent, name):
                method: Callable[..., Any] = getattr(self, name)
                return method
        raise InvalidInputError(
            f"agent {self.name!r} ({type(self).__qualname__}) overrides none of rollout(), "
            "rollout_async(), training_rollout[_async](), validation_rollout[_async]()",
            field="agent",
        )

    def bind(self, inputs: AttemptInputs) -> Callable[[], Any]:
        """Call the entry point as Agent Lightning does: ``(task, resources, rollout)``."""
        method = self.entry_point(inputs.rollout.mode)
        resources = {name: _compat(value) for name, value in inputs.resources.items()}
        handed = AttemptedRollout(inputs.rollout, inputs.attempt)
        return functools.partial(method, inputs.task, resources, handed)

    def check(self) -> None:
        for mode in ("train", "val"):
            method = self.entry_point(mode)
            if len(inspect.signature(method).parameters) < 3:
                raise InvalidInputError(
                    f"{type(self).__qualname__}.{method.__name__} must take (task, resources, "
                    "rollout), as in Agent Lightning",
                    field="agent",
                )


class Trainer(agl.Trainer):
    """:class:`agl.Trainer` with Agent Lightning's argument names.

    Args:
        algorithm: The algorithm (an agl algorithm, its name, or a per-agent mapping).
        n_workers: Runner processes (agl's ``n_runners``).
        initial_resources: Resources published before training (agl's ``resources``).
        **options: Any other :class:`agl.Trainer` option.
    """

    def __init__(
        self,
        *,
        algorithm: Any = None,
        n_workers: int = 1,
        initial_resources: Mapping[str, Resource] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(algorithm, n_runners=n_workers, resources=initial_resources, **options)

    def fit(
        self,
        agent: Any,
        train_dataset: DatasetSource,
        val_dataset: DatasetSource | None = None,
    ) -> FitResult:
        """Train, with the agent's ``trained_agents`` as the RL algorithm's agents."""
        self._select_trained_agents(agent)
        return super().fit(agent, train_dataset, val_dataset)

    def dev(  # type: ignore[override]
        self,
        agent: Any,
        train_dataset: DatasetSource | None = None,
        val_dataset: DatasetSource | None = None,
        *,
        n: int = 1,
    ) -> FitResult:
        """Run the agent once over ``train_dataset`` (else ``val_dataset``), training nothing."""
        if train_dataset is not None:
            return super().dev(agent, train_dataset, mode="train", n=n)
        if val_dataset is not None:
            return super().dev(agent, val_dataset, mode="val", n=n)
        raise InvalidInputError("dev() needs train_dataset= or val_dataset=", field="dataset")

    def _select_trained_agents(self, agent: Any) -> None:
        pattern = getattr(agent, "trained_agents", None)
        if pattern is None:
            return
        algorithm = self.algorithm
        builder = getattr(algorithm, "transitions", None)
        if not isinstance(algorithm, StepAlgorithm) or builder is None:
            logger.warning(
                "trained_agents=%r is ignored: %s builds no RL transitions (give a per-agent "
                "mapping instead: Trainer(algorithm={'agent': ..., '*': None}))",
                pattern,
                type(algorithm).__name__,
            )
            return
        algorithm.transitions = builder.with_agents(f"re:{pattern}")


def _compat(value: Resource) -> Resource:
    """An LLM resource with ``get_base_url``; other resources as they are."""
    if isinstance(value, agl.LLM) and not isinstance(value, LLM):
        fields = {name: getattr(value, name) for name in agl.LLM.model_fields}
        return LLM(**fields)
    return value
