"""The search, as the store keeps it: :class:`APOState`, the plugin's resource type.

APO publishes an :class:`APOState` beside the prompts it optimizes, under
``apo/<prompt names>``, so every version of the run's resources shows where the search stood:
every candidate tried with its score on each validation item, the beam, the Pareto front, the
best candidate, what was skipped and why, and the budgets spent. The same state, saved once per
step under a resources id derived from the optimized prompts (:func:`checkpoint_id`), is what a
restarted run reads back to continue (:func:`find_checkpoint`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from agl import GenericResource, NotFoundError, PromptTemplate, Resource, ResourcesUpdate
from agl.store import Store

__all__ = [
    "APOState",
    "Candidate",
    "Checkpoint",
    "Skip",
    "as_state",
    "checkpoint_id",
    "find_checkpoint",
    "run_key",
    "tasks_digest",
]

Origin = Literal["seed", "rewrite", "merge"]
Stage = Literal["critique", "rewrite", "merge", "check", "score"]


class Candidate(BaseModel):
    """One set of prompts the search scored.

    Attributes:
        id: ``c0`` for the seed (the prompts the run started with), then ``c1``, ``c2``, ...
        round: The round that made it (0: the seed).
        origin: ``seed``, ``rewrite`` (a parent rewritten after a critique) or ``merge`` (two
            Pareto-front members merged).
        parents: The candidates it came from.
        templates: Resource name -> template text.
        scores: Its reward on each validation item (mean over samples; a failed rollout is 0).
        score: The mean of ``scores``.
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    round: int = Field(ge=0)
    origin: Origin
    parents: list[str] = Field(default_factory=list)
    templates: dict[str, str]
    scores: list[float]
    score: float


class Skip(BaseModel):
    """A candidate the search gave up on, and why (an optimizer error, a broken template...)."""

    model_config = ConfigDict(extra="forbid")

    round: int
    stage: Stage
    parents: list[str] = Field(default_factory=list)
    reason: str
    template: str | None = None


class APOState(Resource):
    """Where an APO search stands (see the module docstring).

    Attributes:
        resources: The names of the optimized prompt templates.
        engines: Each one's template engine (candidates keep it).
        items: Indices of the validation tasks every candidate is scored on.
        item_source: Whether ``items`` index the validation tasks or (without any) the
            training tasks.
        items_digest: A digest of those tasks (a resumed search must score the same ones).
        step: The last training step completed.
        rounds: Optimization rounds completed.
        candidates: Every candidate scored, in the order made.
        beam: The candidates kept to expand next round (best first; Pareto-front members that
            are not among the best follow).
        front: The Pareto front: candidates best on some item and beaten by none on all.
        best: The best candidate by mean score.
        best_scores: The best mean score after each round (index 0: the seed alone).
        stale_rounds: Rounds since the best score last improved.
        stopped: Why the search stopped (None while it runs).
        rollouts: Rollouts the search ran to score candidates.
        optimizer_calls / optimizer_tokens: Calls made to the optimizer model, tokens they used.
        skips: Candidates given up on.
        duplicates: Proposals that repeated a candidate already scored (not scored again).
        merged: Pairs of candidates already merged (not merged again).
        generation: Which start of the search on this store this is (a run that does not
            resume starts a new one).
    """

    type: Literal["apo_state"] = "apo_state"
    resources: list[str]
    engines: dict[str, Literal["f-string", "jinja2"]]
    items: list[int]
    item_source: Literal["val", "train"] = "val"
    items_digest: str = ""
    step: int = 0
    rounds: int = 0
    candidates: list[Candidate] = Field(default_factory=list)
    beam: list[str] = Field(default_factory=list)
    front: list[str] = Field(default_factory=list)
    best: str | None = None
    best_scores: list[float] = Field(default_factory=list)
    stale_rounds: int = 0
    stopped: str | None = None
    rollouts: int = 0
    optimizer_calls: int = 0
    optimizer_tokens: int = 0
    skips: list[Skip] = Field(default_factory=list)
    duplicates: int = 0
    merged: list[list[str]] = Field(default_factory=list)
    generation: int = 1

    def candidate(self, candidate_id: str) -> Candidate:
        """Return the candidate with this id."""
        for candidate in self.candidates:
            if candidate.id == candidate_id:
                return candidate
        raise KeyError(candidate_id)

    def best_candidate(self) -> Candidate | None:
        """Return the best candidate (None before the seed is scored)."""
        return self.candidate(self.best) if self.best is not None else None

    def prompts(self, candidate: Candidate) -> dict[str, PromptTemplate]:
        """Return a candidate's templates as :class:`~agl.PromptTemplate` resources."""
        return {
            name: PromptTemplate(template=text, engine=self.engines[name])
            for name, text in candidate.templates.items()
        }


def run_key(seeds: Mapping[str, PromptTemplate]) -> str:
    """A short digest naming one search: the optimized prompts and their starting templates."""
    payload = json.dumps(
        {name: [seed.engine, seed.template] for name, seed in sorted(seeds.items())},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def tasks_digest(tasks: Sequence[JsonValue]) -> str:
    """A short digest of the tasks candidates are scored on."""
    payload = json.dumps(list(tasks), sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def checkpoint_id(key: str, generation: int, step: int) -> str:
    """The resources id of the checkpoint saved after ``step`` of a search."""
    return f"apo-{key}-g{generation}-s{step}"


@dataclass(frozen=True)
class Checkpoint:
    """A saved search found in the store: its generation, last step and resource set."""

    generation: int
    step: int
    update: ResourcesUpdate

    def state(self, state_name: str) -> APOState:
        """The :class:`APOState` the checkpoint holds under ``state_name``."""
        state = as_state(self.update.resources.get(state_name))
        assert state is not None
        return state


def as_state(resource: Resource | None) -> APOState | None:
    """``resource`` as an :class:`APOState`, None if it is not one.

    A store hands the state back as a :class:`agl.GenericResource` (it is the plugin's type,
    not core's): its fields are validated into the class here.
    """
    if isinstance(resource, GenericResource) and resource.type == "apo_state":
        return APOState.model_validate(resource.model_dump())
    return resource if isinstance(resource, APOState) else None


async def find_checkpoint(store: Store, key: str, state_name: str) -> tuple[int, Checkpoint | None]:
    """Find the latest saved step of the latest search ``key`` names in the store.

    Checkpoints are saved after every step under :func:`checkpoint_id`, so steps 1..n of a
    generation all exist; this probes generations, then steps (doubling, then bisecting): a
    handful of lookups whatever the run's length, through any store.

    Returns:
        The latest generation that saved a step (0: none), and its last checkpoint.
    """

    async def get(generation: int, step: int) -> ResourcesUpdate | None:
        try:
            return await store.get_resources(checkpoint_id(key, generation, step))
        except NotFoundError:
            return None

    generation = 0
    while await get(generation + 1, 1) is not None:
        generation += 1
    if generation == 0:
        return 0, None
    low, high = 1, 2  # low exists; find the first missing step above it
    while await get(generation, high) is not None:
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        if await get(generation, middle) is not None:
            low = middle
        else:
            high = middle
    update = await get(generation, low)
    if update is None or as_state(update.resources.get(state_name)) is None:
        return generation, None
    return generation, Checkpoint(generation=generation, step=low, update=update)
