"""An ADK coordinator and its sub-agent: one pass with a table per agent, or RL for the guide.

::

    # one pass over the validation questions, with a scripted stand-in model (no model needed)
    uv run --no-sync python examples/google_adk_museums/run.py
    # the same with a real model behind any OpenAI-compatible server (vLLM, a hosted API)
    uv run --no-sync python examples/google_adk_museums/run.py --split all \\
        --endpoint http://localhost:8000/v1 --model Qwen/Qwen2.5-7B-Instruct
    # train only the guide with LightningRL (agl-torch), on a tiny model built in code
    uv run --no-sync python examples/google_adk_museums/run.py --train --steps 3

The agents (``museum_guide.py``) are an ADK ``coordinator`` that looks the museum up with a tool
and transfers to its sub-agent, the ``guide``, which answers the visitor; the reward is whether
the answer states the museum's number (``museums.py``). The runners trace them with agl's ADK
instrumentation (``agl-google-adk``).

The command line is :class:`agl.Script`'s: the default run prints a table per agent (its LLM
calls, the mean reward of the rollouts it took part in);
``--train`` maps the agents to algorithms,
``{"guide": LightningRLTorch(...), "*": None}``:
the guide runs on the tiny model and only its calls become transitions; the coordinator is
frozen on a fixed model of its own (the stand-in, published as ``coordinator_llm``), so it
still finds the museum and transfers while the guide learns. Its calls are counted and left
alone.
"""

from __future__ import annotations

from typing import Any

import museums
import stand_in
from museum_guide import COORDINATE, GUIDE, museum_guide

import agl


def guide_rl(run: agl.ScriptRun, algorithm: type[Any] | None = None) -> dict[str, Any]:
    """``--train``: LightningRL for the guide only, on a tiny model built in code."""
    from agl_torch.demo import tiny_rl
    from agl_torch.rl import LightningRLTorch

    corpus = [COORDINATE, GUIDE, *(q["question"] for q in museums.questions())]
    corpus += [str(museums.find(q["museum"])) for q in museums.questions()]
    return {"guide": tiny_rl(run, corpus, algorithm=algorithm or LightningRLTorch), "*": None}


SCRIPT = agl.Script(
    "google-adk-museums",
    agent=museum_guide,
    tasks=museums.questions,
    instrument=["google-adk"],
    algorithm=guide_rl,
    # the coordinator stays frozen on a fixed model of its own: the stand-in, or --endpoint's
    resources=lambda run: {"coordinator_llm": run.llm},
    stand_in=lambda tasks: stand_in.script(tasks, stand_in.default_plan(tasks)),
    trained="only the guide was trained",
)

if __name__ == "__main__":
    SCRIPT.main(description=(__doc__ or "").splitlines()[0])
