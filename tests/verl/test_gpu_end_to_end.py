"""lightningrl-verl end to end on a GPU: verl's FSDP workers and vLLM replicas, agl's loop.

Needs a CUDA device and verl's GPU stack (``pip install "verl[vllm]"``: vLLM, flash-attn);
skipped otherwise. A tiny model built in code trains for two steps with the 1-GPU recipe; the
agent answers through agl's gateway in front of verl's vLLM server, and the run logs verl's
actor metrics next to agl's rewards.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import openai
import pytest

import agl
import agl._train._metrics
from agl_verl.rl import LightningRLVerl

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="verl's rollout needs vLLM installed"
    ),
]

RECIPE = Path(__file__).parents[2] / "packages" / "agl-verl" / "configs" / "1gpu.yaml"


@agl.rollout
async def echo_digit(task: dict[str, Any], llm: agl.LLM) -> float:
    async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="none") as client:
        reply = await client.chat.completions.create(
            model=llm.model,
            messages=[{"role": "user", "content": f"Say {task['digit']}"}],
            max_tokens=8,
        )
    return 1.0 if str(task["digit"]) in (reply.choices[0].message.content or "") else 0.0


def test_two_steps_on_one_gpu_log_reward_and_verls_actor_metrics(
    tmp_path: Path, model_dir: Path
) -> None:
    algorithm = LightningRLVerl(
        str(model_dir),
        config=RECIPE,
        loop=agl.LoopSettings(batch_size=4, n_samples=4, max_steps=2, step_timeout=600),
    )
    trainer = agl.Trainer(algorithm, run_dir=tmp_path / "run", console=False, plot=False)
    result = trainer.fit(echo_digit, [{"digit": d} for d in range(8)])

    rows = [r for r in agl.read_metrics(tmp_path / "run") if "reward/mean" in r]
    assert [r["step"] for r in rows] == [1, 2]
    assert result.totals["succeeded"] == 32
    for row in rows:
        assert "reward/mean" in row
        if not row.get("verl/skipped_update"):
            assert "actor/pg_loss" in row
            assert "timing_s/update_actor" in row
