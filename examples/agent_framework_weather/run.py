"""An Agent Framework workflow of two: one pass with a table per agent, or RL for the writer.

::

    # one pass over the validation questions, with a scripted stand-in model (no model needed)
    uv run --no-sync python examples/agent_framework_weather/run.py
    # the same with a real model behind any OpenAI-compatible server (vLLM, a hosted API)
    uv run --no-sync python examples/agent_framework_weather/run.py --split all \\
        --endpoint http://localhost:8000/v1 --model Qwen/Qwen2.5-7B-Instruct
    # train only the writer with LightningRL (agl-torch), on a tiny model built in code
    uv run --no-sync python examples/agent_framework_weather/run.py --train --steps 3

The agent (``travel_workflow.py``) is a ``WorkflowBuilder`` workflow: a ``forecaster`` looks the
town up with a tool, a ``writer`` answers the traveller from the forecaster's report; the reward
is whether the answer states the forecast's number (``weather.py``). The runners trace it with
agl's Agent Framework instrumentation (``agl-agent-framework``).

The command line is :class:`agl.Script`'s: the default run prints a table per agent (its LLM
calls, the mean reward of the rollouts it took part in);
``--train`` maps the agents to algorithms,
``{"writer": LightningRLTorch(...), "*": None}``:
every step runs the whole workflow, but only the writer's calls become transitions; the
forecaster's are counted and left alone (frozen).
"""

from __future__ import annotations

from typing import Any

import stand_in
import weather
from travel_workflow import FORECASTER, WRITER, travel_workflow

import agl


def writer_rl(run: agl.ScriptRun, algorithm: type[Any] | None = None) -> dict[str, Any]:
    """``--train``: LightningRL for the writer only, on a tiny model built in code."""
    from agl_torch.demo import tiny_rl
    from agl_torch.rl import LightningRLTorch

    corpus = [FORECASTER, WRITER, *(q["question"] for q in weather.questions())]
    corpus += [str(weather.forecast(q["town"])) for q in weather.questions()]
    return {"writer": tiny_rl(run, corpus, algorithm=algorithm or LightningRLTorch), "*": None}


SCRIPT = agl.Script(
    "agent-framework-weather",
    agent=travel_workflow,
    tasks=weather.questions,
    instrument=["agent-framework"],
    algorithm=writer_rl,
    stand_in=lambda tasks: stand_in.script(tasks, stand_in.default_plan(tasks)),
    trained="only the writer was trained",
)

if __name__ == "__main__":
    SCRIPT.main(description=(__doc__ or "").splitlines()[0])
