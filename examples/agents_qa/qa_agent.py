"""The agent: two OpenAI Agents SDK agents, ``researcher`` and ``answerer``, over a small corpus.

- **researcher** has one function tool, :func:`search` (the :data:`TOP_K` best documents of
  ``data/corpus.jsonl`` for a query, by term overlap); a multi-hop question takes two searches
  (the first finds the entity the question hinges on, the second what it asks about that
  entity); then it hands off to the answerer (``handoffs=[answerer]``: the SDK's handoff tool
  ``transfer_to_answerer``).
- **answerer** has no tools: it reads the conversation (the question, the searches and their
  results) and replies with the short answer only.

The documents are about invented companies, people, towns and products, so no model knows
the answers: they are in the corpus or nowhere. The agents know nothing about agl: they are
what you would write anyway. The only agl code is :func:`qa_agent`, the rollout: it gets the
task and the LLM the run serves, runs the agents and returns the reward, 1.0 when the final
answer, normalized (:func:`normalize`), equals or contains the gold answer, else 0.0. agl's
Agents SDK instrumentation names each agent turn's span after the agent, which is how every
LLM call is attributed to ``researcher`` or ``answerer``, and how a run can train only one.

**When the researcher does not hand off.** A model that never calls ``transfer_to_answerer``
(a weak one, or the random tiny model of ``run.py --train``) would end the run with the
researcher's text, and the answerer would never run. So :func:`research_and_answer` hands over
itself: if the researcher's run ends without the handoff, the answerer gets the researcher's
conversation so far (or the question alone, if that run failed: too many turns, a call of a
tool it does not have) in a second ``Runner.run``. Both agents run in every rollout, whatever
the model does, which is what lets RL train the answerer from a model that cannot hand off.

**The model.** Both agents call the Agents SDK's default model, ``OpenAIResponsesModel`` (the
OpenAI Responses API: what ``Agent(model="name")`` resolves to), on an ``openai`` client of the
run's LLM resource. When the run trains, that client's base URL is agl's gateway, which serves
the Responses API as one chat call to the engine and records the call's token ids under the
response id the SDK saw: nothing here changes to be trainable.

The Agents SDK exports its traces to OpenAI when ``OPENAI_API_KEY`` is set; importing this
module replaces its trace processors with none (``agents.set_trace_processors([])``) so the
traces stay on the machine. The SDK's tracing itself stays on: agl reads the runs through it.
"""

from __future__ import annotations

import functools
import json
import re
import string
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import agents
from agents import (
    Agent,
    FunctionTool,
    MaxTurnsExceeded,
    Model,
    ModelBehaviorError,
    ModelSettings,
    OpenAIResponsesModel,
    Runner,
    TResponseInputItem,
    function_tool,
)
from openai import AsyncOpenAI

import agl

__all__ = [
    "ANSWERER_PROMPT",
    "DATA",
    "MAX_TURNS",
    "RESEARCHER_PROMPT",
    "STOP_WORDS",
    "TOP_K",
    "build_agents",
    "corpus",
    "model_settings",
    "normalize",
    "qa_agent",
    "questions",
    "research_and_answer",
    "retrieve",
    "reward",
    "search",
    "search_text",
    "search_tool",
    "terms",
]

DATA = Path(__file__).resolve().parent / "data"
"""The shipped corpus and questions."""

RESEARCHER_PROMPT = (
    "You research questions about a private knowledge base with the search tool. Search for "
    "the entity the question names; its document names another entity: search for that one "
    "too. When the results hold the answer, hand off to the answerer."
)
ANSWERER_PROMPT = (
    "You answer a question from the research in the conversation. Reply with the short answer "
    "only (a name, a place, a thing or a number), no sentence."
)

TOP_K = 2
"""How many documents a search returns."""
MAX_TURNS = 6
"""Model calls in the researcher's run, at most (the answerer's included, after a handoff): a
right run takes 4 (search, search, hand off, answer)."""

