"""Best-of-n prompt selection: run the agent with each candidate prompt, keep the best one.

The smallest honest prompt optimizer: no model writes prompts here, the candidates are given
(or derived from the prompt the trainer was given), and each is scored by the mean reward the
agent earns with it on the training tasks::

    trainer = agl.Trainer(
        algorithm="best-of-n",  # or BestOfNAlgorithm(candidates=[...])
        resources={"prompt": agl.PromptTemplate(template="What is {x} squared?")},
    )
    trainer.fit(agent, train_tasks, val_dataset=val_tasks)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import agl
from agl import reward_metrics

__all__ = ["BestOfNAlgorithm"]


class BestOfNAlgorithm(agl.Algorithm):
    """Score each candidate prompt template by the agent's mean reward; publish the best.

    Step ``i`` publishes candidate ``i`` as the prompt resource, runs every training task
    ``n_samples`` times with it and logs the rewards (``reward/mean`` is the candidate's
    score). Then the best candidate (the earliest among equals) is published, so the agent
    keeps using it, and run on the validation tasks (``val/...`` metrics).

    Args:
        candidates: The template texts to try. By default: the trainer's prompt resource
            (named ``resource``) as it is, and with each of :attr:`INSTRUCTIONS` before it.
        resource: The name of the :class:`agl.PromptTemplate` resource the agent uses.
        n_samples: Rollouts per task and candidate; more give a less noisy score.

    Attributes:
        scores: Each candidate's mean reward, after :meth:`run`.
        best: The winning template, after :meth:`run`.
    """

    name = "best-of-n"

    INSTRUCTIONS: ClassVar[tuple[str, ...]] = (
        "Answer with the final result only.\n",
        "Think step by step, then give the final answer.\n",
    )
    """What the default candidates put before the trainer's prompt."""

    def __init__(
        self,
        candidates: Sequence[str] | None = None,
        *,
        resource: str = "prompt",
        n_samples: int = 1,
    ) -> None:
        if candidates is not None and not candidates:
            raise agl.InvalidInputError("candidates is empty", field="candidates")
        if n_samples < 1:
            raise agl.InvalidInputError(
                f"n_samples must be at least 1, got {n_samples}", field="n_samples"
            )
        self.candidates = None if candidates is None else list(candidates)
        self.resource = resource
        self.n_samples = n_samples
        self.scores: list[float] = []
        self.best: agl.PromptTemplate | None = None

    async def run(self, ctx: agl.AlgorithmContext) -> None:
        templates = self._templates(ctx)
        self.scores = []
        for step, template in enumerate(templates, start=1):
            update = await ctx.publish({**ctx.resources, self.resource: template})
            results = await ctx.run_rollouts(
                ctx.train_tasks,
                n=self.n_samples,
                resources_id=update.resources_id,
                description=f"candidate {step}/{len(templates)}",
            )
            metrics = reward_metrics(results)
            self.scores.append(metrics["reward/mean"])
            ctx.log(step, {**metrics, "best/reward": max(self.scores)})
        best = max(range(len(templates)), key=lambda index: (self.scores[index], -index))
        self.best = templates[best]
        await ctx.publish({**ctx.resources, self.resource: self.best})
        last = len(templates)
        ctx.log(last, {"best/candidate": float(best + 1), "best/reward": self.scores[best]})
        if ctx.val_tasks:
            results = await ctx.run_rollouts(ctx.val_tasks, mode="val", description="validation")
            ctx.log(last, reward_metrics(results, prefix="val/"))

    def _templates(self, ctx: agl.AlgorithmContext) -> list[agl.PromptTemplate]:
        given = ctx.resources.get(self.resource)
        if given is not None and not isinstance(given, agl.PromptTemplate):
            raise agl.InvalidInputError(
                f"resource {self.resource!r} is a {type(given).__name__}, not a PromptTemplate",
                field="resource",
                value=self.resource,
            )
        engine = given.engine if given is not None else "f-string"
        if self.candidates is not None:
            texts = self.candidates
        elif given is not None:
            texts = [given.template, *(prefix + given.template for prefix in self.INSTRUCTIONS)]
        else:
            raise agl.InvalidInputError(
                f"best-of-n needs candidates=[...] or a PromptTemplate resource named "
                f"{self.resource!r} given to the trainer",
                field="candidates",
            )
        return [agl.PromptTemplate(template=text, engine=engine) for text in texts]
