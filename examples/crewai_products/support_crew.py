"""The agent: a CrewAI crew of two, a ``researcher`` with a catalog tool and a ``writer``.

The researcher looks the product up with :func:`lookup_product` and reports its facts; the
writer answers the customer in one sentence from the researcher's report (the second task
takes the first's output as context). It is a plain sequential CrewAI crew on CrewAI's native
OpenAI provider, what you would write anyway; the only agl code is :func:`support_crew`, the
rollout: it gets the task and the LLM the run serves, kicks the crew off (natively async) and
returns the reward, whether the writer's answer states the catalog's value. agl's CrewAI
instrumentation names each task's span after its agent's role, which is how every LLM call is
attributed to ``researcher`` or ``writer``.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

# CrewAI sends anonymous telemetry and offers its hosted tracing unless told not to.
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
# ...and warns at every call that it estimates token counts for models it does not know.
logging.getLogger("crewai.llms.base_llm").setLevel(logging.ERROR)

from crewai import LLM, Agent, Crew, Process, Task  # noqa: E402
from crewai.tools import tool  # noqa: E402
from products import FIELDS, lookup, reward  # noqa: E402

import agl  # noqa: E402

__all__ = ["RESEARCH", "WRITE", "build_crew", "lookup_product", "support_crew"]

RESEARCH = (
    "A customer asks: {question}\n"
    "Look the product up in the catalog with the lookup_product tool and report its facts."
)
WRITE = (
    "A customer asks: {question}\n"
    "Answer in one sentence, with the exact value from the researcher's report."
)


@tool("lookup_product")
def lookup_product(name: str) -> str:
    """Look a product up in the shop's catalog by name; returns its facts as JSON."""
    product = lookup(name)
    if product is None:
        return f"no product called {name!r} in the catalog"
    facts = {FIELDS[key]: value for key, value in product.items() if key in FIELDS}
    return json.dumps({"product": product["name"], **facts})


def build_crew(llm: LLM) -> Crew:
    """The crew: the researcher's task, then the writer's, both on ``llm``."""
    researcher = Agent(
        role="researcher",
        goal="Find the catalog facts a customer's question needs.",
        backstory="You know the shop's catalog tool and report facts exactly as it gives them.",
        llm=llm,
        tools=[lookup_product],
        max_iter=3,
    )
    writer = Agent(
        role="writer",
        goal="Answer customers briefly and correctly.",
        backstory="You write one-sentence answers from the researcher's facts.",
        llm=llm,
        max_iter=1,
    )
    research = Task(
        name="research",
        description=RESEARCH,
        expected_output="the product's facts",
        agent=researcher,
    )
    answer = Task(
        name="answer",
        description=WRITE,
        expected_output="one sentence",
        agent=writer,
        context=[research],
    )
    return Crew(agents=[researcher, writer], tasks=[research, answer], process=Process.sequential)


@agl.rollout
async def support_crew(task: dict[str, Any], llm: agl.LLM) -> float:
    """Answer ``task["question"]``; reward: whether the answer states ``task["answer"]``.

    ``llm`` is the model the run serves; its sampling parameters (temperature, max_tokens) go
    to every call.
    """
    sampling = llm.sampling_parameters
    options: dict[str, Any] = {}
    if isinstance(temperature := sampling.get("temperature"), int | float):
        options["temperature"] = float(temperature)
    if isinstance(max_tokens := sampling.get("max_tokens"), int):
        options["max_tokens"] = max_tokens
    model = LLM(
        model=f"openai/{llm.model}",
        base_url=llm.endpoint,
        api_key=llm.api_key or os.environ.get("OPENAI_API_KEY") or "unused",
        max_retries=0,
        **options,
    )
    result = await build_crew(model).akickoff(inputs={"question": task["question"]})
    return reward(result.raw, task["answer"])
