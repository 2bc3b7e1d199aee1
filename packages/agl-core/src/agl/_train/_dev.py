"""The algorithm of a dev run (:meth:`agl.Trainer.dev`): the tasks once, nothing trained."""

from __future__ import annotations

from agl._errors import InvalidInputError
from agl._resources import LLM
from agl._results import RolloutResult
from agl._rollouts import RolloutMode
from agl._train._algorithm import Algorithm, AlgorithmContext, reward_metrics

__all__ = ["DevRun"]


class DevRun(Algorithm):
    """Runs the tasks once, ``n`` rollouts each, and keeps the results.

    With ``gateway``, the run's LLM resources are served through agl's gateway first (one per
    upstream), so every call is recorded with the engine's token ids, as in training.
    """

    name = "dev"

    def __init__(self, mode: RolloutMode, n: int, gateway: bool = False) -> None:
        self.mode: RolloutMode = mode
        self.n = n
        self.gateway = gateway
        self.results: list[RolloutResult] = []

    async def run(self, ctx: AlgorithmContext) -> None:
        if self.gateway:
            served = {
                name: await ctx.serve_llm([r.endpoint], r.model, r.sampling_parameters)
                for name, r in ctx.resources.items()
                if isinstance(r, LLM)
            }
            if not served:
                raise InvalidInputError(
                    "dev(gateway=True) serves the trainer's LLM resources through agl's gateway, "
                    "and it has none: give Trainer(resources={'llm': agl.LLM(...)})",
                    field="gateway",
                )
            await ctx.publish({**ctx.resources, **served})
        self.results = await ctx.run_rollouts(
            ctx.train_tasks, mode=self.mode, n=self.n, description="dev"
        )
        ctx.log(0, reward_metrics(self.results))