# fmt: off
STOP_WORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "did", "do", "does", "for", "from", "has",
    "have", "he", "her", "his", "in", "is", "it", "its", "of", "on", "or", "she", "that", "the",
    "their", "this", "to", "was", "were", "what", "when", "where", "which", "who", "whose",
    "with", "s",
})
# fmt: on
"""Words a search ignores."""

_WORD = re.compile(r"[a-z0-9]+")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")

# Keep the SDK's traces on this machine (see the module docstring); agl adds its own processor.
agents.set_trace_processors([])


# --- the corpus and the search tool ------------------------------------------------------------


@functools.cache
def corpus(name: str = "shipped") -> tuple[dict[str, str], ...]:
    """The documents of corpus ``name``, in id order: dicts with ``id``, ``title`` and
    ``text``. ``"shipped"`` is ``data/corpus.jsonl``; ``"world"`` is the generated world of
    ``--train`` (:func:`qa_world.documents`)."""
    if name == "world":
        import qa_world

        docs = list(qa_world.documents())
    elif name == "shipped":
        with (DATA / "corpus.jsonl").open(encoding="utf-8") as lines:
            docs = [json.loads(line) for line in lines if line.strip()]
    else:
        raise ValueError(f"no corpus named {name!r}: the corpora are 'shipped' and 'world'")
    return tuple(sorted(docs, key=lambda doc: doc["id"]))


