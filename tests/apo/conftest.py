"""The rig the APO tests share: a scripted optimizer model, a task whose reward depends on the
prompt, and a trainer run over a memory store that remembers what was published.

The optimizer is agl's real OpenAI-compatible HTTP server with a deterministic script
(:class:`ScriptedOptimizer`): a critique lists the words the failed runs' tasks needed and the
prompt lacks (``MISSING: alpha, beta``), rewrite *i* adds the *i*-th missing word
(``Remember: alpha.``), a merge adds the words of prompt B that prompt A lacks
(``Also remember: beta.``). The agent's reward is the share of its task's ``need`` words found
in the formatted prompt, so the search is reproducible and a better prompt scores higher.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import agl
from agl.store._memory import MemoryStore
from agl.testing.openai_server import OpenAIServer, Reply, encode, last_user_text, render_chat
from agl_apo import APO, APOState
from agl_apo.state import as_state

SEED = "Answer the question: {question}"


def tasks(*needs: str | tuple[str, ...]) -> list[dict[str, Any]]:
    """One task per entry, needing that word (or those words)."""
    return [
        {"q": f"question {i}", "need": [need] if isinstance(need, str) else list(need)}
        for i, need in enumerate(needs)
    ]


@agl.rollout
def keyword_agent(task: dict[str, Any], prompt: agl.PromptTemplate) -> float:
    """Reward: the share of the task's ``need`` words the formatted prompt contains."""
    text = prompt.format(question=task["q"]).lower()
    needed = task["need"]
    return sum(word in text for word in needed) / len(needed)


def block(text: str, tag: str) -> str:
    """The text between ``<tag>`` and ``</tag>`` (empty if absent)."""
    found = re.search(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.DOTALL)
    return found.group(1) if found else ""


Fault = Callable[[str, str, int], "Reply | str | None"]


@dataclass
class Call:
    """One request the optimizer got: its kind, body, user text and the scripted reply."""

    kind: str
    body: dict[str, Any]
    text: str
    reply: Reply | str


class ScriptedOptimizer:
    """The optimizer model's script (see the module docstring).

    ``fault(kind, text, n)``, when set, may replace the reply to the n-th call of a kind (an
    error, a delay, a malformed reply) by returning something other than None.
    """

    def __init__(self) -> None:
        self.fault: Fault | None = None
        self.counts: Counter[str] = Counter()
        self.calls: list[Call] = []
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply | str:
        text = last_user_text(body)
        kind = next((k for k in ("critique", "rewrite", "merge") if f"## {k.title()}" in text), "?")
        with self.lock:
            self.counts[kind] += 1
            count = self.counts[kind]
        reply = self.fault(kind, text, count) if self.fault is not None else None
        if reply is None:
            reply = getattr(self, kind.replace("?", "unknown"))(text)
        with self.lock:
            self.calls.append(Call(kind, body, text, reply))
        return reply

    def texts(self, kind: str) -> list[str]:
        """The user texts of the calls of one kind, in order."""
        return [call.text for call in self.calls if call.kind == kind]

    def tokens_used(self) -> int:
        """The tokens the server reported for every text reply (its byte-level tokenizer)."""
        total = 0
        for call in self.calls:
            reply = call.reply if isinstance(call.reply, str) else call.reply.text
            if isinstance(call.reply, Reply) and call.reply.status is not None:
                continue
            prompt = encode(render_chat(call.body["messages"]))
            total += len(prompt) + len(encode(reply)) + 1  # the reply ends with EOS
        return total

    def unknown(self, text: str) -> str:
        return "?"

    def critique(self, text: str) -> str:
        prompt = block(text, "prompt").lower()
        needs: Counter[str] = Counter()
        for listed in re.findall(r'"need": \[([^\]]*)\]', block(text, "runs")):
            needs.update(word.strip(' "') for word in listed.split(","))
        missing = [word for word, _ in needs.most_common() if word not in prompt]
        return "MISSING: " + (", ".join(missing) if missing else "nothing")

    def rewrite(self, text: str) -> str:
        prompt = block(text, "prompt")
        listed = block(text, "critique").removeprefix("MISSING: ")
        missing = [] if listed == "nothing" else listed.split(", ")
        index = int(re.search(r"version (\d+) of", text).group(1))  # type: ignore[union-attr]
        if index <= len(missing):
            prompt += f" Remember: {missing[index - 1]}."
        return f"Here it is.\n<prompt>\n{prompt}\n</prompt>"

    def merge(self, text: str) -> str:
        first, second = block(text, "prompt_a"), block(text, "prompt_b")
        extra = [w for w in re.findall(r"remember: (\w+)\.", second, re.I) if w not in first]
        return f"<prompt>{first} Also remember: {', '.join(extra)}.</prompt>"


