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
(``agl-llama-index``).

The command line is :class:`agl.Script`'s: the default run prints a table per agent (its LLM
calls, the mean reward of the rollouts it took part in);
``--train`` maps the agents to algorithms,
``{"writer": LightningRLTorch(...), "*": None}``:
the writer runs on the tiny model and only its calls become transitions; the researcher is
frozen on a fixed model of its own (the stand-in, published as ``researcher_llm``), so it
still searches and hands off while the writer learns (a random model would never call the
handoff tool, and the writer would never run). Its calls are counted and left alone.
"""

from __future__ import annotations

from typing import Any

import lighthouses
import stand_in
from lighthouse_desk import RESEARCHER, WRITER, lighthouse_desk

import agl


def writer_rl(run: agl.ScriptRun, algorithm: type[Any] | None = None) -> dict[str, Any]:
    """``--train``: LightningRL for the writer only, on a tiny model built in code."""
    from agl_torch.demo import tiny_rl
    from agl_torch.rl import LightningRLTorch

    corpus = [RESEARCHER, WRITER, *lighthouses.documents()]
    corpus += [q["question"] for q in lighthouses.questions()]
    return {"writer": tiny_rl(run, corpus, algorithm=algorithm or LightningRLTorch), "*": None}


SCRIPT = agl.Script(
    "llama-index-docs",
    agent=lighthouse_desk,
    tasks=lighthouses.questions,
    instrument=["llama-index"],
    algorithm=writer_rl,
    # the researcher stays frozen on a fixed model of its own: the stand-in, or --endpoint's
    resources=lambda run: {"researcher_llm": run.llm},
    stand_in=lambda tasks: stand_in.script(tasks, stand_in.default_plan(tasks)),
    trained="only the writer was trained",
)

if __name__ == "__main__":
    SCRIPT.main(description=(__doc__ or "").splitlines()[0])
