"""One optimizer per agent: two step algorithms share the rollouts of a two-agent system.

The writer is trained by an RL-style algorithm (it owns the writer's LLM resource and reads
transitions); the checker by a prompt optimiser (it owns the checker's prompt and reads
text-level calls); a third agent is frozen. Everything runs for real: the Trainer, the gateway
in front of the scripted OpenAI-compatible server, the OpenAI instrumentation.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import openai
import pytest

import agl
from agl import LLM, InvalidInputError, PromptTemplate, Resource
from agl.lightning import AgentSelector, TransitionBuilder
from agl.testing.openai_server import OpenAIServer, echo

SEEN: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
"""rollout id -> agent -> response ids of the calls the agent made (recorded by the agent)."""
PROMPTS: dict[str, str] = {}
"""rollout id -> the checker prompt it ran with."""
LOCK = threading.Lock()


async def _ask(llm: LLM, agent: str, rollout_id: str, text: str) -> str:
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="-", max_retries=0)
    async with client:
        reply = await client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": text}]
        )
    with LOCK:
        SEEN[rollout_id][agent].append(reply.id)
    return reply.choices[0].message.content or ""


@agl.rollout
async def pipeline(
    task: str,
    writer_llm: LLM,
    checker_llm: LLM,
    checker_prompt: PromptTemplate,
    rollout: agl.Rollout,
) -> float:
    rid = rollout.rollout_id
    PROMPTS[rid] = checker_prompt.template
    with agl.agent_span("writer"):
        draft = await _ask(writer_llm, "writer", rid, f"write about {task}")
        draft = await _ask(writer_llm, "writer", rid, f"improve: {draft}")
    with agl.agent_span("checker"):
        await _ask(checker_llm, "checker", rid, checker_prompt.format(text=draft))
    with agl.agent_span("narrator"):  # frozen: nobody trains it
        await _ask(checker_llm, "narrator", rid, "narrate")
    return 1.0 if rollout.metadata["sample"] == 0 else 0.0


class WriterRL(agl.StepAlgorithm):
    name = "writer-rl"
    loop = agl.LoopSettings(n_samples=2, batch_size=2)

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.transitions = TransitionBuilder()
        self.batches: list[agl.StepBatch] = []
        self.llm: LLM | None = None

    async def setup(self, ctx: agl.AlgorithmContext) -> dict[str, Resource]:
        self.llm = await ctx.serve_llm([self.upstream], "policy", {"temperature": 1.0})
        return {"writer_llm": self.llm}

    async def step(self, ctx: agl.AlgorithmContext, batch: agl.StepBatch) -> dict[str, Resource]:
        assert self.llm is not None
        self.batches.append(batch)
        temperature = 1.0 / (batch.step + 1)
        batch.metrics["temperature"] = temperature
        self.llm = self.llm.model_copy(update={"sampling_parameters": {"temperature": temperature}})
        return {"writer_llm": self.llm}


class CheckerPrompts(agl.StepAlgorithm):
    name = "checker-prompts"
    loop = agl.LoopSettings(n_samples=2, batch_size=2)

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.batches: list[agl.StepBatch] = []

    async def setup(self, ctx: agl.AlgorithmContext) -> dict[str, Resource]:
        return {
            "checker_llm": await ctx.serve_llm([self.upstream], "policy"),
            "checker_prompt": PromptTemplate(template="check: {text}"),
        }

    async def step(self, ctx: agl.AlgorithmContext, batch: agl.StepBatch) -> dict[str, Resource]:
        self.batches.append(batch)
        batch.metrics["prompts_tried"] = float(batch.step)
        return {"checker_prompt": PromptTemplate(template=f"check (v{batch.step}): {{text}}")}


def test_each_algorithm_gets_its_agents_calls_and_updates_its_resources(tmp_path: Path) -> None:
    with OpenAIServer(echo) as server:
        writer, checker = WriterRL(server.url), CheckerPrompts(server.url)
        trainer = agl.Trainer(
            {"writer": writer, "check*": checker, "*": None},
            run_dir=tmp_path / "run",
            console=False,
            plot=False,
            instrument=["openai"],
        )
        result = trainer.fit(pipeline, ["a", "b", "c", "d"])

    assert len(writer.batches) == len(checker.batches) == 2
    for algorithm, agent in ((writer, "writer"), (checker, "checker")):
        for batch in algorithm.batches:
            rollouts = [r.rollout.rollout_id for r in batch.results]
            expected = [rid for r in rollouts for rid in SEEN[r][agent]]
            assert [call.response_id for call in batch.calls] == expected
            assert {call.agent for call in batch.calls} == {agent}
    # the writer's transitions: its 2 calls per rollout x 4 rollouts a step, token ids and all
    for batch in writer.batches:
        assert batch.transitions is not None
        assert len(batch.transitions) == 8
        assert {t.agent for t in batch.transitions} == {"writer"}
        assert batch.transitions.report.notes["other_agents_calls"] == 8  # checker + narrator
    assert all(batch.transitions is None for batch in checker.batches)

    # each update changed only the updating algorithm's resources, and rollouts used them
    async def versions() -> list[dict[str, Any]]:
        async with agl.open_store(result.store_url) as store:
            ids = []
            for batch in writer.batches:
                ids += [r.rollout.resources_id for r in batch.results]
            found = []
            for rid in dict.fromkeys(ids):
                update = await store.get_resources(rid)
                assert update is not None
                found.append({k: v.model_dump() for k, v in update.resources.items()})
            return found

    import asyncio

    first, second = asyncio.run(versions())
    assert first["writer_llm"]["sampling_parameters"] == {"temperature": 1.0}
    assert second["writer_llm"]["sampling_parameters"] == {"temperature": 0.5}
    assert first["checker_prompt"]["template"] == "check: {text}"
    assert second["checker_prompt"]["template"] == "check (v1): {text}"
    assert first["checker_llm"] == second["checker_llm"]
    step_two = [r.rollout.rollout_id for r in checker.batches[1].results]
    assert {PROMPTS[rid] for rid in step_two} == {"check (v1): {text}"}
    # metrics of both algorithms, prefixed by name
    assert result.last("writer-rl/temperature") == pytest.approx(1 / 3)
    assert result.last("checker-prompts/prompts_tried") == 2.0
    assert result.last("checker-prompts/calls") == 4.0
    # and every agent's calls, unprefixed
    assert result.last("agents/checker/calls") == 4.0
    assert result.last("agents/writer/calls") == result.last("writer-rl/calls")
    assert result.last("writer-rl/transitions/kept") == 8.0


class _OwnModel(WriterRL):
    """A writer-rl that serves its own upstream under its own resource name."""

    def __init__(self, upstream: str, resource: str) -> None:
        super().__init__(upstream)
        self.resource = resource
        self.run_dirs: list[Path] = []

    async def setup(self, ctx: agl.AlgorithmContext) -> dict[str, Resource]:
        self.run_dirs.append(ctx.run_dir)
        self.llm = await ctx.serve_llm([self.upstream], f"model-{self.resource}")
        return {self.resource: self.llm}

    async def step(self, ctx: agl.AlgorithmContext, batch: agl.StepBatch) -> dict[str, Resource]:
        self.run_dirs.append(ctx.run_dir)
        self.batches.append(batch)
        batch.metrics["seen"] = float(len(batch.calls))
        return {}


def test_two_algorithms_of_one_kind_are_kept_apart(tmp_path: Path) -> None:
    """Two models, one per agent, each trained by its own instance of one algorithm: each
    serves its model behind its own gateway, writes under its own folder and logs its own
    metrics, labelled by its agents."""
    with OpenAIServer(echo) as first, OpenAIServer(echo) as second:
        writer, checker = _OwnModel(first.url, "writer_llm"), _OwnModel(second.url, "checker_llm")
        trainer = agl.Trainer(
            {"writer": writer, "checker": checker, "*": None},
            run_dir=tmp_path / "run",
            resources={"checker_prompt": PromptTemplate(template="check: {text}")},
            console=False,
            plot=False,
            instrument=["openai"],
        )
        result = trainer.fit(pipeline, ["a", "b"])
        served = {
            server.url: {r.body["model"] for r in server.requests} for server in (first, second)
        }

    assert set(writer.run_dirs) == {tmp_path / "run" / "writer-rl-writer"}
    assert set(checker.run_dirs) == {tmp_path / "run" / "writer-rl-checker"}
    assert result.last("writer-rl-writer/seen") == 8.0  # 2 calls x 4 rollouts
    assert result.last("writer-rl-checker/seen") == 4.0
    assert {call.agent for call in writer.batches[0].calls} == {"writer"}
    # each model got its own agent's calls (and the frozen narrator's went to the checker's)
    assert served == {first.url: {"model-writer_llm"}, second.url: {"model-checker_llm"}}


class _Greedy(CheckerPrompts):
    name = "greedy"

    async def step(self, ctx: agl.AlgorithmContext, batch: agl.StepBatch) -> dict[str, Resource]:
        return {"writer_llm": LLM(endpoint="http://elsewhere/v1", model="m")}


def test_an_algorithm_cannot_update_what_it_does_not_own(tmp_path: Path) -> None:
    with OpenAIServer(echo) as server:
        trainer = agl.Trainer(
            {"writer": WriterRL(server.url), "checker": _Greedy(server.url)},
            run_dir=tmp_path / "run",
            console=False,
            plot=False,
        )
        with pytest.raises(
            InvalidInputError, match="'greedy' returned resources \\['writer_llm'\\]"
        ):
            trainer.fit(pipeline, ["a", "b"])


class _OwnLoop(agl.Algorithm):
    name = "own-loop"

    async def run(self, ctx: agl.AlgorithmContext) -> None:
        await ctx.run_rollouts(ctx.train_tasks)


def test_per_agent_settings_are_checked_up_front() -> None:
    rl, prompts = WriterRL("http://x/v1"), CheckerPrompts("http://x/v1")
    prompts.loop = agl.LoopSettings(n_samples=4, batch_size=2)
    with pytest.raises(InvalidInputError, match="disagree on n_samples"):
        agl.Trainer({"writer": rl, "checker": prompts})
    agl.PerAgent({"writer": rl, "checker": prompts}, n_samples=4)  # explicit: fine
    with pytest.raises(InvalidInputError, match="runs its own loop"):
        agl.Trainer({"writer": _OwnLoop()})  # type: ignore[dict-item]
    with pytest.raises(InvalidInputError, match="nothing to train"):
        agl.Trainer({"*": None})
    per_agent = agl.PerAgent({"writer": rl, "w*": prompts, "*": None}, n_samples=2)
    assert per_agent.owner("writer") is rl
    assert per_agent.owner("wizard") is prompts
    assert per_agent.owner("narrator") is None
    assert per_agent.owner(None) is None


def test_algorithms_by_name(tmp_path: Path) -> None:
    trainer = agl.Trainer("baseline", run_dir=tmp_path / "run", console=False, plot=False)
    assert isinstance(trainer.algorithm, agl.Baseline)
    with pytest.raises(InvalidInputError, match="agl plugins"):
        agl.Trainer("no-such-algorithm")


def test_agents_map_to_algorithms_by_name_one_instance_per_name() -> None:
    per_agent = agl.Trainer({"writer": "baseline", "checker": "baseline", "*": None}).algorithm
    assert isinstance(per_agent, agl.PerAgent)
    writer = per_agent.owner("writer")
    assert isinstance(writer, agl.Baseline)
    assert per_agent.owner("checker") is writer
    assert per_agent.owner("narrator") is None
    with pytest.raises(InvalidInputError, match="agl plugins") as caught:
        agl.Trainer({"writer": "baseline", "checker": "no-such-algorithm"})
    assert caught.value.field == "algorithm['checker']"
    with pytest.raises(InvalidInputError, match="looked up by the Trainer") as caught:
        agl.PerAgent({"writer": "baseline"})  # type: ignore[dict-item]
    assert caught.value.field == "algorithm['writer']"


class _Follower(CheckerPrompts):
    """A prompt optimizer that takes whatever loop the others run."""

    follows_loop = True


def test_an_algorithm_that_follows_the_loop_takes_the_others_settings() -> None:
    rl, follower = WriterRL("http://x/v1"), _Follower("http://x/v1")
    rl.loop = agl.LoopSettings(n_samples=4, batch_size=2)
    follower.loop = agl.LoopSettings(n_samples=1, batch_size=None)
    per_agent = agl.PerAgent({"writer": rl, "checker": follower})
    assert (per_agent.settings.n_samples, per_agent.settings.batch_size) == (4, 2)
    other = _Follower("http://x/v1")
    other.loop = agl.LoopSettings(n_samples=3, batch_size=None)
    with pytest.raises(InvalidInputError, match="disagree on n_samples"):
        agl.PerAgent({"checker": follower, "writer": other})  # all follow: they must agree


class _StepWatcher:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, int, float | None]] = []

    @agl.hookimpl
    def agl_step_start(self, algorithm: str, step: int) -> None:
        self.events.append(("start", algorithm, step, None))

    @agl.hookimpl
    def agl_step_end(self, algorithm: str, step: int, metrics: dict[str, float]) -> None:
        self.events.append(("end", algorithm, step, metrics["reward/mean"]))


def test_step_hooks_fire_around_every_step(tmp_path: Path) -> None:
    @agl.rollout
    def constant(task: int) -> float:
        return 0.5

    watcher = _StepWatcher()
    trainer = agl.Trainer(
        agl.Baseline(loop=agl.LoopSettings(batch_size=2)),
        run_dir=tmp_path / "run",
        console=False,
        plot=False,
        plugins=[watcher],
    )
    trainer.fit(constant, [1, 2, 3])
    assert watcher.events == [
        ("start", "baseline", 1, None),
        ("end", "baseline", 1, 0.5),
        ("start", "baseline", 2, None),
        ("end", "baseline", 2, 0.5),
    ]


def test_a_key_that_matches_no_agent_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with OpenAIServer(echo) as server:
        writer = WriterRL(server.url)
        trainer = agl.Trainer(
            {"writr": writer, "checker": None, "*": None},  # a typo: "writr"
            resources={
                "checker_llm": LLM(endpoint=server.url, model="m"),
                "checker_prompt": PromptTemplate(template="check: {text}"),
                "writer_llm": LLM(endpoint=server.url, model="m"),
            },
            run_dir=tmp_path / "run",
            console=False,
            plot=False,
            instrument=["openai"],
        )
        trainer.fit(pipeline, ["a", "b", "c", "d"])
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    typo = [w for w in warnings if "agent key 'writr'" in w]
    assert len(typo) == 1, warnings  # once a run, not once a step
    assert "checker, narrator, writer" in typo[0]
    assert "trained nothing" in typo[0]
    assert not any("'checker'" in w or "'*'" in w for w in warnings), warnings


class _Learner(agl.StepAlgorithm):
    name = "learner"
    loop = agl.LoopSettings(batch_size=2)

    async def step(self, ctx: agl.AlgorithmContext, batch: agl.StepBatch) -> None:
        return None


def test_a_run_whose_rollouts_record_no_llm_call_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with OpenAIServer(echo) as server:
        # The agent calls its LLM directly and nothing traces the openai client: no calls.
        trainer = agl.Trainer(
            _Learner(),
            run_dir=tmp_path / "run",
            console=False,
            plot=False,
            resources={"llm": LLM(endpoint=server.url, model="m")},
        )

        @agl.rollout
        async def agent(task: str, llm: LLM) -> float:
            async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="-") as client:
                await client.chat.completions.create(
                    model=llm.model, messages=[{"role": "user", "content": task}]
                )
            return 1.0

        trainer.fit(agent, ["a", "b", "c", "d"])
        said = [r.getMessage() for r in caplog.records if "recorded no LLM call" in r.getMessage()]
        assert len(said) == 1, said  # once a run
        assert "instrument=['openai']" in said[0]
        baseline = agl.Trainer(agl.Baseline(), run_dir=tmp_path / "b", console=False, plot=False)
        caplog.clear()
        baseline.fit(agent, ["a"])  # a baseline learns nothing: no warning
        assert not [r for r in caplog.records if "recorded no LLM call" in r.getMessage()]


def test_an_algorithms_own_agents_rule_narrows_what_it_trains(tmp_path: Path) -> None:
    with OpenAIServer(echo) as server:
        writer = WriterRL(server.url)
        writer.transitions = TransitionBuilder(
            agents="re:wri.*"
        )  # alone in the run: owns every call
        trainer = agl.Trainer(
            writer,
            resources={
                "checker_llm": LLM(endpoint=server.url, model="m"),
                "checker_prompt": PromptTemplate(template="check: {text}"),
            },
            run_dir=tmp_path / "run",
            console=False,
            plot=False,
            instrument=["openai"],
        )
        trainer.fit(pipeline, ["a", "b"])
    [batch] = writer.batches
    assert batch.transitions is not None
    assert {t.agent for t in batch.transitions} == {"writer"}  # was: every agent's calls
    # 2 tasks x 2 samples, each with a checker and a narrator call
    assert batch.transitions.report.notes["other_agents_calls"] == 4 * 2


class _SeesItsLoop(agl.Baseline):
    """Records the loop settings its context carries at setup and at every step."""

    name = "sees-its-loop"

    def __init__(self) -> None:
        super().__init__(loop=agl.LoopSettings(batch_size=2))  # max_staleness=0, n_samples=1
        self.seen: list[agl.LoopSettings] = []

    async def setup(self, ctx: agl.AlgorithmContext) -> dict[str, Resource]:
        self.seen.append(ctx.loop)
        return {}

    async def step(self, ctx: agl.AlgorithmContext, batch: agl.StepBatch) -> dict[str, Resource]:
        self.seen.append(ctx.loop)
        return {}


@agl.rollout
async def _constant(task: int) -> float:
    return 1.0


def test_every_algorithm_runs_by_the_per_agent_runs_loop(tmp_path: Path) -> None:
    """A per-agent run's settings reach its algorithms, not only its loop: an algorithm whose
    own loop is synchronous sees max_staleness=2 (it settles what depends on it, such as an
    off-policy loss, from ``ctx.loop``)."""
    algorithm = _SeesItsLoop()
    per_agent = agl.PerAgent({"*": algorithm}, max_staleness=2, n_samples=2)
    trainer = agl.Trainer(per_agent, run_dir=tmp_path / "run", console=False, plot=False)
    trainer.fit(_constant, [1, 2, 3, 4])
    assert algorithm.loop.max_staleness == 0  # its own settings are left as they were
    assert len(algorithm.seen) == 3  # setup and two steps
    assert all(loop == per_agent.settings for loop in algorithm.seen), algorithm.seen
    assert {(loop.max_staleness, loop.n_samples) for loop in algorithm.seen} == {(2, 2)}


def test_agent_keys_follow_the_transition_builders_rule() -> None:
    """Names first, then patterns in order: shell-style and ``re:`` alike (a ``re:`` key was
    taken as a literal name)."""
    rl, prompts = WriterRL("http://x/v1"), CheckerPrompts("http://x/v1")
    per_agent = agl.Trainer(
        {"re:(re)?writer": rl, "checker-[0-9]": prompts, "rewriter": prompts, "*": None}
    ).algorithm
    assert isinstance(per_agent, agl.PerAgent)
    assert per_agent.owner("writer") is rl
    assert per_agent.owner("rewriter") is prompts  # an exact name wins over a pattern
    assert per_agent.owner("checker-7") is prompts
    assert per_agent.owner("writers") is None  # a regular expression matches the whole name
    assert per_agent.owner(None) is None
    for agent in ("writer", "rewriter", "checker-7", "writers", None):  # the same rule
        keys = [key for key in ("re:(re)?writer", "checker-[0-9]") if AgentSelector(key)(agent)]
        expected = {"re:(re)?writer": rl, "checker-[0-9]": prompts}
        if agent != "rewriter" and keys:
            assert per_agent.owner(agent) is expected[keys[0]]
    with pytest.raises(InvalidInputError, match="not a valid regular expression"):
        agl.PerAgent({"re:(": rl})
