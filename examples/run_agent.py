"""Run an agent over a dataset: every LLM call through the gateway, every trace in a SQLite file.

The agent is plain OpenAI-client code. The model is agl's scripted OpenAI-compatible test server
(it speaks the vLLM wire format, token ids included), standing in for vLLM or a hosted API. The
Baseline algorithm serves it through the gateway, runs the tasks with 2 runner processes and
reports rewards; nothing is trained yet.

    uv run --no-sync python examples/run_agent.py [--run-dir runs/example]

Afterwards: ``agl rollouts list --store sqlite:///runs/example/store.db`` and
``agl rollouts show ID --store ...`` show each rollout, its attempts, spans and rewards.
"""

from __future__ import annotations

import argparse

import agl
from agl import AlgorithmContext, Baseline
from agl.testing.openai_server import OpenAIServer, Reply

TASKS = [{"a": a, "b": b} for a in range(1, 6) for b in range(1, 5)]


def arithmetic_model(request: dict[str, object]) -> Reply:
    """The stand-in model: adds the numbers it is asked about, wrongly when b is 3."""
    messages = request["messages"]
    assert isinstance(messages, list)
    a, b = (int(x) for x in str(messages[-1]["content"]).split("?")[0].split()[-1].split("+"))
    return Reply(text=str(a + b + (1 if b == 3 else 0)))


@agl.rollout
async def adder(task: dict[str, int], llm: agl.LLM) -> float:
    """The agent: asks the model, checks the answer, returns the reward."""
    client = llm.openai_client(max_retries=0)
    question = f"What is {task['a']}+{task['b']}? Digits only."
    async with client:
        response = await client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": question}]
        )
    answer = (response.choices[0].message.content or "").strip()
    agl.emit_message(f"model answered {answer!r}")
    return 1.0 if answer == str(task["a"] + task["b"]) else 0.0


class ServedBaseline(Baseline):
    """Baseline, with the model served through the run's gateway (as RL algorithms do)."""

    def __init__(self, upstream: str, loop: agl.LoopSettings) -> None:
        super().__init__(loop=loop)
        self.upstream = upstream

    async def run(self, ctx: AlgorithmContext) -> None:
        await ctx.publish({"llm": await ctx.serve_llm([self.upstream], "arithmetic")})
        await super().run(ctx)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", default="runs/example")
    args = parser.parse_args()
    with OpenAIServer(arithmetic_model) as model:
        trainer = agl.Trainer(
            ServedBaseline(model.url, agl.LoopSettings(n_epochs=2, batch_size=10)),
            run_dir=args.run_dir,
            n_runners=2,
            concurrency=8,
        )
        result = trainer.fit(adder, TASKS, val_dataset=TASKS[:5])
    print(
        f"reward/mean {result.last('reward/mean'):.2f} over {result.totals['rollouts']} rollouts; "
        f"traces in {result.store_url}"
    )


if __name__ == "__main__":
    main()
