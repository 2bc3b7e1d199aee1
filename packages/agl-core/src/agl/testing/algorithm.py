"""The algorithm conformance suite: what every algorithm must do, as pytest tests.

An algorithm passes by subclassing :class:`AlgorithmConformance` and providing one fixture,
``algorithm_factory``, that returns a function building a fresh algorithm::

    import pytest
    from agl.testing.algorithm import AlgorithmConformance
    from agl_shout.algorithm import ShoutAlgorithm

    class TestShoutAlgorithm(AlgorithmConformance):
        plugin_name = "shout"  # the name agl_algorithms registers it under, if it does

        @pytest.fixture
        def algorithm_factory(self):
            return lambda: ShoutAlgorithm(rounds=2)

Each test runs the algorithm through a real :class:`agl.Trainer`: an in-memory store, the runner
in process, no progress bars, console or plot, a temporary run directory, a small deterministic
agent (:func:`scored_agent`) on ``train_tasks`` / ``val_tasks`` (``{"x": 0}`` … ``{"x": 9}``).
Override the ``agent``, ``train_tasks``, ``val_tasks`` or ``resources`` fixtures to give the
algorithm what it needs, such as the prompt template it optimizes.

An algorithm that trains or serves a model puts the gateway (``ctx.serve_llm``) in front of the
suite's scripted OpenAI-compatible server, ``openai_server`` (see
:mod:`agl.testing.openai_server`), and gets an agent that calls the LLM it publishes::

    class TestMyRL(AlgorithmConformance):
        @pytest.fixture
        def algorithm_factory(self, openai_server):
            return lambda: MyRL(upstream=openai_server.url)

        @pytest.fixture
        def agent(self):
            return llm_agent()

What is checked: ``name`` is a real name; ``run`` completes; it logs metrics rows, each with an
integer ``step`` and finite numbers; every rollout it enqueued ended in a final status; every
resource set it published holds registered resource types and survives a JSON round trip; the
same algorithm object runs twice in one process; and with ``plugin_name`` set, the installed
plugin maps that name to the algorithm's class and the class builds with no arguments (as
``agl.Trainer(algorithm="name")`` builds it).

Tests must not be deleted or overridden to make an algorithm pass. A test it cannot pass is
overridden with ``@pytest.mark.xfail(reason="…")`` naming what is missing;
``test_suite_is_intact`` fails otherwise.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest
from pydantic import JsonValue

import agl
from agl._train._metrics_read import read_metrics
from agl.store._memory import MemoryStore
from agl.testing._suite import check_suite_intact

if TYPE_CHECKING:
    from agl.testing.openai_server import OpenAIServer

__all__ = ["AlgorithmConformance", "FitOutcome", "llm_agent", "scored_agent"]


@agl.rollout
def scored_agent(task: dict[str, Any]) -> float:
    """The suite's default agent: reward ``(x % 4) / 4`` for task ``{"x": x}``, no LLM."""
    return (int(task["x"]) % 4) / 4


def llm_agent() -> agl.LitAgent:
    """An agent that asks the rollout's :class:`agl.LLM` about its task once, with its sampling
    defaults (``max_tokens``, ``temperature``, ``top_p``).

    Its reward is ``(x % 4) / 4`` when the reply repeats the task (as the scripted server's
    ``echo`` does), else 0.
    """

    @agl.rollout
    async def ask(task: dict[str, Any], llm: agl.LLM) -> float:
        import openai

        prompt = f"task {task['x']}"
        # the sampling defaults the algorithm published (a length limit above all)
        sampling: dict[str, Any] = {
            key: value
            for key, value in llm.sampling_parameters.items()
            if key in ("max_tokens", "temperature", "top_p")
        }
        async with openai.AsyncOpenAI(
            base_url=llm.endpoint, api_key=llm.api_key or "-", max_retries=0
        ) as client:
            reply = await client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": prompt}], **sampling
            )
        text = reply.choices[0].message.content or ""
        return (int(task["x"]) % 4) / 4 if prompt in text else 0.0

    return ask


