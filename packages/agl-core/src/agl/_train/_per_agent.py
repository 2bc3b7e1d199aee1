"""One optimizer per agent: several step algorithms sharing the rollouts of one run.

::

    trainer = agl.Trainer(algorithm={"writer": GRPO(...), "checker": APO(...), "*": None})

Each agent name or pattern maps to a :class:`~agl.StepAlgorithm`, or to None to leave the
agent frozen. Every step runs one batch of rollouts; its calls are read once, each call goes to
the algorithm of its agent, and each algorithm sees only its agents' calls and transitions and
may update only the resources its :meth:`~agl.StepAlgorithm.setup` returned. A call's agent is
matched against exact names first, then patterns in the order given: shell-style
(``"writer*"``) or regular expressions (``"re:writer|rewriter"``), as
:class:`agl.lightning.AgentSelector` reads them everywhere (``"*"`` matches every agent, and
calls no agent span encloses).

Each step logs every agent's LLM calls, trained or frozen, as ``agents/<name>/calls`` (``-``
for calls outside any agent span) and the transitions built from them as
``agents/<name>/transitions`` (:func:`agl.lightning.agent_steps_table` shows both), beside
each algorithm's own ``calls``, ``transitions/...`` and metrics (prefixed with the algorithm's
name when there are several).

Two algorithms of one kind (two models, each trained by its own ``lightningrl-torch`` for its
own agent) are told apart by their agents: ``lightningrl-torch-writer`` and
``lightningrl-torch-checker`` prefix their metrics, and each writes its files (checkpoints, final
model) under ``<run_dir>/<that label>/`` (:meth:`~agl.AlgorithmContext.with_run_dir`). Each
serves its model behind its own gateway; give each its own resource name.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, replace
from functools import partial
from typing import Any

from agl._errors import InvalidInputError
from agl._settings import LoopSettings
from agl._train._algorithm import Algorithm, AlgorithmContext, StepAlgorithm
from agl._train._step_loop import Member, StepLoop
from agl.lightning._agents import NO_AGENT
from agl.lightning._builder import AgentSelector

__all__ = ["PerAgent"]

logger = logging.getLogger(__name__)


class PerAgent(Algorithm):
    """Run several step algorithms in one run, each on its own agents.

    Args:
        algorithms: Agent name or pattern -> :class:`~agl.StepAlgorithm`, or None (frozen).
            One algorithm may serve several keys. (``Trainer(algorithm={...})`` also takes
            names of installed algorithms, and builds each once.)
        n_epochs / batch_size / n_samples / max_steps / max_staleness: The shared loop. By
            default taken from the algorithms, which must then agree; algorithms that follow
            the loop (:attr:`~agl.StepAlgorithm.follows_loop`, such as a prompt optimizer)
            take the others' settings and are not asked. Every algorithm runs by the shared
            loop, whatever its own says: it reads it from its context (``ctx.loop``).
        step_timeout: How long a step waits for its rollouts (default: the shortest of the
            algorithms' ``loop.step_timeout``).
    """

    name = "per-agent"

    def __init__(
        self,
        algorithms: Mapping[str, StepAlgorithm | None],
        *,
        n_epochs: int | None = None,
        batch_size: int | None = None,
        n_samples: int | None = None,
        max_steps: int | None = None,
        step_timeout: float | None = None,
        max_staleness: int | None = None,
    ) -> None:
        if not isinstance(algorithms, Mapping) or not algorithms:
            raise InvalidInputError(
                "a per-agent run needs a mapping of agent names or patterns to algorithms",
                field="algorithm",
            )
        self.rules: list[tuple[str, StepAlgorithm | None]] = []
        keys: dict[int, list[str]] = {}  # each algorithm's keys, in order
        given: list[tuple[object, object]] = list(algorithms.items())  # callers pass anything
        for key, entry in given:
            if not isinstance(key, str) or not key:
                raise InvalidInputError(
                    f"agent keys must be names or patterns, got {key!r}", field="algorithm"
                )
            if isinstance(entry, str):
                raise InvalidInputError(
                    f"the algorithm for agent {key!r} is the name {entry!r}: names of installed "
                    "algorithms are looked up by the Trainer (Trainer(algorithm={...})); here, "
                    "pass the algorithm object",
                    field=f"algorithm[{key!r}]",
                    value=entry,
                )
            if entry is not None and not isinstance(entry, StepAlgorithm):
                kind = type(entry).__name__
                raise InvalidInputError(
                    f"the algorithm for agent {key!r} is a {kind}, which runs its own loop "
                    "(run() only); to share a run's rollouts with other algorithms an algorithm "
                    "must be an agl.StepAlgorithm (setup() and step())",
                    field=f"algorithm[{key!r}]",
                )
            self.rules.append((key, entry))
            if entry is not None:
                keys.setdefault(id(entry), []).append(key)
        algorithms_in_order = {id(alg): alg for _, alg in self.rules if alg is not None}
        if not algorithms_in_order:
            raise InvalidInputError("every agent is frozen (None): nothing to train")
        names = Counter(alg.name for alg in algorithms_in_order.values())
        self.members: list[Member] = []
        """One per algorithm; its label is the algorithm's name, with its agents when another
        algorithm has the same name (two models of one kind: kept apart)."""
        for ident, algorithm in algorithms_in_order.items():
            label = algorithm.name
            if names[algorithm.name] > 1:
                label += "-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", "+".join(keys[ident]))
            self.members.append(Member(algorithm, partial(self._owns, algorithm), label))
        overrides = {
            name: value
            for name, value in (
                ("n_epochs", n_epochs),
                ("batch_size", batch_size),
                ("n_samples", n_samples),
                ("max_steps", max_steps),
                ("max_staleness", max_staleness),
            )
            if value is not None
        }
        timeouts = [m.algorithm.loop.step_timeout for m in self.members]
        shortest = min((t for t in timeouts if t is not None), default=None)
        self.settings = replace(
            self._shared_loop(overrides),
            step_timeout=step_timeout if step_timeout is not None else shortest,
        )
        """The shared loop."""
        self.label = "+".join(m.label for m in self.members)
        # One rule for agent keys, the transition builder's: names, shell patterns, "re:…".
        selectors = [(key, AgentSelector(key), alg) for key, alg in self.rules]
        self._exact = {key: alg for key, selector, alg in selectors if selector.names}
        self._patterns = [(key, sel, alg) for key, sel, alg in selectors if not sel.names]
        self._owner_cache: dict[str | None, tuple[str | None, StepAlgorithm | None]] = {}
        self._warned: set[str] = set()  # warnings given once per run

    def _shared_loop(self, given: dict[str, Any]) -> LoopSettings:
        """The loop the algorithms agree on, with what the per-agent run was given instead.

        Algorithms that follow the loop (a prompt optimizer) are not asked. The step loop hands
        the result to every algorithm (``ctx.loop``), so each trains as the run goes.
        """
        leading = [m for m in self.members if not m.algorithm.follows_loop] or self.members
        loops = {m.label: replace(m.algorithm.loop, step_timeout=None, **given) for m in leading}
        if len(set(loops.values())) > 1:
            views = {label: asdict(loop) for label, loop in loops.items()}
            first = next(iter(views.values()))
            differ = [name for name in first if len({repr(v[name]) for v in views.values()}) > 1]
            found = {label: {name: view[name] for name in differ} for label, view in views.items()}
            raise InvalidInputError(
                f"the algorithms disagree on {', '.join(differ)} ({found}); give it to the "
                f"per-agent run: agl.PerAgent({{...}}, {differ[0]}=...)",
                field=differ[0],
            )
        return next(iter(loops.values()))

    def owner(self, agent: str | None) -> StepAlgorithm | None:
        """The algorithm that trains ``agent``'s calls (None: frozen or unmatched)."""
        return self._rule(agent)[1]

    def _rule(self, agent: str | None) -> tuple[str | None, StepAlgorithm | None]:
        """The key ``agent`` matches (None: none) and its algorithm."""
        if agent in self._owner_cache:
            return self._owner_cache[agent]
        found: tuple[str | None, StepAlgorithm | None] = (None, None)
        if agent is not None and agent in self._exact:
            found = (agent, self._exact[agent])
        else:
            for pattern, selector, algorithm in self._patterns:
                if selector(agent):
                    found = (pattern, algorithm)
                    break
        self._owner_cache[agent] = found
        return found

    def _check_keys(self, step: int, by_agent: Counter[str | None]) -> None:
        """Warn (once a run each) when a key matched none of a step's calls: its algorithm
        trains on nothing, or a frozen key freezes nothing."""
        matched = {self._rule(agent)[0] for agent in by_agent}
        seen = ", ".join(sorted(agent or NO_AGENT for agent in by_agent))
        for key, algorithm in self.rules:
            if key not in matched:
                what = "is frozen" if algorithm is None else "trained nothing"
                self._warn_once(
                    f"key:{key}",
                    f"step {step}: agent key {key!r} matched none of the step's LLM calls (their "
                    f"agents: {seen}); its algorithm {what}. Check the agent names "
                    "(`agl rollouts show` prints them).",
                )

    def _warn_once(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            logger.warning("%s (said once a run)", message)

    async def run(self, ctx: AlgorithmContext) -> None:
        loop = StepLoop(self.members, self.settings, label=self.label, check_calls=self._check_keys)
        await loop.run(ctx)

    def _owns(self, algorithm: StepAlgorithm, agent: str | None) -> bool:
        return self.owner(agent) is algorithm