def questions(split: str = "all") -> list[dict[str, Any]]:
    """The questions of ``split`` (``train``, ``val`` or ``all``): ``id``, ``split``,
    ``question``, ``answer``, ``bridge`` (the entity between the hops), ``hops`` (the two
    searches a right agent makes) and ``docs`` (the ids of the documents they find)."""
    with (DATA / "questions.jsonl").open(encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    return [row for row in rows if split in ("all", row["split"])]


def terms(text: str) -> set[str]:
    """The lowercased word tokens of ``text``, less :data:`STOP_WORDS`."""
    return set(_WORD.findall(text.lower())) - STOP_WORDS


@functools.cache
def _index(name: str) -> tuple[tuple[dict[str, str], frozenset[str]], ...]:
    return tuple((doc, frozenset(terms(f"{doc['title']} {doc['text']}"))) for doc in corpus(name))


def retrieve(query: str, k: int = TOP_K, *, corpus_name: str = "shipped") -> list[dict[str, str]]:
    """The ``k`` documents of corpus ``corpus_name`` sharing the most terms with ``query``
    (title and text count alike).

    Ties go to the lower document id; documents sharing no term are never returned.
    """
    wanted = terms(query)
    scored = [(len(wanted & words), doc) for doc, words in _index(corpus_name)]
    ranked = sorted((item for item in scored if item[0] > 0), key=lambda i: (-i[0], i[1]["id"]))
    return [doc for _, doc in ranked[:k]]


def search_text(query: str, *, corpus_name: str = "shipped") -> str:
    """What the search tool returns for ``query``: each document as ``[id] title: text``."""
    found = retrieve(query, corpus_name=corpus_name)
    if not found:
        return f"No document matches {query!r}."
    return "\n\n".join(f"[{doc['id']}] {doc['title']}: {doc['text']}" for doc in found)


def search_tool(corpus_name: str = "shipped") -> FunctionTool:
    """The ``search`` function tool over corpus ``corpus_name``."""

    def search(query: str) -> str:
        """Search the knowledge base; returns the two best-matching documents.

        Args:
            query: A few keywords, such as a name and what you want to know about it.
        """
        return search_text(query, corpus_name=corpus_name)

    return function_tool(search)


search = search_tool()
"""The search tool over the shipped corpus."""


# --- the reward ---------------------------------------------------------------------------------


def normalize(text: str) -> str:
    """``text`` lowercased, without punctuation or articles, its whitespace collapsed."""
    text = text.lower().translate(str.maketrans("", "", string.punctuation))
    return " ".join(_ARTICLES.sub(" ", text).split())


def reward(final: str, answer: str) -> float:
    """1.0 if the normalized ``final`` equals or contains (as whole words) the normalized
    ``answer``, else 0.0."""
    gold = normalize(answer)
    return 1.0 if gold and f" {gold} " in f" {normalize(final)} " else 0.0


# --- the agents ---------------------------------------------------------------------------------


def build_agents(
    model: Model,
    settings: ModelSettings | None = None,
    *,
    researcher_model: Model | None = None,
    corpus_name: str = "shipped",
) -> tuple[Agent, Agent]:
    """The ``researcher`` (with the search tool over corpus ``corpus_name``, handing off to
    the answerer) and the ``answerer``: both call ``model`` with ``settings``, unless
    ``researcher_model`` is given (the researcher's, with the model's own settings)."""
    settings = settings or ModelSettings()
    answerer = Agent(
        name="answerer",
        instructions=ANSWERER_PROMPT,
        handoff_description="Writes the short final answer once the research is done.",
        model=model,
        model_settings=settings,
    )
    researcher = Agent(
        name="researcher",
        instructions=RESEARCHER_PROMPT,
        model=researcher_model or model,
        model_settings=settings if researcher_model is None else ModelSettings(),
        tools=[search_tool(corpus_name)],
        handoffs=[answerer],
    )
    return researcher, answerer


async def research_and_answer(
    researcher: Agent, answerer: Agent, question: str, *, max_turns: int = MAX_TURNS
) -> str:
    """Run the researcher on ``question``; return the answerer's final output.

    If the researcher handed off, the answerer has answered in the same run. If it did not
    (it ended with text of its own, or its run failed), the answerer runs next, on the
    researcher's conversation (or the question alone): see the module docstring. An answerer
    that writes nothing answers ``""``.
    """
    conversation: str | list[TResponseInputItem] = question
    try:
        research = await Runner.run(researcher, question, max_turns=max_turns)
    except (MaxTurnsExceeded, ModelBehaviorError) as exc:
        if exc.run_data is not None and exc.run_data.last_agent.name == answerer.name:
            return ""  # the answerer had its turn and wrote no answer
    else:
        if research.last_agent.name == answerer.name:
            return str(research.final_output)
        conversation = research.to_input_list()
    try:
        answered = await Runner.run(answerer, conversation, max_turns=1)
    except (MaxTurnsExceeded, ModelBehaviorError):
        return ""
    return str(answered.final_output)


def model_settings(sampling: dict[str, Any]) -> ModelSettings:
    """``temperature`` and ``max_tokens`` of a run's sampling parameters, as model settings."""
    temperature, max_tokens = sampling.get("temperature"), sampling.get("max_tokens")
    return ModelSettings(
        temperature=float(temperature) if isinstance(temperature, int | float) else None,
        max_tokens=max_tokens if isinstance(max_tokens, int) else None,
    )


def _client(llm: agl.LLM) -> AsyncOpenAI:
    return llm.openai_client(max_retries=0)


@agl.rollout
async def qa_agent(
    task: dict[str, Any], llm: agl.LLM, researcher_llm: agl.LLM | None = None
) -> float:
    """Answer ``task["question"]``; reward: whether the final answer holds ``task["answer"]``.

    ``llm`` is the model the run serves (through agl's gateway when it trains); its sampling
    parameters (temperature, max_tokens) go to every call of both agents, unless the run
    also publishes ``researcher_llm``: then the researcher calls that model instead (a fixed
    one, which training the answerer leaves alone). ``task["corpus"]`` names the corpus the
    search reads (``"shipped"`` if absent).
    """
    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(_client(llm))
        model = OpenAIResponsesModel(model=llm.model, openai_client=client)
        other: Model | None = None
        if researcher_llm is not None:
            own = await stack.enter_async_context(_client(researcher_llm))
            other = OpenAIResponsesModel(model=researcher_llm.model, openai_client=own)
        researcher, answerer = build_agents(
            model,
            model_settings(dict(llm.sampling_parameters)),
            researcher_model=other,
            corpus_name=str(task.get("corpus", "shipped")),
        )
        final = await research_and_answer(researcher, answerer, task["question"])
    return reward(final, task["answer"])
