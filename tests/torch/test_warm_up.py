"""The tiny model, built for a set of conversations and warmed up on them, answers as they do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agl_torch.warm_up import warm_up_tiny_model

pytest.importorskip("torch")

TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    },
}
PAIRS = {"apple": "red", "sky": "blue", "grass": "green", "snow": "white"}


def _conversations() -> list[dict[str, Any]]:
    return [
        {
            "messages": [
                {"role": "user", "content": f"What colour is {thing}?"},
                {"role": "assistant", "content": colour},
            ],
            "tools": [TOOL],
        }
        for thing, colour in PAIRS.items()
    ]


@pytest.mark.timeout(300)
def test_the_warmed_up_model_answers_as_the_demonstrations_do(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    warm = warm_up_tiny_model(
        tmp_path, _conversations(), epochs=60, lr=3e-3, batch_size=4, progress=False
    )
    assert warm == tmp_path / "warm-model"
    assert (tmp_path / "base-model" / "config.json").is_file()
    tokenizer: Any = AutoTokenizer.from_pretrained(warm)
    model = AutoModelForCausalLM.from_pretrained(warm)
    for thing, colour in PAIRS.items():
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": f"What colour is {thing}?"}],
            tools=[TOOL],
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        )
        with torch.no_grad():
            out = model.generate(**prompt, max_new_tokens=6, do_sample=False)
        reply = tokenizer.decode(out[0, prompt["input_ids"].shape[1] :], skip_special_tokens=True)
        assert reply.strip() == colour, (thing, reply)
    # the tokenizer was trained on these conversations: the tool's schema takes few tokens
    schema_tokens = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tools=[TOOL], tokenize=True
    )
    assert len(schema_tokens) < 60, len(schema_tokens)


def test_conversations_given_as_plain_message_lists_take_the_shared_tools(tmp_path: Path) -> None:
    plain = [c["messages"] for c in _conversations()]
    warm = warm_up_tiny_model(tmp_path, plain, epochs=1, tools=[TOOL], progress=False)
    assert (warm / "config.json").is_file()


def test_rl_after_warm_up_sets_a_short_run_up(tmp_path: Path) -> None:
    import agl
    from agl_torch.rl import LightningRLTorch
    from agl_torch.warm_up import rl_after_warm_up

    class Mine(LightningRLTorch):
        pass

    builder = agl.TransitionBuilder(credit="discounted")
    rl = rl_after_warm_up(
        tmp_path / "warm-model", steps=3, tasks_per_step=4, n_samples=2, lr=2e-3,
        max_tokens=24, seed=5, transitions=builder, algorithm=Mine,
    )  # fmt: skip
    assert type(rl) is Mine
    assert (rl.loop.max_steps, rl.loop.batch_size, rl.loop.n_samples) == (3, 4, 2)
    assert (rl.learner.lr, rl.learner.seed) == (2e-3, 5)
    assert rl.sampling.max_tokens == 24
    assert rl.transitions is builder
    assert rl.checkpoints.every == 0
    default = rl_after_warm_up(
        tmp_path / "warm-model", steps=1, tasks_per_step=1, n_samples=2, lr=1e-3, max_tokens=8
    )
    assert type(default) is LightningRLTorch
    assert default.transitions.credit.name == "final"


def test_rl_after_warm_up_on_successes_fine_tunes_on_every_right_sample(tmp_path: Path) -> None:
    import agl
    from agl_torch.sft import SFTTorch
    from agl_torch.warm_up import rl_after_warm_up

    sft = rl_after_warm_up(
        tmp_path / "warm-model", steps=3, tasks_per_step=4, n_samples=6, lr=2e-3,
        max_tokens=24, seed=5, method="successes", min_reward=0.5,
    )  # fmt: skip
    assert type(sft) is SFTTorch
    assert (sft.top_k, sft.min_reward) == (6, 0.5)  # every sample of a task that succeeded
    assert (sft.loop.max_steps, sft.loop.batch_size, sft.loop.n_samples) == (3, 4, 6)
    assert (sft.learner.lr, sft.learner.seed) == (2e-3, 5)
    assert sft.policy.sampling.max_tokens == 24
    assert sft.policy.checkpoints.every == 0
    short = {"steps": 1, "tasks_per_step": 1, "n_samples": 2, "lr": 1e-3, "max_tokens": 8}
    with pytest.raises(agl.InvalidInputError, match="apply to method='grpo' only"):
        rl_after_warm_up(tmp_path, method="successes", transitions=agl.TransitionBuilder(), **short)
    with pytest.raises(agl.InvalidInputError, match="must be 'grpo' or 'successes', got 'ppo'"):
        rl_after_warm_up(tmp_path, method="ppo", **short)  # type: ignore[arg-type]
