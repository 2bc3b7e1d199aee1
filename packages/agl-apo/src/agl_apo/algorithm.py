"""APO, the algorithm ``"apo"``: automatic prompt optimization as an agl step algorithm.

::

    trainer = agl.Trainer(
        APO(
            optimizer=OptimizerSettings(base_url="http://localhost:8000/v1", model="qwen3-8b"),
            budgets=Budgets(max_rounds=4),
        ),
        resources={"llm": agl.LLM(...), "prompt": agl.PromptTemplate(template="...{question}")},
    )
    trainer.fit(agent, "train.jsonl", val_dataset="val.jsonl")

    # beside RL, one run: RL trains the writer's model, APO the checker's prompt
    agl.Trainer(algorithm={"writer": "lightningrl-torch", "checker": "apo"}, ...)

Each training step is one round of the search (:mod:`agl_apo.search`): the step's rollouts ran
with the best prompt so far; APO reads their traces, asks the optimizer model for critiques and
rewrites (and merges of Pareto-front members), scores the new candidates on the validation
tasks and publishes the best prompt with an :class:`~agl_apo.state.APOState` beside it. It
stops optimizing (the loop's remaining steps then only run the best prompt) when a budget is
spent or the score stops improving, and a restarted run on the same store continues.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console

from agl import (
    AlgorithmContext,
    InvalidInputError,
    LoopSettings,
    PromptTemplate,
    Resource,
    StepAlgorithm,
    StepBatch,
    settings,
)
from agl_apo.estimate import CostEstimate, estimate_cost
from agl_apo.meta_prompts import MetaPrompts
from agl_apo.optimizer import (
    DEFAULT_MODEL,
    MODEL_ENV,
    Endpoint,
    OptimizerClient,
    TokenBudget,
    resolve_endpoint,
)
from agl_apo.report import Report
from agl_apo.search import Models, Search
from agl_apo.settings import Budgets, OptimizerSettings, SearchSettings
from agl_apo.state import APOState, checkpoint_id, find_checkpoint, run_key, tasks_digest

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["APO"]

logger = logging.getLogger(__name__)


class APO(StepAlgorithm):
    """Optimize an agent's prompt templates with an optimizer model (see the module docstring).

    Args:
        resources: The :class:`~agl.PromptTemplate` resources to optimize (a name or a list).
            None: the run's only PromptTemplate; with several, say which (an error lists them).
            An ``openai.AsyncOpenAI`` client here is taken as ``client`` (``APO(AsyncOpenAI())``
            as Agent Lightning writes it).
        client: An ``openai.AsyncOpenAI`` client whose settings (base URL, key, headers, timeout,
            retries) APO calls the optimizer model with, in place of ``optimizer``'s
            ``base_url`` / ``api_key``. APO opens its own connections in the run's event loop
            and leaves this client as it is (the caller's to close).
        optimizer: The optimizer model: endpoint, key, models, temperature, timeout, retries,
            reply length, concurrency (:class:`~agl_apo.settings.OptimizerSettings`).
        search: The beam search: width, rewrites per critique, examples shown, validation
            tasks and samples, Pareto front, merges (:class:`~agl_apo.settings.SearchSettings`).
        budgets: When the search stops: rounds, scoring rollouts, optimizer tokens, patience
            (:class:`~agl_apo.settings.Budgets`).
        meta_prompts: Replacements for the shipped meta-prompts, by name (``system``,
            ``critique``, ``rewrite``, ``merge``): text (``str``) or a file (``Path``). See
            :mod:`agl_apo.meta_prompts`.
        loop: The loop when APO runs alone (:class:`agl.LoopSettings`; ignored beside other
            algorithms, whose loop it follows). By default each step is one round:
            ``budgets.max_rounds`` steps of 8 tasks, one rollout each.
        resume: Continue the latest search of the same prompts saved in the run's store
            (budgets spent so far included); False starts a new one.
        state_resource: The name the :class:`~agl_apo.state.APOState` is published under
            (default ``apo/<prompt names>``).
        console: Print the candidates table and the best prompt at the end: None (where the
            trainer prints, nowhere when it is quiet), True (stderr), a
            :class:`rich.console.Console`, or False.
        plot: Draw ``run_dir/apo/scores.png`` (needs matplotlib).
        metrics_prefix: Prefix of the metrics APO logs (``apo/best_score``, ...).

    Every settings argument also takes a mapping of its fields
    (``budgets={"max_rounds": 3}``), and has defaults: ``APO()`` (and ``"apo"`` by name)
    builds, the optimizer endpoint then coming from the environment
    (:func:`~agl_apo.optimizer.resolve_endpoint`).

    Attributes:
        running: The search under way (between setup and close).
    """

    name = "apo"
    follows_loop = True
    transitions = None

    def __init__(
        self,
        resources: str | Sequence[str] | AsyncOpenAI | None = None,
        *,
        client: AsyncOpenAI | None = None,
        optimizer: OptimizerSettings | Mapping[str, Any] | None = None,
        search: SearchSettings | Mapping[str, Any] | None = None,
        budgets: Budgets | Mapping[str, Any] | None = None,
        meta_prompts: Mapping[str, str | os.PathLike[str]] | None = None,
        loop: LoopSettings | Mapping[str, Any] | None = None,
        resume: bool = True,
        state_resource: str | None = None,
        console: bool | Console | None = None,
        plot: bool = True,
        metrics_prefix: str = "apo/",
    ) -> None:
        self.client, names = _client_and_names(resources, client)
        if names is not None and (not names or not all(isinstance(n, str) and n for n in names)):
            raise InvalidInputError(
                "resources must name one or more PromptTemplate resources",
                field="resources",
                value=resources,
            )
        self.resources = list(dict.fromkeys(names)) if names is not None else None
        self.optimizer = settings("optimizer", optimizer, OptimizerSettings())
        self.search = settings("search", search, SearchSettings())
        self.budgets = settings("budgets", budgets, Budgets())
        self.meta_prompts = MetaPrompts.load(meta_prompts)
        rounds = self.budgets.max_rounds
        self.loop = settings(
            "loop", loop, LoopSettings(n_epochs=rounds, batch_size=8, max_steps=rounds)
        )
        self.resume = resume
        self.state_resource = state_resource
        self._console_option = console
        self.console: Console | None = _console(console)
        self.plot = plot
        self.metrics_prefix = metrics_prefix
        self.running: Search | None = None
        self.report: Report | None = None
        self._key = ""
        self._state_name = ""
        self._resumed_step = 0

    # --- the dry run ------------------------------------------------------------------------

    def estimate(
        self,
        train_tasks: int | Sequence[Any],
        val_tasks: int | Sequence[Any] = 0,
        *,
        prompt_chars: int | Sequence[int] = 1000,
        show: bool = True,
        console: Console | None = None,
    ) -> CostEstimate:
        """Estimate rollouts and optimizer calls/tokens on datasets of these sizes; print it.

        Nothing runs and nothing is called (see :mod:`agl_apo.estimate`).
        """
        estimate = estimate_cost(self, train_tasks, val_tasks, prompt_chars=prompt_chars)
        if show:
            estimate.show(console)
        return estimate

    # --- StepAlgorithm ------------------------------------------------------------------------

    async def setup(self, ctx: AlgorithmContext) -> Mapping[str, Resource]:
        await self._release()
        names = self._resolve_names(ctx.resources)
        seeds: dict[str, PromptTemplate] = {}
        for name in names:
            seed = ctx.resources[name]
            assert isinstance(seed, PromptTemplate)
            seeds[name] = seed
        if self.client is not None:
            endpoint = Endpoint(str(self.client.base_url), self.client.api_key, "client=")
        else:
            chosen = self.optimizer
            endpoint = resolve_endpoint(chosen.base_url, chosen.api_key, chosen.api_key_env)
        tasks, source = (ctx.val_tasks, "val") if ctx.val_tasks else (ctx.train_tasks, "train")
        if not tasks:
            raise InvalidInputError("APO needs tasks to score candidates on", field="val_tasks")
        items = list(range(min(self.search.val_size, len(tasks))))
        digest = tasks_digest([tasks[index] for index in items])
        self._state_name = self.state_resource or "apo/" + "+".join(names)
        self._key = run_key(seeds)

        generation, checkpoint = await find_checkpoint(ctx.store, self._key, self._state_name)
        state: APOState | None = None
        self._resumed_step = 0
        if self.resume and checkpoint is not None:
            found = checkpoint.state(self._state_name).model_copy(deep=True)
            same = (found.resources, found.items, found.item_source, found.items_digest)
            if same == (names, items, source, digest):
                state, self._resumed_step = found, checkpoint.step
            else:
                logger.warning(
                    "apo: not resuming the saved search (step %d): its prompts or validation "
                    "tasks differ from this run's; starting a new one",
                    checkpoint.step,
                )
        if state is None:
            state = APOState(
                resources=names,
                engines={name: seed.engine for name, seed in seeds.items()},
                items=items,
                item_source=source,
                items_digest=digest,
                generation=generation + 1,
            )
        chosen = self.optimizer
        model = chosen.model or os.environ.get(MODEL_ENV) or DEFAULT_MODEL
        models = Models(
            critique=chosen.critique_model or model,
            rewrite=chosen.rewrite_model or model,
            merge=chosen.merge_model or model,
        )
        optimizer = OptimizerClient(
            endpoint,
            timeout=chosen.timeout,
            max_retries=chosen.max_retries,
            max_completion_tokens=chosen.max_completion_tokens,
            temperature=chosen.temperature,
            budget=TokenBudget(self.budgets.max_optimizer_tokens, used=state.optimizer_tokens),
            concurrency=chosen.concurrency,
            client=self.client,
        )
        self.running = Search(
            state,
            self.search,
            self.budgets,
            models,
            optimizer,
            self.meta_prompts,
            seeds,
            tasks,
            self._state_name,
        )
        state.stopped = self.running.stop_reason()
        if self._console_option is None:
            self.console = ctx.console if isinstance(ctx.console, Console) else None
        self.report = Report(ctx.run_dir / "apo", console=self.console, plot=self.plot)
        estimate = estimate_cost(
            self,
            ctx.train_tasks,
            ctx.val_tasks,
            prompt_chars=[len(seed.template) for seed in seeds.values()],
        )
        where = endpoint.base_url or "OpenAI's API"
        logger.info("apo: optimizing %s with %s at %s; at most: %s", names, model, where, estimate)
        if self._resumed_step:
            logger.info(
                "apo: resuming the search after step %d (%d rounds, %d candidates, best %s)",
                self._resumed_step, state.rounds, len(state.candidates), state.best,
            )  # fmt: skip
        return self._published(state)

    def resume_step(self) -> int:
        return self._resumed_step

    async def step(self, ctx: AlgorithmContext, batch: StepBatch) -> Mapping[str, Resource]:
        search, report = self.running, self.report
        assert search is not None, "step() before setup()"
        assert report is not None
        state = search.state
        search.round_new = search.round_skips = search.round_duplicates = 0
        if state.stopped is None:
            await search.run_round(ctx, batch)
            state.stopped = search.stop_reason()
            if state.stopped is not None:
                logger.info("apo: the search stopped (%s)", state.stopped)
        state.step = batch.step
        published = self._published(state)
        checkpoint = {n: r for n, r in ctx.resources.items() if n not in published}
        checkpoint.update(published)
        await ctx.store.add_resources(
            checkpoint, resources_id=checkpoint_id(self._key, state.generation, state.step)
        )
        report.write(state)
        report.plot(state)
        ctx.log(batch.step, self._metrics(search))
        return published

    async def close(self, ctx: AlgorithmContext) -> None:
        if self.running is not None and self.report is not None:
            self.report.write(self.running.state)
            self.report.plot(self.running.state)
            self.report.show(self.running.state)
        await self._release()

    # --- helpers ----------------------------------------------------------------------------

    async def _release(self) -> None:
        if self.running is not None:
            await self.running.optimizer.aclose()
        self.running = None

    def _resolve_names(self, resources: Mapping[str, Resource]) -> list[str]:
        prompts = sorted(n for n, r in resources.items() if isinstance(r, PromptTemplate))
        if self.resources is not None:
            for name in self.resources:
                found = resources.get(name)
                if found is None:
                    raise InvalidInputError(
                        f"APO(resources=...) names {name!r}, which the run does not have; its "
                        f"PromptTemplate resources are {prompts}",
                        field="resources",
                        value=name,
                    )
                if not isinstance(found, PromptTemplate):
                    raise InvalidInputError(
                        f"resource {name!r} is a {type(found).__name__}, not a PromptTemplate "
                        f"(the run's PromptTemplate resources are {prompts})",
                        field="resources",
                        value=name,
                    )
            return list(self.resources)
        if len(prompts) == 1:
            return prompts
        if not prompts:
            raise InvalidInputError(
                "APO optimizes PromptTemplate resources and the run has none: give the trainer "
                "one, e.g. Trainer(..., resources={'prompt': agl.PromptTemplate(template=...)})",
                field="resources",
            )
        raise InvalidInputError(
            f"the run has several PromptTemplate resources {prompts}: say which APO optimizes, "
            f"e.g. APO(resources={prompts[0]!r}) (or a list of names); in a per-agent run, map "
            "the agent to such an instance instead of the name 'apo'",
            field="resources",
            value=prompts,
        )

    def _published(self, state: APOState) -> dict[str, Resource]:
        """The best prompts (the seeds until they are scored) and a copy of the state."""
        assert self.running is not None
        best = state.best_candidate()
        prompts: dict[str, Resource] = dict(
            state.prompts(best) if best is not None else self.running.seeds
        )
        prompts[self._state_name] = state.model_copy(deep=True)
        return prompts

    def _metrics(self, search: Search) -> dict[str, float]:
        state = search.state
        metrics = {
            "round": float(state.rounds),
            "candidates": float(len(state.candidates)),
            "new_candidates": float(search.round_new),
            "beam": float(len(state.beam)),
            "front": float(len(state.front)),
            "skipped": float(len(state.skips)),
            "skipped_this_round": float(search.round_skips),
            "duplicates": float(state.duplicates),
            "rollouts": float(state.rollouts),
            "optimizer_calls": float(state.optimizer_calls),
            "optimizer_tokens": float(state.optimizer_tokens),
            "stopped": float(state.stopped is not None),
        }
        best = state.best_candidate()
        if best is not None:
            metrics["best_score"] = best.score
        return {f"{self.metrics_prefix}{key}": value for key, value in metrics.items()}


def _console(option: bool | Console | None) -> Console | None:
    """The console the ``console`` option names (None: decided at setup, from the trainer's)."""
    if isinstance(option, Console):
        return option
    return Console(stderr=True) if option else None


def _client_and_names(
    resources: object, client: object
) -> tuple[AsyncOpenAI | None, Sequence[str] | None]:
    """APO's first argument read as resource names, or as the client when it is one."""
    if resources is not None and not isinstance(resources, str | Sequence):
        return _as_client(resources, client), None
    names = [resources] if isinstance(resources, str) else resources
    return (None if client is None else _as_client(client, None)), names


def _as_client(given: object, other: object) -> AsyncOpenAI:
    """``given`` as the optimizer's client, or a clear error naming what it is."""
    import openai

    if isinstance(given, openai.AsyncOpenAI):
        if other is not None and other is not given:
            raise InvalidInputError("APO got two clients (positional and client=)", field="client")
        return given
    if isinstance(given, openai.OpenAI):
        raise InvalidInputError(
            "APO calls its optimizer asynchronously: pass an openai.AsyncOpenAI client, not "
            "openai.OpenAI",
            field="client",
        )
    raise InvalidInputError(
        f"APO's first argument names the PromptTemplate resources to optimize (a name or a "
        f"list of names) or is an openai.AsyncOpenAI client; got {type(given).__name__}",
        field="resources",
    )
