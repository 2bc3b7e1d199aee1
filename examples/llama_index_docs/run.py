"""A LlamaIndex agent workflow of two: one pass with a table per agent, or RL for the writer.

::

    # one pass over the validation questions, with a scripted stand-in model (no model needed)
    uv run --no-sync python examples/llama_index_docs/run.py
    # the same with a real model behind any OpenAI-compatible server (vLLM, a hosted API)
    uv run --no-sync python examples/llama_index_docs/run.py --split all \\
        --endpoint http://localhost:8000/v1 --model Qwen/Qwen2.5-7B-Instruct
    # train only the writer with LightningRL (agl-torch), on a tiny model built in code
    uv run --no-sync python examples/llama_index_docs/run.py --train --steps 3

The agents (``lighthouse_desk.py``) are a LlamaIndex ``AgentWorkflow``: a ``researcher`` searches
a local vector index of fictional lighthouses' pages with a tool and hands off to a ``writer``,
which answers the visitor; the reward is whether the answer states the page's number
(``lighthouses.py``). The runners trace them with agl's LlamaIndex instrumentation
(``agl-llama-index``):

- the default run (``Trainer.dev``) prints every rollout, then a table per agent: its LLM calls
  and the mean reward of the rollouts it took part in;
- ``--train`` maps the agents to algorithms, ``{"writer": LightningRLTorch(...), "*": None}``:
  the writer runs on the tiny model and only its calls become transitions; the researcher is
  frozen on a fixed model of its own (the stand-in, published as ``researcher_llm``), so it
  still searches and hands off while the writer learns (a random model would never call the
  handoff tool, and the writer would never run). Its calls are counted and left alone. It
  prints each step's calls per agent and the transitions trained on.

The tiny model starts from random weights, so its answers are noise and every reward is 0: the
run shows the machinery (token ids, attribution, the update), not learning. It keeps groups
whose rewards are all equal (advantage 0) so that the transitions exist to look at; with a real
model, leave :class:`agl.TransitionBuilder` at its default and drop them.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lighthouses
from lighthouse_desk import RESEARCHER, WRITER, lighthouse_desk
from rich.console import Console

import agl
from agl import read_metrics
from agl.lightning import agent_stats, agent_steps_table, agents_table

__all__ = ["INSTRUMENT", "dev", "main", "train"]

INSTRUMENT = ["llama-index"]
"""What the runners trace: LlamaIndex (``agl-llama-index``)."""


def dev(
    tasks: Sequence[Mapping[str, Any]],
    llm: agl.LLM,
    *,
    run_dir: Path,
    console: bool | Console = True,
) -> agl.FitResult:
    """Run the agents once over ``tasks`` with ``llm``; nothing is trained."""
    trainer = agl.Trainer(
        run_dir=run_dir,
        resources={"llm": llm},
        concurrency=8,
        instrument=INSTRUMENT,
        console=console,
        progress=console is not False,
        plot=False,
    )
    return trainer.dev(lighthouse_desk, list(tasks))


def train(
    tasks: Sequence[Mapping[str, Any]],
    *,
    run_dir: Path,
    steps: int = 3,
    tasks_per_step: int = 2,
    n_samples: int = 2,
    max_tokens: int = 24,
    lr: float = 1e-3,
    console: bool | Console = True,
    algorithm: type[Any] | None = None,
) -> agl.FitResult:
    """Train the writer (only) with LightningRL on a tiny model built in code.

    ``algorithm`` replaces :class:`~agl_torch.rl.LightningRLTorch` with a subclass of it (to
    look at each step's batch, say).
    """
    from agl_torch.rl import LightningRLTorch
    from agl_torch.settings import CheckpointSettings, LearnerSettings
    from agl_torch.tiny import build_tiny_model

    # A tokenizer trained on the task's own text keeps the prompts short.
    corpus = [RESEARCHER, WRITER, *lighthouses.documents()]
    corpus += [q["question"] for q in lighthouses.questions()]
    model = build_tiny_model(
        run_dir / "tiny-model", corpus=corpus, vocab_size=512, max_position_embeddings=4096
    )
    writer = (algorithm or LightningRLTorch)(
        model,
        loop=agl.LoopSettings(
            n_epochs=math.ceil(steps * tasks_per_step / len(tasks)),  # as many as `steps` needs
            n_samples=n_samples,
            batch_size=tasks_per_step,
            max_steps=steps,
        ),
        learner=LearnerSettings(lr=lr),
        sampling=agl.SamplingSettings(max_tokens=max_tokens),
        # Random weights: every reward is 0. Keep those groups (advantage 0) to show them.
        transitions=agl.TransitionBuilder(drop_zero_variance=False),
        checkpoints=CheckpointSettings(every=0),
    )
    import stand_in

    from agl.testing.openai_server import OpenAIServer

    # The researcher stays fixed on a model of its own; here the stand-in plays it.
    with OpenAIServer(stand_in.script(tasks, stand_in.default_plan(tasks))) as researcher:
        trainer = agl.Trainer(
            algorithm={"writer": writer, "*": None},
            resources={"researcher_llm": agl.LLM(endpoint=researcher.url, model="stand-in")},
            run_dir=run_dir,
            concurrency=tasks_per_step * n_samples,
            instrument=INSTRUMENT,
            console=console,
            progress=console is not False,
            plot=False,
        )
        return trainer.fit(lighthouse_desk, list(tasks))


def main(argv: Sequence[str] | None = None) -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--run-dir", type=Path, default=Path("runs/llama-index-docs"))
    parser.add_argument("--split", choices=["train", "val", "all"], default=None)
    parser.add_argument("--endpoint", help="an OpenAI-compatible base URL (default: stand-in)")
    parser.add_argument("--model", default="stand-in", help="the model name to ask for")
    parser.add_argument("--train", action="store_true", help="train the writer with RL")
    parser.add_argument("--steps", type=int, default=3, help="RL steps (--train)")
    parser.add_argument("--quiet", action="store_true", help="no progress or run summaries")
    args = parser.parse_args(argv)
    out = Console()
    log: bool | Console = not args.quiet
    tasks = lighthouses.questions(args.split or ("train" if args.train else "val"))

    if args.train:
        train(tasks, run_dir=args.run_dir, steps=args.steps, console=log)
        out.print(agent_steps_table(read_metrics(args.run_dir)))
        out.print(f"only the writer was trained. Run dir: {args.run_dir}")
        return

    if args.endpoint is not None:
        llm = agl.LLM(endpoint=args.endpoint, model=args.model)
        result = dev(tasks, llm, run_dir=args.run_dir, console=log)
    else:
        import stand_in

        from agl.testing.openai_server import OpenAIServer

        plan = stand_in.default_plan(tasks)
        with OpenAIServer(stand_in.script(tasks, plan)) as server:
            llm = agl.LLM(endpoint=server.url, model=args.model)
            result = dev(tasks, llm, run_dir=args.run_dir, console=log)
    out.print(agents_table(agent_stats(result.results)))
    rewards = [r.reward or 0.0 for r in result.results]
    out.print(
        f"mean reward {statistics.fmean(rewards):.3f} over {len(rewards)} questions; "
        f"traces: agl rollouts list --store {result.store_url}"
    )


if __name__ == "__main__":
    main()
