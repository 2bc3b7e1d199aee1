"""APO, the algorithm ``"apo"``: automatic prompt optimization as an agl step algorithm.

::

    trainer = agl.Trainer(
        APO(base_url="http://localhost:8000/v1", model="qwen3-8b", max_rounds=4),
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

from agl.algorithm import AlgorithmContext, LoopSettings, StepAlgorithm, StepBatch
from agl.errors import InvalidInputError
from agl.resources import PromptTemplate, Resource
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
from agl_apo.search import Search, Settings
from agl_apo.state import APOState, checkpoint_id, find_checkpoint, run_key, tasks_digest

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["APO"]

logger = logging.getLogger(__name__)


class APO(StepAlgorithm):
    """Optimize an agent's prompt templates with an optimizer model (see the module docstring).

    Every argument has a default, so ``APO()`` (and ``"apo"`` by name) builds; the optimizer
    endpoint then comes from the environment (:func:`~agl_apo.optimizer.resolve_endpoint`).

    Args:
        resources: The :class:`~agl.PromptTemplate` resources to optimize (a name or a list).
            None: the run's only PromptTemplate; with several, say which (an error lists them).
            An ``openai.AsyncOpenAI`` client here is taken as ``client`` (``APO(AsyncOpenAI())``
            as Agent Lightning writes it).
        client: An ``openai.AsyncOpenAI`` client whose settings (base URL, key, headers, timeout,
            retries) APO calls the optimizer model with, in place of ``base_url`` / ``api_key``.
            APO opens its own connections in the run's event loop and leaves this client as it
            is (the caller's to close).
        base_url: The optimizer's OpenAI-compatible endpoint (``.../v1``). None:
            ``$AGL_APO_BASE_URL``, else ``$OPENAI_BASE_URL``, else OpenAI's API.
        api_key: Its key. None: ``$<api_key_env>``, else none (fine for local servers).
        api_key_env: The environment variable holding the key.
        model: The optimizer model. None: ``$AGL_APO_MODEL``, else ``gpt-4.1-mini``.
        critique_model / rewrite_model / merge_model: A different model for one kind of call.
        temperature: Sampling temperature of optimizer calls (None: the server's default).
        timeout: Seconds an optimizer request may take.
        max_retries: Retries on timeouts, rate limits and server errors (openai's backoff).
        max_completion_tokens: The longest optimizer reply.
        concurrency: Optimizer calls in flight at once.
        meta_prompts: Replacements for the shipped meta-prompts, by name (``system``,
            ``critique``, ``rewrite``, ``merge``): text (``str``) or a file (``Path``). See
            :mod:`agl_apo.meta_prompts`.
        beam_width: Candidates kept (by mean score) and expanded each round.
        branch_factor: Rewrites asked for per critique.
        n_examples: Worst runs shown in a critique request.
        max_example_chars: Characters one shown run may take.
        val_size: Validation tasks every candidate is scored on (the first ones; the
            training tasks when there are no validation tasks).
        val_samples: Rollouts per validation task and candidate (scores are their mean).
        max_rounds: Optimization rounds at most (one per training step).
        max_rollouts: Rollouts the search may run to score candidates (None: no limit). The
            loop's own training and validation rollouts are not counted: they are set by
            ``batch_size``, ``n_samples`` and the number of steps.
        max_optimizer_tokens: Tokens the optimizer calls may use in all (as the server reports
            them; a call is made only if its worst case fits). None: no limit.
        patience: Stop after this many rounds without the best score improving by more than
            ``min_improvement`` (None: never).
        min_improvement: The improvement that counts.
        pareto: Keep Pareto-front candidates (best on some validation task) in the beam and
            merge complementary ones.
        front_size: Front members kept beside the beam (default ``beam_width``).
        merges_per_round: Merges asked for per round (when two front members complement each
            other).
        n_epochs / batch_size / n_samples / max_steps: The loop when APO runs alone (ignored
            beside other algorithms, whose loop it follows). By default each step is one round:
            ``max_rounds`` steps of ``batch_size`` tasks.
        resume: Continue the latest search of the same prompts saved in the run's store
            (budgets spent so far included); False starts a new one.
        state_resource: The name the :class:`~agl_apo.state.APOState` is published under
            (default ``apo/<prompt names>``).
        console: Print the candidates table and the best prompt at the end: None (where the
            trainer prints, nowhere when it is quiet), True (stderr), a
            :class:`rich.console.Console`, or False.
        plot: Draw ``run_dir/apo/scores.png`` (needs matplotlib).
        metrics_prefix: Prefix of the metrics APO logs (``apo/best_score``, ...).
    """

    name = "apo"
    follows_loop = True
    lightning = None

    def __init__(
        self,
        resources: str | Sequence[str] | AsyncOpenAI | None = None,
        *,
        client: AsyncOpenAI | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        model: str | None = None,
        critique_model: str | None = None,
        rewrite_model: str | None = None,
        merge_model: str | None = None,
        temperature: float | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_completion_tokens: int = 2048,
        concurrency: int = 4,
        meta_prompts: Mapping[str, str | os.PathLike[str]] | None = None,
        beam_width: int = 4,
        branch_factor: int = 2,
        n_examples: int = 4,
        max_example_chars: int = 2000,
        val_size: int = 16,
        val_samples: int = 1,
        max_rounds: int = 5,
        max_rollouts: int | None = None,
        max_optimizer_tokens: int | None = None,
        patience: int | None = 2,
        min_improvement: float = 0.0,
        pareto: bool = True,
        front_size: int | None = None,
        merges_per_round: int = 1,
        n_epochs: int | None = None,
        batch_size: int | None = 8,
        n_samples: int = 1,
        max_steps: int | None = None,
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
        for field, value, low in (
            ("timeout", timeout, 0.001),
            ("max_retries", max_retries, 0),
            ("max_completion_tokens", max_completion_tokens, 1),
            ("concurrency", concurrency, 1),
            ("beam_width", beam_width, 1),
            ("branch_factor", branch_factor, 1),
            ("n_examples", n_examples, 1),
            ("max_example_chars", max_example_chars, 100),
            ("val_size", val_size, 1),
            ("val_samples", val_samples, 1),
            ("max_rounds", max_rounds, 1),
            ("max_rollouts", max_rollouts, 1),
            ("max_optimizer_tokens", max_optimizer_tokens, 1),
            ("patience", patience, 1),
            ("min_improvement", min_improvement, 0.0),
            ("front_size", front_size, 0),
            ("merges_per_round", merges_per_round, 0),
            ("n_epochs", n_epochs, 1),
            ("batch_size", batch_size, 1),
            ("n_samples", n_samples, 1),
            ("max_steps", max_steps, 1),
        ):
            _check_at_least(field, value, low)
        self.base_url = base_url
        self.api_key = api_key
        self.api_key_env = api_key_env
        self.model = model
        self.critique_model = critique_model
        self.rewrite_model = rewrite_model
        self.merge_model = merge_model
        self.temperature = temperature
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_completion_tokens = max_completion_tokens
        self.concurrency = concurrency
        self.meta_prompts = MetaPrompts.load(meta_prompts)
        self.beam_width = beam_width
        self.branch_factor = branch_factor
        self.n_examples = n_examples
        self.max_example_chars = max_example_chars
        self.val_size = val_size
        self.val_samples = val_samples
        self.max_rounds = max_rounds
        self.max_rollouts = max_rollouts
        self.max_optimizer_tokens = max_optimizer_tokens
        self.patience = patience
        self.min_improvement = min_improvement
        self.pareto = pareto
        self.front_size = beam_width if front_size is None else front_size
        self.merges_per_round = merges_per_round
        self.loop = LoopSettings(
            n_epochs=max_rounds if n_epochs is None else n_epochs,
            batch_size=batch_size,
            n_samples=n_samples,
            max_steps=max_rounds if max_steps is None else max_steps,
        )
        self.resume = resume
        self.state_resource = state_resource
        self._console_option = console
        self.console: Console | None = _console(console)
        self.plot = plot
        self.metrics_prefix = metrics_prefix
        self.search: Search | None = None
        """The running search (between setup and close)."""
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
            endpoint = resolve_endpoint(self.base_url, self.api_key, self.api_key_env)
        tasks, source = (ctx.val_tasks, "val") if ctx.val_tasks else (ctx.train_tasks, "train")
        if not tasks:
            raise InvalidInputError("APO needs tasks to score candidates on", field="val_tasks")
        items = list(range(min(self.val_size, len(tasks))))
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
        model = self.model or os.environ.get(MODEL_ENV) or DEFAULT_MODEL
        settings = Settings(
            critique_model=self.critique_model or model,
            rewrite_model=self.rewrite_model or model,
            merge_model=self.merge_model or model,
            beam_width=self.beam_width,
            branch_factor=self.branch_factor,
            n_examples=self.n_examples,
            max_example_chars=self.max_example_chars,
            val_samples=self.val_samples,
            max_rounds=self.max_rounds,
            max_rollouts=self.max_rollouts,
            patience=self.patience,
            min_improvement=self.min_improvement,
            pareto=self.pareto,
            front_size=self.front_size,
            merges_per_round=self.merges_per_round,
        )
        optimizer = OptimizerClient(
            endpoint,
            timeout=self.timeout,
            max_retries=self.max_retries,
            max_completion_tokens=self.max_completion_tokens,
            temperature=self.temperature,
            budget=TokenBudget(self.max_optimizer_tokens, used=state.optimizer_tokens),
            concurrency=self.concurrency,
            client=self.client,
        )
        self.search = Search(
            state, settings, optimizer, self.meta_prompts, seeds, tasks, self._state_name
        )
        state.stopped = self.search.stop_reason()
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
        search, report = self.search, self.report
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
        if self.search is not None and self.report is not None:
            self.report.write(self.search.state)
            self.report.plot(self.search.state)
            self.report.show(self.search.state)
        await self._release()

    # --- helpers ----------------------------------------------------------------------------

    async def _release(self) -> None:
        if self.search is not None:
            await self.search.optimizer.aclose()
        self.search = None

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
        assert self.search is not None
        best = state.best_candidate()
        prompts: dict[str, Resource] = dict(
            state.prompts(best) if best is not None else self.search.seeds
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


def _check_at_least(field: str, value: float | None, low: float) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or value < low:
        raise InvalidInputError(
            f"{field} must be a number of at least {low:g}, got {value!r}",
            field=field,
            value=value,
        )


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
