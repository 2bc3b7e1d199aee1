"""Run a framework's agent as one rollout through agl's gateway, and check how it was recorded.

For adapter tests beyond the conformance suite: a job gets the rollout's gateway URL (point
the framework's model client at it), runs inside ``tracer.rollout(...)``, and the rollout's
spans come back once the gateway's records are in the store::

    async def job(base_url: str) -> None:
        await my_framework.Agent(model=OpenAIModel(base_url=base_url)).run("hi")

    rollout_id, spans = await run_through_gateway(job, store, tracer, gateway, reward=1.0)
    calls = joined_calls(spans)
    assert [call.agent for call in calls.calls] == ["writer"]

:class:`GatewayRolloutsConformance` is the suite every framework adapter passes with a run of
several agents: each call joined with the gateway's token ids and given to its agent, streamed
too, tool calls as tool spans, and LightningRL training one agent of several.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

import agl
from agl import semconv
from agl._rollouts import AttemptStatus, RolloutRequest
from agl.lightning import AttemptCalls, extract_calls
from agl.testing._suite import check_suite_intact

if TYPE_CHECKING:
    from agl.gateway._serve import GatewayServer
    from agl.testing.openai_server import OpenAIServer, Script
    from agl.tracing._instrumentor import InstrumentorFactory

__all__ = [
    "AgentRun",
    "GatewayRolloutsConformance",
    "joined_calls",
    "run_through_gateway",
    "spans_of_type",
]

Job = Callable[[str], Awaitable[Any]]
"""``job(base_url)``: the agent's work, with its model client pointed at ``base_url``."""


async def run_through_gateway(
    job: Job,
    store: agl.Store,
    tracer: agl.Tracer,
    gateway: GatewayServer,
    *,
    reward: float | None = None,
    group_id: str = "g",
) -> tuple[str, list[agl.Span]]:
    """Run ``job`` as one succeeded rollout whose calls go through ``gateway``.

    Args:
        job: Gets the rollout's gateway URL; runs inside ``tracer.rollout(...)``.
        store / tracer / gateway: Where the rollout is queued, traced and served.
        reward: Emitted after the job, if given.
        group_id: The rollout's ``group_id`` metadata (rollouts of one group share a baseline).

    Returns:
        The rollout's id and its spans, the gateway's records included.
    """
    [rollout] = await store.enqueue_rollouts(
        [RolloutRequest(input="task", metadata={"group_id": group_id})]
    )
    [claim] = await store.dequeue_rollouts(limit=1)
    rollout_id, attempt_id = rollout.rollout_id, claim.attempt.attempt_id
    async with tracer.rollout(rollout_id, attempt_id):
        await job(gateway.rollout_url(rollout_id, attempt_id))
        if reward is not None:
            agl.emit_reward(reward)
    await store.update_attempt(rollout_id, attempt_id, status=AttemptStatus.SUCCEEDED)
    if gateway.gateway is None:
        raise AssertionError("the gateway is not running")
    if not await asyncio.to_thread(gateway.gateway.sender.flush, 10):
        raise AssertionError("the gateway's records did not reach the store within 10 s")
    return rollout_id, await store.query_spans(rollout_id)


def joined_calls(spans: list[agl.Span]) -> AttemptCalls:
    """The attempt's calls, checked to be joined with the gateway's records on response ids.

    Raises:
        AssertionError: a call is not the gateway's, in order; a call has no token ids; or a
            call was joined by order, or stands on one side only (``extract_calls``' counts).
    """
    gateway_ids = [
        s.attributes[semconv.GEN_AI_RESPONSE_ID]
        for s in spans
        if s.attributes.get(semconv.AGL_SPAN_TYPE) == semconv.SPAN_TYPE_GATEWAY
    ]
    calls = extract_calls(spans)
    found = [call.response_id for call in calls.calls]
    if found != gateway_ids:
        raise AssertionError(f"calls {found} are not the gateway's {gateway_ids}")
    if not all(call.has_tokens for call in calls.calls):
        raise AssertionError("a call has no token ids")
    if set(calls.counts.values()) - {0}:
        raise AssertionError(f"calls joined by order or on one side only: {dict(calls.counts)}")
    return calls


def spans_of_type(spans: list[agl.Span], kind: str) -> list[agl.Span]:
    """The spans whose ``agl.span.type`` is ``kind`` (``semconv.SPAN_TYPE_...``), in order."""
    return [s for s in spans if s.attributes.get(semconv.AGL_SPAN_TYPE) == kind]


AgentRun = Callable[[str, bool], Awaitable[Any]]
"""``run(base_url, stream)``: run the framework's agents once on one task, their model client
pointed at ``base_url``, streaming the model's replies when ``stream`` is true."""


class Rollouts:
    """Runs the agents as rollouts through the gateway (the suite's ``rollouts`` fixture)."""

    def __init__(
        self, agent_run: AgentRun, store: agl.Store, tracer: agl.Tracer, gateway: GatewayServer
    ) -> None:
        self.agent_run = agent_run
        self.store = store
        self.tracer = tracer
        self.gateway = gateway

    async def run(
        self, *, stream: bool = False, reward: float | None = None
    ) -> tuple[str, list[agl.Span]]:
        """Run the agents once as a rollout; return its id and spans (the gateway's too)."""

        async def job(base_url: str) -> None:
            await self.agent_run(base_url, stream)

        return await run_through_gateway(job, self.store, self.tracer, self.gateway, reward=reward)