class _RecordingStore(MemoryStore):
    """A memory store that keeps every resource set published to it."""

    def __init__(self) -> None:
        super().__init__(poll_interval=0.01)  # a finished rollout is noticed at once
        self.published: list[agl.ResourcesUpdate] = []

    async def add_resources(
        self, resources: Mapping[str, agl.Resource], resources_id: str | None = None
    ) -> agl.ResourcesUpdate:
        update = await super().add_resources(resources, resources_id)
        self.published.append(update)
        return update


@dataclass
class FitOutcome:
    """What one run through the trainer left behind."""

    result: agl.FitResult
    rollouts: list[agl.Rollout]
    """Every rollout in the store at the end."""
    published: list[agl.ResourcesUpdate]
    """Every resource set published, the trainer's initial one included."""
    metrics: list[dict[str, Any]]
    """The rows of the run's ``metrics.jsonl``."""


Fit = Callable[[agl.Algorithm], FitOutcome]


class AlgorithmConformance:
    """Subclass me and provide an ``algorithm_factory`` fixture."""

    plugin_name: ClassVar[str | None] = None
    """The name the algorithm is registered under through ``agl_algorithms``, if it is."""

    runs_rollouts: ClassVar[bool] = True
    """Whether the algorithm runs the agent (False for one that learns from data alone)."""

    fit_timeout: ClassVar[float] = 120.0
    """Seconds one run may take."""

    concurrency: ClassVar[int] = 4
    """Rollouts the runner runs at once."""

    @pytest.fixture
    def algorithm_factory(self) -> Callable[[], agl.Algorithm]:
        """Build a fresh algorithm (override me)."""
        raise NotImplementedError("provide an algorithm_factory fixture")

    @pytest.fixture
    def agent(self) -> Any:
        """The agent the runner runs (default :func:`scored_agent`)."""
        return scored_agent

    @pytest.fixture
    def train_tasks(self) -> list[JsonValue]:
        return [{"x": x} for x in range(8)]

    @pytest.fixture
    def val_tasks(self) -> list[JsonValue]:
        return [{"x": x} for x in (8, 9)]

    @pytest.fixture
    def resources(self) -> dict[str, agl.Resource]:
        """Resources the trainer publishes before the algorithm starts (default none)."""
        return {}

    @pytest.fixture(scope="class")
    @classmethod
    def openai_server(cls) -> Iterator[OpenAIServer]:
        """A scripted OpenAI-compatible server on loopback, for ``ctx.serve_llm`` upstreams.

        Needs the ``server`` extra of agl-core (``pip install agl-core[server]``).
        """
        from agl.testing.openai_server import OpenAIServer

        with OpenAIServer() as server:
            yield server

    @pytest.fixture
    def fit(
        self,
        tmp_path: Path,
        agent: Any,
        train_tasks: list[JsonValue],
        val_tasks: list[JsonValue],
        resources: dict[str, agl.Resource],
    ) -> Fit:
        """Run an algorithm through a trainer; return what it left behind."""
        runs = iter(range(1, 1000))

        async def session(algorithm: agl.Algorithm) -> FitOutcome:
            store = _RecordingStore()
            async with store:
                trainer = agl.Trainer(
                    algorithm,
                    store=store,
                    run_dir=tmp_path / f"run-{next(runs)}",
                    resources=resources,
                    concurrency=self.concurrency,
                    progress=False,
                    console=False,
                    plot=False,
                )
                fitting = trainer.fit_async(agent, train_tasks, val_tasks or None)
                result = await asyncio.wait_for(fitting, self.fit_timeout)
                rollouts: list[agl.Rollout] = []
                offset: int | None = 0
                while offset is not None:
                    page = await store.query_rollouts(limit=500, offset=offset)
                    rollouts.extend(page.rollouts)
                    offset = page.next_offset
                metrics = read_metrics(result.run_dir)
                return FitOutcome(result, rollouts, list(store.published), metrics)

        def fit(algorithm: agl.Algorithm) -> FitOutcome:
            # A new event loop per run, as each Trainer.fit has.
            return asyncio.run(session(algorithm))

        return fit

    @pytest.fixture
    def outcome(self, fit: Fit, algorithm_factory: Callable[[], agl.Algorithm]) -> FitOutcome:
        return fit(algorithm_factory())

    # --- the suite guards itself ----------------------------------------------------------------

    def test_suite_is_intact(self) -> None:
        """No suite test was deleted, or overridden without an xfail that gives a reason."""
        check_suite_intact(self, AlgorithmConformance, "algorithm suite")

    # --- the suite --------------------------------------------------------------------------------

    def test_name_is_a_real_name(self, algorithm_factory: Callable[[], agl.Algorithm]) -> None:
        algorithm = algorithm_factory()
        assert isinstance(algorithm, agl.Algorithm)
        name = algorithm.name
        assert isinstance(name, str), f"name is a {type(name).__name__}"
        assert name.strip() == name != "", f"name {name!r} is empty or padded"
        assert name != agl.Algorithm.name, "set the class's name; 'algorithm' is the base's"

    def test_run_completes_and_logs_metrics_with_a_step(self, outcome: FitOutcome) -> None:
        history = outcome.result.history
        assert history, "the algorithm logged no metrics (ctx.log(step, {...}))"
        for row in history:
            step = row.get("step")
            assert isinstance(step, float), f"a metrics row without a step: {row}"
            assert step.is_integer(), f"step {step} is not a whole number"
            assert step >= 0, f"step {step} is negative"
            values = {key: value for key, value in row.items() if key != "step"}
            assert values, f"a metrics row with nothing but its step: {row}"
            for key, value in values.items():
                assert isinstance(value, int | float), f"{key} is {value!r}"
                assert math.isfinite(value), f"{key} is {value} at step {step:g}"
        assert len(outcome.metrics) == len(history), "metrics.jsonl and the history disagree"

    def test_every_rollout_it_enqueued_ended(self, outcome: FitOutcome) -> None:
        if self.runs_rollouts:
            assert outcome.rollouts, "the algorithm ran no rollout (set runs_rollouts = False?)"
        unfinished = [
            (rollout.rollout_id, rollout.status.value)
            for rollout in outcome.rollouts
            if not rollout.status.is_final
        ]
        assert unfinished == [], f"rollouts left behind when run() returned: {unfinished}"

    def test_published_resources_validate(self, outcome: FitOutcome) -> None:
        from agl.plugins import PluginManager

        plugins = PluginManager()
        known = plugins.provided("agl_resource_types")
        for update in outcome.published:
            for name, resource in update.resources.items():
                assert resource.type in known, (
                    f"resource {name!r} has type {resource.type!r}, which no plugin provides "
                    "(the agl_resource_types hook)"
                )
                if not isinstance(resource, agl.GenericResource):  # a store may keep it generic
                    assert type(resource) is known[resource.type], name
            # A plugin's type comes back from JSON generic; its plugin turns it back.
            again = agl.ResourcesUpdate.model_validate_json(update.model_dump_json())
            assert plugins.upgrade_resources(again.resources) == plugins.upgrade_resources(
                update.resources
            ), f"resource set {update.resources_id} changes in JSON"
            assert again.model_dump() == update.model_dump(), update.resources_id

    def test_runs_twice_in_one_process(
        self, fit: Fit, algorithm_factory: Callable[[], agl.Algorithm]
    ) -> None:
        algorithm = algorithm_factory()
        fit(algorithm)
        again = fit(algorithm)  # the same object, in a new event loop, with a new store
        assert again.result.history, "the second run logged no metrics"
        if self.runs_rollouts:
            assert again.rollouts, "the second run ran no rollout"
        unfinished = [r.rollout_id for r in again.rollouts if not r.status.is_final]
        assert unfinished == [], f"the second run left rollouts behind: {unfinished}"

    def test_the_plugin_provides_it_by_name(
        self, algorithm_factory: Callable[[], agl.Algorithm]
    ) -> None:
        if self.plugin_name is None:
            pytest.skip("plugin_name is not set: the algorithm is not registered by name")
        from agl.plugins import PluginManager

        cls = PluginManager().provided("agl_algorithms").get(self.plugin_name)
        assert cls is type(algorithm_factory())
        assert isinstance(cls(), agl.Algorithm), "it must build with no arguments"