class RecordingStore(MemoryStore):
    """A memory store that keeps every resource set published to it."""

    def __init__(self) -> None:
        super().__init__(poll_interval=0.01)
        self.published: list[agl.ResourcesUpdate] = []

    async def add_resources(
        self, resources: Mapping[str, agl.Resource], resources_id: str | None = None
    ) -> agl.ResourcesUpdate:
        update = await super().add_resources(resources, resources_id)
        self.published.append(update)
        return update


@dataclass
class Run:
    """What one trainer run left behind."""

    result: agl.FitResult
    rollouts: list[agl.Rollout]
    published: list[agl.ResourcesUpdate] = field(default_factory=list)

    @property
    def run_dir(self) -> Path:
        return self.result.run_dir

    def scoring_rollouts(self) -> list[agl.Rollout]:
        return [r for r in self.rollouts if "apo_candidate" in r.metadata]

    def states(self) -> list[APOState]:
        """Every APO state published, in order."""
        states = (
            as_state(resource)
            for update in self.published
            for resource in update.resources.values()
        )
        return [state for state in states if state is not None]


def make_apo(
    server: OpenAIServer,
    *,
    optimizer: dict[str, Any] | None = None,
    search: dict[str, Any] | None = None,
    budgets: dict[str, Any] | None = None,
    **options: Any,
) -> APO:
    """An APO on the scripted optimizer: fast settings, no console, no plot unless asked.

    ``optimizer``, ``search`` and ``budgets`` are fields changed over the fast ones (APO takes
    a mapping of a settings object's fields as that object).
    """
    fast: dict[str, Any] = {
        "optimizer": {"base_url": server.url, "model": "optimizer", "max_retries": 0}
        | (optimizer or {}),
        "search": {"val_size": 4, "beam_width": 2, "branch_factor": 2} | (search or {}),
        "budgets": {"patience": None} | (budgets or {}),
        "console": False,
        "plot": False,
    }
    loop = options.pop("loop", None)
    fast.update(options)
    fast["loop"] = {"batch_size": 4} | loop if isinstance(loop, dict) else loop or {"batch_size": 4}
    return APO(**fast)


def fit(
    algorithm: Any,
    run_dir: Path,
    train: list[Any],
    val: list[Any] | None = None,
    *,
    agent: Any = keyword_agent,
    resources: Mapping[str, agl.Resource] | None = None,
    store: str | None = None,
    **trainer_options: Any,
) -> Run:
    """Run the trainer (a recording memory store unless ``store`` is a URL)."""
    resources = resources or {"prompt": agl.PromptTemplate(template=SEED)}

    async def session() -> Run:
        recording = RecordingStore() if store is None else None
        opened = recording if recording is not None else agl.open_store(store or "")
        async with opened:
            options = {"progress": False, "console": False, "plot": False, **trainer_options}
            trainer = agl.Trainer(
                algorithm, store=opened, run_dir=run_dir, resources=resources, **options
            )
            result = await trainer.fit_async(agent, train, val)
            page = await opened.query_rollouts(limit=10_000)
            published = recording.published if recording is not None else []
            return Run(result, page.rollouts, list(published))

    return asyncio.run(session())


class Rig:
    """What a test gets from the ``rig`` fixture: the helpers above, bound to one optimizer."""

    SEED = SEED
    APOState = APOState
    ScriptedOptimizer = ScriptedOptimizer
    keyword_agent = keyword_agent
    tasks = staticmethod(tasks)
    block = staticmethod(block)
    fit = staticmethod(fit)

    def __init__(self, script: ScriptedOptimizer, server: OpenAIServer, tmp_path: Path) -> None:
        self.script = script
        self.server = server
        self.tmp_path = tmp_path

    def apo(self, **options: Any) -> APO:
        return make_apo(self.server, **options)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    """The scripted optimizer model behind a real OpenAI-compatible HTTP server, and helpers."""
    script = ScriptedOptimizer()
    with OpenAIServer(script) as server:
        yield Rig(script, server, tmp_path)