@pytest.mark.anyio
class GatewayRolloutsConformance:
    """Subclass me, provide ``instrumentor_factory``, ``script`` and ``agent_run``, and set
    :attr:`call_agents`, :attr:`tools` and :attr:`trained_agent`.

    ``script`` (an :data:`agl.testing.openai_server.Script`) answers the agents' requests the
    same way every run, so each run makes the same calls in the same order; ``agent_run`` runs
    them (:data:`AgentRun`). Every test runs it as a rollout through agl's gateway in front of
    the scripted server (``agl-core[server]``). Tests must not be deleted or overridden but
    with ``@pytest.mark.xfail(reason=...)``.
    """

    call_agents: ClassVar[tuple[str, ...]]
    """The agent each model call of one run belongs to, in the order the calls are made."""
    tools: ClassVar[tuple[str, ...]] = ()
    """The tools one run calls, in order."""
    trained_agent: ClassVar[str]
    """The agent LightningRL trains in ``test_lightningrl_trains_one_agent_of_several``."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        """Build the instrumentor under test for a tracer (override me)."""
        raise NotImplementedError("provide an instrumentor_factory fixture")

    @pytest.fixture
    def script(self) -> Script:
        """The scripted model's answers to the agents' requests (override me)."""
        raise NotImplementedError("provide a script fixture")

    @pytest.fixture
    def agent_run(self) -> AgentRun:
        """Run the agents once against a base URL (override me)."""
        raise NotImplementedError("provide an agent_run fixture")

    @pytest.fixture(scope="class")
    @classmethod
    def upstream(cls) -> Iterator[OpenAIServer]:
        """The scripted model behind the gateway (one per test class)."""
        from agl.testing.openai_server import OpenAIServer

        with OpenAIServer() as server:
            yield server

    @pytest.fixture
    async def rollouts(
        self,
        upstream: OpenAIServer,
        script: Script,
        instrumentor_factory: InstrumentorFactory,
        agent_run: AgentRun,
    ) -> AsyncIterator[Rollouts]:
        """A store, a tracer with the instrumentor on, and the gateway in front of ``upstream``."""
        from agl.gateway._serve import GatewayServer
        from agl.store._memory import MemoryStore

        upstream.script = script
        async with MemoryStore() as store:
            with agl.Tracer(store) as tracer, GatewayServer([upstream.url], store) as gateway:
                instrumentor = instrumentor_factory(tracer)
                instrumentor.instrument()
                try:
                    yield Rollouts(agent_run, store, tracer, gateway)
                finally:
                    instrumentor.uninstrument()

    # --- the suite guards itself ----------------------------------------------------------------

    def test_suite_is_intact(self) -> None:
        """No suite test was deleted, or overridden without an xfail that gives a reason."""
        check_suite_intact(self, GatewayRolloutsConformance, "gateway rollouts suite")

    # --- the suite --------------------------------------------------------------------------------

    async def test_each_call_is_joined_with_its_token_ids_and_its_agent(
        self, rollouts: Rollouts
    ) -> None:
        _, spans = await rollouts.run()
        calls = joined_calls(spans)
        assert tuple(call.agent for call in calls.calls) == self.call_agents

    async def test_streamed_calls_too(self, rollouts: Rollouts) -> None:
        _, spans = await rollouts.run(stream=True)
        calls = joined_calls(spans)
        assert tuple(call.agent for call in calls.calls) == self.call_agents

    async def test_each_agent_is_an_agent_span_and_each_tool_call_a_tool_span(
        self, rollouts: Rollouts
    ) -> None:
        _, spans = await rollouts.run()
        agents = {s.attributes.get(semconv.AGL_AGENT_NAME) for s in spans_of_type(spans, "agent")}
        assert set(self.call_agents) <= agents, agents
        tools = spans_of_type(spans, semconv.SPAN_TYPE_TOOL)
        assert tuple(s.attributes.get(semconv.AGL_TOOL_NAME) for s in tools) == self.tools
        for tool in tools:
            assert isinstance(tool.attributes.get(semconv.AGL_TOOL_ARGUMENTS), str), tool.name
            assert isinstance(tool.attributes.get(semconv.AGL_TOOL_RESULT), str), tool.name

    async def test_lightningrl_trains_one_agent_of_several(self, rollouts: Rollouts) -> None:
        from agl._results import fetch_results
        from agl.lightning import TransitionBuilder

        ids = []
        for reward in (1.0, 0.0):
            rollout_id, _ = await rollouts.run(reward=reward)
            ids.append(rollout_id)
        store = rollouts.store
        results = await fetch_results(store, [await store.get_rollout(i) for i in ids])
        batch = TransitionBuilder(agents=[self.trained_agent]).build(results)
        mine = self.call_agents.count(self.trained_agent)
        assert [t.agent for t in batch] == [self.trained_agent] * (2 * mine)
        assert sorted({t.reward for t in batch}) == [0.0, 1.0]
        assert all(t.prompt_ids and t.response_ids for t in batch)
        others = len(self.call_agents) - mine
        assert batch.report.notes.get("other_agents_calls", 0) == 2 * others
