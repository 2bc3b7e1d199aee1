"""agl-torch on a CUDA device: the learner, the engine and the whole loop (skipped without one)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import agl
from agl import read_metrics
from agl.lightning import Transition
from agl_torch.engine import GenerationEngine, SamplingParams
from agl_torch.learner import Learner
from agl_torch.policy import load_policy, token_logprobs
from agl_torch.quickstart import calculator_agent, tasks
from agl_torch.rl import LightningRLTorch
from agl_torch.settings import LearnerSettings, ServingSettings

pytestmark = pytest.mark.gpu


def test_engine_generates_on_cuda_with_logprobs_the_model_agrees_with(
    tiny_model_dir: Path,
) -> None:
    model, tokenizer = load_policy(tiny_model_dir, device="cuda")
    assert next(model.parameters()).device.type == "cuda"
    prompt = tokenizer("What is 3+4?", add_special_tokens=False)["input_ids"]
    with GenerationEngine(model, tokenizer, device="cuda") as engine:
        completion = engine.generate_sync(prompt, SamplingParams(max_tokens=16, seed=0))
    ids = torch.tensor([prompt + completion.token_ids], device="cuda")
    expected = token_logprobs(model, ids, torch.ones_like(ids))[0, len(prompt) :]
    assert completion.token_ids
    assert torch.allclose(expected.cpu(), torch.tensor(completion.logprobs), atol=1e-3)


def test_learner_steps_on_cuda(tiny_model_dir: Path) -> None:
    model, tokenizer = load_policy(tiny_model_dir, device="cuda")
    learner = Learner(model, tokenizer, LearnerSettings(lr=1e-3), device="cuda")
    prompt = tokenizer("What is 3+4?", add_special_tokens=False)["input_ids"]
    response = tokenizer("7<|im_end|>", add_special_tokens=False)["input_ids"]
    transitions = [
        Transition(None, prompt, response, None, 1.0, sign, f"r{i}", "g")
        for i, sign in enumerate((1.0, -1.0))
    ]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    metrics = learner.rl_step(transitions)
    assert metrics["updates"] == 1
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(t.device.type == "cpu" for t in learner.serving_state_dict().values())


def test_a_short_rl_run_on_cuda(tiny_model_dir: Path, tmp_path: Path) -> None:
    algorithm = LightningRLTorch(
        tiny_model_dir,
        loop=agl.LoopSettings(n_samples=4, batch_size=4, max_steps=3),
        learner=LearnerSettings(lr=1e-4),
        sampling=agl.SamplingSettings(max_tokens=16),
        serving=ServingSettings(device="cuda"),
        transitions=agl.TransitionBuilder(drop_zero_variance=False),
    )
    agl.Trainer(algorithm=algorithm, run_dir=tmp_path, progress=False, console=False).fit(
        calculator_agent, tasks(12, seed=1)
    )
    rows = [row for row in read_metrics(tmp_path) if "actor/loss" in row]
    assert [row["step"] for row in rows] == [1, 2, 3]
    assert all("reward/mean" in row for row in rows)
