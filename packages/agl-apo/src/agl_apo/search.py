"""One round of the search: critique, rewrite, merge, score, select.

A round starts from the beam. For each member it shows the optimizer model the worst runs of
that prompt (the training batch for the published best, the member's own scoring runs for the
others) and asks for a critique, then for ``branch_factor`` rewrites following the critique.
With the Pareto front on, it also asks to merge the most complementary pair of front members.
Each new template is checked (it parses, formats and keeps the seed's placeholders), scored on
the validation items through real rollouts, and the beam, the front and the best are chosen
again from every candidate so far. Whatever fails along the way (an optimizer error, a reply
without a prompt, a broken template, a budget) skips only what depended on it, with its reason
recorded in the state and logged.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import JsonValue

from agl import AlgorithmContext, PromptTemplate, StepBatch
from agl_apo.candidates import (
    CandidateError,
    check_template,
    complementary_pair,
    rank,
    select_beam,
    wins,
)
from agl_apo.meta_prompts import MetaPrompts
from agl_apo.optimizer import OptimizerClient, OptimizerError, extract_prompt
from agl_apo.settings import Budgets, SearchSettings
from agl_apo.state import APOState, Candidate, Origin, Skip, Stage
from agl_apo.traces import Example, examples_from, render_examples, worst

__all__ = ["Models", "Search"]

logger = logging.getLogger(__name__)

_STRENGTHS_SHOWN = 5


@dataclass(frozen=True)
class Models:
    """The optimizer model asked for each kind of call."""

    critique: str
    rewrite: str
    merge: str


@dataclass(frozen=True)
class _Proposal:
    origin: Origin
    parents: list[str]
    templates: dict[str, str]
    target: str


class Search:
    """The search over one run: its state, the optimizer and what it has seen.

    Args:
        state: Where the search stands (a new one, or restored from the store).
        settings: The search's knobs.
        budgets: When it stops.
        models: The optimizer model for each kind of call.
        optimizer: The optimizer model.
        meta_prompts: What to ask it.
        seeds: The prompts the run started with (their placeholders are the agent's).
        tasks: The tasks ``state.items`` index.
        state_name: The name the state is published under (left out of scoring rollouts).
    """

    def __init__(
        self,
        state: APOState,
        settings: SearchSettings,
        budgets: Budgets,
        models: Models,
        optimizer: OptimizerClient,
        meta_prompts: MetaPrompts,
        seeds: Mapping[str, PromptTemplate],
        tasks: list[JsonValue],
        state_name: str,
    ) -> None:
        self.state = state
        self.settings = settings
        self.budgets = budgets
        self.models = models
        self.optimizer = optimizer
        self.meta = meta_prompts
        self.seeds = dict(seeds)
        self.variables = {name: seed.variables() for name, seed in seeds.items()}
        self.tasks = [tasks[index] for index in state.items]
        self.state_name = state_name
        self.examples: dict[str, list[Example]] = {}
        """Candidate id -> runs of its prompts (the newest read)."""
        self.agents: set[str | None] = set()
        """The agents whose calls APO was given (its own, in a per-agent run)."""
        self.round_skips = 0
        self.round_new = 0
        self.round_duplicates = 0
        self._calls_before = state.optimizer_calls

    # --- the round ------------------------------------------------------------------------

    async def run_round(self, ctx: AlgorithmContext, batch: StepBatch) -> None:
        """Run one round on a training step's batch (see the module docstring)."""
        state = self.state
        self.round_skips = self.round_new = self.round_duplicates = 0
        self.agents.update(call.agent for call in batch.calls)
        number = state.rounds + 1
        try:
            if state.candidates or await self._score_seed(ctx):
                await self._round(ctx, batch, number)
        finally:
            self._sync_optimizer()

    async def _round(self, ctx: AlgorithmContext, batch: StepBatch, number: int) -> None:
        state = self.state
        best = state.best_candidate()
        assert best is not None
        self.examples[best.id] = examples_from(batch.results, batch.calls, agents=self.agents)
        names = list(state.resources)
        target = names[(number - 1) % len(names)]
        jobs = [
            self._expand(state.candidate(parent), target, number)
            for parent in state.beam
            if parent in self.examples
        ]
        jobs.extend(self._merge(a, b, number) for a, b in self._pairs_to_merge())
        proposals = [p for found in await asyncio.gather(*jobs) for p in found]
        for proposal in self._checked(proposals, number):
            if not await self._score(ctx, proposal, number):
                break
        self._select(number)

    def stop_reason(self) -> str | None:
        """Why the search should stop now (None: it goes on)."""
        state, budgets = self.state, self.budgets
        if state.rounds >= budgets.max_rounds:
            return f"max_rounds: {state.rounds} rounds done"
        if budgets.patience is not None and state.stale_rounds >= budgets.patience:
            return f"patience: no improvement in {state.stale_rounds} rounds"
        if self.optimizer.budget.exhausted:
            return f"max_optimizer_tokens: {self.optimizer.budget.used} tokens used"
        limit = budgets.max_rollouts
        if limit is not None and state.rollouts + self._scoring_cost() > limit:
            return f"max_rollouts: {state.rollouts} rollouts run"
        return None

    # --- asking the optimizer ---------------------------------------------------------------

    async def _expand(self, parent: Candidate, target: str, number: int) -> list[_Proposal]:
        examples = worst(self.examples[parent.id], self.settings.n_examples)
        text = self.meta.render(
            "critique",
            name=target,
            prompt=parent.templates[target],
            variables=self._variables_text(target),
            examples=render_examples(examples, self.settings.max_example_chars),
            n_examples=len(examples),
            context=self._context(parent, target),
        )
        try:
            reply = await self.optimizer.complete(self.models.critique, self._ask(text))
        except OptimizerError as exc:
            self._skip(number, "critique", [parent.id], f"critique failed: {exc.message}")
            return []
        critique = reply.text.strip()
        count = self.settings.branch_factor
        rewrites = await asyncio.gather(
            *(
                self._rewrite(parent, target, critique, index, count)
                for index in range(1, count + 1)
            )
        )
        proposals = []
        for outcome in rewrites:
            if isinstance(outcome, OptimizerError):
                self._skip(number, "rewrite", [parent.id], f"rewrite failed: {outcome.message}")
            else:
                templates = {**parent.templates, target: outcome}
                proposals.append(_Proposal("rewrite", [parent.id], templates, target))
        return proposals

    async def _rewrite(
        self, parent: Candidate, target: str, critique: str, index: int, count: int
    ) -> str | OptimizerError:
        text = self.meta.render(
            "rewrite",
            name=target,
            prompt=parent.templates[target],
            critique=critique,
            variables=self._variables_text(target),
            syntax=self._syntax(target),
            index=index,
            count=count,
        )
        try:
            reply = await self.optimizer.complete(self.models.rewrite, self._ask(text))
            return extract_prompt(reply.text)
        except OptimizerError as exc:
            return exc

    def _pairs_to_merge(self) -> list[tuple[Candidate, Candidate]]:
        state = self.state
        if not self.settings.pareto:
            return []
        front = [state.candidate(member) for member in state.front]
        merged = {frozenset(pair) for pair in state.merged}
        pairs = []
        for _ in range(self.settings.merges_per_round):
            pair = complementary_pair(front, merged)
            if pair is None:
                break
            key = frozenset((pair[0].id, pair[1].id))
            merged.add(key)
            state.merged.append(sorted(key))
            pairs.append(pair)
        return pairs

    async def _merge(self, first: Candidate, second: Candidate, number: int) -> list[_Proposal]:
        parents = [first.id, second.id]
        differing = [n for n in self.state.resources if first.templates[n] != second.templates[n]]
        if not differing:
            self._skip(number, "merge", parents, "the two candidates have the same prompts")
            return []
        target = differing[0]
        text = self.meta.render(
            "merge",
            name=target,
            prompt_a=first.templates[target],
            prompt_b=second.templates[target],
            strengths_a=self._strengths(first, second),
            strengths_b=self._strengths(second, first),
            variables=self._variables_text(target),
            syntax=self._syntax(target),
        )
        try:
            reply = await self.optimizer.complete(self.models.merge, self._ask(text))
            merged = extract_prompt(reply.text)
        except OptimizerError as exc:
            self._skip(number, "merge", parents, f"merge failed: {exc.message}")
            return []
        return [_Proposal("merge", parents, {**first.templates, target: merged}, target)]

    def _ask(self, text: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.meta.system.strip()},
            {"role": "user", "content": text},
        ]

    def _variables_text(self, name: str) -> str:
        names = sorted(self.variables[name])
        if not names:
            return "none"
        if self.state.engines[name] == "jinja2":
            return ", ".join("{{ " + n + " }}" for n in names)
        return ", ".join("{" + n + "}" for n in names)

    def _syntax(self, name: str) -> str:
        if self.state.engines[name] == "jinja2":
            return "The template is a Jinja2 template."
        return (
            "The template is a Python format string: write a literal brace as {{ or }}, and "
            "use no other {...} fields."
        )

    def _context(self, candidate: Candidate, target: str) -> str:
        others = [n for n in candidate.templates if n != target]
        if not others:
            return ""
        shown = "\n\n".join(
            f'<other_prompt name="{n}">\n{candidate.templates[n]}\n</other_prompt>' for n in others
        )
        return f"\nThe agent also uses these prompts (not to be changed now):\n\n{shown}\n"

    def _strengths(self, candidate: Candidate, other: Candidate) -> str:
        return "\n".join(
            f"- task {self.tasks[index]!r}: reward {candidate.scores[index]:.3g} "
            f"instead of {other.scores[index]:.3g}"
            for index in wins(candidate, other)[:_STRENGTHS_SHOWN]
        )

    # --- checking and scoring -----------------------------------------------------------------

    def _checked(self, proposals: list[_Proposal], number: int) -> list[_Proposal]:
        known = {_key(c.templates): c.id for c in self.state.candidates}
        kept = []
        for proposal in proposals:
            text = proposal.templates[proposal.target]
            try:
                variables = self.variables[proposal.target]
                engine = self.state.engines[proposal.target]
                check_template(text, engine, required=variables, allowed=variables)
            except CandidateError as exc:
                self._skip(number, "check", proposal.parents, exc.message, text)
                continue
            key = _key(proposal.templates)
            if key in known:
                self.state.duplicates += 1
                self.round_duplicates += 1
                logger.info(
                    "apo round %d: a %s of %s repeats %s; not scored again",
                    number, proposal.origin, ", ".join(proposal.parents), known[key],
                )  # fmt: skip
                continue
            known[key] = "a candidate of this round"
            kept.append(proposal)
        return kept

    async def _score_seed(self, ctx: AlgorithmContext) -> bool:
        seed = _Proposal(
            "seed", [], {n: s.template for n, s in self.seeds.items()}, self.state.resources[0]
        )
        if not await self._score(ctx, seed, 0):
            return False
        state = self.state
        scored = state.candidates[0]
        state.best = scored.id
        state.beam = [scored.id]
        state.front = [scored.id]
        state.best_scores = [scored.score]
        return True

    async def _score(self, ctx: AlgorithmContext, proposal: _Proposal, number: int) -> bool:
        """Score a proposal on the validation items; False when the rollout budget is spent."""
        state = self.state
        cost = self._scoring_cost()
        limit = self.budgets.max_rollouts
        if limit is not None and state.rollouts + cost > limit:
            reason = (
                f"the rollout budget ({limit}) has {limit - state.rollouts} rollouts left and "
                f"scoring needs {cost}"
            )
            self._skip(
                number, "score", proposal.parents, reason, proposal.templates[proposal.target]
            )
            return False
        candidate_id = f"c{len(state.candidates)}"
        prompts = {
            n: PromptTemplate(template=t, engine=state.engines[n])
            for n, t in proposal.templates.items()
        }
        others = {n: r for n, r in ctx.resources.items() if n != self.state_name}
        update = await ctx.store.add_resources({**others, **prompts})
        results = await ctx.run_rollouts(
            self.tasks,
            mode="val",
            n=self.settings.val_samples,
            resources_id=update.resources_id,
            metadata={"apo_candidate": candidate_id, "apo_round": number},
            description=f"apo round {number}: scoring {candidate_id}",
        )
        state.rollouts += len(results)
        per_item: list[list[float]] = [[] for _ in self.tasks]
        for result in results:
            index = result.rollout.metadata.get("task_index")
            if isinstance(index, int) and 0 <= index < len(per_item):
                per_item[index].append(result.reward if result.reward is not None else 0.0)
        scores = [statistics.fmean(values) if values else 0.0 for values in per_item]
        candidate = Candidate(
            id=candidate_id,
            round=number,
            origin=proposal.origin,
            parents=proposal.parents,
            templates=proposal.templates,
            scores=scores,
            score=statistics.fmean(scores) if scores else 0.0,
        )
        state.candidates.append(candidate)
        self.examples[candidate_id] = examples_from(results, agents=self.agents)
        self.round_new += proposal.origin != "seed"
        logger.info(
            "apo round %d: %s (%s of %s) scored %.4f",
            number, candidate_id, proposal.origin, ", ".join(proposal.parents) or "-",
            candidate.score,
        )  # fmt: skip
        return True

    def _select(self, number: int) -> None:
        state, settings = self.state, self.settings
        if not state.candidates:
            return
        previous = state.best_scores[-1] if state.best_scores else float("-inf")
        beam, front = select_beam(
            state.candidates,
            settings.beam_width,
            pareto=settings.pareto,
            front_size=settings.front,
        )
        state.beam = [c.id for c in beam]
        state.front = [c.id for c in front]
        best = rank(state.candidates)[0]
        state.best = best.id
        state.best_scores.append(best.score)
        state.stale_rounds = (
            0 if best.score > previous + self.budgets.min_improvement else state.stale_rounds + 1
        )
        state.rounds = number
        for stale in set(self.examples) - set(state.beam):
            del self.examples[stale]  # only beam members are expanded again

    def _scoring_cost(self) -> int:
        return len(self.tasks) * self.settings.val_samples

    def _skip(
        self,
        number: int,
        stage: Stage,
        parents: list[str],
        reason: str,
        template: str | None = None,
    ) -> None:
        self.state.skips.append(
            Skip(round=number, stage=stage, parents=parents, reason=reason, template=template)
        )
        self.round_skips += 1
        logger.warning(
            "apo round %d: skipped a candidate (%s of %s): %s",
            number, stage, ", ".join(parents) or "-", reason,
        )  # fmt: skip

    def _sync_optimizer(self) -> None:
        self.state.optimizer_tokens = self.optimizer.budget.used
        self.state.optimizer_calls = self._calls_before + self.optimizer.calls


def _key(templates: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(templates.items()))
